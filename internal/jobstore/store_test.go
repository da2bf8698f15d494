package jobstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

type testBundle struct {
	store *jobstore.Store
	ctx   context.Context
}

// setup starts a real redis-server (internal/redistest) for the test.
func setup(t *testing.T) testBundle {
	t.Helper()
	srv := redistest.Start(t)
	return testBundle{store: jobstore.New(srv.Client(), jobstore.Config{}), ctx: context.Background()}
}

func spec(name string, p jobspec.Priority) *jobspec.Spec {
	return &jobspec.Spec{Name: name, BaseModel: "tiny-char", Dataset: "file:///d/train.jsonl",
		Priority: p, Trainer: "reference", LoRA: jobspec.LoRA{Rank: 4, Alpha: 8}, Training: jobspec.Training{Epochs: 1, LearningRate: 1e-3, BatchSize: 4}}
}

func TestLifecycle(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	j, existed, err := s.Create(ctx, jobstore.NewJob{Spec: spec("a", jobspec.PriorityNormal), OutputURI: "file:///out/{id}"})
	if err != nil || existed {
		t.Fatalf("create: %v existed=%v", err, existed)
	}
	if j.State != jobtype.StateQueued || j.Attempt != 1 || j.OutputURI != "file:///out/"+j.ID {
		t.Fatalf("created job: %+v", j)
	}
	// Claim before dispatch is stale.
	if out, err := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "inc1", Lease: time.Minute}); err != nil || out != jobstore.ClaimStale {
		t.Fatalf("early claim: %v %v", out, err)
	}
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1}); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	// A second dispatch loses.
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 5}); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("second dispatch: %v", err)
	}
	// The node is full now.
	j2, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("b", jobspec.PriorityNormal)})
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j2.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1}); !errors.Is(err, jobstore.ErrNodeFull) {
		t.Fatalf("dispatch on full node: %v", err)
	}
	if out, _ := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "other", Incarnation: "inc1", Lease: time.Minute}); out != jobstore.ClaimStale {
		t.Fatalf("claim by the wrong node: %v", out)
	}
	if out, err := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "inc1", Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	if out, _ := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "inc1", Lease: time.Minute}); out != jobstore.ClaimStale {
		t.Fatalf("second claim: %v", out)
	}
	prog := jobtype.Progress{Step: 3, TotalSteps: 10, Loss: 2.5}
	pb, _ := json.Marshal(prog)
	if c, err := s.Append(ctx, j.ID, 1, []jobstore.EventIn{{Type: "progress", Data: pb, Field: "progress", Value: string(pb)}, {Type: "log", Data: json.RawMessage(`{"line":"hi"}`)}}); err != nil || c {
		t.Fatalf("append: %v %v", c, err)
	}
	if _, err := s.Append(ctx, j.ID, 2, nil); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("stale append: %v", err)
	}
	if err := s.Requeue(ctx, j.ID, 1, "exit", "exit status 1"); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	got, _ := s.Get(ctx, j.ID)
	if got.State != jobtype.StateQueued || got.Attempt != 2 || got.Node != "" {
		t.Fatalf("after requeue: %+v", got)
	}
	// The slot was released: j2 fits now, and j (same priority, older) is first in line.
	ids, _ := s.Pending(ctx, 10)
	if len(ids) != 2 || ids[0] != j.ID {
		t.Fatalf("pending order: %v (want %s first)", ids, j.ID)
	}
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 2, Node: "n1", Backend: "local", Capacity: 1}); err != nil {
		t.Fatalf("dispatch 2: %v", err)
	}
	if out, _ := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 2, Node: "n1", Incarnation: "inc1", Lease: time.Minute}); out != jobstore.Claimed {
		t.Fatalf("claim 2: %v", out)
	}
	if err := s.Finish(ctx, j.ID, 2, jobstore.Ending{State: jobtype.StateSucceeded, Metrics: map[string]float64{"eval_loss": 1.5},
		Artifacts: []jobtype.Artifact{{Path: "a.safetensors", Bytes: 3, SHA256: "x"}}}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	got, _ = s.Get(ctx, j.ID)
	if got.State != jobtype.StateSucceeded || got.Metrics["eval_loss"] != 1.5 || len(got.Artifacts) != 1 || got.Progress.Step != 3 || got.FinishedAt == nil {
		t.Fatalf("after finish: %+v", got)
	}
	if _, err := s.Cancel(ctx, j.ID); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("cancel after success: %v", err)
	}
	evs, err := s.Events(ctx, j.ID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, e := range evs {
		if e.Type == "state" {
			var sc jobtype.StateChange
			_ = json.Unmarshal(e.Data, &sc)
			states = append(states, string(sc.To))
		}
	}
	want := "queued dispatched running queued dispatched running succeeded"
	if got := join(states); got != want {
		t.Fatalf("state events %q, want %q", got, want)
	}
	counts, _ := s.CountByState(ctx)
	if counts[jobtype.StateSucceeded] != 1 || counts[jobtype.StateQueued] != 1 {
		t.Fatalf("counts: %v", counts)
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}

func TestIdempotencyAndPriority(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	a, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("batch", jobspec.PriorityBatch), IdempotencyKey: "k1"})
	again, existed, err := s.Create(ctx, jobstore.NewJob{Spec: spec("batch", jobspec.PriorityBatch), IdempotencyKey: "k1"})
	if err != nil || !existed || again.ID != a.ID {
		t.Fatalf("idempotent create: %v %v %v", again, existed, err)
	}
	u, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("urgent", jobspec.PriorityUrgent)})
	n, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("normal", jobspec.PriorityNormal)})
	ids, _ := s.Pending(ctx, 10)
	if len(ids) != 3 || ids[0] != u.ID || ids[1] != n.ID || ids[2] != a.ID {
		t.Fatalf("pending order %v, want urgent, normal, batch", ids)
	}
	// Pagination, newest first.
	page1, next, err := s.List(ctx, "", "", 2)
	if err != nil || len(page1) != 2 || next == "" || page1[0].ID != n.ID {
		t.Fatalf("page1: %v %q %v", page1, next, err)
	}
	page2, next2, _ := s.List(ctx, "", next, 2)
	if len(page2) != 1 || page2[0].ID != a.ID || next2 != "" {
		t.Fatalf("page2: %v %q", page2, next2)
	}
}

