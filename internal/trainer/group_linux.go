//go:build linux

package trainer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// GroupAlive reports whether process group pgid still has a live member: a
// process that has not exited. It asks the kernel first (kill(-pgid, 0)
// failing with ESRCH means the group is gone) and, when the group still
// exists, reads /proc to discount members that are zombies, which have exited
// but wait for their parent (often init) to reap them. When /proc cannot be
// read it reports true. It reports false for pgid <= 1, which names no
// trainer's group.
func GroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	live, err := groupHasLiveMember(pgid)
	if err != nil {
		return true
	}
	return live
}

// KillGroup sends sig to every process in group pgid. It refuses, with an
// error wrapping ErrInvalidGroup, a pgid <= 1 (kill(2) would read those as
// "every process" or "my own group") and the caller's own group. When the
// group has no member the error wraps syscall.ESRCH; when the caller may not
// signal it, syscall.EPERM.
func KillGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 || pgid == syscall.Getpgrp() {
		return fmt.Errorf("%w: %d", ErrInvalidGroup, pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil {
		return fmt.Errorf("trainer: send %s to process group %d: %w", signalName(sig), pgid, err)
	}
	return nil
}

// groupHasLiveMember scans /proc for a process in group pgid that is not a
// zombie. A zombie thread-group leader whose other threads still run counts
// as live.
func groupHasLiveMember(pgid int) (bool, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return false, fmt.Errorf("trainer: scan /proc: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return false, fmt.Errorf("trainer: scan /proc: %w", err)
	}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		state, pgrp, err := procStat(pid)
		if err != nil || pgrp != pgid {
			continue // gone meanwhile, or another group
		}
		if state != 'Z' && state != 'X' {
			return true, nil
		}
		if tasks, err := os.ReadDir("/proc/" + name + "/task"); err == nil && len(tasks) > 1 {
			return true, nil
		}
	}
	return false, nil
}

// procStat reads the state letter and process group of pid from
// /proc/<pid>/stat.
func procStat(pid int) (state byte, pgrp int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses,
	// so parse after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("trainer: parse /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("trainer: parse /proc/%d/stat", pid)
	}
	pgrp, err = strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, fmt.Errorf("trainer: parse /proc/%d/stat: %w", pid, err)
	}
	return f[0][0], pgrp, nil
}

// processExited reports whether pid, a child of this process, has exited
// (it is a zombie or already gone).
func processExited(pid int) bool {
	state, _, err := procStat(pid)
	return err != nil || state == 'Z' || state == 'X'
}

// Constants of waitid(2), which package syscall lacks.
const (
	idPID   = 1          // P_PID
	wExited = 0x4        // WEXITED
	wNoWait = 0x01000000 // WNOWAIT
)

// waitExited blocks until child pid has exited, without reaping it: the
// zombie keeps its pid and process group id reserved, so the group can still
// be signalled safely. os/exec's Wait reaps it later.
func waitExited(pid int) error {
	var info [16]uint64 // siginfo_t is 128 bytes; its content is not needed
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, idPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), wExited|wNoWait, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return fmt.Errorf("trainer: waitid %d: %w", pid, errno)
		}
	}
}

// signalNames names the signals a trainer is likely to die of.
var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT",
	syscall.SIGALRM: "SIGALRM",
	syscall.SIGBUS:  "SIGBUS",
	syscall.SIGFPE:  "SIGFPE",
	syscall.SIGHUP:  "SIGHUP",
	syscall.SIGILL:  "SIGILL",
	syscall.SIGINT:  "SIGINT",
	syscall.SIGKILL: "SIGKILL",
	syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGSEGV: "SIGSEGV",
	syscall.SIGSYS:  "SIGSYS",
	syscall.SIGTERM: "SIGTERM",
	syscall.SIGTRAP: "SIGTRAP",
	syscall.SIGUSR1: "SIGUSR1",
	syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ",
}

// signalName returns "SIGTERM" and the like, or "signal N" for a signal
// without a name here.
func signalName(sig syscall.Signal) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(sig))
}
