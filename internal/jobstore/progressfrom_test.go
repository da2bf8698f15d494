package jobstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestProgressFromIsTheAttemptsFirstLine: the record keeps the first
// progress line of the current attempt (its step and the line's time), not
// the latest; a new attempt's first line replaces the last attempt's.
func TestProgressFromIsTheAttemptsFirstLine(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("pace", jobspec.PriorityNormal)})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	line := func(attempt, step int, at time.Time) {
		t.Helper()
		ev := jobstore.EventIn{Type: jobtype.EventProgress, Time: at, Data: json.RawMessage(`{}`)}.
			WithProgress(jobtype.Progress{Step: step, TotalSteps: 100})
		if _, err := s.Append(ctx, j.ID, attempt, []jobstore.EventIn{ev}); err != nil {
			t.Fatal(err)
		}
	}
	mark := func() *jobtype.ProgressMark {
		t.Helper()
		got, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.ProgressFrom
	}
	run := func(attempt int) {
		t.Helper()
		if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: attempt, Node: "n1", Backend: "local", Capacity: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: attempt, Node: "n1", Incarnation: "i", Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	run(1)
	if m := mark(); m != nil {
		t.Fatalf("a mark before any progress line: %+v", m)
	}
	line(1, 3, t0)
	line(1, 9, t0.Add(time.Minute))
	line(1, 20, t0.Add(2*time.Minute))
	if m := mark(); m == nil || m.Attempt != 1 || m.Step != 3 || !m.At.Equal(t0) {
		t.Fatalf("attempt 1's mark: %+v, want step 3 at %s", m, t0)
	}
	if err := s.Requeue(ctx, j.ID, 1, "preempted", "test"); err != nil {
		t.Fatal(err)
	}
	run(2)
	line(2, 21, t0.Add(time.Hour))
	line(2, 30, t0.Add(time.Hour+time.Minute))
	if m := mark(); m == nil || m.Attempt != 2 || m.Step != 21 || !m.At.Equal(t0.Add(time.Hour)) {
		t.Fatalf("attempt 2's mark: %+v, want step 21 at %s", m, t0.Add(time.Hour))
	}
}
