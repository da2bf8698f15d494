package main

// Two workers as two nodes against one Redis (issue: "kill -9 of one during
// a job, and separately SIGSTOP of one (a partition): its job finishes on the
// other node, and at no moment do two attempts of one job run"). Real parts
// only: the lathed binary as a scheduler and two workers, a real
// redis-server, the reference trainer under /usr/bin/python3 with torch.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// twoNodes is a scheduler and the workers node-a and node-b on one Redis.
// Each worker has its own data dir; the checkpoint root is one folder both
// use (a pool's shared storage), so either node can resume the other's job.
type twoNodes struct {
	api, lathe string
	workers    map[string]*daemon
	spec       string
}

// startTwoNodes starts the pool with short leases: a worker renews every
// 750 ms (lease_ttl/4), fences itself 1.5 s after its last renewal, and the
// scheduler reaps 1 s after the 3 s lease ends. lease_ttl/2 + reap_grace
// (2.5 s) stays above kill_grace (2 s), as configs/lathe.yaml asks.
func startTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	requireTorch(t)
	lathed, lathe := binaries(t)
	root := repoRoot(t)
	rs := redistest.Start(t)
	port := redistest.FreePort(t)
	base := t.TempDir()
	cfg := filepath.Join(base, "lathe.yaml")
	writeNodesFile(t, cfg, shortLeases(base, root))
	// About 20 s of training on one CPU, a checkpoint every 20 steps.
	spec := filepath.Join(base, "two-nodes.yaml")
	writeNodesFile(t, spec, fmt.Sprintf(`name: two-nodes
base_model: tiny-char
dataset: file://%s/configs/examples/data/tiny-train.jsonl
lora: {rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}
training: {max_steps: 1500, batch_size: 4, learning_rate: 0.001, checkpoint_every: 20, eval_every: 100000}
resources: {gpus: 0}
`, root))
	n := &twoNodes{api: "http://127.0.0.1:" + strconv.Itoa(port), lathe: lathe, workers: map[string]*daemon{}, spec: spec}
	sd := startDaemon(t, lathed, "scheduler", "--config", cfg, "--redis-url", rs.URL(),
		"--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(base, "scheduler"))
	waitHTTP(t, n.api, sd)
	for _, node := range []string{"node-a", "node-b"} {
		n.workers[node] = startDaemon(t, lathed, "worker", "--config", cfg, "--redis-url", rs.URL(),
			"--node", node, "--data-dir", filepath.Join(base, node), "--gpus", "none")
	}
	// Both nodes must be live before the job is submitted, so that either
	// may get it and the other is there to take it over.
	// (On a timeout the workers' cleanup logs what they wrote.)
	waitfor.NoError(t, 30*time.Second, "the two workers up", func() error {
		live, err := rs.Client().Exists(t.Context(), "lathe:node:node-a", "lathe:node:node-b").Result()
		if err == nil && live != 2 {
			err = fmt.Errorf("%d of node-a and node-b live", live)
		}
		return err
	})
	return n
}

// shortLeases is the config of a pool under base with short leases
// (startTwoNodes says how short) and a checkpoint root of its own, its
// jobs' files allowed under base and the repository root.
func shortLeases(base, root string) string {
	return fmt.Sprintf(`worker:
  lease_ttl: 3s
  heartbeat_ttl: 3s
  kill_grace: 2s
  checkpoint_root: %s
scheduler:
  reap_grace: 1s
  place_interval: 100ms
jobs:
  allowed_roots: [%s, %s]
`, filepath.Join(base, "checkpoints"), base, root)
}

func writeNodesFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// submit submits the spec and returns the job id.
func (n *twoNodes) submit(t *testing.T) string {
	t.Helper()
	out, e, code := cli(t, n.lathe, n.api, "submit", n.spec, "-o", "json")
	if code != 0 {
		t.Fatalf("submit: %d %s", code, e)
	}
	return decodeJob(t, out).ID
}

// waitCheckpoint waits until attempt 1 of job id runs and has written a
// checkpoint, and returns the node running it.
func (n *twoNodes) waitCheckpoint(t *testing.T, id string) string {
	t.Helper()
	j := waitJob(t, n.api, id, 60*time.Second, "attempt 1 running with a checkpoint", func(j jobtype.Job) bool {
		return j.State == jobtype.StateRunning && j.Attempt == 1 && countEvents(t, n.api, id, "checkpoint") > 0
	})
	if _, ok := n.workers[j.Node]; !ok {
		t.Fatalf("job %s runs on %q, not on one of the two nodes", id, j.Node)
	}
	return j.Node
}

