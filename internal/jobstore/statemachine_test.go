package jobstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// storeOp is one store operation as the state machine test drives it, with
// arguments that match the job forceState leaves (attempt 1 on node n1,
// incarnation "dead", lease expired), so that only the job's state and its
// cancel and stop flags decide what the operation does.
type storeOp struct {
	op  jobtype.Op // "" for an operation that must not change the state
	run func(ctx context.Context, s *jobstore.Store, id string) error
}

// sweepOps are the trial operations, run on a trial of sweepID (forceState
// sets its sweep fields); storeOps run on plain jobs.
func sweepOps(sweepID string) map[string]storeOp {
	return map[string]storeOp{
		"pause": {jobtype.OpPause, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Pause(ctx, id, 1, 10, map[string]float64{"eval_loss": 1})
		}},
		"promote": {jobtype.OpPromote, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Promote(ctx, jobstore.PromoteParams{SweepID: sweepID, ID: id, Attempt: 1, Rung: 1, StopAtStep: 30})
		}},
		"stop": {jobtype.OpStop, func(ctx context.Context, s *jobstore.Store, id string) error {
			_, err := s.Stop(ctx, id, jobtype.ReasonNotPromoted, "not in the top third of rung 0")
			return err
		}},
		"cancel trial": {jobtype.OpCancel, func(ctx context.Context, s *jobstore.Store, id string) error {
			_, err := s.Cancel(ctx, id)
			return err
		}},
		"finish cancelled trial": {jobtype.OpFinish, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Finish(ctx, id, 1, jobstore.Ending{State: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled})
		}},
	}
}

func storeOps() map[string]storeOp {
	lease := time.Minute
	finish := func(st jobtype.State) storeOp {
		return storeOp{jobtype.OpFinish, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Finish(ctx, id, 1, jobstore.Ending{State: st, Reason: "test"})
		}}
	}
	return map[string]storeOp{
		"dispatch": {jobtype.OpDispatch, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Dispatch(ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1000})
		}},
		"claim": {jobtype.OpClaim, func(ctx context.Context, s *jobstore.Store, id string) error {
			_, err := s.Claim(ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "inc2", Lease: lease})
			return err
		}},
		"claim cloud": {jobtype.OpClaimCloud, func(ctx context.Context, s *jobstore.Store, id string) error {
			_, err := s.ClaimCloud(ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "inc2", Lease: lease})
			return err
		}},
		"started": {jobtype.OpStarted, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Started(ctx, id, 1, time.Now())
		}},
		"finish succeeded": finish(jobtype.StateSucceeded),
		"finish failed":    finish(jobtype.StateFailed),
		"finish cancelled": finish(jobtype.StateCancelled),
		"requeue": {jobtype.OpRequeue, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Requeue(ctx, id, 1, "exit", "boom")
		}},
		"cancel": {jobtype.OpCancel, func(ctx context.Context, s *jobstore.Store, id string) error {
			_, err := s.Cancel(ctx, id)
			return err
		}},
		"cancel dispatched": {jobtype.OpCancelDispatched, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.CancelDispatched(ctx, id, 1)
		}},
		"request preempt": {jobtype.OpRequestPreempt, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.RequestPreempt(ctx, id, 1, "j-urgent")
		}},
		"preempted": {jobtype.OpPreempted, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Preempted(ctx, id, 1, "j-urgent")
		}},
		"cloud preempted": {jobtype.OpCloudPreempted, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.CloudPreempted(ctx, id, 1, "spot interruption")
		}},
		"reap": {jobtype.OpReap, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Reap(ctx, id, 1, 0)
		}},
		"release dead": {jobtype.OpReleaseDead, func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.ReleaseDead(ctx, jobstore.ReleaseDeadParams{ID: id, Attempt: 1, Node: "n1", Dead: "dead", Live: "live"})
		}},
		"retry": {jobtype.OpRetry, func(ctx context.Context, s *jobstore.Store, id string) error {
			_, err := s.Retry(ctx, id)
			return err
		}},
		// Writes that must leave the state as it is.
		"append": {"", func(ctx context.Context, s *jobstore.Store, id string) error {
			_, err := s.Append(ctx, id, 1, []jobstore.EventIn{{Type: jobtype.EventLog, Data: json.RawMessage(`{}`)}})
			return err
		}},
		"renew": {"", func(ctx context.Context, s *jobstore.Store, id string) error {
			_, err := s.Renew(ctx, id, 1, "dead", lease)
			return err
		}},
		"adopt": {"", func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.Adopt(ctx, jobstore.AdoptParams{ID: id, Attempt: 1, Node: "n1", From: "dead", To: "inc2", Lease: lease})
		}},
		"set route": {"", func(ctx context.Context, s *jobstore.Store, id string) error {
			return s.SetRoute(ctx, id, &jobtype.RouteInfo{Backend: "local", Attempt: 1}, "")
		}},
	}
}

// asked is what forceState leaves asked of a job: nothing, a cancel, or a
// stop by its sweep (which also sets cancel_requested, as Stop does).
type asked int

const (
	askedNone asked = iota
	askedCancel
	askedStop
)

func (a asked) String() string { return [...]string{"none", "cancel", "stop"}[a] }

