//go:build linux

package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/waitfor"
)

// These tests need a writable cgroup v2 hierarchy with cgroup.kill (Linux
// 5.14+), found the way the worker finds it (AutoCgroupRoot); they fail,
// never skip, where there is none. Their trainers are /bin/sh stand-ins
// written to t.TempDir(), with real escaping processes (setsid, a double
// fork) and real signals.

var cgroupSeq atomic.Int64

// testCgroupParent makes a cgroup of this test under the automatic root and
// kills and removes it when the test ends.
func testCgroupParent(t *testing.T) string {
	t.Helper()
	root, err := AutoCgroupRoot()
	if err != nil {
		t.Fatalf("no usable cgroup v2 for the trainer cgroups (these tests need one): %v", err)
	}
	dir := filepath.Join(root, fmt.Sprintf("runner-test-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := PrepareCgroup(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := KillCgroup(ctx, dir); err != nil {
			t.Errorf("test cleanup: %v", err)
		}
	})
	return dir
}

// escapingTrainer is a /bin/sh stand-in trainer that starts two processes
// that leave its process group (setsid, and a double-forked daemon in a new
// session), prints "escaped PID PGRP" for each once it runs, and then runs
// tail.
func escapingTrainer(t *testing.T, tail string) string {
	return script(t, `
d=$(dirname "$0")
mkfifo "$d/a" "$d/b"
setsid sh -c 'echo $$ > "$1"; exec sleep 1000' sh "$d/a" &
( setsid sh -c 'echo $$ > "$1"; exec sleep 1000' sh "$d/b" & )
read a < "$d/a"
read b < "$d/b"
for p in $a $b; do echo "escaped $p $(cut -d' ' -f5 /proc/$p/stat)"; done
`+tail)
}

