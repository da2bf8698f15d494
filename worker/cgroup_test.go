package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/worker"
)

// These tests need a writable cgroup v2 (the worker's automatic
// worker.cgroup_root); they fail, never skip, where the worker found none.

// escapingTrainer is a /bin/sh stand-in trainer that starts a process that
// leaves its process group (setsid) and a double-forked daemon in a new
// session, prints "escaped PID" for each once it runs, writes its adapter
// and exits 0.
const escapingTrainer = `#!/bin/sh
mkfifo a b
setsid sh -c 'echo $$ > a; exec sleep 1000' &
( setsid sh -c 'echo $$ > b; exec sleep 1000' & )
read a < a
read b < b
echo "escaped $a"
echo "escaped $b"
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors","bytes":7}'
exit 0
`

// procLive reports whether pid exists and is not a zombie.
func procLive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// needCgroup fails the test when the worker runs without cgroups.
func needCgroup(t *testing.T, w *worker.Worker) string {
	t.Helper()
	dir := worker.CgroupDirOf(w)
	if dir == "" {
		t.Fatal("the worker found no usable cgroup v2 (see its log); this test needs one")
	}
	return dir
}

// TestEscapedTrainerProcessesDieWithTheAttempt: a trainer whose children
// left its process group still ends "succeeded", and by the time the store
// says so the escaped processes are dead and the attempt's cgroup is gone.
func TestEscapedTrainerProcessesDieWithTheAttempt(t *testing.T) {
	b := setup(t, map[string]string{"escape": escapingTrainer})
	cg := needCgroup(t, b.w)
	id := b.submit(t, "escape", time.Hour)
	j := b.wait(t, id, terminal)
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("state %s (%s)", j.State, j.Error)
	}
	evs, _ := b.store.Events(b.ctx, id, "", 1000)
	var pids []int
	for _, e := range evs {
		var l jobtype.LogLine
		if e.Type != jobtype.EventLog || json.Unmarshal(e.Data, &l) != nil {
			continue
		}
		if p, ok := strings.CutPrefix(l.Line, "escaped "); ok {
			pid, err := strconv.Atoi(p)
			if err != nil {
				t.Fatalf("log line %q", l.Line)
			}
			pids = append(pids, pid)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("escaped pids %v, want 2", pids)
	}
	for _, pid := range pids {
		if procLive(pid) {
			t.Errorf("escaped process %d still runs after the job ended", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	attempt := filepath.Join(cg, id+"-1")
	if _, err := os.Stat(attempt); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("attempt cgroup %s left behind (stat: %v)", attempt, err)
	}
}

// TestStartKillsOrphanCgroups: processes a previous incarnation of the
// worker (same node, same data dir) left in its attempts' cgroups, in a
// session and group of their own and with no pidfile (what escaped a
// trainer killed with its worker), are killed and their cgroups removed
// before the new incarnation takes work. The orphans are real sleeps
// started into the cgroups.
func TestStartKillsOrphanCgroups(t *testing.T) {
	b := setup(t, nil)
	cg := needCgroup(t, b.w)
	if err := b.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, name := range []string{"j-00000000000000aa-1", "j-00000000000000ab-2"} {
		dir := filepath.Join(cg, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(dir) }) // after the kill below, should the test fail
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
		pid := cmd.Process.Pid
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		pids = append(pids, pid)
	}
	w, err := worker.New(b.rdb, b.store, worker.Config{Node: "n1", DataDir: b.dir,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	if got := worker.CgroupDirOf(w); got != cg {
		t.Fatalf("the new incarnation's cgroup is %q, the previous one's %q", got, cg)
	}
	for _, pid := range pids {
		if procLive(pid) {
			t.Errorf("orphan %d still runs after the worker started", pid)
		}
	}
	entries, _ := os.ReadDir(cg)
	for _, e := range entries {
		if e.IsDir() {
			t.Errorf("orphan cgroup %s left", e.Name())
		}
	}
}

// TestCgroupRootConfig: worker.cgroup_root must be auto, none or an
// absolute path to a cgroup v2 directory; the error names the key and the
// value. none runs without cgroups.
func TestCgroupRootConfig(t *testing.T) {
	b := setup(t, nil)
	for _, bad := range []string{"relative/dir", "/sys/fs/cgroup/../x", "/"} {
		_, err := worker.New(b.rdb, b.store, worker.Config{Node: "n9", DataDir: t.TempDir(), CgroupRoot: bad})
		if err == nil || !strings.Contains(err.Error(), "worker.cgroup_root") || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("CgroupRoot %q: err %v, want one naming worker.cgroup_root and the value", bad, err)
		}
	}
	notCgroup := t.TempDir()
	w, err := worker.New(b.rdb, b.store, worker.Config{Node: "n9", DataDir: t.TempDir(), CgroupRoot: notCgroup})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err == nil || !strings.Contains(err.Error(), notCgroup) {
		_ = w.Stop(context.Background())
		t.Errorf("Start with CgroupRoot %q (not a cgroup): err %v, want one naming it", notCgroup, err)
	}
	w, err = worker.New(b.rdb, b.store, worker.Config{Node: "n8", DataDir: t.TempDir(), CgroupRoot: worker.CgroupNone})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	if dir := worker.CgroupDirOf(w); dir != "" {
		t.Errorf("cgroup_root none: the worker uses cgroup %s", dir)
	}
}