func TestCancelStates(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	q, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("q", jobspec.PriorityNormal)})
	if req, err := s.CancelRequested(ctx, q.ID); err != nil || req {
		t.Fatalf("fresh job: cancel requested %v, %v", req, err)
	}
	if st, err := s.Cancel(ctx, q.ID); err != nil || st != jobtype.StateCancelled {
		t.Fatalf("cancel queued: %v %v", st, err)
	}
	if ids, _ := s.Pending(ctx, 10); len(ids) != 0 {
		t.Fatalf("cancelled job still pending: %v", ids)
	}
	d, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("d", jobspec.PriorityNormal)})
	_ = s.Dispatch(ctx, jobstore.DispatchParams{JobID: d.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 4})
	if st, err := s.Cancel(ctx, d.ID); err != nil || st != jobtype.StateDispatched {
		t.Fatalf("cancel dispatched: %v %v", st, err)
	}
	if out, _ := s.Claim(ctx, jobstore.ClaimParams{ID: d.ID, Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); out != jobstore.ClaimCancelled {
		t.Fatalf("claim after cancel: %v", out)
	}
	got, _ := s.Get(ctx, d.ID)
	if got.State != jobtype.StateCancelled {
		t.Fatalf("state %s", got.State)
	}
	nodes, _ := s.Nodes(ctx)
	_ = nodes
	if _, err := s.Get(ctx, "j-00000000000000zz"); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
}

// TestLeaseRenewReap drives the store's clock by hand: a lease is renewed
// only by its incarnation, and reaped only once it ended more than the grace.
func TestLeaseRenewReap(t *testing.T) {
	srv := redistest.Start(t)
	now := time.UnixMilli(1_800_000_000_000)
	s := jobstore.New(srv.Client(), jobstore.Config{Now: func() time.Time { return now }})
	ctx := context.Background()
	j, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("l", jobspec.PriorityNormal)})
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 2}); err != nil {
		t.Fatal(err)
	}
	if out, _ := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "inc1", Lease: 30 * time.Second}); out != jobstore.Claimed {
		t.Fatal("claim")
	}
	if _, err := s.Renew(ctx, j.ID, 1, "other-incarnation", 30*time.Second); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("renew by another incarnation: %v", err)
	}
	now = now.Add(20 * time.Second)
	if _, err := s.Renew(ctx, j.ID, 1, "inc1", 30*time.Second); err != nil {
		t.Fatalf("renew: %v", err)
	}
	leases, _ := s.RunningLeases(ctx, 10)
	if len(leases) != 1 || !leases[0].Until.Equal(now.Add(30*time.Second)) {
		t.Fatalf("leases %+v", leases)
	}
	now = now.Add(32 * time.Second) // 2 s past the lease: inside a 5 s grace
	if err := s.Reap(ctx, j.ID, 1, 5*time.Second); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("reap inside the grace: %v", err)
	}
	now = now.Add(4 * time.Second)
	if err := s.Reap(ctx, j.ID, 1, 5*time.Second); err != nil {
		t.Fatalf("reap: %v", err)
	}
	got, _ := s.Get(ctx, j.ID)
	if got.State != jobtype.StateQueued || got.Attempt != 2 {
		t.Fatalf("after reap: %s attempt %d", got.State, got.Attempt)
	}
	if ids, _ := s.Pending(ctx, 10); len(ids) != 1 || ids[0] != j.ID {
		t.Fatalf("pending %v", ids)
	}
	if _, err := s.Renew(ctx, j.ID, 1, "inc1", 30*time.Second); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("the reaped attempt renewed: %v", err)
	}
	if n, _ := s.Nodes(ctx); len(n) != 0 {
		t.Fatalf("nodes %v", n)
	}
}