// escapedPIDs parses the "escaped PID PGRP" lines and checks the processes
// really left the trainer's group.
func escapedPIDs(t *testing.T, rec *recorder, leader int) []int {
	t.Helper()
	var pids []int
	for _, l := range rec.linesOf(StreamStdout) {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "escaped" {
			continue
		}
		pid, err1 := strconv.Atoi(f[1])
		pgrp, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil || pid <= 1 {
			t.Fatalf("bad line %q", l)
		}
		if pgrp == leader {
			t.Fatalf("process %d did not leave the trainer's group %d: the test proves nothing", pid, leader)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("escaped pids %v from stdout %q, want 2", pids, rec.linesOf(StreamStdout))
	}
	return pids
}

// checkGone fails the test if one of pids still lives or the cgroup is
// still there, right after Run returned (Run waits for both).
func checkGone(t *testing.T, pids []int, cgroup string) {
	t.Helper()
	for _, pid := range pids {
		if processLive(pid) {
			t.Errorf("escaped process %d still runs after Run returned", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(cgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup %s still there after Run returned (stat: %v)", cgroup, err)
	}
}

// TestRunKillsEscapedProcesses: processes that left the trainer's process
// group (setsid, a double-forked daemon) are killed with the attempt's
// cgroup on every way an attempt ends, the outcome is the trainer's own, and
// the cgroup is removed.
func TestRunKillsEscapedProcesses(t *testing.T) {
	checkNoLeak(t)
	const waiting = "trap 'exit 143' TERM\necho ready\nsleep 1000 &\nwait\n"
	tests := []struct {
		name    string
		tail    string
		stop    func(cancel context.CancelCauseFunc) // nil: the trainer ends by itself
		outcome Outcome
	}{
		{"exit 0", "exit 0\n", nil, Succeeded},
		{"cancel", waiting, func(c context.CancelCauseFunc) { c(ErrCancelled) }, Cancelled},
		{"timeout", waiting, func(c context.CancelCauseFunc) { c(ErrTimeout) }, TimedOut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cg := filepath.Join(testCgroupParent(t), "job-1")
			rec := newRecorder(t)
			ready := rec.waitFor("ready")
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := runAsync(ctx, Config{Argv: []string{escapingTrainer(t, tt.tail)}, Cgroup: cg,
				KillGrace: 5 * time.Second, Logger: testLogger(t)}, rec)
			var pids []int
			if tt.stop != nil {
				await(t, ready, "ready")
				rpids, _, _ := rec.snapshot()
				pids = escapedPIDs(t, rec, rpids[0])
				for _, p := range pids {
					if !processLive(p) {
						t.Fatalf("escaped process %d not running before the stop", p)
					}
				}
				tt.stop(cancel)
			}
			res := await(t, done, "Run")
			if res.Outcome != tt.outcome {
				t.Fatalf("result = %+v, want %v", res, tt.outcome)
			}
			if pids == nil {
				pids = escapedPIDs(t, rec, res.PID)
			}
			checkGone(t, pids, cg)
			if GroupAlive(res.PID) {
				t.Errorf("group %d alive after Run", res.PID)
			}
		})
	}
}

// TestRunCgroupStartFailures: an existing cgroup directory (a leftover) and
// a parent that is not a cgroup are refused before anything runs, with the
// path in the error.
func TestRunCgroupStartFailures(t *testing.T) {
	sh := script(t, "exit 0\n")
	parent := testCgroupParent(t)
	exists := filepath.Join(parent, "exists")
	if err := os.Mkdir(exists, 0o755); err != nil {
		t.Fatal(err)
	}
	notCgroup := filepath.Join(t.TempDir(), "cg")
	for _, cg := range []string{exists, notCgroup, "relative/cg"} {
		rec := newRecorder(t)
		res := Run(context.Background(), Config{Argv: []string{sh}, Cgroup: cg}, rec)
		if res.Outcome != StartFailed || res.Err == nil || !strings.Contains(res.Err.Error(), cg) {
			t.Errorf("Cgroup %q: result = %+v, want start failed naming it", cg, res)
		}
		if pids, _, _ := rec.snapshot(); len(pids) != 0 {
			t.Errorf("Cgroup %q: Started called with %v", cg, pids)
		}
	}
	if _, err := os.Stat(exists); err != nil {
		t.Errorf("the existing cgroup was touched: %v", err)
	}
}

// TestWatchdogKillsTheCgroup: the watchdog alone (its caller frozen: nobody
// feeds it, nobody else signals anything) kills a process of the trainer's
// cgroup that is in another session and process group. The "trainer" and
// the escaped process are plain sleeps started into the cgroup.
func TestWatchdogKillsTheCgroup(t *testing.T) {
	cg := filepath.Join(testCgroupParent(t), "job-1")
	f, err := makeCgroup(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := func(attr *syscall.SysProcAttr) *exec.Cmd {
		attr.UseCgroupFD, attr.CgroupFD = true, int(f.Fd())
		cmd := exec.Command("sleep", "1000")
		cmd.SysProcAttr = attr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }() // reaped: a dead one is a zombie at most
		return cmd
	}
	leader := start(&syscall.SysProcAttr{Setpgid: true})
	escaped := start(&syscall.SysProcAttr{Setsid: true})
	wd := NewWatchdog(200 * time.Millisecond)
	if _, err := wd.start(leader.Process.Pid, 100*time.Millisecond, f); err != nil {
		t.Fatal(err)
	}
	defer wd.stop()
	type cgroupState struct{ Populated, EscapedLive, LeaderLive bool }
	waitfor.Value(t, testTimeout, fmt.Sprintf("the cgroup empty after the watchdog's timeout (escaped %d, leader %d)", escaped.Process.Pid, leader.Process.Pid),
		func() cgroupState {
			populated, err := CgroupPopulated(cg)
			if err != nil {
				t.Fatal(err)
			}
			return cgroupState{populated, processLive(escaped.Process.Pid), processLive(leader.Process.Pid)}
		}, func(s cgroupState) bool { return !s.Populated })
	if processLive(escaped.Process.Pid) || processLive(leader.Process.Pid) {
		t.Fatal("a process of the cgroup lives on")
	}
}

// TestKillCgroupRemovesNested: KillCgroup kills the processes of a cgroup
// and of a child cgroup, and removes both.
func TestKillCgroupRemovesNested(t *testing.T) {
	parent := testCgroupParent(t)
	cg := filepath.Join(parent, "orphan")
	child := filepath.Join(cg, "inner")
	if err := os.MkdirAll(child, 0o755); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, dir := range []string{cg, child} {
		f, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sleep", "1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: int(f.Fd())}
		err = cmd.Start()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }()
		pids = append(pids, cmd.Process.Pid)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := KillCgroup(ctx, cg); err != nil {
		t.Fatal(err)
	}
	checkGone(t, pids, cg)
}

// TestRunAsTrainerCannotLeaveItsCgroup: a trainer run as another user
// (nobody; the tests run as root) cannot move itself into its cgroup's
// parent nor into the root cgroup, and what it starts in another session
// dies with the attempt. (A trainer running as root could move itself:
// this is why worker.run_as matters.)
func TestRunAsTrainerCannotLeaveItsCgroup(t *testing.T) {
	parent := testCgroupParent(t)
	mount, err := cgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	sh := script(t, `
setsid sleep 1000 &
echo "escaped $! 0"
for cg in "$CG_PARENT" "$CG_ROOT"; do
	if echo $$ > "$cg/cgroup.procs"; then echo "moved to $cg"; else echo "denied $cg"; fi
done
id -u
exit 0
`)
	// nobody must reach the script (t.TempDir folders are 0700).
	for _, d := range []string{filepath.Dir(sh), filepath.Dir(filepath.Dir(sh))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cg := filepath.Join(parent, "job-1")
	rec := newRecorder(t)
	res := Run(context.Background(), Config{Argv: []string{sh}, Cgroup: cg, Dir: "/",
		RunAs: &Credential{UID: 65534, GID: 65534},
		Env:   []string{"CG_PARENT=" + parent, "CG_ROOT=" + mount}, Logger: testLogger(t)}, rec)
	out := rec.linesOf(StreamStdout)
	if res.Outcome != Succeeded {
		t.Fatalf("result = %+v, stdout %q", res, out)
	}
	want := []string{"denied " + parent, "denied " + mount, "65534"}
	if len(out) != 4 || strings.Join(out[1:], "|") != strings.Join(want, "|") {
		t.Fatalf("stdout %q, want the escape line then %q", out, want)
	}
	pid, err := strconv.Atoi(strings.Fields(out[0])[1])
	if err != nil {
		t.Fatalf("stdout %q", out)
	}
	checkGone(t, []int{pid}, cg)
}