// forceState creates a job and rewrites its record and indexes into state
// st at attempt 1 on node n1 (incarnation "dead", lease expired), with the
// cancel flag (and the stop) asked as a says, as a trial of sweepID when it
// is set (a paused one is in the sweep's paused set): a job as the scripts
// could have left it, reached without going through them.
func forceState(t *testing.T, b testBundle, st jobtype.State, a asked, sweepID string) string {
	t.Helper()
	j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec("sm", jobspec.PriorityBatch), OutputURI: "file:///out/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	rdb, p := b.store.Redis(), b.store.Prefix()
	flag, stop := "0", ""
	if a != askedNone {
		flag = "1"
	}
	if a == askedStop {
		stop = jobtype.ReasonMedianStopping
	}
	pipe := rdb.TxPipeline()
	pipe.HSet(b.ctx, p+"job:"+j.ID, "state", string(st), "node", "n1", "backend", "local", "incarnation", "dead",
		"lease_until", 1, "cancel_requested", flag, "stop_requested", stop, "stop_message", "worse than the median")
	if sweepID != "" {
		pipe.HSet(b.ctx, p+"job:"+j.ID, "sweep_id", sweepID, "trial_index", 0, "params", "[]", "rung", 0)
		if st == jobtype.StatePaused {
			pipe.SAdd(b.ctx, p+"sweep:"+sweepID+":paused", j.ID)
		}
	}
	pipe.ZRem(b.ctx, p+"state:queued", j.ID)
	pipe.ZAdd(b.ctx, p+"state:"+string(st), redis.Z{Member: j.ID})
	if st != jobtype.StateQueued {
		pipe.ZRem(b.ctx, p+"pending", j.ID)
	}
	if _, err := pipe.Exec(b.ctx); err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// smSweep creates the sweep the state machine test's trials name: one
// trial, no budgets.
func smSweep(t *testing.T, b testBundle) string {
	t.Helper()
	id := jobstore.NewSweepID(time.Now())
	ns := jobstore.NewSweep{Sweep: jobtype.Sweep{ID: id, Name: "sm", Search: "asha", MaxParallel: 1},
		Trials: []jobstore.NewTrial{{Job: jobstore.NewJob{ID: jobstore.TrialID(id, 0), Spec: spec("sm-0", jobspec.PriorityBatch)}}}}
	if _, _, err := b.store.CreateSweep(b.ctx, nil, ns); err != nil {
		t.Fatal(err)
	}
	return id
}

// lastStateChange is the StateChange of the job's last state event.
func lastStateChange(t *testing.T, b testBundle, id string) jobtype.StateChange {
	t.Helper()
	evs, err := b.store.Events(b.ctx, id, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ch jobtype.StateChange
	for _, e := range evs {
		if e.Type == jobtype.EventState {
			ch = jobtype.StateChange{}
			if err := json.Unmarshal(e.Data, &ch); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ch
}

// TestScriptsObeyTransitions drives every store operation that writes a
// job from every state, with nothing asked, a cancel asked or a stop asked
// by the job's sweep, against a real redis-server, and checks that each
// state change a script makes is a row of jobtype.Transitions (with its
// condition, and a state event that says the same), that a stop asked
// never ends a job cancelled (only a user's cancel does), and that every
// row is made by some operation. The trial operations run on trials of a
// sweep made by CreateSweep.
func TestScriptsObeyTransitions(t *testing.T) {
	b := setup(t)
	type row struct {
		op       jobtype.Op
		from, to jobtype.State
	}
	reached := map[row]bool{}
	j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec("new", jobspec.PriorityNormal)})
	if err != nil || j.State != jobtype.StateQueued {
		t.Fatalf("create: %v, %v", j, err)
	}
	if ch := lastStateChange(t, b, j.ID); ch.From != "" || ch.To != jobtype.StateQueued {
		t.Fatalf("create's event: %+v", ch)
	}
	reached[row{jobtype.OpCreate, "", jobtype.StateQueued}] = true

	when := map[row]string{}
	for _, tr := range jobtype.Transitions {
		when[row{tr.Op, tr.From, tr.To}] = tr.When
	}
	sw := smSweep(t, b)
	ops, trials := storeOps(), sweepOps(sw)
	for name, o := range trials {
		ops[name] = o
	}
	for name, o := range ops {
		_, trial := trials[name]
		for _, st := range jobtype.States {
			for _, a := range []asked{askedNone, askedCancel, askedStop} {
				t.Run(fmt.Sprintf("%s/%s/asked=%v", name, st, a), func(t *testing.T) {
					trialOf := ""
					if trial {
						trialOf = sw
					}
					id := forceState(t, b, st, a, trialOf)
					_ = o.run(b.ctx, b.store, id) // conflicts are expected; the state says what happened
					got, err := b.store.Get(b.ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if got.State == st {
						return
					}
					r := row{o.op, st, got.State}
					w, ok := when[r]
					if o.op == "" || !ok {
						t.Fatalf("%s moved a job %s → %s: not in jobtype.Transitions", name, st, got.State)
					}
					if (w == jobtype.WhenCancelAsked && a != askedCancel) || (w == jobtype.WhenNoCancel && a != askedNone) ||
						(w == jobtype.WhenStopAsked && a != askedStop) {
						t.Fatalf("%s moved a job %s → %s with %v asked; the table says only when %s", name, st, got.State, a, w)
					}
					if a == askedStop && got.State == jobtype.StateCancelled && o.op != jobtype.OpCancel {
						t.Fatalf("%s moved a job %s → cancelled while a stop was asked; it must end stopped", name, st)
					}
					if ch := lastStateChange(t, b, id); ch.From != st || ch.To != got.State {
						t.Fatalf("%s moved a job %s → %s, its event says %s → %s", name, st, got.State, ch.From, ch.To)
					}
					reached[r] = true
				})
			}
		}
	}
	for _, tr := range jobtype.Transitions {
		if !reached[row{tr.Op, tr.From, tr.To}] {
			t.Errorf("row %s: %q → %s (%s) is made by no operation", tr.Op, tr.From, tr.To, tr.When)
		}
	}
}
