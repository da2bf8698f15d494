package jobstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestEndStatsCountsEachEndingOnce: every way a job ends (finished
// succeeded or failed from running, cancelled while queued, cancelled
// through a requeue of a job asked to cancel, stopped for its budget) is
// counted once with its reason, backend and priority; its run time (by
// the store's clock) lands in its bucket; a second writer of an ending
// that lost, and a cancel of a job already cancelled, count nothing; a
// retried job that ends again is a second ending.
func TestEndStatsCountsEachEndingOnce(t *testing.T) {
	srv := redistest.Start(t)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC).UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()) }
	s := jobstore.New(srv.Client(), jobstore.Config{Now: now})
	ctx := context.Background()
	advance := func(d time.Duration) { clock.Add(d.Milliseconds()) }

	create := func(name string, p jobspec.Priority) string {
		t.Helper()
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec(name, p)})
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	run := func(id string, attempt int) {
		t.Helper()
		if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: id, Attempt: attempt, Node: "n1", Backend: "local", Capacity: 10}); err != nil {
			t.Fatal(err)
		}
		if out, err := s.Claim(ctx, jobstore.ClaimParams{ID: id, Attempt: attempt, Node: "n1", Incarnation: "i1", Lease: time.Hour}); out != jobstore.Claimed {
			t.Fatalf("claim %s: %v %v", id, out, err)
		}
	}

	ok := create("ok", jobspec.PriorityUrgent)
	run(ok, 1)
	advance(20 * time.Second) // bucket 2 (≤ 30 s)
	if err := s.Finish(ctx, ok, 1, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	// A stale second writer of the same ending loses and counts nothing.
	if err := s.Finish(ctx, ok, 1, jobstore.Ending{State: jobtype.StateFailed}); err == nil {
		t.Fatal("a second Finish of an ended attempt succeeded")
	}

	bad := create("bad", "")
	run(bad, 1)
	advance(5 * time.Second) // bucket 1 (≤ 10 s)
	if err := s.Finish(ctx, bad, 1, jobstore.Ending{State: jobtype.StateFailed, Reason: "exit", Error: "exit status 3"}); err != nil {
		t.Fatal(err)
	}

	waiting := create("waiting", jobspec.PriorityBatch)
	if _, err := s.Cancel(ctx, waiting); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, waiting); err != nil { // a cancelled job: DONE, nothing written
		t.Fatal(err)
	}

	asked := create("asked", jobspec.PriorityNormal)
	run(asked, 1)
	if _, err := s.Cancel(ctx, asked); err != nil {
		t.Fatal(err)
	}
	advance(time.Minute) // bucket 3 (≤ 90 s)
	if err := s.Requeue(ctx, asked, 1, "exit", "killed"); err != nil {
		t.Fatal(err)
	}

	broke := create("broke", jobspec.PriorityNormal)
	if _, err := s.Stop(ctx, broke, jobtype.ReasonBudget, "team out of money"); err != nil {
		t.Fatal(err)
	}

	// The failed job, retried, runs 100 s more and succeeds: a second
	// ending, its run time the two attempts' (105 s: bucket 4, ≤ 270 s).
	if _, err := s.Retry(ctx, bad); err != nil {
		t.Fatal(err)
	}
	run(bad, 2)
	advance(100 * time.Second)
	if err := s.Finish(ctx, bad, 2, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}

	st, err := s.EndStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[jobstore.EndKey]int64{
		{State: "succeeded", Reason: "", Backend: "local", Priority: "urgent"}:            1,
		{State: "failed", Reason: "exit", Backend: "local", Priority: "normal"}:           1,
		{State: "succeeded", Reason: "", Backend: "local", Priority: "normal"}:            1,
		{State: "cancelled", Reason: "cancelled", Backend: "", Priority: "batch"}:         1,
		{State: "cancelled", Reason: "cancelled", Backend: "local", Priority: "normal"}:   1,
		{State: "stopped", Reason: jobtype.ReasonBudget, Backend: "", Priority: "normal"}: 1,
	}
	if len(st.Finished) != len(want) {
		t.Errorf("finished series %v, want %v", st.Finished, want)
	}
	for k, n := range want {
		if st.Finished[k] != n {
			t.Errorf("finished %+v: %d, want %d (all: %v)", k, st.Finished[k], n, st.Finished)
		}
	}
	type hist struct {
		buckets map[int]uint64 // 1-based bucket → endings
		sum     time.Duration
	}
	wantD := map[jobstore.DurationKey]hist{
		{Backend: "local", State: "succeeded"}: {map[int]uint64{2: 1, 4: 1}, 125 * time.Second},
		{Backend: "local", State: "failed"}:    {map[int]uint64{1: 1}, 5 * time.Second},
		{Backend: "local", State: "cancelled"}: {map[int]uint64{3: 1}, time.Minute},
		{Backend: "", State: "cancelled"}:      {map[int]uint64{1: 1}, 0},
		{Backend: "", State: "stopped"}:        {map[int]uint64{1: 1}, 0},
	}
	if len(st.Durations) != len(wantD) {
		t.Errorf("duration series %v, want %d", st.Durations, len(wantD))
	}
	for k, w := range wantD {
		d := st.Durations[k]
		for i := range jobstore.DurationBuckets {
			if d.Buckets[i] != w.buckets[i+1] {
				t.Errorf("duration %+v bucket %d (≤ %v s): %d, want %d", k, i+1, jobstore.DurationBuckets[i], d.Buckets[i], w.buckets[i+1])
			}
		}
		if d.Inf != 0 || d.Sum != w.sum {
			t.Errorf("duration %+v: inf %d sum %v, want 0 and %v", k, d.Inf, d.Sum, w.sum)
		}
	}
}

// TestEndStatsRace: many writers racing to end the same jobs (Finish from
// two "workers", Cancel from the API) count each job's ending exactly once.
func TestEndStatsRace(t *testing.T) {
	b := setup(t)
	s, ctx := b.store, b.ctx
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("r", jobspec.PriorityNormal)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
		if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: n}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		for _, st := range []jobtype.State{jobtype.StateSucceeded, jobtype.StateFailed, jobtype.StateCancelled} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Finish(ctx, id, 1, jobstore.Ending{State: st, Reason: "r"})
			}()
		}
	}
	wg.Wait()
	st, err := s.EndStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, v := range st.Finished {
		total += v
	}
	if total != n {
		t.Fatalf("%d endings counted for %d jobs ended by racing writers: %v", total, n, st.Finished)
	}
}
