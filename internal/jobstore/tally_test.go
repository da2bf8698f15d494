package jobstore_test

import (
	"reflect"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/seedtest"
)

// TestGetTallies: a job's tally, read off its own small fields, is what
// its brief record says (jobstore.TallyOf): for seeded finished, running
// and queued jobs, a job with no route and no priority, a sweep's trials
// (admitted and gated), a job whose route was changed since (SetRoute),
// and a record stored before the tally's fields existed (read brief); in
// the order asked, a missing id left out.
func TestGetTallies(t *testing.T) {
	tb := setup(t)
	ctx, s := tb.ctx, tb.store
	seeded, err := seedtest.Seed(ctx, s, seedtest.Cluster{Nodes: 2, GPUsPerNode: 4, Finished: 10, Running: 4, Queued: 12, Events: 2})
	if err != nil {
		t.Fatal(err)
	}
	bare, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("bare", ""), OutputURI: "file:///out/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	rerouted, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("rerouted", jobspec.PriorityUrgent), Team: "ml", OutputURI: "file:///out/{id}",
		Route: &jobtype.RouteInfo{Backend: "local", Site: "dc", Kind: "local", Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetRoute(ctx, rerouted.ID, &jobtype.RouteInfo{Backend: "aws-eu", Site: "aws-eu-central-1", Kind: "aws",
		Attempt: 1, Reasons: []string{`a "quoted" reason`}}, ""); err != nil {
		t.Fatal(err)
	}
	old, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("old", jobspec.PriorityBatch), OutputURI: "file:///out/{id}",
		Route: &jobtype.RouteInfo{Backend: "aws-eu", Kind: "aws", Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Redis().HDel(ctx, s.Prefix()+"job:"+old.ID, "priority", "route_kind", "route_backend").Err(); err != nil {
		t.Fatal(err)
	}
	sw, _, err := s.CreateSweep(ctx, testLedger(s), sweepOf(3, func(sw *jobtype.Sweep) { sw.MaxParallel = 1 }))
	if err != nil {
		t.Fatal(err)
	}
	ids := append(append(append([]string{}, seeded.Finished...), seeded.Running...), seeded.Queued...)
	ids = append(ids, bare.ID, rerouted.ID, "j-missing", old.ID)
	for i := range 3 {
		ids = append(ids, jobstore.TrialID(sw.ID, i))
	}
	got, err := s.GetTallies(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	brief, err := s.GetManyBrief(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids)-1 || len(brief) != len(got) {
		t.Fatalf("%d ids (one missing): %d tallies, %d brief records", len(ids), len(got), len(brief))
	}
	// The old record is read brief after the others: compare by id.
	byID := map[string]jobstore.Tally{}
	for _, tl := range got {
		byID[tl.ID] = tl
	}
	gated := 0
	for _, j := range brief {
		want := jobstore.TallyOf(j)
		if !reflect.DeepEqual(byID[j.ID], want) {
			t.Errorf("job %s (%s): tally\n%+v\nwant (brief)\n%+v", j.ID, j.Name, byID[j.ID], want)
		}
		if want.Gate != "" {
			gated++
		}
	}
	if r := byID[rerouted.ID]; r.RouteKind != "aws" || r.RouteBackend != "aws-eu" || r.Priority != jobspec.PriorityUrgent {
		t.Errorf("rerouted: %+v, want the new route's kind and backend", r)
	}
	if o := byID[old.ID]; o.Priority != jobspec.PriorityBatch || o.RouteKind != "aws" || got[len(got)-1].ID != old.ID {
		t.Errorf("old record: %+v (last: %s), want it read brief, last", o, got[len(got)-1].ID)
	}
	if gated != 2 {
		t.Errorf("%d gated trials, want 2 (max_parallel 1 of 3)", gated)
	}
}
