//go:build !linux

package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// errUnsupported says this package needs Linux.
var errUnsupported = fmt.Errorf("runner: %w on %s", errors.ErrUnsupported, runtime.GOOS)

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
