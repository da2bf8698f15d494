package worker

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
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
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err := procState(pid); err == nil && st == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed process never became a zombie")
		}
	}
	if !predecessorDead(jobstore.Node{Host: host, PID: pid}) {
		t.Fatal("a zombie predecessor is called alive: its successor is refused the node name")
	}
}
