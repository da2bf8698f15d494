package trainer

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// ErrTimeout is a cancel cause that makes Run report [TimedOut]. Pass it to the
// cancel function of [context.WithCancelCause] when an attempt hits its
// max_runtime.
var ErrTimeout = errors.New("trainer: attempt timed out")

// ErrCancelled is a cancel cause that makes Run report [Cancelled]. Pass it to
// the cancel function of [context.WithCancelCause] when a user cancels a job.
var ErrCancelled = errors.New("trainer: attempt cancelled")

// ErrInvalidConfig is wrapped by the error of a [StartFailed] result when the
// [Config] is unusable (empty Argv, malformed Env, negative durations or sizes).
var ErrInvalidConfig = errors.New("trainer: invalid config")

// ErrInvalidGroup is returned by [KillGroup] for a process group id that must
// never be signalled: zero, one, a negative number, or the caller's own group.
var ErrInvalidGroup = errors.New("trainer: invalid process group")

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

// ExitOutcome is the outcome of a trainer that ended by itself (not stopped
// by Run) with exit code code: Succeeded for 0, Permanent for
// [PermanentExitCode], Failed for anything else (-1: killed by a signal).
// Run decides with it, and so does the AWS worker reading an agent's
// status: one mapping from exit codes to outcomes.
func ExitOutcome(code int) Outcome {
	switch code {
	case 0:
		return Succeeded
	case PermanentExitCode:
		return Permanent
	default:
		return Failed
	}
}

// Verdict is how a trainer run that neither succeeded nor was stopped on
// purpose ends its attempt: the jobtype reason and the message the job
// record shows. The local worker and the cloud agent judge a Result with
// [Judge]; what each does with the verdict (a retry, a status.json) is
// theirs.
type Verdict struct {
	// Outcome is the Result's.
	Outcome Outcome
	// Reason is jobtype.ReasonPermanent, ReasonTimeout, ReasonInternal
	// (StartFailed) or ReasonExit (Failed, retryable); empty for Succeeded
	// and Cancelled, which Judge leaves to the caller.
	Reason string
	// Message says what happened, quoting lastLogs for a trainer failure.
	Message string
}

// Judge returns the verdict on res. maxRuntime is the attempt's limit (the
// TimedOut message names it) and lastLogs the trainer's last log lines (a
// failure's message quotes them).
func Judge(res Result, maxRuntime time.Duration, lastLogs string) Verdict {
	v := Verdict{Outcome: res.Outcome}
	switch res.Outcome {
	case Permanent:
		v.Reason, v.Message = jobtype.ReasonPermanent, fmt.Sprintf("trainer exited %d (permanent): %s", PermanentExitCode, lastLogs)
	case TimedOut:
		v.Reason, v.Message = jobtype.ReasonTimeout, fmt.Sprintf("max_runtime %s reached", maxRuntime)
	case StartFailed:
		v.Reason, v.Message = jobtype.ReasonInternal, fmt.Sprintf("trainer did not start: %v", res.Err)
	case Failed:
		v.Reason, v.Message = jobtype.ReasonExit, FailureMessage(res, lastLogs)
	}
	return v
}

// FailureMessage is the message of a trainer that failed (or exited
// permanent, for the agent's status): how it exited and its last log lines.
func FailureMessage(res Result, lastLogs string) string {
	return fmt.Sprintf("trainer failed (%s): %s", res.ExitDesc(), lastLogs)
}

// ExitDesc says how the trainer exited: "signal SIGKILL" or "exit 1".
func (r Result) ExitDesc() string {
	if r.Signal != "" {
		return "signal " + r.Signal
	}
	return "exit " + strconv.Itoa(r.ExitCode)
}
