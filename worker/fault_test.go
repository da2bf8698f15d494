package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/trainer"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/worker"
)

// TestStartKillsOrphans: a trainer group left by a previous incarnation
// (a pidfile naming a live process group with its start time) is killed
// before the worker takes work. The "orphan" is a real process group of
// /bin/sh with a child that ignores SIGTERM.
func TestStartKillsOrphans(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	dir := t.TempDir()
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
	b, _ := json.Marshal(map[string]any{"job_id": "j-00000000000000aa", "attempt": 1, "pgid": pgid, "start_time": start})
	os.WriteFile(filepath.Join(dir, "pids", "j-00000000000000aa-1.json"), b, 0o644)
	w, err := worker.New(rdb, jobstore.New(rdb, jobstore.Config{}), worker.Config{Node: "n1", DataDir: dir,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	if trainer.GroupAlive(pgid) {
		t.Fatalf("orphaned group %d still alive after the worker started", pgid)
	}
	if _, err := os.Stat(filepath.Join(dir, "pids", "j-00000000000000aa-1.json")); !os.IsNotExist(err) {
		t.Fatalf("pidfile left: %v", err)
	}
}

// TestSelfFencing: when Redis is gone for half the attempt's lease, the
// worker stops the trainer on its own; once Redis is back the attempt is
// requeued (or, had the reaper come first, it stays requeued): never two.
func TestSelfFencing(t *testing.T) {
	b := setup(t, map[string]string{"slow": "#!/bin/sh\necho '{\"event\":\"progress\",\"step\":1,\"total_steps\":9,\"loss\":1}'\nexec sleep 120\n"})
	_ = b.w.Stop(context.Background()) // replace the default worker with one on a short lease
	w, err := worker.New(b.rdb, b.store, worker.Config{Node: "n2", DataDir: b.dir, LeaseTTL: 2 * time.Second, KillGrace: time.Second,
		Trainers: map[string][]string{"slow": {"/bin/sh", filepath.Join(b.dir, "slow.sh")}},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	id := b.submitTo(t, "slow", "n2")
	j := b.wait(t, id, func(j *jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	pid := startedPID(t, b, id)
	srv := redisOf(t, b)
	srv.Kill()
	// The trainer must be gone without Redis: wait on the process group.
	waitfor.True(t, 30*time.Second, fmt.Sprintf("trainer group %d gone with Redis down (lease 2s)", pid),
		func() bool { return !trainer.GroupAlive(pid) })
	srv.Restart()
	j = b.wait(t, id, func(j *jobtype.Job) bool { return j.State == jobtype.StateQueued })
	if j.Attempt != 2 {
		t.Fatalf("after fencing: %s attempt %d", j.State, j.Attempt)
	}
}

// TestStartPurgesStaleTasks: tasks left on the node's queue for attempts
// the store no longer has dispatched there are removed at start; a task
// the store still wants stays and runs.
func TestStartPurgesStaleTasks(t *testing.T) {
	b := setup(t, map[string]string{"ok": okTrainer})
	_ = b.w.Stop(context.Background())
	// A stale task (its job was never dispatched) and a current one, both for n3.
	stale, _, _ := b.store.Create(b.ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "s", Trainer: "ok", Priority: jobspec.PriorityNormal}})
	payload, _ := json.Marshal(jobtype.TaskPayload{JobID: stale.ID, Attempt: 1})
	info, err := b.client.Enqueue(asynq.NewTask(jobtype.TaskType, payload), asynq.Queue(jobtype.NodeQueue("n3")), asynq.MaxRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	cur := b.submitTo(t, "ok", "n3")
	w, err := worker.New(b.rdb, b.store, worker.Config{Node: "n3", DataDir: b.dir,
		Trainers: map[string][]string{"ok": {"/bin/sh", filepath.Join(b.dir, "ok.sh")}},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	if _, err := insp.GetTaskInfo(jobtype.NodeQueue("n3"), info.ID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("the stale task is still queued: %v", err)
	}
	if j := b.wait(t, cur, terminal); j.State != jobtype.StateSucceeded {
		t.Fatalf("the current task: %s %s", j.State, j.Error)
	}
}
