package jobstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestCreateWaitsForReplica: with MinReplicas 1 against a real primary and
// a real replica (redistest, --replicaof), a created job is on the replica
// when Create returns (WAIT sent after the script on its connection);
// the same after the script cache was flushed (the NOSCRIPT path a new
// primary takes); and with the replica killed, Create fails with
// ErrNotReplicated, which Unreachable reports (the API's "outcome
// unknown"), while the job is on the primary: it may or may not last.
func TestCreateWaitsForReplica(t *testing.T) {
	ctx := context.Background()
	primary := redistest.StartWith(t, redistest.Options{AOF: true})
	replica := redistest.StartWith(t, redistest.Options{AOF: true, ReplicaOf: primary.Addr})
	primary.WaitReplicas(1)
	pc := primary.Client()
	s := jobstore.New(pc, jobstore.Config{MinReplicas: 1})
	onReplica := jobstore.New(replica.Client(), jobstore.Config{})
	for _, flush := range []bool{false, true} {
		if flush {
			if err := pc.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("r", jobspec.PriorityNormal), IdempotencyKey: "k-" + map[bool]string{false: "a", true: "b"}[flush]})
		if err != nil {
			t.Fatalf("create (script cache flushed: %v): %v", flush, err)
		}
		// Read at once, no waiting: WAIT promised the replica has it.
		if got, err := onReplica.Get(ctx, j.ID); err != nil || got.ID != j.ID {
			t.Fatalf("job %s not on the replica when Create returned: %v", j.ID, err)
		}
	}

	replica.Kill()
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("lone", jobspec.PriorityNormal), IdempotencyKey: "k-lone"})
	if !errors.Is(err, jobstore.ErrNotReplicated) || !jobstore.Unreachable(err) {
		t.Fatalf("create with no replica: job %v, err %v; want ErrNotReplicated, unreachable", j, err)
	}
	// Sent again with its key, as the client does after a 503: the job the
	// first call stored on the primary, not a second one.
	noWait := jobstore.New(pc, jobstore.Config{})
	again, existed, err := noWait.Create(ctx, jobstore.NewJob{Spec: spec("lone", jobspec.PriorityNormal), IdempotencyKey: "k-lone"})
	if err != nil || !existed {
		t.Fatalf("resend: existed=%v err=%v", existed, err)
	}
	n, err := noWait.PendingCount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("%d jobs pending, want 3 (the resend %s stored nothing new)", n, again.ID)
	}
}
