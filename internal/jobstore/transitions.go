package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Dispatch reserves one slot on node (of capacity slots in all) for attempt
// of job id and moves the job queued → dispatched, in one script. It returns
// ErrNodeFull when the node has no free slot, and a *ConflictError when the
// job is no longer queued at that attempt (or a cancel was asked).
func (s *Store) Dispatch(ctx context.Context, id string, attempt int, node, backend string, capacity int, gpus []int, fence ...Fence) error {
	if gpus == nil {
		gpus = []int{}
	}
	data := mustJSON(jobtype.StateChange{From: jobtype.StateQueued, To: jobtype.StateDispatched, Node: node})
	r, err := s.run(ctx, "dispatch", id, dispatchScript, attempt, node, capacity, ms(s.now()), s.cfg.EventsMaxLen, data, backend, mustJSON(gpus), fenceArg(fence))
	if err != nil {
		return err
	}
	switch r.code {
	case 1:
		return nil
	case 5:
		return fmt.Errorf("jobstore: dispatch %s: %w", id, ErrFenced)
	case 3:
		return fmt.Errorf("jobstore: dispatch %s to %s: %w", id, node, ErrNodeFull)
	default:
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("dispatch needs queued attempt %d", attempt)}
	}
}

// ClaimOutcome is what Claim found.
type ClaimOutcome int

// Claim outcomes.
const (
	// Claimed: the attempt is now running and belongs to the caller.
	Claimed ClaimOutcome = iota + 1
	// ClaimStale: the attempt is not (or no longer) dispatched to this node;
	// the caller must do nothing.
	ClaimStale
	// ClaimCancelled: a cancel was asked before the attempt started; the
	// claim wrote cancelled and the caller must do nothing else.
	ClaimCancelled
)

// Claim takes attempt of job id for node (incarnation identifies the worker
// process): dispatched → running with a lease of the given length, or →
// cancelled when a cancel was asked.
func (s *Store) Claim(ctx context.Context, id string, attempt int, node, incarnation string, lease time.Duration) (ClaimOutcome, error) {
	return s.claim(ctx, id, attempt, node, incarnation, lease, jobtype.StateRunning)
}

// claim moves a dispatched attempt to (running or provisioning), or to
// cancelled when a cancel was asked.
func (s *Store) claim(ctx context.Context, id string, attempt int, node, incarnation string, lease time.Duration, to jobtype.State) (ClaimOutcome, error) {
	rdata := mustJSON(jobtype.StateChange{From: jobtype.StateDispatched, To: to, Node: node})
	cdata := mustJSON(jobtype.StateChange{From: jobtype.StateDispatched, To: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled})
	r, err := s.run(ctx, "claim", id, claimScript, attempt, node, incarnation, ms(s.now()), s.cfg.EventsMaxLen, rdata, cdata, lease.Milliseconds(), string(to))
	if err != nil {
		return 0, err
	}
	switch r.code {
	case 1:
		return Claimed, nil
	case 4:
		return ClaimCancelled, nil
	default:
		return ClaimStale, nil
	}
}

// EventIn is one event to append to a running (or provisioning) attempt's
// stream. Field and Value, when Field is set, update the record in the same
// script (progress, metrics, artifacts as JSON). An EventIn with an empty
// Type adds no event and only updates the field.
type EventIn struct {
	Type  string
	Time  time.Time
	Data  json.RawMessage
	Field string
	Value string
}

// Append adds events of the running attempt to the job's stream, updating
// the record where asked. It returns whether a cancel was requested, and a
// *ConflictError when the attempt is no longer the running one (the caller
// must stop its trainer: it lost the job).
func (s *Store) Append(ctx context.Context, id string, attempt int, evs []EventIn) (cancelRequested bool, err error) {
	args := make([]any, 0, 2+5*len(evs))
	args = append(args, attempt, s.cfg.EventsMaxLen)
	for _, e := range evs {
		t := e.Time
		if t.IsZero() {
			t = s.now()
		}
		args = append(args, e.Type, ms(t), string(e.Data), e.Field, e.Value)
	}
	r, err := s.run(ctx, "append", id, appendScript, args...)
	if err != nil {
		return false, err
	}
	if r.code != 1 {
		return r.cancel, &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("append needs running attempt %d", attempt)}
	}
	return r.cancel, nil
}

