//go:build linux

package trainer

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/waitfor"
)

// The trainers in these tests are /bin/sh scripts written to t.TempDir():
// real child processes, real process groups and real signals. The runner
// itself never uses a shell; the scripts are only convenient trainers.

// testTimeout bounds every wait on a condition, so a broken runner fails the
// test instead of hanging it.
const testTimeout = 20 * time.Second

// recorder is a Sink that keeps every call and fails the test if two calls
// overlap or a call arrives before Started.
type recorder struct {
	t *testing.T

	inCall atomic.Int32

	mu      sync.Mutex
	pids    []int
	events  []TrainerEvent
	logs    []logLine
	waiters []waiter
}

type logLine struct{ stream, line string }

type waiter struct {
	prefix string
	ch     chan string
}

func newRecorder(t *testing.T) *recorder { return &recorder{t: t} }

// enter and leave catch overlapping sink calls.
func (r *recorder) enter() {
	if r.inCall.Add(1) != 1 {
		r.t.Error("sink called concurrently")
	}
}

func (r *recorder) leave() { r.inCall.Add(-1) }

func (r *recorder) Started(pid int) {
	r.enter()
	defer r.leave()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) > 0 || len(r.logs) > 0 {
		r.t.Error("Started called after output")
	}
	r.pids = append(r.pids, pid)
}

func (r *recorder) Event(ev TrainerEvent) {
	r.enter()
	defer r.leave()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pids) == 0 {
		r.t.Error("Event before Started")
	}
	r.events = append(r.events, ev)
}

func (r *recorder) Log(stream, line string) {
	r.enter()
	defer r.leave()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pids) == 0 {
		r.t.Error("Log before Started")
	}
	r.logs = append(r.logs, logLine{stream, line})
	kept := r.waiters[:0]
	for _, w := range r.waiters {
		if strings.HasPrefix(line, w.prefix) {
			w.ch <- line
			continue
		}
		kept = append(kept, w)
	}
	r.waiters = kept
}

// waitFor returns a channel that gets the first log line starting with
// prefix. Register it before Run starts.
func (r *recorder) waitFor(prefix string) <-chan string {
	ch := make(chan string, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiters = append(r.waiters, waiter{prefix, ch})
	return ch
}

func (r *recorder) snapshot() (pids []int, events []TrainerEvent, logs []logLine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.pids...), append([]TrainerEvent(nil), r.events...), append([]logLine(nil), r.logs...)
}

func (r *recorder) linesOf(stream string) []string {
	_, _, logs := r.snapshot()
	var out []string
	for _, l := range logs {
		if l.stream == stream {
			out = append(out, l.line)
		}
	}
	return out
}

// script writes a /bin/sh trainer and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "trainer.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// scriptFile is script with the body of testdata/name, a /bin/sh trainer
// that more than one test runs.
func scriptFile(t *testing.T, name string) string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return script(t, string(body))
}

// testLogger sends the runner's records to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// checkNoLeak fails the test if goroutines started during it are still
// running once it ends (polling, since exiting goroutines take a moment to
// be counted out).
func checkNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		if !waitfor.Poll(testTimeout, func() bool { runtime.Gosched(); return runtime.NumGoroutine() <= before }) {
			buf := make([]byte, 1<<20)
			t.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
	})
}

