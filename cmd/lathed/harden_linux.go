//go:build linux

package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// hardenProcess marks lathed non-dumpable (prctl PR_SET_DUMPABLE 0): the
// kernel then makes /proc/<lathed>/environ, mem, maps and fd owned by root,
// so a trainer running as lathed's own user can no longer read the
// daemon's environment (LATHE_TOKEN*, AWS credentials) or memory, nor
// ptrace it. Linux lets a same-uid process read those otherwise. Side
// effects: no core dumps, and a debugger must attach as root. Trainers are
// unaffected (execve makes them dumpable again), and so is root.
func hardenProcess() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
