package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/backends/aws"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler"
)

// fakeCloud is a fake of a cloud backend's EC2 side (scheduler.CloudInstances):
// a list of instances, a switch to make listing fail, and the ids it was
// asked to terminate. The real one is tested against moto in
// cmd/lathed/aws_e2e_test.go.
type fakeCloud struct {
	mu         sync.Mutex
	insts      []aws.Instance
	failList   bool
	terminated []string
}

func (f *fakeCloud) FindManaged(context.Context) ([]aws.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failList {
		return nil, errors.New("RequestLimitExceeded")
	}
	var out []aws.Instance
	for _, in := range f.insts {
		if !in.Gone() {
			out = append(out, in)
		}
	}
	return out, nil
}

func (f *fakeCloud) Terminate(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.terminated = append(f.terminated, id)
	for i := range f.insts {
		if f.insts[i].ID == id {
			f.insts[i].State = "terminated"
		}
	}
	return nil
}

func (f *fakeCloud) terminatedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.terminated...)
}

func instance(id, job string, attempt int, age time.Duration, tags ...string) aws.Instance {
	t := map[string]string{aws.TagManaged: "true", aws.TagCluster: "c", aws.TagBackend: "aws-eu", aws.TagJobID: job,
		aws.TagAttempt: string(rune('0' + attempt))}
	for i := 0; i+1 < len(tags); i += 2 {
		t[tags[i]] = tags[i+1]
	}
	return aws.Instance{ID: id, State: "running", LaunchTime: time.Now().Add(-age), Tags: t}
}

// TestReconciler: the leader terminates instances without a live attempt
// (no such job, an ended job, another attempt, a cancel asked, a bad tag),
// keeps the live attempt's and a young one's, terminates nothing while
// listing fails, and ends a cancelled attempt no worker holds.
func TestReconciler(t *testing.T) {
	cloud := &fakeCloud{failList: true}
	b := setup(t, scheduler.Config{Clouds: map[string]scheduler.CloudInstances{"aws-eu": cloud},
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
	cloud.insts = []aws.Instance{
		instance("i-live", live.ID, 1, time.Hour),
		instance("i-stale-attempt", live.ID, 2, time.Hour),
		instance("i-ended", ended.ID, 1, time.Hour),
		instance("i-cancelled", cancelled.ID, 1, time.Hour),
		instance("i-nojob", "j-00000000000000", 1, time.Hour),
		instance("i-badtag", live.ID, 1, time.Hour, aws.TagAttempt, "x"),
		instance("i-young", "j-00000000000001", 1, time.Second),
		instance("i-otherbackend", live.ID, 1, time.Hour, aws.TagBackend, "aws-us"),
	}
	if err := b.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.s.Stop(ctx)
	for deadline := time.Now().Add(5 * time.Second); b.s.ReconcileStats().Failures < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reconciler did not run")
		}
	}
	if got := cloud.terminatedIDs(); len(got) != 0 {
		t.Fatalf("terminated %v while listing failed", got)
	}
	cloud.mu.Lock()
	cloud.failList = false
	cloud.mu.Unlock()
	want := map[string]bool{"i-stale-attempt": true, "i-ended": true, "i-cancelled": true, "i-nojob": true, "i-badtag": true}
	for deadline := time.Now().Add(5 * time.Second); len(cloud.terminatedIDs()) < len(want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("terminated %v, want %v", cloud.terminatedIDs(), want)
		}
	}
	time.Sleep(200 * time.Millisecond) // a few more passes: nothing else goes
	got := cloud.terminatedIDs()
	seen := map[string]bool{}
	for _, id := range got {
		if !want[id] || seen[id] {
			t.Fatalf("terminated %v, want each of %v once", got, want)
		}
		seen[id] = true
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		j, _ := s.Get(ctx, cancelled.ID)
		if j.State == jobtype.StateCancelled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled attempt was not ended: %s", j.State)
		}
	}
	if j, _ := s.Get(ctx, live.ID); j.State != jobtype.StateProvisioning {
		t.Fatalf("the live job changed: %s", j.State)
	}
	if st := b.s.ReconcileStats(); st.Terminated != int64(len(want)) || st.Cancelled != 1 {
		t.Fatalf("stats %+v", st)
	}
}