// runAsync runs Run in a goroutine; the result arrives on the channel.
func runAsync(ctx context.Context, cfg Config, sink Sink) <-chan Result {
	ch := make(chan Result, 1)
	go func() { ch <- Run(ctx, cfg, sink) }()
	return ch
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// processLive reports whether pid exists and is not a zombie.
func processLive(pid int) bool {
	state, _, err := procStat(pid)
	return err == nil && state != 'Z' && state != 'X'
}

func TestRunEventsAndLogs(t *testing.T) {
	checkNoLeak(t)
	sh := script(t, `
echo "pid $$"
echo '{"event":"progress","step":10,"total_steps":200,"epoch":0.1,"loss":2.31,"learning_rate":0.0002,"samples_per_s":41.5,"gpu_util":0.9}'
echo '{"event":"eval","step":100,"eval_loss":1.92}'
echo 'plain log line'
echo '{"event":"checkpoint","step":100,"path":"ckpt-100"}'
echo 'to stderr' >&2
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors","bytes":123456,"sha256":"abc"}'
echo '{"not_an_event":1}'
echo '{"event":"heartbeat","step":5}'
printf 'bad \377 utf8\n'
printf 'crlf line\r\n'
echo '{"event":"done","metrics":{"train_loss":1.71,"eval_loss":1.88}}'
printf 'tail without newline'
`)
	rec := newRecorder(t)
	res := Run(context.Background(), Config{Argv: []string{sh}, Logger: testLogger(t)}, rec)
	if res.Outcome != Succeeded || res.ExitCode != 0 || res.Err != nil || res.Signal != "" {
		t.Fatalf("result = %+v, want succeeded", res)
	}
	pids, events, _ := rec.snapshot()
	if len(pids) != 1 || pids[0] != res.PID || pids[0] <= 0 {
		t.Fatalf("Started pids = %v, result pid %d; want exactly one, the same", pids, res.PID)
	}
	if res.Started.IsZero() || res.Ended.Before(res.Started) {
		t.Errorf("times: started %v ended %v", res.Started, res.Ended)
	}

	want := []string{"progress", "eval", "checkpoint", "artifact", "heartbeat", "done"}
	if len(events) != len(want) {
		t.Fatalf("got %d events %+v, want kinds %v", len(events), events, want)
	}
	for i, k := range want {
		if events[i].Kind != k {
			t.Errorf("event %d kind = %q, want %q", i, events[i].Kind, k)
		}
	}
	p := events[0]
	if p.Step != 10 || p.TotalSteps != 200 || p.Epoch != 0.1 || p.Loss != 2.31 || p.LearningRate != 0.0002 || p.SamplesPerS != 41.5 {
		t.Errorf("progress parsed as %+v", p)
	}
	if !strings.Contains(string(p.Raw), `"gpu_util":0.9`) {
		t.Errorf("progress Raw %s lost an extra field", p.Raw)
	}
	if e := events[1]; e.Step != 100 || e.EvalLoss != 1.92 {
		t.Errorf("eval parsed as %+v", e)
	}
	if c := events[2]; c.Step != 100 || c.Path != "ckpt-100" {
		t.Errorf("checkpoint parsed as %+v", c)
	}
	if a := events[3]; a.Path != "adapter_model.safetensors" || a.Format != "safetensors" || a.Bytes != 123456 || a.SHA256 != "abc" {
		t.Errorf("artifact parsed as %+v", a)
	}
	if h := events[4]; h.Known() || h.Step != 5 {
		t.Errorf("unknown event parsed as %+v (known %v)", h, h.Known())
	}
	if d := events[5]; d.Metrics["train_loss"] != 1.71 || d.Metrics["eval_loss"] != 1.88 || len(d.Metrics) != 2 {
		t.Errorf("done metrics = %v", d.Metrics)
	}

	stdout := rec.linesOf(StreamStdout)
	wantOut := []string{"pid " + strconv.Itoa(res.PID), "plain log line", `{"not_an_event":1}`, "bad \uFFFD utf8", "crlf line", "tail without newline"}
	if strings.Join(stdout, "\n") != strings.Join(wantOut, "\n") {
		t.Errorf("stdout logs = %q, want %q", stdout, wantOut)
	}
	if stderr := rec.linesOf(StreamStderr); len(stderr) != 1 || stderr[0] != "to stderr" {
		t.Errorf("stderr logs = %q", stderr)
	}
}

func TestRunLongLineTruncated(t *testing.T) {
	checkNoLeak(t)
	// 100000 zeros: longer than the line limit and than the read buffer.
	sh := script(t, `printf '%0100000d\n' 0; echo after; printf '%0300d' 0`)
	rec := newRecorder(t)
	res := Run(context.Background(), Config{Argv: []string{sh}, MaxLineBytes: 100, Logger: testLogger(t)}, rec)
	if res.Outcome != Succeeded {
		t.Fatalf("result = %+v", res)
	}
	got := rec.linesOf(StreamStdout)
	want := []string{strings.Repeat("0", 100), "after", strings.Repeat("0", 100)}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines = %q, want %q", got, want)
	}
}

