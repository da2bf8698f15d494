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
