package kubetest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lathe-ml/lathe/internal/waitfor"
)

func shJob(name, script string, gpus int) *batchv1.Job {
	zero := int32(0)
	q := resource.MustParse("1")
	q.Set(int64(gpus))
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: batchv1.JobSpec{BackoffLimit: &zero,
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "stand-in", Command: []string{"/bin/sh", "-c", script},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": q}}}}}}}}
}

func jobEnded(c *Cluster, name string) (batchv1.JobConditionType, bool) {
	j, err := c.Client.BatchV1().Jobs(c.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	for _, cd := range j.Status.Conditions {
		if (cd.Type == batchv1.JobComplete || cd.Type == batchv1.JobFailed) && cd.Status == corev1.ConditionTrue {
			return cd.Type, true
		}
	}
	return "", false
}

// TestClusterRunsGPUJobs: a Job asking nvidia.com/gpu is made into a pod by
// the real Job controller, scheduled onto a kwok GPU node by the real
// scheduler, made Running by kwok; the stand-in runs its command, which
// sees CUDA_VISIBLE_DEVICES, and ends it: Complete for exit 0, Failed for
// exit 3. A Job asking more GPUs than a node has stays unscheduled.
func TestClusterRunsGPUJobs(t *testing.T) {
	c := Start(t, Options{GPUs: 2})
	out := filepath.Join(t.TempDir(), "out")
	ctx := context.Background()
	for _, j := range []*batchv1.Job{shJob("ok", "echo $CUDA_VISIBLE_DEVICES > "+out, 2), shJob("bad", "exit 3", 1), shJob("big", "true", 3)} {
		if _, err := c.Client.BatchV1().Jobs(c.Namespace).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var okEnd, badEnd batchv1.JobConditionType
	if !waitfor.Poll(2*time.Minute, func() bool {
		var a, b bool
		okEnd, a = jobEnded(c, "ok")
		badEnd, b = jobEnded(c, "bad")
		return a && b
	}) {
		pods, _ := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("pod %s node %q phase %s conditions %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions)
		}
		t.Fatalf("jobs did not end: ok %q bad %q", okEnd, badEnd)
	}
	if okEnd != batchv1.JobComplete || badEnd != batchv1.JobFailed {
		t.Errorf("ok ended %s, bad ended %s", okEnd, badEnd)
	}
	if b, err := os.ReadFile(out); err != nil || strings.TrimSpace(string(b)) != "0,1" {
		t.Errorf("CUDA_VISIBLE_DEVICES seen: %q %v", b, err)
	}
	pods, _ := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=big"})
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "" {
		t.Errorf("the 3-GPU job's pods: %+v", pods.Items)
	}
	if _, ended := jobEnded(c, "big"); ended || c.StandIn.Runs() != 2 {
		t.Errorf("the 3-GPU job ended %v; stand-in runs %d, want 2", ended, c.StandIn.Runs())
	}
}