func TestRunManyLinesFullyDrained(t *testing.T) {
	checkNoLeak(t)
	// Writes more than a pipe buffer to both streams and exits at once; no
	// tail line may be lost.
	sh := script(t, `i=0; while [ $i -lt 3000 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done`)
	rec := newRecorder(t)
	res := Run(context.Background(), Config{Argv: []string{sh}}, rec)
	if res.Outcome != Succeeded {
		t.Fatalf("result = %+v", res)
	}
	for stream, prefix := range map[string]string{StreamStdout: "out", StreamStderr: "err"} {
		lines := rec.linesOf(stream)
		if len(lines) != 3000 || lines[2999] != prefix+" 2999" {
			t.Errorf("%s: %d lines, last %q", stream, len(lines), lines[len(lines)-1])
		}
	}
}

func TestRunExitOutcomes(t *testing.T) {
	checkNoLeak(t)
	tests := []struct {
		name     string
		body     string
		outcome  Outcome
		exitCode int
		signal   string
	}{
		{"exit 0", "exit 0", Succeeded, 0, ""},
		{"exit 3", "exit 3", Permanent, 3, ""},
		{"exit 1", "exit 1", Failed, 1, ""},
		{"exit 143 by itself", "exit 143", Failed, 143, ""},
		{"killed by a signal", "kill -USR1 $$", Failed, -1, "SIGUSR1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Run(context.Background(), Config{Argv: []string{script(t, tt.body)}, Logger: testLogger(t)}, nil)
			if res.Outcome != tt.outcome || res.ExitCode != tt.exitCode || res.Signal != tt.signal {
				t.Fatalf("result = %+v, want %v exit %d signal %q", res, tt.outcome, tt.exitCode, tt.signal)
			}
			if (res.Err == nil) != (tt.outcome == Succeeded) {
				t.Errorf("Err = %v", res.Err)
			}
			var ee *exec.ExitError
			if tt.outcome != Succeeded && !errors.As(res.Err, &ee) {
				t.Errorf("Err %v does not wrap *exec.ExitError", res.Err)
			}
		})
	}
}

func TestRunCancelTrainerCheckpointsOnTERM(t *testing.T) {
	checkNoLeak(t)
	sh := scriptFile(t, "checkpoint-on-term.sh")
	rec := newRecorder(t)
	ready := rec.waitFor("ready")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, Config{Argv: []string{sh}, Logger: testLogger(t)}, rec)
	await(t, ready, "ready")
	cancel()
	res := await(t, done, "Run")
	if res.Outcome != Cancelled || res.ExitCode != 143 || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("result = %+v, want cancelled, exit 143", res)
	}
	_, events, _ := rec.snapshot()
	if len(events) != 1 || events[0].Kind != EventCheckpoint || events[0].Step != 7 || events[0].Path != "ckpt-7" {
		t.Errorf("events = %+v, want the checkpoint", events)
	}
	if GroupAlive(res.PID) {
		t.Errorf("group %d alive after Run", res.PID)
	}
}

func TestRunIgnoresTERMKilledAfterGrace(t *testing.T) {
	checkNoLeak(t)
	// The ignored disposition is inherited by the sleeps too.
	sh := script(t, `
trap '' TERM
echo ready
while :; do sleep 1000; done
`)
	const grace = 300 * time.Millisecond
	rec := newRecorder(t)
	ready := rec.waitFor("ready")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := runAsync(ctx, Config{Argv: []string{sh}, KillGrace: grace, Logger: testLogger(t)}, rec)
	await(t, ready, "ready")
	cancelled := time.Now()
	cancel(ErrCancelled)
	res := await(t, done, "Run")
	if res.Outcome != Cancelled || res.Signal != "SIGKILL" || res.ExitCode != -1 || !errors.Is(res.Err, ErrCancelled) {
		t.Fatalf("result = %+v, want cancelled by SIGKILL", res)
	}
	if waited := time.Since(cancelled); waited < grace {
		t.Errorf("SIGKILL after %v, before the grace of %v", waited, grace)
	}
	if GroupAlive(res.PID) {
		t.Errorf("group %d alive after Run", res.PID)
	}
}