// CancelRequested reports whether a cancel was asked for the job.
func (s *Store) CancelRequested(ctx context.Context, id string) (bool, error) {
	v, err := s.rdb.HMGet(ctx, s.key("job", id), "state", "cancel_requested").Result()
	if err != nil {
		return false, fmt.Errorf("jobstore: cancel requested %s: %w", id, err)
	}
	if st, _ := v[0].(string); st == "" {
		return false, fmt.Errorf("jobstore: cancel requested %s: %w", id, ErrNotFound)
	}
	c, _ := v[1].(string)
	return c == "1", nil
}

// Ending is how an attempt ended, for Finish.
type Ending struct {
	State     jobtype.State // succeeded, failed or cancelled
	Reason    string
	Error     string
	Metrics   map[string]float64 // merged into the record's metrics when set
	Artifacts []jobtype.Artifact // replaces the record's artifacts when set
}

// Finish ends attempt of job id in a terminal state, from running (or from
// dispatched, for an attempt that never started), and frees its node slot.
func (s *Store) Finish(ctx context.Context, id string, attempt int, e Ending) error {
	if !e.State.Terminal() {
		return fmt.Errorf("jobstore: finish %s: %q is not a terminal state", id, e.State)
	}
	now := s.now()
	fields := []any{"reason", e.Reason, "error", e.Error, "finished_at", ms(now)}
	if e.Metrics != nil {
		j, err := s.Get(ctx, id)
		if err != nil {
			return err
		}
		for k, v := range e.Metrics {
			j.Metrics[k] = v
		}
		fields = append(fields, "metrics", mustJSON(j.Metrics))
	}
	if e.Artifacts != nil {
		fields = append(fields, "artifacts", mustJSON(e.Artifacts))
	}
	return s.transition(ctx, id, attempt, []jobtype.State{jobtype.StateRunning, jobtype.StateProvisioning, jobtype.StateDispatched}, e.State,
		jobtype.StateChange{To: e.State, Reason: e.Reason, Error: e.Error}, "release", fields...)
}

// Requeue ends attempt of job id and makes the next attempt: the job goes
// back to queued (through the pending set, to be routed and placed again)
// with attempt+1. reason says why (exit code, worker shutdown).
func (s *Store) Requeue(ctx context.Context, id string, attempt int, reason, errMsg string) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	score := strconv.FormatFloat(PendingScore(j.Spec.Priority, j.CreatedAt), 'f', 0, 64)
	return s.transitionScore(ctx, id, attempt, []jobtype.State{jobtype.StateRunning, jobtype.StateProvisioning, jobtype.StateDispatched}, jobtype.StateQueued,
		jobtype.StateChange{To: jobtype.StateQueued, Reason: reason, Error: errMsg}, "release,requeue", score, "error", errMsg)
}

func (s *Store) transition(ctx context.Context, id string, attempt int, from []jobtype.State, to jobtype.State, ch jobtype.StateChange, flags string, fields ...any) error {
	return s.transitionScore(ctx, id, attempt, from, to, ch, flags, "0", fields...)
}

func (s *Store) transitionScore(ctx context.Context, id string, attempt int, from []jobtype.State, to jobtype.State, ch jobtype.StateChange, flags, score string, fields ...any) error {
	names := make([]string, len(from))
	for i, f := range from {
		names[i] = string(f)
	}
	args := []any{strings.Join(names, ","), attempt, string(to), ms(s.now()), s.cfg.EventsMaxLen, "", flags, score}
	args = append(args, fields...)
	// The script puts the state it found in place of fromPlaceholder.
	if ch.From == "" {
		ch.From = fromPlaceholder
	}
	args[5] = mustJSON(ch)
	r, err := s.run(ctx, "transition", id, transitionScript, args...)
	if err != nil {
		return err
	}
	if r.code != 1 {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("%s needs %s at attempt %d", to, strings.Join(names, "|"), attempt)}
	}
	return nil
}

// Cancel asks for job id's cancellation. A queued job is cancelled at once;
// a dispatched or running one gets the durable cancel_requested flag, which
// the attempt's owner honours (and writes cancelled after its trainer's
// process group exited). It returns the job's state after the request, and
// a *ConflictError for a job that already succeeded or failed.
func (s *Store) Cancel(ctx context.Context, id string) (jobtype.State, error) {
	cdata := mustJSON(jobtype.StateChange{From: fromPlaceholder, To: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled})
	r, err := s.run(ctx, "cancel", id, cancelScript, ms(s.now()), s.cfg.EventsMaxLen, cdata, `{}`)
	if err != nil {
		return "", err
	}
	if r.code != 1 {
		return r.state, &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: "cancel needs a job that has not ended"}
	}
	return r.state, nil
}

