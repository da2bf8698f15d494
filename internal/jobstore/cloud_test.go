package jobstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestCloudAttempt: a cloud attempt is claimed to provisioning (no
// started_at), renewed and annotated there, adopted only from the
// incarnation that held it, started, preempted without counting as a
// failure, and its instance cost is added once per attempt.
func TestCloudAttempt(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	node := jobtype.CloudNode("aws-eu")
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("c", jobspec.PriorityNormal)})
	if err != nil {
		t.Fatal(err)
	}
	// max_instances 1: a second job finds the backend full.
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: node, Backend: "aws-eu", Capacity: 1}); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	j2, _, _ := s.Create(ctx, jobstore.NewJob{Spec: spec("d", jobspec.PriorityNormal)})
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j2.ID, Attempt: 1, Node: node, Backend: "aws-eu", Capacity: 1}); !errors.Is(err, jobstore.ErrNodeFull) {
		t.Fatalf("dispatch past max_instances: %v", err)
	}
	if out, err := s.ClaimCloud(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: node, Incarnation: "inc1", Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	got, _ := s.Get(ctx, j.ID)
	if got.State != jobtype.StateProvisioning || got.StartedAt != nil || got.Incarnation != "inc1" || got.LeaseUntil == nil {
		t.Fatalf("after claim: %+v", got)
	}
	if _, err := s.Renew(ctx, j.ID, 1, "inc1", time.Minute); err != nil {
		t.Fatalf("renew while provisioning: %v", err)
	}
	if err := s.RecordInstance(ctx, j.ID, 1, &jobtype.Instance{ID: "i-1", Attempt: 1, Type: "g5.xlarge", Market: "spot",
		LaunchTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), USDPerHour: 1}); err != nil {
		t.Fatalf("annotate while provisioning: %v", err)
	}
	if _, err := s.Append(ctx, j.ID, 1, []jobstore.EventIn{{Type: "cloud", Data: []byte(`{}`)}, jobstore.CloudEventsSeqUpdate(4)}); err != nil {
		t.Fatalf("append while provisioning: %v", err)
	}
	if v, _ := s.CloudEventsSeq(ctx, j.ID); v != 4 {
		t.Fatalf("field-only event: %d", v)
	}
	// Adopt: only from the holder the caller saw.
	if err := s.Adopt(ctx, jobstore.AdoptParams{ID: j.ID, Attempt: 1, Node: node, From: "someone-else", To: "inc2", Lease: time.Minute}); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("adopt from the wrong incarnation: %v", err)
	}
	if err := s.Adopt(ctx, jobstore.AdoptParams{ID: j.ID, Attempt: 1, Node: node, From: "inc1", To: "inc2", Lease: time.Minute}); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if _, err := s.Renew(ctx, j.ID, 1, "inc1", time.Minute); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("the old incarnation still renews: %v", err)
	}
	at := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	if err := s.Started(ctx, j.ID, 1, at); err != nil {
		t.Fatalf("started: %v", err)
	}
	got, _ = s.Get(ctx, j.ID)
	if got.State != jobtype.StateRunning || got.StartedAt == nil || !got.StartedAt.Equal(at) || got.Instance == nil || got.Instance.ID != "i-1" {
		t.Fatalf("after started: %+v", got)
	}
	if atts, err := s.NodeAttempts(ctx, node, 100); err != nil || len(atts) != 1 || atts[0].ID != j.ID {
		t.Fatalf("node attempts: %v %v", atts, err)
	}
	for i, want := range []bool{true, false} {
		if added, err := s.AddAttemptCost(ctx, j.ID, 1, 0.25); err != nil || added != want {
			t.Fatalf("add cost #%d: added=%v err=%v", i+1, added, err)
		}
	}
	if err := s.CloudPreempted(ctx, j.ID, 1, "spot interruption"); err != nil {
		t.Fatalf("preempted: %v", err)
	}
	got, _ = s.Get(ctx, j.ID)
	if got.State != jobtype.StateQueued || got.Attempt != 2 || got.Preemptions != 1 || got.Node != "" || got.CostUSD != 0.25 {
		t.Fatalf("after spot preemption: %+v", got)
	}
	// The instance slot is free again.
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j2.ID, Attempt: 1, Node: node, Backend: "aws-eu", Capacity: 1}); err != nil {
		t.Fatalf("dispatch after the slot freed: %v", err)
	}
	if added, err := s.AddAttemptCost(ctx, j.ID, 2, 0.5); err != nil || !added {
		t.Fatalf("cost of attempt 2: %v %v", added, err)
	}
	if got, _ = s.Get(ctx, j.ID); got.CostUSD != 0.75 {
		t.Fatalf("cost over two attempts: %v", got.CostUSD)
	}
	if _, err := s.AddAttemptCost(ctx, "j-nosuchjob00000", 1, 1); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("cost of a missing job: %v", err)
	}
}
