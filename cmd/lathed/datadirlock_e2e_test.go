package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestUpLocksDataDir: a second `lathed up` on a data dir a first one runs
// on exits non-zero at once, naming the dir, the first one's pid and the
// lock file, and starts nothing there (the first one's redis-server socket
// stays, and it still serves); once the first is stopped a new one starts,
// and after that one is killed with SIGKILL the lock is free again as soon
// as its redis-server has exited (nothing stale is left behind).
func TestUpLocksDataDir(t *testing.T) {
	lathed, lathe := binaries(t)
	data := t.TempDir()
	lockPath := filepath.Join(data, lockFileName)
	sock := filepath.Join(data, "redis", "redis.sock")
	up := func() (*daemon, string) {
		t.Helper()
		port := redistest.FreePort(t)
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data, "--gpus", "none")
		waitHTTP(t, base, d)
		return d, base
	}
	first, base := up()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	second := exec.CommandContext(ctx, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(redistest.FreePort(t)), "--data-dir", data, "--gpus", "none")
	out, err := second.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ctx.Err() != nil {
		t.Fatalf("second lathed up on the same data dir: %v (want a non-zero exit at once)\n%s", err, out)
	}
	want := fmt.Sprintf("lathed up: data dir %s is in use by lathed pid %d (lock %s)\n", data, first.cmd.Process.Pid, lockPath)
	if string(out) != want {
		t.Errorf("second lathed up said\n%q\nwant\n%q", out, want)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the first lathed up's redis socket: %v", err)
	}
	if _, errOut, code := cli(t, lathe, base, "list"); code != 0 {
		t.Errorf("the first lathed up no longer serves: lathe list exited %d: %s", code, errOut)
	}

	// Stopped: the next one starts.
	stop(t, first, os.Interrupt)
	third, base := up()
	if _, errOut, code := cli(t, lathe, base, "list"); code != 0 {
		t.Errorf("lathed up after the first stopped: lathe list exited %d: %s", code, errOut)
	}

	// Killed outright: the kernel drops the lock once it and its
	// redis-server (SIGTERM on lathed's death) have exited.
	stop(t, third, os.Kill)
	waitfor.True(t, time.Minute, "the data dir lock free after SIGKILL", func() bool { return lockFree(t, lockPath) })
	_, base = up()
	if _, errOut, code := cli(t, lathe, base, "list"); code != 0 {
		t.Errorf("lathed up after one was killed: lathe list exited %d: %s", code, errOut)
	}
}

// stop sends d sig and waits for it to exit.
func stop(t *testing.T, d *daemon, sig os.Signal) {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	waitfor.True(t, time.Minute, fmt.Sprintf("lathed to exit on %v", sig), func() bool {
		select {
		case <-d.done:
			return true
		default:
			return false
		}
	})
}

// lockFree reports whether this process could take the lock at path (and
// drops it at once).
func lockFree(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatalf("open the lock: %v", err)
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}
