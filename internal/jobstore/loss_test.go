package jobstore_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestLossSeriesFollowsProgress: the loss series the append script keeps
// (against a real redis-server) is AddLossPoint applied to every progress
// update recorded, in order, over a long run with restarts from earlier
// steps; it stays within LossSeriesMax points, its steps increase, and
// Delete removes it.
func TestLossSeriesFollowsProgress(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("loss", jobspec.PriorityNormal)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var want []jobtype.LossPoint
	step := 0
	for i := range 3000 {
		switch {
		case i == 1700:
			step = 0 // a restart from scratch
		case i%700 == 650:
			step -= 1 + rng.IntN(40) // resumed from an older checkpoint
		default:
			step += 1 + rng.IntN(5)
		}
		step = max(step, 1)
		p := jobtype.Progress{Step: step, TotalSteps: 9000, Loss: 3/float64(1+step) + rng.Float64()/7}
		want = jobstore.AddLossPoint(want, p.Step, p.Loss)
		// Progress batched as the worker's sink does, with a log line between.
		evs := []jobstore.EventIn{jobstore.EventIn{Type: jobtype.EventProgress, Data: json.RawMessage(`{}`)}.WithProgress(p),
			{Type: jobtype.EventLog, Data: json.RawMessage(`{"line":"x"}`)}}
		if _, err := s.Append(ctx, j.ID, 1, evs); err != nil {
			t.Fatal(err)
		}
		if i%97 != 0 && i != 2999 {
			continue
		}
		got, err := s.LossSeries(ctx, []string{j.ID, "j-none"})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["j-none"]; ok || len(got[j.ID]) > jobstore.LossSeriesMax || fmt.Sprint(got[j.ID]) != fmt.Sprint(want) {
			t.Fatalf("after update %d (step %d): store has %d points %v,\nwant %d %v", i, step, len(got[j.ID]), got[j.ID], len(want), want)
		}
		for k := 1; k < len(want); k++ {
			if want[k].Step() <= want[k-1].Step() {
				t.Fatalf("steps do not increase: %v", want)
			}
		}
	}
	if len(want) < jobstore.LossSeriesMax/2 {
		t.Fatalf("a long run kept only %d points", len(want))
	}
	if err := s.Finish(ctx, j.ID, 1, jobstore.Ending{State: jobtype.StateSucceeded, Reason: "exit"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.LossSeries(ctx, []string{j.ID}); len(got[j.ID]) != len(want) {
		t.Fatalf("a finished job keeps its series: %v", got)
	}
	if err := s.Delete(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.LossSeries(ctx, []string{j.ID}); len(got) != 0 {
		t.Fatalf("Delete left the loss series: %v", got)
	}
}

// TestAddLossPointSpacing: a run of evenly spaced updates keeps evenly
// spaced points from its first step to near its last.
func TestAddLossPointSpacing(t *testing.T) {
	var s []jobtype.LossPoint
	for step := 10; step <= 10000; step += 10 {
		s = jobstore.AddLossPoint(s, step, 1/float64(step))
	}
	if len(s) < jobstore.LossSeriesMax/2 || len(s) > jobstore.LossSeriesMax || s[0].Step() != 10 || s[len(s)-1].Step() < 10000-640 {
		t.Fatalf("series of 1000 updates: %v", s)
	}
	gap := s[1].Step() - s[0].Step()
	for i := 1; i < len(s); i++ {
		if s[i].Step()-s[i-1].Step() != gap || s[i].Loss() != 1/float64(s[i].Step()) {
			t.Fatalf("uneven at %d: %v", i, s)
		}
	}
}
