package jobstore_test

import (
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
)

// TestCreateMany: one call stores every job in order, each pending with its
// own id; a key repeated inside one batch is one job; the limit is enforced
// before anything is written.
func TestCreateMany(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	njs := []jobstore.NewJob{
		{Spec: spec("a", jobspec.PriorityBatch), IdempotencyKey: "k1"},
		{Spec: spec("b", jobspec.PriorityUrgent)},
		{Spec: spec("a", jobspec.PriorityBatch), IdempotencyKey: "k1"},
	}
	res, err := s.CreateMany(ctx, njs)
	if err != nil || len(res) != 3 {
		t.Fatalf("create many: %v (%d results)", err, len(res))
	}
	if res[0].Existed || res[1].Existed || !res[2].Existed || res[2].Job.ID != res[0].Job.ID || res[2].Job.Name != "a" {
		t.Fatalf("same key twice in one batch: %+v %+v", res[0], res[2])
	}
	if res[0].Job.ID == res[1].Job.ID {
		t.Fatal("two jobs share an id")
	}
	// Pending order is priority first: b (urgent) before a (batch).
	ids, _ := s.Redis().ZRange(ctx, s.Prefix()+"pending", 0, -1).Result()
	if strings.Join(ids, ",") != res[1].Job.ID+","+res[0].Job.ID {
		t.Fatalf("pending = %v", ids)
	}
	for _, r := range res[:2] {
		if got, err := s.Get(ctx, r.Job.ID); err != nil || got.Name != r.Job.Name || got.State != "queued" {
			t.Fatalf("get %s: %+v %v", r.Job.ID, got, err)
		}
	}
	over := make([]jobstore.NewJob, jobstore.MaxCreateBatch+1)
	for i := range over {
		over[i] = jobstore.NewJob{Spec: spec("x", jobspec.PriorityNormal)}
	}
	if _, err := s.CreateMany(ctx, over); err == nil {
		t.Fatal("a batch over the limit was accepted")
	}
	if n, _ := s.Redis().ZCard(ctx, s.Prefix()+"jobs").Result(); n != 2 {
		t.Fatalf("%d jobs stored, want 2", n)
	}
}