func TestRunKillsGrandchildIgnoringTERM(t *testing.T) {
	checkNoLeak(t)
	// The leader obeys SIGTERM; its child ignores it and would outlive the
	// leader but for the SIGKILL to the group.
	sh := script(t, `
(trap '' TERM; exec sleep 1000) &
echo "child $!"
trap 'exit 143' TERM
echo ready
wait
`)
	rec := newRecorder(t)
	child := rec.waitFor("child ")
	ready := rec.waitFor("ready")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, Config{Argv: []string{sh}, Logger: testLogger(t)}, rec)
	childPID, err := strconv.Atoi(strings.TrimPrefix(await(t, child, "child pid"), "child "))
	if err != nil {
		t.Fatal(err)
	}
	await(t, ready, "ready")
	cancel()
	res := await(t, done, "Run")
	if res.Outcome != Cancelled || res.ExitCode != 143 {
		t.Fatalf("result = %+v, want cancelled, exit 143", res)
	}
	if GroupAlive(res.PID) {
		t.Errorf("group %d alive after Run", res.PID)
	}
	if processLive(childPID) {
		t.Errorf("grandchild %d still running after Run", childPID)
		_ = syscall.Kill(childPID, syscall.SIGKILL)
	}
}

func TestRunKillsLeftoverChildrenOnSuccess(t *testing.T) {
	checkNoLeak(t)
	// The leftover child holds stdout open: Run must kill it to see EOF, and
	// still report the leader's success.
	sh := script(t, `
sleep 1000 &
echo "child $!"
exit 0
`)
	rec := newRecorder(t)
	res := Run(context.Background(), Config{Argv: []string{sh}, Logger: testLogger(t)}, rec)
	if res.Outcome != Succeeded {
		t.Fatalf("result = %+v", res)
	}
	lines := rec.linesOf(StreamStdout)
	if len(lines) != 1 {
		t.Fatalf("stdout = %q", lines)
	}
	childPID, _ := strconv.Atoi(strings.TrimPrefix(lines[0], "child "))
	if GroupAlive(res.PID) || processLive(childPID) {
		t.Errorf("group %d or child %d alive after Run", res.PID, childPID)
	}
}

func TestRunTimeouts(t *testing.T) {
	checkNoLeak(t)
	sh := script(t, "echo ready\nexec sleep 1000\n")
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		res := Run(ctx, Config{Argv: []string{sh}, Logger: testLogger(t)}, nil)
		if res.Outcome != TimedOut || res.Signal != "SIGTERM" || !errors.Is(res.Err, context.DeadlineExceeded) {
			t.Fatalf("result = %+v, want timed out by SIGTERM", res)
		}
	})
	t.Run("cause ErrTimeout", func(t *testing.T) {
		rec := newRecorder(t)
		ready := rec.waitFor("ready")
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		done := runAsync(ctx, Config{Argv: []string{sh}, Logger: testLogger(t)}, rec)
		await(t, ready, "ready")
		cancel(ErrTimeout)
		res := await(t, done, "Run")
		if res.Outcome != TimedOut || !errors.Is(res.Err, ErrTimeout) {
			t.Fatalf("result = %+v, want timed out", res)
		}
	})
	t.Run("already done", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(ErrTimeout)
		rec := newRecorder(t)
		res := Run(ctx, Config{Argv: []string{sh}}, rec)
		if res.Outcome != TimedOut || res.PID != 0 || !errors.Is(res.Err, ErrTimeout) {
			t.Fatalf("result = %+v, want timed out, never started", res)
		}
		if pids, _, _ := rec.snapshot(); len(pids) != 0 {
			t.Errorf("Started called with %v", pids)
		}
	})
}

func TestRunStartFailures(t *testing.T) {
	checkNoLeak(t)
	sh := script(t, "exit 0\n")
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"missing absolute binary", Config{Argv: []string{"/nonexistent/lathe-trainer"}}, fs.ErrNotExist},
		{"missing binary on PATH", Config{Argv: []string{"lathe-no-such-trainer"}}, exec.ErrNotFound},
		{"bad dir", Config{Argv: []string{sh}, Dir: "/nonexistent/dir"}, fs.ErrNotExist},
		{"empty argv", Config{}, ErrInvalidConfig},
		{"bad env", Config{Argv: []string{sh}, Env: []string{"NOEQUALS"}}, ErrInvalidConfig},
		{"negative grace", Config{Argv: []string{sh}, KillGrace: -time.Second}, ErrInvalidConfig},
		{"token in PassEnv", Config{Argv: []string{sh}, PassEnv: []string{"LATHE_TOKEN_ALICE"}}, ErrInvalidConfig},
		{"contract variable in PassEnv", Config{Argv: []string{sh}, PassEnv: []string{"LATHE_OUTPUT_DIR"}}, ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t)
			res := Run(context.Background(), tt.cfg, rec)
			if res.Outcome != StartFailed || !errors.Is(res.Err, tt.want) {
				t.Fatalf("result = %+v (err %v), want start failed wrapping %v", res, res.Err, tt.want)
			}
			if pids, _, _ := rec.snapshot(); len(pids) != 0 {
				t.Errorf("Started called with %v", pids)
			}
		})
	}
}

