//go:build linux

package trainer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// watchdogEnv, when set, makes a process that links this package the
// watchdog of one trainer instead of whatever its main does: Run starts
// /proc/self/exe with it. Its value is "<pgid>,<timeout ms>,<grace ms>,<c>",
// where c is 1 when fd 4 is the trainer's cgroup directory, 0 otherwise.
const watchdogEnv = "LATHE_RUNNER_WATCHDOG"

func init() {
	if v, ok := os.LookupEnv(watchdogEnv); ok {
		os.Exit(watchdogMain(v))
	}
}

// start starts the watchdog process for the trainer group pgid and, when
// cgroup is not nil, the trainer's cgroup (the watchdog joins both, so the
// trainer's end ends it too). The feed pipe's read end is its fd 3, the
// cgroup directory its fd 4; the write end stays in this process only
// (close-on-exec), so the watchdog reads EOF once this process is gone.
func (d *Watchdog) start(pgid int, grace time.Duration, cgroup *os.File) (*exec.Cmd, error) {
	if d.Timeout <= 0 {
		return nil, fmt.Errorf("%w: Watchdog.Timeout %v", ErrInvalidConfig, d.Timeout)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("trainer: watchdog pipe: %w", err)
	}
	defer r.Close()
	attr := &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	files, hasCgroup := []*os.File{r}, 0
	if cgroup != nil {
		attr.UseCgroupFD, attr.CgroupFD = true, int(cgroup.Fd())
		files, hasCgroup = append(files, cgroup), 1
	}
	cmd := &exec.Cmd{
		// /proc/self/exe runs this very binary even if its file was
		// replaced or deleted since it started.
		Path:        "/proc/self/exe",
		Args:        []string{"lathe-trainer-watchdog"},
		Env:         []string{fmt.Sprintf("%s=%d,%d,%d,%d", watchdogEnv, pgid, d.Timeout.Milliseconds(), grace.Milliseconds(), hasCgroup)},
		ExtraFiles:  files,
		Stderr:      os.Stderr,
		SysProcAttr: attr,
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("trainer: start watchdog: %w", err)
	}
	d.mu.Lock()
	d.feed = w
	d.mu.Unlock()
	go func() { _ = cmd.Wait() }() // reap it whenever it ends
	return cmd, nil
}

// stop closes the feed once the trainer's group is gone (the watchdog, a
// member of the group, was killed with it).
func (d *Watchdog) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.feed != nil {
		d.feed.Close()
		d.feed = nil
	}
}

// watchdogMain is the watchdog process: it reads the feed pipe on fd 3 and,
// when nothing comes for the timeout or the pipe ends, stops the group:
// SIGTERM, then after the grace SIGKILL to the whole cgroup (processes that
// left the group included) and to the group.
func watchdogMain(spec string) int {
	// It is a member of the group it (and the runner) signals.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	f := strings.Split(spec, ",")
	if len(f) != 4 {
		fmt.Fprintf(os.Stderr, "lathe trainer watchdog: bad %s=%q\n", watchdogEnv, spec)
		return 2
	}
	pgid, err1 := strconv.Atoi(f[0])
	tms, err2 := strconv.Atoi(f[1])
	gms, err3 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2, err3); err != nil || pgid <= 1 || tms <= 0 || (f[3] != "0" && f[3] != "1") {
		fmt.Fprintf(os.Stderr, "lathe trainer watchdog: bad %s=%q\n", watchdogEnv, spec)
		return 2
	}
	timeout, grace := time.Duration(tms)*time.Millisecond, time.Duration(gms)*time.Millisecond
	// Non-blocking, so that the runtime poller serves read deadlines.
	if err := syscall.SetNonblock(3, true); err != nil {
		fmt.Fprintf(os.Stderr, "lathe trainer watchdog: fd 3: %v\n", err)
		return 2
	}
	feed := os.NewFile(3, "lease-feed")
	buf := make([]byte, 256)
	why := ""
	for why == "" {
		_ = feed.SetReadDeadline(time.Now().Add(timeout))
		if _, err := feed.Read(buf); err != nil {
			why = "its worker is gone"
			if errors.Is(err, os.ErrDeadlineExceeded) {
				why = "no lease renewal from its worker for " + timeout.String()
			}
		}
	}
	fmt.Fprintf(os.Stderr, "lathe trainer watchdog: %s; stopping trainer process group %d (SIGTERM, SIGKILL after %s)\n", why, pgid, grace)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	for deadline := time.Now().Add(grace); time.Now().Before(deadline) && !processExited(pgid); {
		time.Sleep(20 * time.Millisecond)
	}
	if f[3] == "1" {
		// Every process of the cgroup, this one included.
		if err := killCgroupFD(4); err != nil {
			fmt.Fprintf(os.Stderr, "lathe trainer watchdog: %v\n", err)
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // this process included
	return 0
}

// killCgroupFD writes "1" to cgroup.kill in the cgroup directory open as fd.
func killCgroupFD(fd int) error {
	k, err := syscall.Openat(fd, "cgroup.kill", syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open cgroup.kill: %w", err)
	}
	defer syscall.Close(k)
	if _, err := syscall.Write(k, []byte("1")); err != nil {
		return fmt.Errorf("write cgroup.kill: %w", err)
	}
	return nil
}
