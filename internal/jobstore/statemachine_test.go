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
// cancel flag decide what the operation does.
type storeOp struct {
	op  jobtype.Op // "" for an operation that must not change the state
	run func(ctx context.Context, s *jobstore.Store, id string) error
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

// forceState creates a job and rewrites its record and indexes into state
// st at attempt 1 on node n1 (incarnation "dead", lease expired), with the
// cancel flag set when cancel is true: a job as the scripts could have left
// it, reached without going through them.
func forceState(t *testing.T, b testBundle, st jobtype.State, cancel bool) string {
	t.Helper()
	j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec("sm", jobspec.PriorityBatch), OutputURI: "file:///out/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	rdb, p := b.store.Redis(), b.store.Prefix()
	flag := "0"
	if cancel {
		flag = "1"
	}
	pipe := rdb.TxPipeline()
	pipe.HSet(b.ctx, p+"job:"+j.ID, "state", string(st), "node", "n1", "backend", "local", "incarnation", "dead",
		"lease_until", 1, "cancel_requested", flag)
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
// job from every state, with and without a cancel request, against a real
// redis-server, and checks that each state change a script makes is a row
// of jobtype.Transitions (with its cancel condition, and a state event that
// says the same), and that every row is made by some operation.
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
	for name, o := range storeOps() {
		for _, st := range jobtype.States {
			for _, cancel := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/cancel=%v", name, st, cancel), func(t *testing.T) {
					id := forceState(t, b, st, cancel)
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
					if (w == jobtype.WhenCancelAsked && !cancel) || (w == jobtype.WhenNoCancel && cancel) {
						t.Fatalf("%s moved a job %s → %s with cancel=%v; the table says only when %s", name, st, got.State, cancel, w)
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