func TestRunEnvAndDir(t *testing.T) {
	checkNoLeak(t)
	t.Setenv("LATHE_RUNNER_TEST_LEAK", "leaked")
	dir := t.TempDir()
	sh := script(t, `echo "foo=$FOO leak=$LATHE_RUNNER_TEST_LEAK path=${PATH:+set}"; pwd`)
	rec := newRecorder(t)
	res := Run(context.Background(), Config{Argv: []string{sh}, Dir: dir, Env: []string{"FOO=bar"}}, rec)
	if res.Outcome != Succeeded {
		t.Fatalf("result = %+v", res)
	}
	got := rec.linesOf(StreamStdout)
	realDir, _ := filepath.EvalSymlinks(dir)
	want := []string{"foo=bar leak= path=set", realDir}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("stdout = %q, want %q", got, want)
	}
}

func TestRunArgvResolvedOnPath(t *testing.T) {
	checkNoLeak(t)
	sh := script(t, `echo "args $0 $1"`)
	t.Setenv("PATH", filepath.Dir(sh)+string(os.PathListSeparator)+os.Getenv("PATH"))
	rec := newRecorder(t)
	// Dir elsewhere: the resolved path must not depend on it.
	res := Run(context.Background(), Config{Argv: []string{"trainer.sh", "x"}, Dir: t.TempDir()}, rec)
	if res.Outcome != Succeeded {
		t.Fatalf("result = %+v", res)
	}
	if got := rec.linesOf(StreamStdout); len(got) != 1 || got[0] != "args "+sh+" x" {
		t.Errorf("stdout = %q", got)
	}
}

// TestRunWithoutCgroupEscapedProcessDoesNotBlockDrain: with no Cgroup (a
// host without cgroup v2, worker.cgroup_root: none) a child that leaves the
// group with setsid survives the attempt and keeps stdout open; Run must
// still return, after DrainTimeout, with what was printed before. (With a
// Cgroup the escaped child dies: TestRunKillsEscapedProcesses.)
func TestRunWithoutCgroupEscapedProcessDoesNotBlockDrain(t *testing.T) {
	checkNoLeak(t)
	sh := script(t, `
setsid sleep 1000 &
echo "escaped $!"
exit 0
`)
	rec := newRecorder(t)
	res := Run(context.Background(), Config{Argv: []string{sh}, DrainTimeout: 100 * time.Millisecond, Logger: testLogger(t)}, rec)
	lines := rec.linesOf(StreamStdout)
	if len(lines) == 1 {
		if pid, err := strconv.Atoi(strings.TrimPrefix(lines[0], "escaped ")); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if res.Outcome != Succeeded || len(lines) != 1 {
		t.Fatalf("result = %+v, stdout %q", res, lines)
	}
}

func TestKillGroupRefusesDangerousIDs(t *testing.T) {
	for _, pgid := range []int{-5, 0, 1, syscall.Getpgrp()} {
		if err := KillGroup(pgid, 0); !errors.Is(err, ErrInvalidGroup) {
			t.Errorf("KillGroup(%d) = %v, want ErrInvalidGroup", pgid, err)
		}
		if pgid <= 1 && GroupAlive(pgid) {
			t.Errorf("GroupAlive(%d) = true", pgid)
		}
	}
}

func TestGroupAliveAndKillGroup(t *testing.T) {
	// A group of our own, started without the runner, as the worker would
	// find an orphan.
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	if !GroupAlive(pgid) {
		t.Fatalf("GroupAlive(%d) = false for a running group", pgid)
	}
	if err := KillGroup(pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Unreaped, the leader is a zombie: the group exists but is not alive.
	waitfor.True(t, testTimeout, "the group not alive after SIGKILL", func() bool { return !GroupAlive(pgid) })
	_ = cmd.Wait()
	if err := KillGroup(pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("KillGroup on a gone group = %v, want ESRCH", err)
	}
}
