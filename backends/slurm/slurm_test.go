package slurm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/internal/slurmtest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestCLIAgainstRealSlurm: submit, watch, find by name, count pending,
// cancel, and a failing script, against a real one-host Slurm
// (internal/slurmtest).
func TestCLIAgainstRealSlurm(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.Options{GPUs: 2, CPUs: 2})
	cli := slurm.New(slurm.Config{Conf: c.Conf})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	req := func(name, body string, gpus int) slurm.SubmitRequest {
		return slurm.SubmitRequest{Name: name, Partition: c.Partition, Account: "ml", GPUs: gpus, Script: script(name, body),
			Dir: dir, Output: filepath.Join(dir, name+".out"), TimeLimit: 90 * time.Second}
	}
	long, err := cli.Submit(ctx, req("lathe-long", "sleep 300", 2))
	if err != nil {
		t.Fatal(err)
	}
	j := waitfor.Value(t, time.Minute, "the long job running", func() slurm.Job { j, _ := cli.Job(ctx, long); return j },
		func(j slurm.Job) bool { return j.State == slurm.StateRunning })
	if j.Partition != c.Partition || j.Account != "ml" || j.TRESPerNode != "gres:gpu:2" || j.Name != "lathe-long" || j.StartTime.IsZero() {
		t.Errorf("job %+v", j)
	}
	waiting, err := cli.Submit(ctx, req("lathe-wait", "exit 3", 1))
	if err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, time.Minute, "the second job pending (no GPU left)", func() bool {
		p, err := cli.Pending(ctx, c.Partition)
		return err == nil && len(p) == 1 && p[0].ID == waiting
	})
	// One pending job of 1 GPU × 2 min (90 s rounded up) over 2 GPUs.
	if w, err := cli.QueueWait(ctx, c.Partition); err != nil || w != time.Minute {
		t.Errorf("QueueWait = %s, %v; want 1m0s", w, err)
	}
	if found, err := cli.FindByName(ctx, "lathe-long"); err != nil || len(found) != 1 || found[0].ID != long {
		t.Errorf("FindByName: %+v %v", found, err)
	}
	if err := cli.Cancel(ctx, long); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, time.Minute, "the long job cancelled", func() bool { j, _ := cli.Job(ctx, long); return j.State == slurm.StateCancelled })
	j = waitfor.Value(t, time.Minute, "the failing job ended", func() slurm.Job { j, _ := cli.Job(ctx, waiting); return j },
		func(j slurm.Job) bool { return slurm.Ended(j.State) })
	if j.State != slurm.StateFailed || j.EndTime.IsZero() {
		t.Errorf("failing job %+v", j)
	}
	if err := cli.Cancel(ctx, long); err != nil {
		t.Errorf("cancel an ended job: %v", err)
	}
	if _, err := cli.Job(ctx, "987654"); !errors.Is(err, slurm.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if !strings.Contains(strings.Join(req("x", "", 1).Args(), " "), "--gres=gpu:1") {
		t.Error("args lack the gres")
	}
}