// CancelDispatched cancels a dispatched attempt whose task the caller has
// removed from its queue before any worker took it (so nobody else owns it).
func (s *Store) CancelDispatched(ctx context.Context, id string, attempt int) error {
	return s.transition(ctx, id, attempt, []jobtype.State{jobtype.StateDispatched}, jobtype.StateCancelled,
		jobtype.StateChange{From: jobtype.StateDispatched, To: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled},
		"release", "reason", jobtype.ReasonCancelled, "finished_at", ms(s.now()))
}

// fromPlaceholder stands for the state a script finds; the script replaces it.
const fromPlaceholder = "__FROM__"

// Renew extends the lease of attempt of job id, held by incarnation, to
// now + lease. It returns whether a cancel was asked, and a *ConflictError
// when the attempt is no longer running under this incarnation (the caller
// lost it and must stop its trainer).
func (s *Store) Renew(ctx context.Context, id string, attempt int, incarnation string, lease time.Duration) (cancelRequested bool, err error) {
	r, err := s.run(ctx, "renew", id, renewScript, attempt, incarnation, ms(s.now()), lease.Milliseconds())
	if err != nil {
		return false, err
	}
	if r.code == 7 {
		return false, fmt.Errorf("jobstore: renew %s: %w", id, ErrPreemptRequested)
	}
	if r.code != 1 {
		return r.cancel, &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("renew needs running attempt %d of incarnation %s", attempt, incarnation)}
	}
	return r.cancel, nil
}

// annotate sets field/value pairs on job id while attempt is current and
// dispatched or running (RecordGPUs, RecordInstance).
func (s *Store) annotate(ctx context.Context, id string, attempt int, fieldValues ...any) error {
	r, err := s.run(ctx, "annotate", id, annotateScript, append([]any{attempt}, fieldValues...)...)
	if err != nil {
		return err
	}
	if r.code != 1 {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("annotate needs attempt %d running", attempt)}
	}
	return nil
}

// ErrPreemptRequested is returned by Renew (which did renew the lease) when
// the attempt is asked to stop for an urgent job.
var ErrPreemptRequested = errors.New("preemption requested")

// RequestPreempt asks attempt of job id to make room for job forJob: a
// running attempt is flagged (its worker stops the trainer at the next
// renewal and calls Preempted); a dispatched one is requeued at once.
func (s *Store) RequestPreempt(ctx context.Context, id string, attempt int, forJob string, fence ...Fence) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	score := strconv.FormatFloat(PendingScore(j.Spec.Priority, j.CreatedAt), 'f', 0, 64)
	r, err := s.run(ctx, "preempt", id, preemptScript, attempt, ms(s.now()), s.cfg.EventsMaxLen, forJob, score, fenceArg(fence))
	if err != nil {
		return err
	}
	switch r.code {
	case 1:
		return nil
	case 5:
		return fmt.Errorf("jobstore: preempt %s: %w", id, ErrFenced)
	default:
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("preempt needs running or dispatched attempt %d", attempt)}
	}
}

// Preempted ends a running attempt that stopped for a preemption (its
// trainer checkpointed): the job goes back to queued as the next attempt,
// resuming from its checkpoint, with reason "preempted". A preemption is
// not a failure.
func (s *Store) Preempted(ctx context.Context, id string, attempt int, forJob string) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	score := strconv.FormatFloat(PendingScore(j.Spec.Priority, j.CreatedAt), 'f', 0, 64)
	return s.transitionScore(ctx, id, attempt, []jobtype.State{jobtype.StateRunning}, jobtype.StateQueued,
		jobtype.StateChange{To: jobtype.StateQueued, Reason: jobtype.ReasonPreempted, Error: "preempted for " + forJob},
		"release,requeue", score, "preempt_requested", "", "preemptions", j.Preemptions+1)
}

// Lease is a running attempt and when its lease ends.
type Lease struct {
	ID      string
	Attempt int
	Until   time.Time
	Node    string
}

// RunningLeases returns the leases of up to n running jobs.
func (s *Store) RunningLeases(ctx context.Context, n int) ([]Lease, error) {
	ids, err := s.IDsInState(ctx, jobtype.StateRunning, n)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, s.key("job", id), "state", "attempt", "lease_until", "node")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("jobstore: running leases: %w", err)
	}
	out := make([]Lease, 0, len(ids))
	for i, c := range cmds {
		v := c.Val()
		if st, _ := v[0].(string); st != string(jobtype.StateRunning) {
			continue
		}
		a, _ := v[1].(string)
		u, _ := v[2].(string)
		node, _ := v[3].(string)
		l := Lease{ID: ids[i], Until: msTime(u), Node: node}
		l.Attempt, _ = strconv.Atoi(a)
		out = append(out, l)
	}
	return out, nil
}

