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

// DispatchParams names one dispatch: which attempt goes where.
type DispatchParams struct {
	JobID   string
	Attempt int    // the queued attempt; any other makes a ConflictError
	Node    string // a local node, or a cloud backend's jobtype.CloudNode
	Backend string // the backend's name ("local" for a local node)
	// Capacity is the node's slots in all (a cloud node: the backend's
	// max_instances); the script refuses when they are all reserved.
	Capacity int
	// GPUs are the node's GPU indexes the attempt takes; nil or empty: a
	// CPU slot. The script refuses a GPU another job holds.
	GPUs []int
	// Fence is the leader's fencing token; "" (tests, tools) checks none.
	Fence Fence
}

// Dispatch reserves one slot on p.Node (of p.Capacity slots in all) and
// p.GPUs for attempt p.Attempt of job p.JobID and moves the job queued →
// dispatched, in one script. It returns ErrNodeFull when the node has no
// free slot (or a GPU is held), a *ConflictError when the job is no longer
// queued at that attempt (or a cancel was asked), and ErrFenced when
// p.Fence is not the current leader's.
func (s *Store) Dispatch(ctx context.Context, p DispatchParams) error {
	id, attempt, node, gpus := p.JobID, p.Attempt, p.Node, p.GPUs
	if gpus == nil {
		gpus = []int{}
	}
	data := mustJSON(jobtype.StateChange{From: jobtype.StateQueued, To: jobtype.StateDispatched, Node: node})
	r, err := s.run(ctx, "dispatch", id, dispatchScript, attempt, node, p.Capacity, ms(s.now()), s.cfg.EventsMaxLen, data, p.Backend, mustJSON(gpus), string(p.Fence))
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
	// claim wrote cancelled (stopped, for a trial its sweep asked to stop)
	// and the caller must do nothing else.
	ClaimCancelled
)

// ClaimParams names the attempt a worker takes (Claim, ClaimCloud) and the
// lease it takes it with.
type ClaimParams struct {
	ID      string
	Attempt int
	// Node is the node the attempt was dispatched to (for ClaimCloud, its
	// backend's CloudNode); another node's claim is stale.
	Node string
	// Incarnation identifies the worker process that takes it.
	Incarnation string
	// Lease is how long the attempt is held without a renewal (until now + Lease).
	Lease time.Duration
}

// Claim takes attempt p.Attempt of job p.ID for p.Node: dispatched →
// running with a lease held by p.Incarnation, or → cancelled when a cancel
// was asked.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (ClaimOutcome, error) {
	return s.claim(ctx, p, jobtype.StateRunning)
}

// claim moves a dispatched attempt to (running or provisioning), or to
// cancelled when a cancel was asked.
func (s *Store) claim(ctx context.Context, p ClaimParams, to jobtype.State) (ClaimOutcome, error) {
	rdata := mustJSON(jobtype.StateChange{From: jobtype.StateDispatched, To: to, Node: p.Node})
	r, err := s.run(ctx, "claim", p.ID, claimScript, p.Attempt, p.Node, p.Incarnation, ms(s.now()), s.cfg.EventsMaxLen, rdata, p.Lease.Milliseconds(), string(to))
	if err != nil {
		return 0, err
	}
	return claimOutcome(r), nil
}

