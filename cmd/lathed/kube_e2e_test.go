package main

// End-to-end tests of the Kubernetes pool: the real lathed binaries
// (scheduler, `worker --backend kubernetes`, and `slurm-step`, which each
// Job's container runs) against a real kube-apiserver and etcd (envtest),
// with the real Job controller, garbage collector and scheduler, and kwok
// GPU nodes (internal/kubetest). No container runs: the kubetest
// **stand-in** plays each pod's container, running its command on this
// host and ending the pod through the API with the exit code. The trainers
// are small /bin/sh stand-ins that speak the trainer contract.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/kubetest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// kubeRig is one Redis, one cluster, a lathed config with a kubernetes
// backend "k8s" in site dc-frankfurt [onprem, eu], a scheduler and a
// kubernetes worker.
type kubeRig struct {
	t             *testing.T
	lathed, lathe string
	rs            *redistest.Server
	kube          *kubetest.Cluster
	dir, cfgPath  string
	base          string
	worker        *daemon
}

func newKubeRig(t *testing.T) *kubeRig { return newKubeRigWith(t, kubeRigOptions{}) }

// kubeRigOptions: the lathed_path of the backend (default: the lathed
// under test), and whether the rig starts no daemon of its own.
type kubeRigOptions struct {
	LathedOnNodes string
	NoDaemons     bool
}

func newKubeRigWith(t *testing.T, o kubeRigOptions) *kubeRig {
	t.Helper()
	r := &kubeRig{t: t}
	r.lathed, r.lathe = binaries(t)
	lathedOnNodes := o.LathedOnNodes
	if lathedOnNodes == "" {
		lathedOnNodes = r.lathed
	}
	r.rs = redistest.Start(t)
	r.kube = kubetest.Start(t, kubetest.Options{GPUs: 2})
	r.dir = t.TempDir()
	var trainers strings.Builder
	for name, body := range slurmTrainers {
		p := filepath.Join(r.dir, name+".sh")
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&trainers, "  sh-%s: [/bin/sh, %s]\n", name, p)
	}
	cfg := kubeBackendConfig("k8s", r.kube, filepath.Join(r.dir, "kube-work"), lathedOnNodes, r.dir) + fmt.Sprintf(`datasets:
  file_site: dc-frankfurt
scheduler: {leader_ttl: 2s}
worker: {heartbeat_ttl: 3s, kill_grace: 2s}
trainers:
%sjobs:
  allowed_roots: [%s, %s]
`, trainers.String(), repoRoot(t), r.dir)
	r.cfgPath = filepath.Join(r.dir, "lathed.yaml")
	if err := os.WriteFile(r.cfgPath, []byte("sites:\n  dc-frankfurt: [onprem, eu]\nredis_site: dc-frankfurt\nbackends:\n"+cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if !o.NoDaemons {
		port := redistest.FreePort(t)
		r.base = "http://127.0.0.1:" + strconv.Itoa(port)
		d := startDaemon(t, r.lathed, "scheduler", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--redis-url", r.rs.URL(),
			"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"))
		waitHTTP(t, r.base, d)
		r.worker = r.startWorker()
	}
	return r
}

// kubeBackendConfig is the backends entry NAME of kind kubernetes on
// cluster c (its pods see the host's hostDir), then the kubernetes:
// section.
func kubeBackendConfig(name string, c *kubetest.Cluster, workDir, lathed, hostDir string) string {
	return fmt.Sprintf(`  %s:
    kind: kubernetes
    site: dc-frankfurt
    namespace: %s
    image: lathe-test:stand-in
    service_account: lathe-trainer
    node_selector: {type: kwok}
    tolerations:
    - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
    queue_name: team-a
    host_paths: [%s]
    work_dir: %s
    lathed_path: %s
    price: {usd_per_gpu_hour: 2.0}
kubernetes: {kubeconfig: %s, poll_interval: 300ms, lease_ttl: 3s, lost_grace: 5s, submit_retry: 2s, orphan_grace: 1s}
`, name, c.Namespace, hostDir, workDir, lathed, c.Kubeconfig)
}