// TestCancelWhileWorkerGone: a cancel asked while the attempt's worker is
// gone ends the job when the reaper (or a requeue) comes, instead of
// queueing a new attempt that could never be placed.
func TestCancelWhileWorkerGone(t *testing.T) {
	srv := redistest.Start(t)
	now := time.UnixMilli(1_800_000_000_000)
	s := jobstore.New(srv.Client(), jobstore.Config{Now: func() time.Time { return now }})
	ctx := context.Background()
	for _, path := range []string{"reap", "requeue"} {
		j, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("w", jobspec.PriorityNormal)})
		_ = s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 9})
		_, _ = s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "inc", Lease: 30 * time.Second})
		if st, err := s.Cancel(ctx, j.ID); err != nil || st != jobtype.StateRunning {
			t.Fatalf("%s: cancel: %s %v", path, st, err)
		}
		if path == "reap" {
			now = now.Add(time.Minute)
			if err := s.Reap(ctx, j.ID, 1, time.Second); err != nil {
				t.Fatal(err)
			}
		} else if err := s.Requeue(ctx, j.ID, 1, "worker shutdown", ""); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Get(ctx, j.ID)
		if got.State != jobtype.StateCancelled || got.Attempt != 1 {
			t.Fatalf("%s: %s attempt %d, want cancelled at attempt 1", path, got.State, got.Attempt)
		}
		if ids, _ := s.Pending(ctx, 10); len(ids) != 0 {
			t.Fatalf("%s: pending %v", path, ids)
		}
		// retry still works on it: a new attempt, cancel request cleared.
		if r, err := s.Retry(ctx, j.ID); err != nil || r.State != jobtype.StateQueued || r.Attempt != 2 || r.CancelRequested {
			t.Fatalf("%s: retry: %+v %v", path, r, err)
		}
		_, _ = s.Cancel(ctx, j.ID)
	}
}

// TestPruneFinished keeps the newest finished jobs up to the cap, drops
// those past the age limit, and never touches unfinished ones.
func TestPruneFinished(t *testing.T) {
	srv := redistest.Start(t)
	now := time.UnixMilli(1_800_000_000_000)
	s := jobstore.New(srv.Client(), jobstore.Config{Now: func() time.Time { return now }})
	ctx := context.Background()
	var ids []string
	for i := 0; i < 6; i++ {
		now = now.Add(time.Hour)
		j, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("p", jobspec.PriorityNormal)})
		ids = append(ids, j.ID)
		if i < 5 {
			_, _ = s.Cancel(ctx, j.ID) // finished
		}
	}
	if err := s.Delete(ctx, ids[5]); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("delete of a queued job: %v", err)
	}
	n, err := s.PruneFinished(ctx, 3, time.Time{}, 100)
	if err != nil || n != 2 {
		t.Fatalf("prune to 3: %d %v", n, err)
	}
	for i, id := range ids {
		_, err := s.Get(ctx, id)
		if gone := errors.Is(err, jobstore.ErrNotFound); gone != (i < 2) {
			t.Fatalf("job %d: gone=%v", i, gone)
		}
	}
	if evs, _ := s.Events(ctx, ids[0], "", 10); len(evs) != 0 {
		t.Fatalf("events of a pruned job remain: %d", len(evs))
	}
	// Age: jobs created before the 4th hour go; the queued one stays.
	n, _ = s.PruneFinished(ctx, 0, time.UnixMilli(1_800_000_000_000).Add(4*time.Hour+time.Minute), 100)
	if n != 2 {
		t.Fatalf("prune by age: %d", n)
	}
	if j, err := s.Get(ctx, ids[5]); err != nil || j.State != jobtype.StateQueued {
		t.Fatalf("the unfinished job: %v %v", j, err)
	}
	if all, _, _ := s.List(ctx, "", "", 100); len(all) != 2 {
		t.Fatalf("listed %d jobs, want 2", len(all))
	}
}

// TestNodesForgetsExpiredHeartbeats: a node whose heartbeat expired leaves
// the nodes set; its next heartbeat puts it back.
func TestNodesForgetsExpiredHeartbeats(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := jobstore.New(c, jobstore.Config{})
	ctx := context.Background()
	n := jobstore.Node{Name: "gone", Incarnation: "i", Backend: "local", Slots: 1}
	if err := s.Heartbeat(ctx, n, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, "lathe:node:gone") // as if its TTL ran out
	if ns, _ := s.Nodes(ctx); len(ns) != 0 {
		t.Fatalf("nodes %v", ns)
	}
	if m, _ := c.SIsMember(ctx, "lathe:nodes", "gone").Result(); m {
		t.Fatal("an expired node stays in the nodes set")
	}
	_ = s.Heartbeat(ctx, n, jobstore.HeartbeatOptions{TTL: time.Minute})
	if ns, _ := s.Nodes(ctx); len(ns) != 1 {
		t.Fatalf("after a new heartbeat: %v", ns)
	}
}
