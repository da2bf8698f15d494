package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/cloud"
	"github.com/lathe-ml/lathe/internal/cloud/cloudfake"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler"
)

// instance is a running managed instance of backend aws-eu for a job
// attempt, launched age ago, changed by mod.
func instance(id, job string, attempt int, age time.Duration, mod ...func(*cloud.Instance)) cloud.Instance {
	in := cloud.Instance{ID: id, Backend: "aws-eu", JobID: job, Attempt: attempt, Managed: true,
		State: cloud.StateRunning, LaunchTime: time.Now().Add(-age)}
	for _, m := range mod {
		m(&in)
	}
	return in
}

// TestReconciler runs against cloudfake, an in-memory fake of a cloud
// backend that passes the seam's conformance suite (as backends/aws does
// on moto; the real one runs in cmd/lathed/aws_e2e_test.go): the leader terminates instances without a live attempt
// (no such job, an ended job, another attempt, a cancel asked, a bad tag),
// keeps the live attempt's and a young one's, terminates nothing while
// listing fails, and ends a cancelled attempt no worker holds.
func TestReconciler(t *testing.T) {
	fake := cloudfake.New("aws-eu")
	fake.FailFind(cloudfake.ErrThrottled)
	b := setup(t, scheduler.Config{Clouds: map[string]scheduler.CloudInstances{"aws-eu": fake},
		ReconcileEvery: 50 * time.Millisecond, ReconcileGrace: time.Minute, ReapGrace: time.Millisecond})
	ctx, s := b.ctx, b.store
	node := jobtype.CloudNode("aws-eu")
	mk := func(name string) *jobtype.Job {
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: name, BaseModel: "tiny-char", Dataset: "file:///d/t.jsonl",
			Priority: jobspec.PriorityNormal, Trainer: "reference"}})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	running := func(j *jobtype.Job, lease time.Duration) {
		if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: j.Attempt, Node: node, Backend: "aws-eu", Capacity: 100}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimCloud(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: j.Attempt, Node: node, Incarnation: "inc", Lease: lease}); err != nil {
			t.Fatal(err)
		}
	}
	live, ended, cancelled, young := mk("live"), mk("ended"), mk("cancelled"), mk("young")
	running(live, time.Hour)
	running(ended, time.Hour)
	if err := s.Finish(ctx, ended.ID, 1, jobstore.Ending{State: jobtype.StateFailed, Reason: "exit"}); err != nil {
		t.Fatal(err)
	}
	running(cancelled, time.Millisecond) // its worker is gone
	if _, err := s.Cancel(ctx, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	running(young, time.Hour)
	fake.Put(
		instance("i-live", live.ID, 1, time.Hour),
		instance("i-stale-attempt", live.ID, 2, time.Hour),
		instance("i-ended", ended.ID, 1, time.Hour),
		instance("i-cancelled", cancelled.ID, 1, time.Hour),
		instance("i-nojob", "j-00000000000000", 1, time.Hour),
		instance("i-badtag", "", 0, time.Hour), // a bad attempt tag names no attempt
		instance("i-young", "j-00000000000001", 1, time.Second),
		instance("i-otherbackend", live.ID, 1, time.Hour, func(in *cloud.Instance) { in.Backend = "aws-us" }),
	)
	if err := b.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.s.Stop(ctx)
	waitfor.True(t, 5*time.Second, "two failed reconciler passes", func() bool { return b.s.ReconcileStats().Failures >= 2 })
	if got := fake.Terminated(); len(got) != 0 {
		t.Fatalf("terminated %v while listing failed", got)
	}
	fake.FailFind(nil)
	want := map[string]bool{"i-stale-attempt": true, "i-ended": true, "i-cancelled": true, "i-nojob": true, "i-badtag": true}
	waitfor.Value(t, 5*time.Second, fmt.Sprintf("the orphans %v terminated", want), fake.Terminated,
		func(got []string) bool { return len(got) >= len(want) })
	// A few more passes: nothing else goes.
	passes := b.s.ReconcileStats().Passes
	waitfor.True(t, 5*time.Second, "three more reconciler passes", func() bool { return b.s.ReconcileStats().Passes >= passes+3 })
	got := fake.Terminated()
	seen := map[string]bool{}
	for _, id := range got {
		if !want[id] || seen[id] {
			t.Fatalf("terminated %v, want each of %v once", got, want)
		}
		seen[id] = true
	}
	waitfor.Value(t, 5*time.Second, "the cancelled attempt ended", func() jobtype.State {
		j, _ := s.Get(ctx, cancelled.ID)
		return j.State
	}, func(st jobtype.State) bool { return st == jobtype.StateCancelled })
	if j, _ := s.Get(ctx, live.ID); j.State != jobtype.StateProvisioning {
		t.Fatalf("the live job changed: %s", j.State)
	}
	if st := b.s.ReconcileStats(); st.Terminated != int64(len(want)) || st.Cancelled != 1 {
		t.Fatalf("stats %+v", st)
	}
}
