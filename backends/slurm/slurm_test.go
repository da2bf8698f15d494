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
	if all, err := cli.Jobs(ctx, []string{long, waiting}); err != nil || len(all) != 2 || all[long].State != slurm.StateRunning || all[waiting].State != slurm.StatePending {
		t.Errorf("Jobs: %+v %v", all, err)
	}
	if all, err := cli.Jobs(ctx, []string{long, "987654"}); err != nil || len(all) > 1 {
		t.Errorf("Jobs with an unknown id: %+v %v", all, err)
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
}

// TestSubmitArgs: sbatch's command line for a request.
func TestSubmitArgs(t *testing.T) {
	r := slurm.SubmitRequest{Name: "lathe-j-1", Partition: "gpu", Account: "ml", GPUs: 2, GRESType: "a100", Script: "/w/run.sh",
		Dir: "/w", Output: "/w/slurm.out", TimeLimit: 61 * time.Second}
	want := "--parsable --job-name=lathe-j-1 --partition=gpu --nodes=1 --ntasks=1 --no-requeue --chdir=/w --output=/w/slurm.out " +
		"--account=ml --gres=gpu:a100:2 --time=2 /w/run.sh"
	if got := strings.Join(r.Args(), " "); got != want {
		t.Errorf("args\n%s\nwant\n%s", got, want)
	}
	r.GRESType, r.Account, r.TimeLimit = "", "", 0
	if got := strings.Join(r.Args(), " "); strings.Contains(got, "--account") || strings.Contains(got, "--time") || !strings.Contains(got, "--gres=gpu:2 ") {
		t.Errorf("args %s", got)
	}
	if g := (slurm.Job{TRESPerNode: "gres:gpu:a100:4"}).GPUs(); g != 4 {
		t.Errorf("GPUs of gres:gpu:a100:4 = %d", g)
	}
}

// TestGRESTypeAgainstRealSlurm: a request of typed GPUs (gres_type) runs on
// a node whose GPUs have that GRES type.
func TestGRESTypeAgainstRealSlurm(t *testing.T) {
	c := slurmtest.Start(t, slurmtest.Options{GRESType: "a100"})
	cli := slurm.New(slurm.Config{Conf: c.Conf})
	dir := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho CVD=$CUDA_VISIBLE_DEVICES\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := cli.Submit(t.Context(), slurm.SubmitRequest{Name: "typed", Partition: c.Partition, GPUs: 1, GRESType: "a100",
		Script: script, Dir: dir, Output: filepath.Join(dir, "out")})
	if err != nil {
		t.Fatal(err)
	}
	j := waitfor.Value(t, time.Minute, "the typed job ended", func() slurm.Job { j, _ := cli.Job(t.Context(), id); return j },
		func(j slurm.Job) bool { return slurm.Ended(j.State) })
	out, _ := os.ReadFile(filepath.Join(dir, "out"))
	if j.State != slurm.StateCompleted || j.GPUs() != 1 || !strings.HasPrefix(string(out), "CVD=0") {
		t.Errorf("job %+v, output %q", j, out)
	}
}