func otherNode(node string) string {
	if node == "node-a" {
		return "node-b"
	}
	return "node-a"
}

// checkTakenOver checks a job that lost its node at attempt 1 after a
// checkpoint: it succeeded exactly once, on the other node, and the attempt
// that finished it resumed from attempt 1's checkpoints instead of step 0.
func checkTakenOver(t *testing.T, api, id, lost string, j jobtype.Job) {
	t.Helper()
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("job ended %s (%s)", j.State, j.Error)
	}
	if j.Attempt < 2 || j.Node != otherNode(lost) {
		t.Fatalf("job succeeded at attempt %d on %q; want attempt >= 2 on %s", j.Attempt, j.Node, otherNode(lost))
	}
	lastCkpt1, first, succeeded, resumed := 0, 0, 0, ""
	starts := map[int]int{}
	for _, e := range events(t, api, id) {
		var d struct {
			Step int
			To   string
			Line string
		}
		_ = json.Unmarshal(e.Data, &d)
		switch {
		case e.Type == "checkpoint" && e.Attempt == 1:
			lastCkpt1 = max(lastCkpt1, d.Step)
		case e.Type == "progress" && e.Attempt == j.Attempt && first == 0:
			first = d.Step
		case e.Type == "log" && e.Attempt == j.Attempt && strings.Contains(d.Line, "resuming from step"):
			resumed = d.Line
		case e.Type == "state" && d.To == string(jobtype.StateSucceeded):
			succeeded++
		case e.Type == "started":
			starts[e.Attempt]++
		}
	}
	if succeeded != 1 {
		t.Fatalf("%d succeeded state events", succeeded)
	}
	for a, c := range starts {
		if c != 1 {
			t.Fatalf("attempt %d started its trainer %d times", a, c)
		}
	}
	// The last attempt starts after the newest checkpoint on the shared
	// storage, which is at least the last one attempt 1 reported.
	if lastCkpt1 == 0 || first <= lastCkpt1 || resumed == "" {
		t.Fatalf("attempt %d: first progress step %d, attempt 1's last checkpoint %d, resume log line %q",
			j.Attempt, first, lastCkpt1, resumed)
	}
	t.Logf("%s succeeded on %s at attempt %d; attempt 1 checkpointed up to step %d, the last attempt logged %q",
		id, j.Node, j.Attempt, lastCkpt1, resumed)
}