// claimOutcome is what a claim script's reply says.
func claimOutcome(r result) ClaimOutcome {
	switch r.code {
	case codeDone:
		return Claimed
	case codeClaimCancelled:
		return ClaimCancelled
	default:
		return ClaimStale
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
	if r.code != codeDone {
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
// A trial whose sweep asked it to stop, finished cancelled, ends stopped.
func (s *Store) Finish(ctx context.Context, id string, attempt int, e Ending) error {
	if !e.State.Terminal() {
		return fmt.Errorf("jobstore: finish %s: %q is not a terminal state", id, e.State)
	}
	if e.State == jobtype.StateStopped {
		// Only a stop the sweep asked ends a trial stopped: Finish cancelled
		// writes it then (transitionScript).
		return fmt.Errorf("jobstore: finish %s: stopped is written for a stop asked (Stop), not by Finish; finish cancelled", id)
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
	return s.transition(ctx, id, attempt, move{from: attemptEnds, to: e.State,
		change: jobtype.StateChange{To: e.State, Reason: e.Reason, Error: e.Error}, release: true, fields: fields})
}

// Requeue ends attempt of job id and makes the next attempt: the job goes
// back to queued (through the pending set, to be routed and placed again)
// with attempt+1. reason says why (exit code, worker shutdown).
func (s *Store) Requeue(ctx context.Context, id string, attempt int, reason, errMsg string) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return s.transition(ctx, id, attempt, move{from: attemptEnds, to: jobtype.StateQueued,
		change:  jobtype.StateChange{To: jobtype.StateQueued, Reason: reason, Error: errMsg},
		release: true, requeue: true, score: requeueScore(j), fields: []any{"error", errMsg}})
}

// attemptEnds are the states an attempt ends from (Finish, Requeue), in the
// order a conflict names them.
var attemptEnds = []jobtype.State{jobtype.StateRunning, jobtype.StateProvisioning, jobtype.StateDispatched}

// move is one run of transitionScript: the change it may make
// (jobtype.Transitions) and what it writes with it.
type move struct {
	// from are the states the job may be in (at the caller's attempt).
	from []jobtype.State
	to   jobtype.State
	// change is the state event; From "" stands for the state found.
	change jobtype.StateChange
	// release frees the node reservation; requeue makes the next attempt
	// (attempt+1, into the pending set with score), or ends the job
	// cancelled when a cancel was asked, unless clearCancel clears the
	// request first (retry).
	release, requeue, clearCancel bool
	score                         string
	// fields are field/value pairs set on the record.
	fields []any
}

// flags is m's flags argument for transitionScript.
func (m move) flags() string {
	var f []string
	if m.release {
		f = append(f, flagRelease)
	}
	if m.requeue {
		f = append(f, flagRequeue)
	}
	if m.clearCancel {
		f = append(f, flagClearCancel)
	}
	return strings.Join(f, ",")
}

// requeueScore is the pending score j goes back into the pending set with.
func requeueScore(j *jobtype.Job) string {
	return strconv.FormatFloat(PendingScore(j.Spec.Priority, j.CreatedAt), 'f', 0, 64)
}

func (s *Store) transition(ctx context.Context, id string, attempt int, m move) error {
	names := make([]string, len(m.from))
	for i, f := range m.from {
		names[i] = string(f)
	}
	// The script puts the state it found in place of fromPlaceholder.
	ch := m.change
	if ch.From == "" {
		ch.From = fromPlaceholder
	}
	score := m.score
	if score == "" {
		score = "0"
	}
	args := []any{strings.Join(names, ","), attempt, string(m.to), ms(s.now()), s.cfg.EventsMaxLen, mustJSON(ch), m.flags(), score}
	args = append(args, m.fields...)
	r, err := s.run(ctx, "transition", id, transitionScript, args...)
	if err != nil {
		return err
	}
	if r.code != codeDone {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("%s needs %s at attempt %d", m.to, strings.Join(names, "|"), attempt)}
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
	if r.code != codeDone {
		return r.state, &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: "cancel needs a job that has not ended"}
	}
	return r.state, nil
}

// CancelDispatched cancels a dispatched attempt whose task the caller has
// removed from its queue before any worker took it (so nobody else owns it).
func (s *Store) CancelDispatched(ctx context.Context, id string, attempt int) error {
	return s.transition(ctx, id, attempt, move{from: []jobtype.State{jobtype.StateDispatched}, to: jobtype.StateCancelled,
		change:  jobtype.StateChange{From: jobtype.StateDispatched, To: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled},
		release: true, fields: []any{"reason", jobtype.ReasonCancelled, "finished_at", ms(s.now())}})
}

// Renew extends the lease of attempt of job id, held by incarnation, to
// now + lease. It returns whether a cancel was asked, and a *ConflictError
// when the attempt is no longer running under this incarnation (the caller
// lost it and must stop its trainer).
func (s *Store) Renew(ctx context.Context, id string, attempt int, incarnation string, lease time.Duration) (cancelRequested bool, err error) {
	r, err := s.run(ctx, "renew", id, renewScript, attempt, incarnation, ms(s.now()), lease.Milliseconds())
	if err != nil {
		return false, err
	}
	if r.code == codePreemptAsked {
		return false, fmt.Errorf("jobstore: renew %s: %w", id, ErrPreemptRequested)
	}
	if r.code != codeDone {
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
	score := requeueScore(j)
	r, err := s.run(ctx, "preempt", id, preemptScript, attempt, ms(s.now()), s.cfg.EventsMaxLen, forJob, score, fenceArg(fence))
	if err != nil {
		return err
	}
	switch r.code {
	case codeDone:
		return nil
	case codeFenced:
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
	return s.transition(ctx, id, attempt, move{from: []jobtype.State{jobtype.StateRunning}, to: jobtype.StateQueued,
		change:  jobtype.StateChange{To: jobtype.StateQueued, Reason: jobtype.ReasonPreempted, Error: "preempted for " + forJob},
		release: true, requeue: true, score: requeueScore(j), fields: []any{"preempt_requested", "", "preemptions", j.Preemptions + 1}})
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
	score := requeueScore(j)
	r, err := s.run(ctx, "reap", id, reapScript, attempt, ms(s.now()), s.cfg.EventsMaxLen, data, score, grace.Milliseconds(), fenceArg(fence))
	if err != nil {
		return err
	}
	if r.code == codeFenced {
		return fmt.Errorf("jobstore: reap %s: %w", id, ErrFenced)
	}
	if r.code != codeDone {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("reap needs running attempt %d with an expired lease", attempt)}
	}
	return nil
}

// ReasonWorkerRestarted is the reason of an attempt ended by ReleaseDead.
const ReasonWorkerRestarted = "worker restarted"

// ReleaseDeadParams names an attempt whose worker incarnation died, for
// ReleaseDead.
type ReleaseDeadParams struct {
	ID      string
	Attempt int
	// Node is the node it runs on.
	Node string
	// Dead is the dead incarnation ("": any but Live).
	Dead string
	// Live is the caller, the node's new incarnation.
	Live string
}

// ReleaseDead ends attempt p.Attempt of job p.ID, running on p.Node under a
// worker incarnation that is dead, and queues the next attempt (resuming
// from the checkpoint), at once instead of when the lease expires: the
// caller is the node's new incarnation p.Live, which has killed the dead
// one's trainer groups and seen them gone. As with the reaper, a job whose
// cancel was asked ends cancelled instead; like the reaper's, the new
// attempt counts towards max_attempts (only preemptions do not). It returns
// a *ConflictError when the attempt is not running there under such an
// incarnation (already reaped, ended, or held by p.Live).
func (s *Store) ReleaseDead(ctx context.Context, p ReleaseDeadParams) error {
	id, attempt, node := p.ID, p.Attempt, p.Node
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	data := mustJSON(jobtype.StateChange{From: jobtype.StateRunning, To: jobtype.StateQueued, Reason: ReasonWorkerRestarted,
		Error: fmt.Sprintf("attempt %d: its worker died; the worker restarted on %s killed the trainer; resuming from the last checkpoint", attempt, node)})
	r, err := s.run(ctx, "release dead attempt", id, releaseDeadScript, attempt, node, p.Dead, p.Live, ms(s.now()), s.cfg.EventsMaxLen, data, requeueScore(j))
	if err != nil {
		return err
	}
	if r.code != codeDone {
		return &ConflictError{ID: id, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("release needs running attempt %d on %s of a dead incarnation", attempt, node)}
	}
	return nil
}

// Retry makes a new attempt of a failed or cancelled job: it goes back to
// queued (attempt+1, through the pending set, routed and placed again) with
// its cancel request, reason and error cleared. The checkpoint folder is
// kept, so the new attempt resumes where the last one stopped. A sweep's
// trial is refused (ErrTrialRetry): its sweep holds its budget and its
// place, and re-entering them is not built.
func (s *Store) Retry(ctx context.Context, id string) (*jobtype.Job, error) {
	j, err := s.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.Trial != nil {
		return nil, fmt.Errorf("jobstore: retry %s: trial of sweep %s: %w", id, j.Trial.SweepID, ErrTrialRetry)
	}
	if j.State != jobtype.StateFailed && j.State != jobtype.StateCancelled {
		return nil, &ConflictError{ID: id, State: j.State, Attempt: j.Attempt, Want: "retry needs a failed or cancelled job"}
	}
	err = s.transition(ctx, id, j.Attempt, move{from: []jobtype.State{jobtype.StateFailed, jobtype.StateCancelled}, to: jobtype.StateQueued,
		change:  jobtype.StateChange{To: jobtype.StateQueued, Reason: "retry"},
		requeue: true, clearCancel: true, score: requeueScore(j), fields: []any{"reason", "", "error", "", "finished_at", ""}})
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
