package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/trainer"
	"github.com/lathe-ml/lathe/worker"
)

// TestRestartReleasesDeadAttempts: a worker starting on a node kills the
// trainer groups its previous incarnation left (pidfiles) and hands their
// attempts back to the queue at once, though their leases run for another
// 10 minutes: queued as attempt 2, resuming from the checkpoint. An
// attempt of that incarnation with no pidfile (its trainer is not known
// dead) is left to the reaper. The "trainer" is a real process group of
// /bin/sh with a child that ignores SIGTERM.
func TestRestartReleasesDeadAttempts(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	store := jobstore.New(rdb, jobstore.Config{})
	dir := t.TempDir()
	const dead = "dead-incarnation"
	var ids []string
	for i := 0; i < 2; i++ {
		j, _, err := store.Create(ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "r", Priority: jobspec.PriorityNormal}, OutputURI: "file:///out/{id}"})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 2}); err != nil {
			t.Fatal(err)
		}
		if out, err := store.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: dead, Lease: 10 * time.Minute}); err != nil || out != jobstore.Claimed {
			t.Fatalf("claim: %v %v", out, err)
		}
		ids = append(ids, j.ID)
	}
	// ids[0] had a trainer, still running (orphaned); ids[1] none recorded.
	cmd := exec.Command("/bin/sh", "-c", "trap '' TERM; sleep 300 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	pgid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pgid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+1:])
	start, _ := strconv.ParseUint(fields[19], 10, 64)
	os.MkdirAll(filepath.Join(dir, "pids"), 0o755)
	b, _ := json.Marshal(map[string]any{"job_id": ids[0], "attempt": 1, "pgid": pgid, "start_time": start, "incarnation": dead})
	os.WriteFile(filepath.Join(dir, "pids", ids[0]+"-1.json"), b, 0o644)

	w, err := worker.New(rdb, store, worker.Config{Node: "n1", DataDir: dir, LeaseTTL: 10 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	if trainer.GroupAlive(pgid) {
		t.Fatalf("orphaned group %d still alive after the worker started", pgid)
	}
	j, err := store.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.State != jobtype.StateQueued || j.Attempt != 2 || j.Node != "" || !strings.Contains(j.Error, "restarted") {
		t.Fatalf("the dead attempt was not released at start: %s attempt %d node %q error %q", j.State, j.Attempt, j.Node, j.Error)
	}
	if n, _ := rdb.ZScore(ctx, "lathe:pending", ids[0]).Result(); n == 0 {
		t.Fatal("the released job is not in the pending set")
	}
	if res, _ := rdb.HGetAll(ctx, "lathe:node:n1:reserved").Result(); res[ids[0]] != "" {
		t.Fatalf("the released attempt still holds its reservation: %v", res)
	}
	if j, _ := store.Get(ctx, ids[1]); j.State != jobtype.StateRunning || j.Attempt != 1 {
		t.Fatalf("an attempt with no pidfile was released: %s attempt %d", j.State, j.Attempt)
	}
}