// Reap ends attempt of job id if its lease expired more than grace ago,
// and queues the next attempt (it resumes from the job's checkpoint). It
// returns a *ConflictError when the lease was renewed meanwhile or the
// attempt already ended.
func (s *Store) Reap(ctx context.Context, id string, attempt int, grace time.Duration, fence ...Fence) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	data := mustJSON(jobtype.StateChange{From: jobtype.StateRunning, To: jobtype.StateQueued, Reason: "lease expired",
		Error: fmt.Sprintf("attempt %d: lease expired (worker gone); resuming from the last checkpoint", attempt)})
	score := strconv.FormatFloat(PendingScore(j.Spec.Priority, j.CreatedAt), 'f', 0, 64)
	r, err := s.run(ctx, "reap", id, reapScript, attempt, ms(s.now()), s.cfg.EventsMaxLen, data, score, grace.Milliseconds(), fenceArg(fence))
	if err != nil {
		return err
	}
	if r.code == 5 {
		return fmt.Errorf("jobstore: reap %s: %w", id, ErrFenced)
	}
	if r.code != 1 {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("reap needs running attempt %d with an expired lease", attempt)}
	}
	return nil
}

// ReasonWorkerRestarted is the reason of an attempt ended by ReleaseDead.
const ReasonWorkerRestarted = "worker restarted"

// ReleaseDead ends attempt of job id, running on node under a worker
// incarnation that is dead, and queues the next attempt (resuming from the
// checkpoint), at once instead of when the lease expires: the caller is the
// node's new incarnation live, which has killed the dead one's trainer
// groups and seen them gone. dead is the dead incarnation ("": any but
// live). As with the reaper, a job whose cancel was asked ends cancelled
// instead; like the reaper's, the new attempt counts towards max_attempts
// (only preemptions do not). It returns a *ConflictError when the attempt
// is not running there under such an incarnation (already reaped, ended,
// or held by live).
func (s *Store) ReleaseDead(ctx context.Context, id string, attempt int, node, dead, live string) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	data := mustJSON(jobtype.StateChange{From: jobtype.StateRunning, To: jobtype.StateQueued, Reason: ReasonWorkerRestarted,
		Error: fmt.Sprintf("attempt %d: its worker died; the worker restarted on %s killed the trainer; resuming from the last checkpoint", attempt, node)})
	score := strconv.FormatFloat(PendingScore(j.Spec.Priority, j.CreatedAt), 'f', 0, 64)
	r, err := s.run(ctx, "release dead attempt", id, releaseDeadScript, attempt, node, dead, live, ms(s.now()), s.cfg.EventsMaxLen, data, score)
	if err != nil {
		return err
	}
	if r.code != 1 {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("release needs running attempt %d on %s of a dead incarnation", attempt, node)}
	}
	return nil
}

// Retry makes a new attempt of a failed or cancelled job: it goes back to
// queued (attempt+1, through the pending set, routed and placed again) with
// its cancel request, reason and error cleared. The checkpoint folder is
// kept, so the new attempt resumes where the last one stopped.
func (s *Store) Retry(ctx context.Context, id string) (*jobtype.Job, error) {
	j, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.State != jobtype.StateFailed && j.State != jobtype.StateCancelled {
		return nil, &ConflictError{ID: id, State: j.State, Attempt: j.Attempt, Want: "retry needs a failed or cancelled job"}
	}
	score := strconv.FormatFloat(PendingScore(j.Spec.Priority, j.CreatedAt), 'f', 0, 64)
	err = s.transitionScore(ctx, id, j.Attempt, []jobtype.State{jobtype.StateFailed, jobtype.StateCancelled}, jobtype.StateQueued,
		jobtype.StateChange{To: jobtype.StateQueued, Reason: "retry"}, "requeue,clearcancel", score,
		"reason", "", "error", "", "finished_at", "")
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

// ErrFenced: the write carried a leader's fence whose term has ended.
var ErrFenced = errors.New("fenced: no longer the leader")

func fenceArg(f []Fence) string {
	if len(f) == 0 {
		return ""
	}
	return string(f[0])
}
