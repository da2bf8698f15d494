package runner

import (
	"errors"
	"fmt"
	"time"
)

// ErrTimeout is a cancel cause that makes Run report [TimedOut]. Pass it to the
// cancel function of [context.WithCancelCause] when an attempt hits its
// max_runtime.
var ErrTimeout = errors.New("runner: attempt timed out")

// ErrCancelled is a cancel cause that makes Run report [Cancelled]. Pass it to
// the cancel function of [context.WithCancelCause] when a user cancels a job.
var ErrCancelled = errors.New("runner: attempt cancelled")

// ErrInvalidConfig is wrapped by the error of a [StartFailed] result when the
// [Config] is unusable (empty Argv, malformed Env, negative durations or sizes).
var ErrInvalidConfig = errors.New("runner: invalid config")

// ErrInvalidGroup is returned by [KillGroup] for a process group id that must
// never be signalled: zero, one, a negative number, or the caller's own group.
var ErrInvalidGroup = errors.New("runner: invalid process group")

// PermanentExitCode is the exit code by which a trainer reports a failure that
// no retry can fix (bad data, bad config).
const PermanentExitCode = 3

// Outcome says how an attempt ended.
type Outcome int

const (
	// Succeeded: the trainer exited 0 by itself.
	Succeeded Outcome = iota
	// Failed: the trainer exited with a code other than 0 and 3, or was killed
	// by a signal Lathe did not send. The attempt may be retried.
	Failed
	// Permanent: the trainer exited with [PermanentExitCode]; do not retry.
	Permanent
	// Cancelled: the context was cancelled (with [context.Canceled],
	// [ErrCancelled] or any cause other than a timeout) and Run signalled the
	// trainer.
	Cancelled
	// TimedOut: the context's deadline passed, or it was cancelled with
	// [ErrTimeout], and Run signalled the trainer.
	TimedOut
	// StartFailed: the trainer never ran (missing binary, bad directory,
	// invalid config). A context already done before the start yields
	// Cancelled or TimedOut instead, with PID zero.
	StartFailed
)

// String returns the outcome's lower-case name, e.g. "succeeded".
func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Failed:
		return "failed"
	case Permanent:
		return "permanent"
	case Cancelled:
		return "cancelled"
	case TimedOut:
		return "timed_out"
	case StartFailed:
		return "start_failed"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}

// Result is what Run reports about one attempt. When Run returns it, no live
// process is left in the trainer's process group.
type Result struct {
	// Outcome says how the attempt ended.
	Outcome Outcome
	// ExitCode is the trainer's exit code, or -1 when it was killed by a
	// signal or never started.
	ExitCode int
	// Signal names the signal that killed the trainer ("SIGKILL"), or is
	// empty when it exited by itself or never started.
	Signal string
	// Err says why the attempt did not succeed: the start error for
	// StartFailed (wrapping the cause), the context's cause for Cancelled and
	// TimedOut, the exit code or signal for Failed and Permanent. It is nil
	// for Succeeded.
	Err error
	// PID is the trainer's process id, which is also its process group id;
	// zero when it never started.
	PID int
	// Started is when the trainer process was started (when Run gave up, for
	// StartFailed).
	Started time.Time
	// Ended is when the process group was gone and both pipes drained.
	Ended time.Time
}
