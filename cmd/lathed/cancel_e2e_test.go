package main

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// slowTrainerConfig: a /bin/sh stand-in trainer that prints progress until
// SIGTERM, then a checkpoint line, and exits 143 (the contract's behaviour,
// without torch's start-up time).
const slowTrainerConfig = `
trainers:
  slow: ["/bin/sh", "-c", "ck() { printf '{\"event\":\"checkpoint\",\"step\":1,\"path\":\"ckpt-1\"}\\n'; exit 143; }; trap ck TERM; i=0; while :; do i=$((i+1)); printf '{\"event\":\"progress\",\"step\":%d,\"total_steps\":100000,\"loss\":1}\\n' $i; sleep 0.1; done"]
worker:
  lease_ttl: 3s
  heartbeat_ttl: 3s
  kill_grace: 2s
  slots: 1
scheduler:
  place_interval: 100ms
  reap_grace: 1s
`

// TestCancelInEveryState: a cancel while the job is queued, dispatched (its
// task not yet taken), running, and running on a worker that is down ends
// cancelled each time, and no trainer of those jobs starts afterwards.
func TestCancelInEveryState(t *testing.T) {
	lathed, lathe := binaries(t)
	rs := redistest.Start(t)
	data := t.TempDir()
	cfg := filepath.Join(data, "lathe.yaml")
	os.WriteFile(cfg, []byte(slowTrainerConfig), 0o644)
	spec := filepath.Join(data, "slow.yaml")
	os.WriteFile(spec, []byte("name: slow\nbase_model: tiny-char\ndataset: file://"+repoRoot(t)+"/configs/examples/data/tiny-train.jsonl\ntrainer: slow\n"), 0o644)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	sd := startDaemon(t, lathed, "scheduler", "--config", cfg, "--redis-url", rs.URL(), "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
	waitHTTP(t, base, sd)
	worker := func() *daemon {
		return startDaemon(t, lathed, "worker", "--config", cfg, "--backend", "local", "--redis-url", rs.URL(), "--data-dir", data, "--node", "c1")
	}
	submit := func() string {
		out, e, code := cli(t, lathe, base, "submit", spec, "-o", "json")
		if code != 0 {
			t.Fatalf("submit: %d %s", code, e)
		}
		return decodeJob(t, out).ID
	}
	cancel := func(id string) {
		if _, e, code := cli(t, lathe, base, "cancel", id); code != 0 {
			t.Fatalf("cancel %s: %s", id, e)
		}
	}
	cancelled := func(id string) {
		waitJob(t, base, id, 30*time.Second, "cancelled", func(j jobtype.Job) bool { return j.State == jobtype.StateCancelled })
	}
	var done []string

	// 1. queued: no worker at all.
	q := submit()
	cancel(q)
	cancelled(q)
	done = append(done, q)

	// 2. dispatched: the worker is frozen (SIGSTOP) while its heartbeat
	// lives, so the placer dispatches to its queue but nobody takes the task.
	wd := worker()
	waitNode(t, rs, "c1")
	_ = wd.cmd.Process.Signal(syscall.SIGSTOP)
	d := submit()
	waitJob(t, base, d, 10*time.Second, "dispatched", func(j jobtype.Job) bool { return j.State == jobtype.StateDispatched })
	cancel(d)
	cancelled(d)
	done = append(done, d)
	_ = wd.cmd.Process.Signal(syscall.SIGCONT)

	// 3. running.
	r := submit()
	waitJob(t, base, r, 30*time.Second, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step > 0 })
	cancel(r)
	cancelled(r)
	done = append(done, r)

	// 4. running on a worker that is down: kill -9 it, cancel, then start it again.
	g := submit()
	waitJob(t, base, g, 30*time.Second, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step > 0 })
	_ = wd.cmd.Process.Kill()
	<-wd.done
	cancel(g)
	cancelled(g) // the reaper ends it once the lease is over
	done = append(done, g)
	worker()

	// No trainer of any of them starts afterwards: watch /proc for the
	// retry path's delay (lease + grace) plus 5 s.
	watches := make([]*trainerWatch, len(done))
	for i, id := range done {
		watches[i] = watchTrainers(id)
	}
	time.Sleep(4*time.Second + 5*time.Second) // an observation window, not a timing assertion
	for i, id := range done {
		if n := watches[i].stop(); n != 0 {
			t.Fatalf("a trainer of cancelled job %s ran after the cancel (%d seen)", id, n)
		}
		if j := getJob(t, base, id); j.State != jobtype.StateCancelled {
			t.Fatalf("job %s is %s after the window", id, j.State)
		}
	}
}

// waitNode waits until a worker's heartbeat is in Redis.
func waitNode(t *testing.T, rs *redistest.Server, node string) {
	t.Helper()
	c := rs.Client()
	waitfor.True(t, 30*time.Second, "node "+node+" registered", func() bool {
		n, _ := c.Exists(t.Context(), "lathe:node:"+node).Result()
		return n == 1
	})
}
