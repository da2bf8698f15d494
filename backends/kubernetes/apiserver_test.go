package kubernetes

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lathe-ml/lathe/internal/kubetest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestClientAgainstRealAPIServer drives Client against a real
// kube-apiserver with the real Job controller and scheduler and kwok GPU
// nodes (internal/kubetest; its stand-in plays the containers): a Job that
// exits 0 reads Succeeded, with its start, end and exit code, and its log
// comes back through the API server's pods/log; one that exits 3 reads
// Failed with exit code 3; one past its active deadline reads
// DeadlineExceeded; a Job deleted is gone from the watch.
func TestClientAgainstRealAPIServer(t *testing.T) {
	c := kubetest.Start(t, kubetest.Options{GPUs: 2})
	cl, err := New(Config{Kubeconfig: c.Kubeconfig, Namespace: c.Namespace, Cluster: "lathe"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sh := func(name, script string, deadline time.Duration) SubmitRequest {
		return SubmitRequest{Name: name, JobID: "j-0123456789abcdef", Attempt: 1, Image: "stand-in", GPUs: 1,
			Command: []string{"/bin/sh", "-c", script}, ActiveDeadline: deadline}
	}
	for _, r := range []SubmitRequest{sh("ok", "echo first; echo last line", 0), sh("bad", "echo bad >&2; exit 3", 0), sh("slow", "exec sleep 600", 2*time.Second)} {
		if _, existed, err := cl.Submit(ctx, r); err != nil || existed {
			t.Fatalf("submit %s: existed %v err %v", r.Name, existed, err)
		}
	}
	// The API server takes the claim's paths as subPath mounts (its
	// validation refuses an absolute or climbing subPath).
	mr := sh("mounts", "true", 0)
	mr.VolumeClaim, mr.ClaimPath = "shared", "/shared/w"
	mr.ClaimMounts = []Mount{{Path: "/shared/w/j/1"}, {Path: "/shared/w/data/train.jsonl", ReadOnly: true}}
	if _, _, err := cl.Submit(ctx, mr); err != nil {
		t.Fatalf("submit mounts: %v", err)
	}
	mj, err := cl.cs.BatchV1().Jobs(c.Namespace).Get(ctx, "mounts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vm := mj.Spec.Template.Spec.Containers[0].VolumeMounts; len(vm) != 2 || vm[0].SubPath != "j/1" || vm[1].SubPath != "data/train.jsonl" || !vm[1].ReadOnly {
		t.Errorf("mounts as stored: %+v", vm)
	}
	if err := cl.Delete(ctx, "mounts"); err != nil {
		t.Fatal(err)
	}
	// The pod the Job controller made from the template keeps the
	// hardening the API server accepted: no API token mounted, no
	// escalation, no capabilities.
	var pod corev1.Pod
	waitfor.True(t, time.Minute, "ok's pod made", func() bool {
		pods, err := cl.cs.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=ok"})
		if err != nil || len(pods.Items) == 0 {
			return false
		}
		pod = pods.Items[0]
		return true
	})
	sc := pod.Spec.Containers[0].SecurityContext
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a || sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("ok's pod: token automount %v, security context %+v", a, sc)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil || strings.HasPrefix(v.Name, "kube-api-access") {
			t.Errorf("ok's pod has the API token volume %q", v.Name)
		}
	}
	ended := func(name string) Job {
		var j Job
		waitfor.True(t, 2*time.Minute, name+" ended in the watch", func() bool {
			j, err = cl.Watched(name)
			return err == nil && Ended(j.State)
		})
		return j
	}
	if j := ended("ok"); j.State != StateSucceeded || j.ExitCode != 0 || j.Start.IsZero() || j.End.Before(j.Start) || j.Node != c.Nodes[0] {
		t.Errorf("ok: %+v", j)
	}
	if j := ended("bad"); j.State != StateFailed || j.ExitCode != 3 {
		t.Errorf("bad: %+v", j)
	}
	if j := ended("slow"); j.State != StateDeadlineExceeded {
		t.Errorf("slow: %+v", j)
	}
	if out, err := cl.Logs(ctx, "ok", 1<<10); err != nil || !strings.HasSuffix(out, "last line\n") {
		t.Errorf("log of ok: %q %v", out, err)
	}
	if err := cl.Delete(ctx, "ok"); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, time.Minute, "ok gone from the watch", func() bool { _, err := cl.Watched("ok"); return err != nil })
}
