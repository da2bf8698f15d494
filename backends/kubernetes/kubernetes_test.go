package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func testRequest() SubmitRequest {
	return SubmitRequest{Name: "lathe-j-0123456789abcdef-2", Cluster: "lathe", JobID: "j-0123456789abcdef", Attempt: 2,
		Image: "registry.example/lathe:1", Command: []string{"/shared/w/j/2/run.sh"}, WorkingDir: "/shared/w/j/2", GPUs: 2,
		NodeSelector: map[string]string{"gpu": "a100"}, Tolerations: []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
		ServiceAccount: "trainer", QueueName: "team-a", ActiveDeadline: 90*time.Minute + 500*time.Millisecond,
		HostPaths: []string{"/shared", "/data"}, VolumeClaim: "work", ClaimPath: "/shared/w",
		ClaimMounts: []Mount{{Path: "/shared/w/j/2"}, {Path: "/shared/w/j/checkpoints"}, {Path: "/shared/w/data/train.jsonl", ReadOnly: true},
			{Path: "/data/eval.jsonl", ReadOnly: true}, {Path: "/shared/w"}, {Path: "/shared/w/../x"}}}
}

// TestBuildJob: one pod that never restarts, no Kubernetes retries, the
// GPUs as nvidia.com/gpu limits, the backend's selector, tolerations,
// account and volumes, Kueue's label, the deadline rounded up.
func TestBuildJob(t *testing.T) {
	j := BuildJob(testRequest(), "ns")
	s := j.Spec
	if j.Name != "lathe-j-0123456789abcdef-2" || j.Namespace != "ns" || *s.BackoffLimit != 0 || *s.ActiveDeadlineSeconds != 5401 ||
		s.PodFailurePolicy.Rules[0].OnPodConditions[0].Type != corev1.DisruptionTarget {
		t.Errorf("job = %+v", j)
	}
	for _, l := range []map[string]string{j.Labels, s.Template.Labels} {
		if l[LabelQueue] != "team-a" || l[LabelJob] != "j-0123456789abcdef" || l[LabelAttempt] != "2" || l[LabelCluster] != "lathe" {
			t.Errorf("labels = %v", l)
		}
	}
	p := s.Template.Spec
	c := p.Containers[0]
	if p.RestartPolicy != corev1.RestartPolicyNever || p.ServiceAccountName != "trainer" || p.NodeSelector["gpu"] != "a100" ||
		len(p.Tolerations) != 1 || p.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("pod = %+v", p)
	}
	// The trainer is hostile: no API token, no escalation, no capabilities.
	if sc := c.SecurityContext; p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken || sc == nil ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged == nil || *sc.Privileged ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod token %v, container security context %+v; want no token, no escalation, no capabilities, RuntimeDefault seccomp",
			p.AutomountServiceAccountToken, sc)
	}
	if q := c.Resources.Limits[ResourceGPU]; q.Value() != 2 || c.Image != "registry.example/lathe:1" || c.Command[0] != "/shared/w/j/2/run.sh" {
		t.Errorf("container = %+v", c)
	}
	if len(p.Volumes) != 3 || p.Volumes[0].PersistentVolumeClaim.ClaimName != "work" || p.Volumes[1].HostPath.Path != "/data" ||
		p.Volumes[2].HostPath.Path != "/shared" {
		t.Errorf("volumes %+v", p.Volumes)
	}
	// Of the claim, the attempt's folder, its checkpoints and its data
	// alone, each at its own path: not the whole work_dir (other
	// attempts' folders), nor a path out of it.
	var mounts []string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, fmt.Sprintf("%s %s:%s ro=%v", m.Name, m.SubPath, m.MountPath, m.ReadOnly))
	}
	want := []string{"work j/2:/shared/w/j/2 ro=false", "work j/checkpoints:/shared/w/j/checkpoints ro=false",
		"work data/train.jsonl:/shared/w/data/train.jsonl ro=true", "host-0 :/data ro=false", "host-1 :/shared ro=false"}
	if !slices.Equal(mounts, want) {
		t.Errorf("mounts\n%q\nwant\n%q", mounts, want)
	}
	r := testRequest()
	r.QueueName, r.GPUs = "", 0
	if j := BuildJob(r, "ns"); j.Labels[LabelQueue] != "" || j.Spec.Template.Spec.Containers[0].Resources.Limits != nil {
		t.Errorf("no queue, no GPUs: %+v", j)
	}
}

func cond(t batchv1.JobConditionType, reason string) batchv1.JobCondition {
	return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: "m\x1b[31m"}
}

func podOf(phase corev1.PodPhase, reason string, exit int32, disruption bool) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "gpu-1"}, Status: corev1.PodStatus{Phase: phase, Reason: reason}}
	now := metav1.Now()
	switch phase {
	case corev1.PodRunning:
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	case corev1.PodFailed, corev1.PodSucceeded:
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, StartedAt: now, FinishedAt: now}}}}
	}
	if disruption {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"}}
	}
	return p
}

