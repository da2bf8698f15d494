//go:build !linux

package trainer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// errUnsupported says this package needs Linux.
var errUnsupported = fmt.Errorf("trainer: %w on %s", errors.ErrUnsupported, runtime.GOOS)

// Run needs Linux; here it reports StartFailed with an error wrapping
// errors.ErrUnsupported.
func Run(ctx context.Context, cfg Config, sink Sink) Result {
	now := time.Now()
	return Result{Outcome: StartFailed, ExitCode: -1, Err: errUnsupported, Started: now, Ended: now}
}

// GroupAlive needs Linux; here it reports false.
func GroupAlive(pgid int) bool { return false }

// KillGroup needs Linux; here it returns an error wrapping
// errors.ErrUnsupported.
func KillGroup(pgid int, sig syscall.Signal) error { return errUnsupported }

// ErrNoCgroup is wrapped by the errors that say no usable cgroup v2 was
// found; off Linux there is none.
var ErrNoCgroup = errors.New("no usable cgroup v2")

// AutoCgroupRoot needs Linux; here it returns an error wrapping ErrNoCgroup.
func AutoCgroupRoot() (string, error) {
	return "", fmt.Errorf("trainer: %w on %s", ErrNoCgroup, runtime.GOOS)
}

// PrepareCgroup needs Linux; here it returns an error wrapping ErrNoCgroup.
func PrepareCgroup(dir string) error {
	return fmt.Errorf("trainer: %w on %s", ErrNoCgroup, runtime.GOOS)
}

// CgroupPopulated needs Linux; here it reports false.
func CgroupPopulated(dir string) (bool, error) { return false, errUnsupported }

// KillCgroup needs Linux; here it returns an error wrapping
// errors.ErrUnsupported.
func KillCgroup(ctx context.Context, dir string) error { return errUnsupported }