// startWorker starts `lathed worker --backend kubernetes --kube-backend k8s`.
func (r *kubeRig) startWorker() *daemon {
	d := startDaemon(r.t, r.lathed, "worker", "--backend", "kubernetes", "--kube-backend", "k8s", "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"))
	if !waitfor.Poll(60*time.Second, func() bool {
		select {
		case <-d.done:
			r.t.Fatalf("kubernetes worker exited:\n%s", d.output())
		default:
		}
		return strings.Contains(d.output(), "kubernetes worker started")
	}) {
		r.t.Fatalf("kubernetes worker did not start:\n%s", d.output())
	}
	return d
}

func (r *kubeRig) submit(name, trainer string) string {
	r.t.Helper()
	sr := &slurmRig{t: r.t, dir: r.dir}
	out, errOut, code := cli(r.t, r.lathe, r.base, "submit", sr.spec(name, trainer, "eu"), "-o", "json")
	if code != 0 {
		r.t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	return decodeJob(r.t, out).ID
}

// k8sJob returns the attempt's Kubernetes Job (by its name).
func (r *kubeRig) k8sJob(id string, attempt int) (*batchv1.Job, bool) {
	j, err := r.kube.Client.BatchV1().Jobs(r.kube.Namespace).Get(context.Background(), "lathe-"+id+"-"+strconv.Itoa(attempt), metav1.GetOptions{})
	return j, err == nil
}

func (r *kubeRig) jobs() []batchv1.Job {
	l, err := r.kube.Client.BatchV1().Jobs(r.kube.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return l.Items
}

func (r *kubeRig) dump() {
	if r.t.Failed() {
		r.t.Logf("kubernetes worker:\n%s", r.worker.output())
	}
}

// TestKubePoolE2E: a job routed to the kubernetes backend runs as a Job
// asking nvidia.com/gpu 1, with the backend's node selector, toleration,
// service account and Kueue queue label, backoffLimit 0; its trainer sees
// CUDA_VISIBLE_DEVICES; it succeeds with its artifact published and its
// cost recorded. A job cancelled mid-run ends cancelled and its Job is
// deleted. A trainer that exits 3 fails the job for good with its reason.
// A job whose tags the site lacks is refused, never sent there.
func TestKubePoolE2E(t *testing.T) {
	r := newKubeRig(t)
	defer r.dump()

	okID := r.submit("kube-ok", "ok")
	sleepID := r.submit("kube-sleep", "sleep")
	j := waitJob(t, r.base, okID, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || len(j.Artifacts) != 1 || j.Artifacts[0].Path != "adapter.bin" || j.Metrics["train_loss"] != 0.5 {
		t.Fatalf("ok job: %s %s %s artifacts %+v metrics %v", j.State, j.Reason, j.Error, j.Artifacts, j.Metrics)
	}
	if j.Instance == nil || j.Instance.Backend != "k8s" || j.Instance.ID != "lathe-"+okID+"-1" || j.CloudCostUSD <= 0 {
		t.Errorf("ok job's Kubernetes record %+v cost %v", j.Instance, j.CloudCostUSD)
	}
	checkKubeJobSpec(t, r, okID)
	cvd, err := os.ReadFile(filepath.Join(r.dir, "kube-work", okID, "1", "cvd.txt"))
	if err != nil || strings.TrimSpace(string(cvd)) != "cuda=0" {
		t.Errorf("the trainer's CUDA_VISIBLE_DEVICES: %q %v", cvd, err)
	}
	if b, err := os.ReadFile(filepath.Join(strings.TrimPrefix(j.OutputURI, "file://"), "adapter.bin")); err != nil || string(b) != "adapter\n" {
		t.Errorf("published artifact %q %v", b, err)
	}

	waitJob(t, r.base, sleepID, 2*time.Minute, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	if out, errOut, code := cli(t, r.lathe, r.base, "cancel", sleepID); code != 0 {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	j = waitJob(t, r.base, sleepID, time.Minute, "cancelled", func(j jobtype.Job) bool { return j.State.Terminal() })
	if _, found := r.k8sJob(sleepID, 1); j.State != jobtype.StateCancelled || found {
		t.Errorf("cancelled job: %s %s %s; its Job still there: %v", j.State, j.Reason, j.Error, found)
	}

	failID := r.submit("kube-fail", "fail")
	j = waitJob(t, r.base, failID, 2*time.Minute, "failed", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || !strings.Contains(j.Error, "bad data at line 3") || j.Attempt != 1 {
		t.Errorf("failing job: %s %s %q attempt %d", j.State, j.Reason, j.Error, j.Attempt)
	}

	sr := &slurmRig{t: t, dir: r.dir}
	out, errOut, code := cli(t, r.lathe, r.base, "submit", sr.spec("kube-us", "ok", "us"), "-o", "json")
	if code == 0 || !strings.Contains(out+errOut, "k8s") {
		t.Errorf("a [us] job: exit %d\n%s\n%s", code, out, errOut)
	}
	if jobs := r.jobs(); len(jobs) != 2 || r.kube.StandIn.Runs() != 3 {
		t.Errorf("%d Jobs left (want ok and fail), %d pods run (want 3)", len(jobs), r.kube.StandIn.Runs())
	}
}

// checkKubeJobSpec checks the Job of job id's first attempt against the
// backend's config.
func checkKubeJobSpec(t *testing.T, r *kubeRig, id string) {
	t.Helper()
	kj, ok := r.k8sJob(id, 1)
	if !ok {
		t.Fatalf("no Job for %s", id)
	}
	p := kj.Spec.Template.Spec
	c := p.Containers[0]
	gpus := c.Resources.Limits["nvidia.com/gpu"]
	if gpus.Value() != 1 || *kj.Spec.BackoffLimit != 0 || p.RestartPolicy != corev1.RestartPolicyNever || p.NodeSelector["type"] != "kwok" ||
		len(p.Tolerations) != 1 || p.ServiceAccountName != "lathe-trainer" || kj.Labels["kueue.x-k8s.io/queue-name"] != "team-a" ||
		c.Image != "lathe-test:stand-in" || kj.Spec.ActiveDeadlineSeconds == nil {
		t.Errorf("Job spec %+v", kj.Spec)
	}
	if !kubeJobEnded(kj, batchv1.JobComplete) {
		t.Errorf("Job status %+v, want Complete", kj.Status)
	}
}

func kubeJobEnded(j *batchv1.Job, want batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == want && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// TestKubeWorkerRestartE2E: the kubernetes worker is killed (-9) while its
// attempt runs; the next worker adopts the attempt and re-attaches to the
// Job recorded on the job (none made again), which then succeeds.
func TestKubeWorkerRestartE2E(t *testing.T) {
	r := newKubeRig(t)
	defer r.dump()
	id := r.submit("kube-gate", "gate")
	waitJob(t, r.base, id, 2*time.Minute, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	kill9(t, r.worker)
	r.worker = r.startWorker()
	waitfor.True(t, time.Minute, "the new worker re-attached", func() bool { return strings.Contains(r.worker.output(), "re-attached to Kubernetes Job") })
	if err := os.WriteFile(filepath.Join(r.dir, "kube-work", id, "1", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, r.base, id, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt != 1 || j.Metrics["train_loss"] != 0.25 || len(j.Artifacts) != 1 {
		t.Fatalf("job %s attempt %d %s metrics %v artifacts %+v", j.State, j.Attempt, j.Error, j.Metrics, j.Artifacts)
	}
	if jobs := r.jobs(); len(jobs) != 1 || r.kube.StandIn.Runs() != 1 {
		t.Errorf("%d Jobs, %d pods run; want the one", len(jobs), r.kube.StandIn.Runs())
	}
}

// TestKubeEvictionE2E: the attempt's pod is evicted through the Eviction
// API (the DisruptionTarget condition); the Job fails by its pod failure
// policy, the attempt ends as a preemption (not a failure), and the next
// attempt runs in a new Job and succeeds.
func TestKubeEvictionE2E(t *testing.T) {
	r := newKubeRig(t)
	defer r.dump()
	id := r.submit("kube-second", "second")
	waitJob(t, r.base, id, 2*time.Minute, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	ctx := context.Background()
	pods, err := r.kube.Client.CoreV1().Pods(r.kube.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "lathe.dev/job=" + id})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %v %v", id, pods, err)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods.Items[0].Name, Namespace: r.kube.Namespace}}
	if err := r.kube.Client.CoreV1().Pods(r.kube.Namespace).EvictV1(ctx, ev); err != nil {
		t.Fatalf("evict: %v", err)
	}
	j := waitJob(t, r.base, id, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt != 2 || j.Preemptions != 1 {
		t.Fatalf("job %s %s %q attempt %d preemptions %d, want succeeded in attempt 2 after 1 preemption", j.State, j.Reason, j.Error, j.Attempt, j.Preemptions)
	}
	if kj, ok := r.k8sJob(id, 1); !ok || !kubeJobEnded(kj, batchv1.JobFailed) {
		t.Errorf("attempt 1's Job %+v (found %v), want Failed", kj, ok)
	}
}

// TestKubeOrphanE2E: a Job of this deployment named for an attempt the
// store does not hold is deleted; one of another deployment's label, and
// one of another name, are left alone.
func TestKubeOrphanE2E(t *testing.T) {
	r := newKubeRig(t)
	defer r.dump()
	ctx := context.Background()
	mk := func(name, cluster string) {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"lathe.dev/cluster": cluster}},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"lathe.dev/cluster": cluster}},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeSelector: map[string]string{"type": "none"},
					Containers: []corev1.Container{{Name: "trainer", Image: "x", Command: []string{"/bin/true"}}}}}}}
		if _, err := r.kube.Client.BatchV1().Jobs(r.kube.Namespace).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("lathe-j-0000000000000001-1", "lathe")
	mk("lathe-j-0000000000000002-1", "other")
	mk("not-lathe", "lathe")
	waitfor.True(t, time.Minute, "the orphan deleted", func() bool {
		_, err := r.kube.Client.BatchV1().Jobs(r.kube.Namespace).Get(ctx, "lathe-j-0000000000000001-1", metav1.GetOptions{})
		return err != nil
	})
	if jobs := r.jobs(); len(jobs) != 2 {
		t.Errorf("%d Jobs left, want the other deployment's and the other name's", len(jobs))
	}
}

// TestKubeStepOutputFromAPIE2E: the image lacks lathed at lathed_path, so
// each attempt's container fails before the step runs and leaves no status;
// the worker reads the pod's log through the API server's pods/log (served
// by the kubetest stand-in as a kubelet would) and puts its end into the
// reason; each such attempt is retried, and the job fails after the last.
func TestKubeStepOutputFromAPIE2E(t *testing.T) {
	r := newKubeRigWith(t, kubeRigOptions{LathedOnNodes: "/nonexistent/lathed"})
	defer r.dump()
	id := r.submit("kube-nolathed", "ok")
	j := waitJob(t, r.base, id, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateFailed || j.Attempt != 3 || !strings.Contains(j.Error, "its output ends:") || !strings.Contains(j.Error, "/nonexistent/lathed") {
		t.Fatalf("job %s %s %q attempt %d, want failed in attempt 3 with the pod's log", j.State, j.Reason, j.Error, j.Attempt)
	}
	t.Logf("the job's reason: %s", j.Error)
}

// TestKubeUpE2E: `lathed up --kube-backend k8s`: the scheduler, a local
// worker and the kubernetes worker in one process; a job runs as a Job and
// succeeds.
func TestKubeUpE2E(t *testing.T) {
	r := newKubeRigWith(t, kubeRigOptions{NoDaemons: true})
	port := redistest.FreePort(t)
	r.base = "http://127.0.0.1:" + strconv.Itoa(port)
	r.worker = startDaemon(t, r.lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"), "--gpus", "none", "--kube-backend", "k8s")
	waitHTTP(t, r.base, r.worker)
	defer r.dump()
	id := r.submit("kube-up", "ok")
	j := waitJob(t, r.base, id, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Instance == nil || j.Instance.Backend != "k8s" {
		t.Fatalf("job %s %s %s instance %+v", j.State, j.Reason, j.Error, j.Instance)
	}
	if kj, ok := r.k8sJob(id, 1); !ok || !kubeJobEnded(kj, batchv1.JobComplete) {
		t.Errorf("the Job %+v (found %v), want Complete", kj, ok)
	}
}
