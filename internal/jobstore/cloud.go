package jobstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// The store side of cloud attempts (issue #6). A cloud attempt is claimed
// dispatched → provisioning by its backend's AWS worker before any instance
// is launched (the attempt record in Redis that a launch needs), becomes
// running when the agent on the instance reports its first event, and ends
// through Finish, Requeue or CloudPreempted like a local attempt. Its lease
// says which worker process watches it; a cloud attempt whose lease expired
// is not reaped (its instance may be running fine): the backend's next
// worker adopts it (Adopt), and the leader's reconciler terminates
// instances whose attempt is no longer live.

// ClaimCloud takes attempt p.Attempt of job p.ID for the cloud node p.Node
// (CloudNode of its backend): dispatched → provisioning with a lease held by
// p.Incarnation, or → cancelled when a cancel was asked. Nothing has been
// launched yet.
func (s *Store) ClaimCloud(ctx context.Context, p ClaimParams) (ClaimOutcome, error) {
	return s.claim(ctx, p, jobtype.StateProvisioning)
}

// AdoptParams names the attempt Adopt hands over, and to whom.
type AdoptParams struct {
	ID      string
	Attempt int
	Node    string
	// From is the incarnation the caller saw holding it (a worker process
	// that is gone); To takes it, with a lease until now + Lease.
	From, To string
	Lease    time.Duration
}

// Adopt moves the lease of a provisioning or running attempt on p.Node from
// incarnation p.From to p.To. It returns a *ConflictError when the attempt,
// its node or its incarnation changed since the caller read them.
func (s *Store) Adopt(ctx context.Context, p AdoptParams) error {
	r, err := s.run(ctx, "adopt", p.ID, adoptScript, p.Attempt, p.Node, p.From, p.To, ms(s.now()), p.Lease.Milliseconds())
	if err != nil {
		return err
	}
	if r.code != codeDone {
		return &ConflictError{ID: p.ID, State: r.state, Attempt: r.attempt, Want: fmt.Sprintf("adopt needs attempt %d on %s held by %q", p.Attempt, p.Node, p.From)}
	}
	return nil
}

// Started moves a provisioning attempt to running (its trainer started on
// the instance) and sets started_at.
func (s *Store) Started(ctx context.Context, id string, attempt int, at time.Time) error {
	return s.transition(ctx, id, attempt, move{from: []jobtype.State{jobtype.StateProvisioning}, to: jobtype.StateRunning,
		change: jobtype.StateChange{From: jobtype.StateProvisioning, To: jobtype.StateRunning}, fields: []any{"started_at", ms(at)}})
}

// CloudPreempted ends a provisioning or running cloud attempt that the
// cloud took back (a spot interruption: its checkpoint is in S3): the job
// goes back to queued as the next attempt, routed again and resuming from
// the checkpoint, with reason "preempted". Like a local preemption it is not
// a failure (Preemptions counts it).
func (s *Store) CloudPreempted(ctx context.Context, id string, attempt int, why string) error {
	j, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return s.transition(ctx, id, attempt, move{from: []jobtype.State{jobtype.StateRunning, jobtype.StateProvisioning}, to: jobtype.StateQueued,
		change:  jobtype.StateChange{To: jobtype.StateQueued, Reason: jobtype.ReasonPreempted, Error: why},
		release: true, requeue: true, score: requeueScore(j), fields: []any{"error", why, "preemptions", j.Preemptions + 1}})
}

// AddAttemptCost adds usd, the cost of attempt's cloud instance (its time ×
// price, known when the instance ended), to the job's cost, once per
// attempt: a worker that adopts the attempt and records it again adds
// nothing. It reports whether this call added it. The leader's budget
// settlement counts the job's cost.
func (s *Store) AddAttemptCost(ctx context.Context, id string, attempt int, usd float64) (bool, error) {
	if !(usd >= 0) {
		usd = 0
	}
	n, err := addCostScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, id, attempt, strconv.FormatFloat(usd, 'f', 6, 64)).Int()
	if err != nil {
		return false, fmt.Errorf("jobstore: add cost of %s attempt %d: %w", id, attempt, err)
	}
	if n < 0 {
		return false, fmt.Errorf("jobstore: add cost of %s attempt %d: %w", id, attempt, ErrNotFound)
	}
	return n == 1, nil
}

var addCostScript = redis.NewScript(`
local jk = ARGV[1] .. 'job:' .. ARGV[2]
if redis.call('EXISTS', jk) == 0 then return -1 end
if redis.call('HSETNX', jk, 'cost_attempt_' .. ARGV[3], ARGV[4]) == 0 then return 0 end
redis.call('HINCRBYFLOAT', jk, 'cost_usd', ARGV[4])
redis.call('HINCRBYFLOAT', jk, 'cloud_cost_usd', ARGV[4])
return 1
`)

// NodeAttempts returns the jobs whose current attempt is provisioning or
// running on node (at most n of each state).
func (s *Store) NodeAttempts(ctx context.Context, node string, n int) ([]*jobtype.Job, error) {
	var ids []string
	for _, st := range []jobtype.State{jobtype.StateProvisioning, jobtype.StateRunning} {
		got, err := s.IDsInState(ctx, st, n)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	jobs, err := s.GetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := jobs[:0]
	for _, j := range jobs {
		if j != nil && j.Node == node && (j.State == jobtype.StateProvisioning || j.State == jobtype.StateRunning) {
			out = append(out, j)
		}
	}
	return out, nil
}
