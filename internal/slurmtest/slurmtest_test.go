package slurmtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestClusterRunsAGPUJob: the cluster takes a batch job asking for one GPU
// and runs it with CUDA_VISIBLE_DEVICES set.
func TestClusterRunsAGPUJob(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := filepath.Join(c.Dir, "job.out")
	if _, err := c.Command(ctx, "sbatch", "--parsable", "--gres=gpu:1", "--partition="+c.Partition, "--output="+out,
		"--wrap", "echo CVD=$CUDA_VISIBLE_DEVICES"); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, time.Minute, "the job's output", func() bool {
		b, _ := os.ReadFile(out)
		return strings.HasPrefix(string(b), "CVD=0")
	})
	jobs, err := c.Jobs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].TRESPerNode != "gres:gpu:1" {
		t.Errorf("jobs %+v, %v", jobs, err)
	}
}

// TestClusterPreemption: a job of the urgent partition preempts one of the
// default partition, which ends PREEMPTED.
func TestClusterPreemption(t *testing.T) {
	c := Start(t, Options{Preemption: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Command(ctx, "sbatch", "--parsable", "--job-name=low", "--gres=gpu:1", "--partition="+c.Partition, "--output=/dev/null", "--wrap", "sleep 300"); err != nil {
		t.Fatal(err)
	}
	state := func(name string) string {
		jobs, _ := c.Jobs(ctx)
		for _, j := range jobs {
			if j.Name == name {
				return j.State
			}
		}
		return ""
	}
	waitfor.True(t, time.Minute, "the low job running", func() bool { return state("low") == "RUNNING" })
	if _, err := c.Command(ctx, "sbatch", "--parsable", "--job-name=high", "--gres=gpu:2", "--partition="+UrgentPartition, "--output=/dev/null", "--wrap", "sleep 1"); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, time.Minute, "the low job preempted", func() bool { return state("low") == "PREEMPTED" })
}
