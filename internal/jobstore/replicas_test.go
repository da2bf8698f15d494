package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestCreateWaitsForReplica: with MinReplicas 1 against a real primary and
// a real replica (redistest, --replicaof), a created job is on the replica
// when Create returns (WAIT sent after the script on its connection);
// the same after the script cache was flushed (the NOSCRIPT path a new
// primary takes), and for a sweep's trials (StoreTrials); and with the
// replica killed, StoreTrials and Create fail with
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

	// A sweep's chunk of trials waits the same way (with its ledger records).
	ns := sweepOf(3, nil)
	ns.Total = 3
	if _, _, err := s.StoreTrials(ctx, testLedger(s), ns, "filler"); err != nil {
		t.Fatalf("store trials: %v", err)
	}
	if got, err := onReplica.GetSweep(ctx, ns.Sweep.ID); err != nil || got.Stored != 3 {
		t.Fatalf("sweep %s not on the replica when StoreTrials returned: %+v %v", ns.Sweep.ID, got, err)
	}

	replica.Kill()
	ns2 := sweepOf(2, nil)
	ns2.Total = 2
	if _, _, err := s.StoreTrials(ctx, testLedger(s), ns2, "filler"); !errors.Is(err, jobstore.ErrNotReplicated) {
		t.Fatalf("store trials with no replica: %v, want ErrNotReplicated", err)
	}
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

// BenchmarkCreateReplicas: Create against a real primary with one real
// replica (redistest), with MinReplicas 0 (the create script alone) and 1
// (the script and WAIT 1 in one pipeline): one caller at a time (ns/op is
// a submit's store latency) and 16 at once (submits/s).
func BenchmarkCreateReplicas(b *testing.B) {
	primary := redistest.StartWith(b, redistest.Options{AOF: true})
	redistest.StartWith(b, redistest.Options{AOF: true, ReplicaOf: primary.Addr})
	primary.WaitReplicas(1)
	rdb := primary.Client()
	for _, n := range []int{0, 1} {
		s := jobstore.New(rdb, jobstore.Config{MinReplicas: n})
		ctx := context.Background()
		b.Run(fmt.Sprintf("min_replicas=%d/serial", n), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("bench", jobspec.PriorityNormal)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("min_replicas=%d/parallel16", n), func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("bench", jobspec.PriorityNormal)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
		})
	}
}
