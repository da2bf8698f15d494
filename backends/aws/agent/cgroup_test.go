package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lathe-ml/lathe/internal/trainer"
)

// escapingStandIn is a /bin/sh STAND-IN trainer whose two children leave
// its process group (setsid, and a double fork into a new session); it
// prints "escaped PID" for each once it runs, writes an artifact and
// succeeds.
const escapingStandIn = `#!/bin/sh
mkfifo a b
setsid sh -c 'echo $$ > a; exec sleep 1000' &
( setsid sh -c 'echo $$ > b; exec sleep 1000' & )
read a < a
read b < b
echo "escaped $a"
echo "escaped $b"
echo adapter > "$LATHE_OUTPUT_DIR/adapter.txt"
echo '{"event":"done","metrics":{}}'
`

// TestEscapedProcessesDieWithTheAttempt: on an instance, as on a local
// worker, the trainer runs in a cgroup of its own (--cgroup-root auto), so
// the processes it moved out of its process group are dead when the agent
// reports the attempt, and the attempt's cgroup is gone. It needs a
// writable cgroup v2, as the worker's cgroup tests do: it fails, never
// skips, without one.
func TestEscapedProcessesDieWithTheAttempt(t *testing.T) {
	root, err := trainer.AutoCgroupRoot()
	if err != nil {
		t.Fatalf("no usable cgroup v2 here (this test needs one): %v", err)
	}
	b := setup(t)
	p := filepath.Join(t.TempDir(), "escape.sh")
	if err := os.WriteFile(p, []byte(escapingStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	job := b.job("job-escape", 1, 600, []string{"/bin/sh", p})
	got, err := Run(b.ctx, b.config(t, job))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.State != StateSucceeded {
		t.Fatalf("status %+v, want succeeded", got)
	}
	var pids []int
	re := regexp.MustCompile(`escaped (\d+)`)
	for _, e := range b.events(t, "job-escape", 1) {
		if m := re.FindStringSubmatch(string(e.Data)); m != nil {
			pid, _ := strconv.Atoi(m[1])
			pids = append(pids, pid)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("escaped pids %v, want 2", pids)
	}
	for _, pid := range pids {
		if procLive(pid) {
			t.Errorf("escaped process %d still runs after the attempt ended", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "job-escape-1")); !os.IsNotExist(err) {
		t.Errorf("the attempt's cgroup is left behind (stat: %v)", err)
	}
}

// TestCgroupRootIsChecked: --cgroup-root takes auto, none or a clean
// absolute path; anything else is refused, naming the value.
func TestCgroupRootIsChecked(t *testing.T) {
	for _, bad := range []string{"relative/dir", "/sys/fs/cgroup/../x", "/a//b"} {
		_, _, err := Config{JobURI: "s3://b/p/j-1/1/job.json", CgroupRoot: bad, store: newMemStore()}.normalise()
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("CgroupRoot %q: %v, want a refusal naming it", bad, err)
		}
	}
}

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
