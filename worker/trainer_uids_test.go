package worker

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestUIDPool: a uid held by one attempt is never given to another while
// it is held (the lock is the kernel's, per open file), a range of two
// holds two attempts and refuses a third naming the range, and a uid given
// back can be taken again.
func TestUIDPool(t *testing.T) {
	p, err := newUIDPool(3_000_000_000, 3_000_000_001, filepath.Join(t.TempDir(), "uids"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.take()
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.take()
	if err != nil {
		t.Fatal(err)
	}
	if a.cred.UID == b.cred.UID || a.cred.GID != a.cred.UID {
		t.Fatalf("two attempts got uids %+v and %+v; want two different uids, each its own group", a.cred, b.cred)
	}
	if _, err := p.take(); err == nil || !strings.Contains(err.Error(), "3000000000-3000000001") {
		t.Fatalf("a third take of a range of two: %v; want an error naming the range", err)
	}
	a.release()
	c, err := p.take()
	if err != nil || c.cred.UID != a.cred.UID {
		t.Fatalf("after a release: %+v %v; want uid %d again", c, err, a.cred.UID)
	}
	if _, err := newUIDPool(5, 4, t.TempDir()); err == nil {
		t.Fatal("a range whose last is below its first was accepted")
	}
	// A range holding an existing user (root, 0, is never in one; nobody
	// is 65534 on Debian) is refused, naming the user.
	if _, err := newUIDPool(65000, 65535, t.TempDir()); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("a range holding nobody: %v; want it refused naming the user", err)
	}
}

// TestSweepScratch: what a uid left at the top of the scratch folders is
// removed (a link is removed, not followed); what other uids own stays.
func TestSweepScratch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chown needs root")
	}
	scratch, target := t.TempDir(), t.TempDir()
	old := scratchDirs
	scratchDirs = []string{scratch}
	t.Cleanup(func() { scratchDirs = old })
	const uid = 3_000_000_007
	mine := filepath.Join(scratch, "left")
	_ = os.MkdirAll(filepath.Join(mine, "deep"), 0o755)
	link := filepath.Join(scratch, "link")
	kept := filepath.Join(target, "kept")
	_ = os.WriteFile(kept, []byte("x"), 0o644)
	_ = os.Symlink(target, link)
	other := filepath.Join(scratch, "other")
	_ = os.WriteFile(other, []byte("x"), 0o644)
	for _, p := range []string{mine, filepath.Join(mine, "deep")} {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(link, uid, uid); err != nil {
		t.Fatal(err)
	}
	if err := sweepScratch(uid); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{mine, link} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", p, err)
		}
	}
	for _, p := range []string{other, kept} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// TestReachable: a folder under one that others may not search is named,
// with the way out.
func TestReachable(t *testing.T) {
	top := t.TempDir()
	inner := filepath.Join(top, "data")
	_ = os.Mkdir(inner, 0o755)
	if err := os.Chmod(top, 0o700); err != nil {
		t.Fatal(err)
	}
	err := reachable(inner)
	if err == nil || !strings.Contains(err.Error(), top+" is mode 0700") || !strings.Contains(err.Error(), "chmod o+x "+top) {
		t.Fatalf("reachable: %v; want %s named as mode 0700 with chmod o+x", err, top)
	}
	_ = os.Chmod(top, 0o711)
	// The test's temp folders above may be 0700 too: make them searchable
	// as the check wants (nothing above the system's temp folder), then
	// it passes.
	tmp := filepath.Clean(os.TempDir())
	for p := filepath.Dir(top); strings.HasPrefix(p, tmp+string(filepath.Separator)); p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o001 == 0 {
			_ = os.Chmod(p, st.Mode().Perm()|0o001)
		}
	}
	if err := reachable(inner); err != nil {
		t.Fatalf("reachable after chmod: %v", err)
	}
}

// TestOthersMayRead: a model folder with a file others may not read (as
// safetensors writes them, 0600) is named with the way out; made
// readable, it passes.
func TestOthersMayRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "model")
	_ = os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644)
	weights := filepath.Join(dir, "sub", "model.safetensors")
	_ = os.WriteFile(weights, []byte("w"), 0o600)
	err := othersMayRead(dir)
	if err == nil || !strings.Contains(err.Error(), weights+" is mode 0600") || !strings.Contains(err.Error(), "chmod -R o+rX "+dir) {
		t.Fatalf("othersMayRead: %v; want %s named with chmod -R o+rX", err, weights)
	}
	_ = os.Chmod(weights, 0o644)
	if err := othersMayRead(dir); err != nil {
		t.Fatalf("othersMayRead of a readable folder: %v", err)
	}
}

// TestKillUID: every process running as a pool uid is killed, a child it
// forked after the first pass included; a process of another uid is not.
func TestKillUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("running a process as another uid needs root")
	}
	const uid, other = 3_000_000_011, 3_000_000_012
	start := func(u uint32, script string) *exec.Cmd {
		c := exec.Command("/bin/sh", "-c", script)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u, Gid: u, Groups: []uint32{}}}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	// A forker: a loop that keeps starting children.
	forker := start(uid, "while :; do sleep 30 & done")
	bystander := start(other, "sleep 30")
	waitfor.True(t, 10*time.Second, "the forker's children running", func() bool { return countUID(uid) > 1 })
	killUID(uid)
	if n := countUID(uid); n != 0 {
		t.Fatalf("%d processes of uid %d left", n, uid)
	}
	_ = forker.Wait()
	if countUID(other) == 0 {
		t.Fatal("the process of another uid was killed")
	}
	_ = bystander.Process.Kill()
}

// countUID counts the live processes whose real or effective uid is uid
// (a zombie, killed and not yet reaped, is not live).
func countUID(uid uint32) int {
	procs, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !procUIDs(pid, uid) {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
				continue
			}
		}
		n++
	}
	return n
}

// TestTrainerUserWarnedAtStart: who trainers run as is said at every
// start. worker.run_as: root, written out, is accepted from a root lathed
// only and logs TRAINERS RUN AS ROOT as an error (issue #24: "run_as: root
// must be written out, and it earns a loud warning at every start"); so
// does a root lathed given neither run_as nor users of their own. A lathed
// that is not root, with no run_as, warns that trainers run as its own
// user.
func TestTrainerUserWarnedAtStart(t *testing.T) {
	old := geteuid
	t.Cleanup(func() { geteuid = old })
	for _, tc := range []struct {
		name  string
		euid  int
		runAs string
		level slog.Level
		want  string
	}{
		{"run_as root", 0, "root", slog.LevelError, "TRAINERS RUN AS ROOT"},
		{"root lathed, no users of their own", 0, "", slog.LevelError, "TRAINERS RUN AS ROOT"},
		{"lathed not root", 1000, "", slog.LevelWarn, "trainers run as lathed's own user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			geteuid = func() int { return tc.euid }
			c := Config{RunAs: tc.runAs}
			if err := c.checkTrainers(); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			w := &Worker{cfg: c, log: slog.New(slog.NewTextHandler(&buf, nil))}
			w.warnTrainerUser()
			if out := buf.String(); !strings.Contains(out, "level="+tc.level.String()) || !strings.Contains(out, tc.want) {
				t.Fatalf("logged %q; want %s %q", out, tc.level, tc.want)
			}
		})
	}
	// run_as: root from a lathed that is not root is refused.
	geteuid = func() int { return 1000 }
	c := Config{RunAs: "root"}
	if err := c.checkTrainers(); err == nil || !strings.Contains(err.Error(), "not root") {
		t.Fatalf("run_as: root from uid 1000: %v, want a refusal", err)
	}
}
