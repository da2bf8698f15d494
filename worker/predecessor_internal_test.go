package worker

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestPredecessorDeadZombie: a worker killed with -9 whose parent has not
// reaped it yet (a zombie) is dead, so its successor on the same host may
// take the node name over at once; a live process is not dead.
func TestPredecessorDeadZombie(t *testing.T) {
	host, _ := os.Hostname()
	cmd := exec.Command("/bin/sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if predecessorDead(jobstore.Node{Host: host, PID: pid}) {
		t.Fatal("a live process is called dead")
	}
	_ = syscall.Kill(pid, syscall.SIGKILL) // not waited for: a zombie until Cleanup
	waitfor.True(t, 10*time.Second, "the killed process a zombie", func() bool {
		st, err := procState(pid)
		return err == nil && st == 'Z'
	})
	if !predecessorDead(jobstore.Node{Host: host, PID: pid}) {
		t.Fatal("a zombie predecessor is called alive: its successor is refused the node name")
	}
}