// TestTwoNodesKillWorker: kill -9 of the worker running a job. Its trainer
// dies with it (parent-death signal), the scheduler reaps the attempt once
// its lease ends, and the other node resumes it from the shared checkpoints.
// /proc, sampled every 100 ms from submit to the end, never shows two
// trainers of the job at once.
func TestTwoNodesKillWorker(t *testing.T) {
	n := startTwoNodes(t)
	id := n.submit(t)
	watch := watchAttempts(t, id)
	node := n.waitCheckpoint(t, id)
	w := n.workers[node]
	t0 := time.Now()
	_ = w.cmd.Process.Kill() // SIGKILL: no cleanup of any kind
	<-w.done
	j := waitJob(t, n.api, id, 90*time.Second, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	t.Logf("killed %s; the job ended %s %s later", node, j.State, time.Since(t0).Round(time.Millisecond))
	watch.check(t)
	checkTakenOver(t, n.api, id, node, j)
}

// TestTwoNodesStoppedWorker: SIGSTOP of the worker running a job (a worker
// frozen or cut off: it renews nothing, stops nothing). The job must finish
// on the other node with no moment where two of its trainers run; then the
// frozen worker is continued, and it must not run the job again nor change
// its record: its claim is stale.
//
// The frozen worker cannot stop its trainer itself (and the trainer's
// parent-death signal never fires); its trainer's watchdog process
// (internal/trainer/watchdog.go), no longer fed lease renewals, stops it
// before the scheduler may reap the attempt.
func TestTwoNodesStoppedWorker(t *testing.T) {
	n := startTwoNodes(t)
	id := n.submit(t)
	watch := watchAttempts(t, id)
	node := n.waitCheckpoint(t, id)
	w := n.workers[node]
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: this one runs before the daemon's
	// own, whose SIGTERM a stopped process would never act on.
	t.Cleanup(func() { _ = w.cmd.Process.Signal(syscall.SIGCONT) })
	t0 := time.Now()
	j := waitJob(t, n.api, id, 90*time.Second, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	t.Logf("stopped %s; the job ended %s %s later", node, j.State, time.Since(t0).Round(time.Millisecond))
	watch.check(t)
	checkTakenOver(t, n.api, id, node, j)

	// Continue the frozen worker. Its next lease renewal, or the end of
	// its attempt, meets a store that moved on; it writes nothing.
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitfor.Value(t, 30*time.Second, node+", continued, saying its attempt of "+id+" was lost", w.output,
		func(log string) bool { return strings.Contains(log, "the store moved on") })
	// Let its handler finish what it does with the lost attempt (a
	// trainer it stops, an end it tries to record), then look again.
	_ = waitfor.Poll(15*time.Second, func() bool { return strings.Contains(w.output(), "trainer exited") })
	watch.check(t)
	for _, l := range strings.Split(w.output(), "\n") {
		if strings.Contains(l, "watchdog") || strings.Contains(l, "moved on") || strings.Contains(l, "fenc") {
			t.Logf("%s: %s", node, l)
		}
	}
	after := getJob(t, n.api, id)
	if after.State != jobtype.StateSucceeded || after.Attempt != j.Attempt || after.Node != j.Node {
		t.Fatalf("after %s was continued the job is %s attempt %d on %q; it was succeeded attempt %d on %s",
			node, after.State, after.Attempt, after.Node, j.Attempt, j.Node)
	}
	checkTakenOver(t, n.api, id, node, after)
}

// attemptWatch samples /proc every 100 ms for the live (not zombie)
// processes of one job — their environment holds LATHE_JOB_ID=<id> — and
// keeps the first sample that shows more than one, with what each process
// was, as evidence. It is watchTrainers with the evidence kept, and it can
// be read while it goes on sampling.
type attemptWatch struct {
	done chan struct{}
	res  chan watchResult
}

type watchResult struct {
	most     int
	evidence string
}

// watchAttempts starts sampling for job id until the test ends.
func watchAttempts(t *testing.T, id string) *attemptWatch {
	w := &attemptWatch{done: make(chan struct{}), res: make(chan watchResult)}
	go w.loop(id)
	t.Cleanup(func() { close(w.done) })
	return w
}

func (w *attemptWatch) loop(id string) {
	var res watchResult
	started := time.Now()
	next := time.After(0)
	for {
		select {
		case <-w.done:
			return
		case w.res <- res:
		case <-next:
			procs := jobProcs(id)
			if len(procs) > res.most {
				res.most = len(procs)
				if res.most > 1 && res.evidence == "" {
					res.evidence = fmt.Sprintf("%s after submit: %s", time.Since(started).Round(time.Millisecond), strings.Join(procs, "; "))
				}
			}
			next = time.After(100 * time.Millisecond)
		}
	}
}

// check fails the test if two live processes of the job were ever seen at once.
func (w *attemptWatch) check(t *testing.T) {
	t.Helper()
	res := <-w.res
	if res.most > 1 {
		t.Fatalf("/proc showed %d processes of the job at once; first seen %s", res.most, res.evidence)
	}
	if res.most == 0 {
		t.Fatal("/proc never showed a process of the job: the watch is blind")
	}
}

// jobProcs lists the live processes whose environment holds
// LATHE_JOB_ID=id, each as "pid P ppid Q state S attempt N".
func jobProcs(id string) []string {
	needle := []byte("LATHE_JOB_ID=" + id + "\x00")
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		attempt := "?"
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("LATHE_ATTEMPT=")); ok {
				attempt = string(v)
			}
		}
		state, ppid := "?", "?"
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i >= 0 {
				if f := strings.Fields(string(st[i+1:])); len(f) >= 2 {
					state, ppid = f[0], f[1]
				}
			}
		}
		if state == "Z" || state == "X" {
			continue
		}
		out = append(out, fmt.Sprintf("pid %s ppid %s state %s attempt %s", e.Name(), ppid, state, attempt))
	}
	sort.Strings(out)
	return out
}