// TestSummarize: the end mapping. Complete → Succeeded; Failed by the
// deadline → DeadlineExceeded; Failed with an evicted, preempted or lost
// pod → Disrupted; Failed otherwise → Failed with the exit code; a Job
// being deleted → Deleting; a running pod → Running; else Pending.
func TestSummarize(t *testing.T) {
	deleted := metav1.Now()
	cases := []struct {
		name  string
		conds []batchv1.JobCondition
		pod   *corev1.Pod
		del   bool
		want  string
		exit  int
	}{
		{"pending", nil, podOf(corev1.PodPending, "", 0, false), false, StatePending, -1},
		{"no pod yet", nil, nil, false, StatePending, -1},
		{"running", nil, podOf(corev1.PodRunning, "", 0, false), false, StateRunning, -1},
		{"complete", []batchv1.JobCondition{cond(batchv1.JobComplete, "")}, podOf(corev1.PodSucceeded, "", 0, false), false, StateSucceeded, 0},
		{"failed exit 3", []batchv1.JobCondition{cond(batchv1.JobFailed, "BackoffLimitExceeded")}, podOf(corev1.PodFailed, "", 3, false), false, StateFailed, 3},
		{"failure target", []batchv1.JobCondition{cond(batchv1.JobFailureTarget, "BackoffLimitExceeded")}, podOf(corev1.PodFailed, "", 1, false), false, StateFailed, 1},
		{"deadline", []batchv1.JobCondition{cond(batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded)}, podOf(corev1.PodFailed, "", 137, false), false, StateDeadlineExceeded, 137},
		{"preempted", []batchv1.JobCondition{cond(batchv1.JobFailed, "BackoffLimitExceeded")}, podOf(corev1.PodFailed, "", 137, true), false, StateDisrupted, 137},
		{"evicted", []batchv1.JobCondition{cond(batchv1.JobFailed, "BackoffLimitExceeded")}, podOf(corev1.PodFailed, "Evicted", 0, false), false, StateDisrupted, -1},
		{"node lost", []batchv1.JobCondition{cond(batchv1.JobFailed, "BackoffLimitExceeded")}, podOf(corev1.PodFailed, "NodeLost", 0, false), false, StateDisrupted, -1},
		{"pod failure policy", []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonPodFailurePolicy,
			Message: "Pod lathe-jobs/x-abc has condition DisruptionTarget matching FailJob rule at index 0"}}, nil, false, StateDisrupted, -1},
		{"deleting", nil, podOf(corev1.PodRunning, "", 0, false), true, StateDeleting, -1},
	}
	for _, tc := range cases {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Status: batchv1.JobStatus{Conditions: tc.conds}}
		if tc.del {
			job.DeletionTimestamp = &deleted
		}
		var pods []*corev1.Pod
		if tc.pod != nil {
			if tc.exit < 0 && tc.pod.Status.Phase == corev1.PodFailed {
				tc.pod.Status.ContainerStatuses = nil
			}
			pods = append(pods, tc.pod)
		}
		got := Summarize(job, pods)
		if got.State != tc.want || got.ExitCode != tc.exit {
			t.Errorf("%s: state %s exit %d, want %s exit %d", tc.name, got.State, got.ExitCode, tc.want, tc.exit)
		}
		if strings.ContainsRune(got.Message, 0x1b) {
			t.Errorf("%s: message %q keeps a control character", tc.name, got.Message)
		}
	}
}

// TestBounded: what the cluster says is cut and stripped.
func TestBounded(t *testing.T) {
	long := strings.Repeat("é", 600)
	if b := bounded(long); len(b) > maxText+len("…") || !strings.HasSuffix(b, "…") {
		t.Errorf("bounded(long) is %d bytes", len(b))
	}
	if b := bounded("a\nb\x00c"); b != "a b c" {
		t.Errorf("bounded = %q", b)
	}
}

// TestClientSubmitOnce: a second Submit of the same name makes nothing and
// returns the Job made first; Delete of a Job gone is no error. Over
// client-go's fake clientset (an object tracker with state, not a real API
// server: cmd/lathed's TestKube*E2E use one).
func TestClientSubmitOnce(t *testing.T) {
	cs := fake.NewClientset()
	c, err := NewForClientset(cs, Config{Namespace: "ns", Cluster: "lathe"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, existed, err := c.Submit(ctx, testRequest()); err != nil || existed {
		t.Fatalf("submit: existed %v err %v", existed, err)
	}
	j, existed, err := c.Submit(ctx, testRequest())
	if err != nil || !existed || j.Name != testRequest().Name {
		t.Fatalf("second submit: %+v existed %v err %v", j, existed, err)
	}
	list, _ := cs.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Errorf("%d jobs, want 1", len(list.Items))
	}
	if err := c.Delete(ctx, j.Name); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, j.Name); err != nil {
		t.Errorf("delete again: %v", err)
	}
	if _, err := c.Get(ctx, j.Name); !errors.Is(err, ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
}
