package kubernetes

import (
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations Lathe puts on its Jobs and their pods.
const (
	// LabelManaged is "lathe" on every Job Lathe makes.
	LabelManaged = "app.kubernetes.io/managed-by"
	// LabelCluster is the deployment's name (the config's cluster): only
	// Jobs of this deployment are ever taken for orphans.
	LabelCluster = "lathe.dev/cluster"
	// LabelJob and LabelAttempt are the Lathe job id and attempt.
	LabelJob     = "lathe.dev/job"
	LabelAttempt = "lathe.dev/attempt"
	// LabelQueue is Kueue's LocalQueue label, set when the backend names
	// a queue.
	LabelQueue = "kueue.x-k8s.io/queue-name"
	// ResourceGPU is the extended resource of NVIDIA's device plugin.
	ResourceGPU = corev1.ResourceName("nvidia.com/gpu")
	// ContainerName is the name of the attempt's one container.
	ContainerName = "trainer"
)

// Mount is one path of the claim the attempt's pod gets.
type Mount struct {
	Path     string
	ReadOnly bool
}

// Toleration is one toleration of the attempt's pod.
type Toleration struct{ Key, Operator, Value, Effect string }

// SubmitRequest is one attempt's Job.
type SubmitRequest struct {
	// Name is the Job's name (a DNS-1123 label): it carries the Lathe job
	// id and attempt, so the Job of an attempt is found by it after a
	// restart, and the API server refuses a second Job of the name.
	Name string
	// Cluster, JobID and Attempt go into the Job's and pod's labels.
	Cluster, JobID string
	Attempt        int
	// Image and Command are the container's; WorkingDir its folder.
	Image      string
	Command    []string
	WorkingDir string
	// GPUs is the nvidia.com/gpu limit (and request); 0: none asked.
	GPUs int
	// NodeSelector, Tolerations and ServiceAccount go into the pod as they
	// are; QueueName, when set, is Kueue's queue-name label.
	NodeSelector   map[string]string
	Tolerations    []Toleration
	ServiceAccount string
	QueueName      string
	// ActiveDeadline bounds the Job's run (activeDeadlineSeconds): the Job
	// fails DeadlineExceeded past it. 0: no bound.
	ActiveDeadline time.Duration
	// VolumeClaim is the claim that holds ClaimPath (work_dir); of it the
	// pod gets the paths of ClaimMounts alone, each at its own path (a
	// subPath mount): the attempt's folder, its checkpoint folder and its
	// data, never the other attempts' folders. A mount outside ClaimPath is
	// not the claim's (a host path holds it, or nothing). HostPaths are
	// mounted whole, each at its own path.
	VolumeClaim, ClaimPath string
	ClaimMounts            []Mount
	HostPaths              []string
	// TTLAfterFinished deletes the Job that long after it ended (the TTL
	// controller's); 0: kept.
	TTLAfterFinished time.Duration
}

// Labels are the labels of the request's Job and pod.
func (r SubmitRequest) Labels() map[string]string {
	l := map[string]string{LabelManaged: "lathe", LabelCluster: r.Cluster, LabelJob: r.JobID, LabelAttempt: strconv.Itoa(r.Attempt)}
	if r.QueueName != "" {
		l[LabelQueue] = r.QueueName
	}
	return l
}

// BuildJob is the Job of r in namespace ns: one pod, restartPolicy Never
// and backoffLimit 0 (Lathe owns retries: each new run is a new Lathe
// attempt, never Kubernetes'), the GPUs as nvidia.com/gpu limits, and the
// backend's selector, tolerations, account and volumes. A pod disrupted
// (evicted, preempted, its node lost: the DisruptionTarget condition) fails
// the Job by its pod failure policy, which names the condition in the
// Job's Failed condition: the Job itself says why, after the pod is gone.
func BuildJob(r SubmitRequest, ns string) *batchv1.Job {
	labels := r.Labels()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(0)),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionFailJob,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}}}},
			Completions: ptr(int32(1)),
			Parallelism: ptr(int32(1)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(r),
			},
		},
	}
	if r.ActiveDeadline > 0 {
		job.Spec.ActiveDeadlineSeconds = ptr(int64((r.ActiveDeadline + time.Second - 1) / time.Second))
	}
	if r.TTLAfterFinished > 0 {
		job.Spec.TTLSecondsAfterFinished = ptr(int32(r.TTLAfterFinished / time.Second))
	}
	return job
}

// podSpec is the pod of r's Job. The trainer in it is hostile: the pod
// gets no API token (its service account's token is not mounted, so it
// cannot act on the cluster as that account: list, delete or make Jobs
// and pods), and its container no privilege escalation (setuid binaries
// gain nothing), no capabilities and the runtime's default seccomp
// profile.
func podSpec(r SubmitRequest) corev1.PodSpec {
	c := corev1.Container{Name: ContainerName, Image: r.Image, Command: r.Command, WorkingDir: r.WorkingDir,
		ImagePullPolicy: corev1.PullIfNotPresent, SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			Privileged:               ptr(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}}
	if r.GPUs > 0 {
		q := resource.MustParse(strconv.Itoa(r.GPUs))
		c.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceGPU: q}, Requests: corev1.ResourceList{ResourceGPU: q}}
	}
	spec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeSelector: r.NodeSelector, ServiceAccountName: r.ServiceAccount,
		AutomountServiceAccountToken: ptr(false)}
	for _, t := range r.Tolerations {
		spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator),
			Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	addVolumes(&spec, &c, r)
	spec.Containers = []corev1.Container{c}
	return spec
}

// addVolumes mounts r's claim and host paths into spec's container c.
func addVolumes(spec *corev1.PodSpec, c *corev1.Container, r SubmitRequest) {
	if r.VolumeClaim != "" {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "work", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: r.VolumeClaim}}})
		for _, m := range r.ClaimMounts {
			rel, err := filepath.Rel(r.ClaimPath, m.Path)
			if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || !filepath.IsAbs(m.Path) {
				continue // not beneath the claim's path (nor the whole claim)
			}
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "work", MountPath: m.Path, SubPath: rel, ReadOnly: m.ReadOnly})
		}
	}
	paths := append([]string(nil), r.HostPaths...)
	sort.Strings(paths)
	for i, p := range paths {
		name := "host-" + strconv.Itoa(i)
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: p, Type: ptr(corev1.HostPathDirectory)}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: p})
	}
}

func ptr[T any](v T) *T { return &v }
