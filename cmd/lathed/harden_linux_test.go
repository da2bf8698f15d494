//go:build linux

package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestHardenHelper is not a test: it is the helper process of
// TestTrainerCannotReadLathedEnviron (it does nothing unless
// LATHE_HARDEN_HELPER is set). It plays lathed: it hardens itself like
// lathed's main when LATHE_HARDEN_HELPER=1, says ready, and waits for
// its stdin to close.
func TestHardenHelper(t *testing.T) {
	mode := os.Getenv("LATHE_HARDEN_HELPER")
	if mode == "" {
		return
	}
	if mode == "1" {
		if err := hardenProcess(); err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(2)
		}
	}
	os.Stdout.WriteString("ready\n")
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// TestTrainerCannotReadLathedEnviron: a process of lathed's own user (a
// /bin/sh STAND-IN trainer: cat /proc/<pid>/environ) cannot read the
// environment of a hardened lathed. Tests run as root, which reads any
// process's environ, so both the helper playing lathed (this test binary,
// re-executed) and the reader run as the unprivileged user nobody; the
// unhardened helper shows that the reader could read it otherwise.
func TestTrainerCannotReadLathedEnviron(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs its processes as the user nobody and needs root (the tests run as root)")
	}
	const uid, gid = 65534, 65534
	dir, err := os.MkdirTemp("", "lathe-harden-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "lathed.test")
	if err := copyExecutable(self, bin); err != nil {
		t.Fatal(err)
	}
	cred := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	for _, c := range []struct {
		mode     string
		readable bool
	}{{"0", true}, {"1", false}} {
		helper := exec.Command(bin, "-test.run=^TestHardenHelper$")
		helper.Dir = dir
		helper.Env = []string{"LATHE_HARDEN_HELPER=" + c.mode, "LATHE_TOKEN=tok-environ-secret"}
		helper.SysProcAttr = cred
		stdin, _ := helper.StdinPipe()
		out, _ := helper.StdoutPipe()
		if err := helper.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			stdin.Close()
			helper.Wait()
			t.Fatalf("helper (hardened=%s): %q %v", c.mode, line, err)
		}
		reader := exec.Command("/bin/sh", "-c", "cat /proc/$0/environ", strconv.Itoa(helper.Process.Pid))
		reader.SysProcAttr = cred
		got, rerr := reader.CombinedOutput()
		stdin.Close()
		helper.Wait()
		leaked := strings.Contains(string(got), "tok-environ-secret")
		if leaked != c.readable {
			t.Fatalf("hardened=%s: a process of the same user read the environ: %v (want %v); output %q, %v", c.mode, leaked, c.readable, got, rerr)
		}
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
