package jobstore_test

import (
	"errors"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
)

// TestIdempotencyKeyConflict: a key sent again with another spec, or by
// another team, is refused (ErrIdempotencyConflict naming the key and the
// job it names) and nothing is stored; the same spec and team get the same
// job back.
func TestIdempotencyKeyConflict(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	a, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("a", jobspec.PriorityNormal), Team: "ml", IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	same, existed, err := s.Create(ctx, jobstore.NewJob{Spec: spec("a", jobspec.PriorityNormal), Team: "ml", IdempotencyKey: "k1"})
	if err != nil || !existed || same.ID != a.ID {
		t.Fatalf("same spec, same key: %+v existed=%v err=%v", same, existed, err)
	}
	for name, nj := range map[string]jobstore.NewJob{
		"another spec": {Spec: spec("b", jobspec.PriorityNormal), Team: "ml", IdempotencyKey: "k1"},
		"another team": {Spec: spec("a", jobspec.PriorityNormal), Team: "other", IdempotencyKey: "k1"},
	} {
		j, existed, err := s.Create(ctx, nj)
		var ce *jobstore.IdempotencyConflictError
		if !errors.Is(err, jobstore.ErrIdempotencyConflict) || !errors.As(err, &ce) || ce.Key != "k1" || ce.JobID != a.ID || j != nil || existed {
			t.Errorf("%s: job %+v existed=%v err=%v; want ErrIdempotencyConflict for k1 naming %s", name, j, existed, err, a.ID)
		}
	}
	// A batch with one conflicting job stores none of its jobs.
	_, err = s.CreateMany(ctx, []jobstore.NewJob{
		{Spec: spec("fresh", jobspec.PriorityNormal), IdempotencyKey: "k2"},
		{Spec: spec("b", jobspec.PriorityNormal), Team: "ml", IdempotencyKey: "k1"},
	})
	if !errors.Is(err, jobstore.ErrIdempotencyConflict) {
		t.Fatalf("batch with a conflict: %v", err)
	}
	if n, _ := s.Redis().ZCard(ctx, s.Prefix()+"jobs").Result(); n != 1 {
		t.Fatalf("%d jobs stored, want 1", n)
	}
	if n, _ := s.Redis().Exists(ctx, s.Prefix()+"idem:k2").Result(); n != 0 {
		t.Fatal("the refused batch left its other key behind")
	}
}

// TestIdempotencyKeyForgottenWithJob: deleting (pruning) a job deletes its
// key, so the key names a new job afterwards instead of a missing one; a
// key left naming a job that is gone (written before keys were deleted
// with their jobs) is forgotten too.
func TestIdempotencyKeyForgottenWithJob(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	a, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("a", jobspec.PriorityNormal), IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneFinished(ctx, 0, a.CreatedAt.Add(1e9), 10); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if n, _ := s.Redis().Exists(ctx, s.Prefix()+"idem:k1").Result(); n != 0 {
		t.Error("the pruned job's key is still there")
	}
	again, existed, err := s.Create(ctx, jobstore.NewJob{Spec: spec("a", jobspec.PriorityNormal), IdempotencyKey: "k1"})
	if err != nil || existed || again.ID == a.ID {
		t.Fatalf("create after prune: %+v existed=%v err=%v", again, existed, err)
	}

	// An old-style key naming a job that is gone.
	if err := s.Redis().Set(ctx, s.Prefix()+"idem:old", "j-0000000000000000", 0).Err(); err != nil {
		t.Fatal(err)
	}
	j, existed, err := s.Create(ctx, jobstore.NewJob{Spec: spec("c", jobspec.PriorityNormal), IdempotencyKey: "old"})
	if err != nil || existed || j == nil {
		t.Fatalf("create over a dangling key: %+v existed=%v err=%v", j, existed, err)
	}
	if got, err := s.Get(ctx, j.ID); err != nil || got.Name != "c" {
		t.Fatalf("get %s: %+v %v", j.ID, got, err)
	}
}
