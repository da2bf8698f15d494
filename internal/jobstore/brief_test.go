package jobstore_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/seedtest"
)

// TestGetManyBrief: a brief record is the full record with only the
// brief fields kept (of the spec its priority, of the route its backend,
// site and kind), for finished,
// running and queued jobs, in the order asked, a missing id left out.
func TestGetManyBrief(t *testing.T) {
	tb := setup(t)
	seeded, err := seedtest.Seed(tb.ctx, tb.store, seedtest.Cluster{Nodes: 2, GPUsPerNode: 4, Finished: 30, Running: 8, Queued: 12, Events: 6})
	if err != nil {
		t.Fatal(err)
	}
	ids := append(append(append([]string{}, seeded.Finished...), seeded.Running...), seeded.Queued...)
	ids = append(ids[:5:5], append([]string{"j-missing"}, ids[5:]...)...)
	full, err := tb.store.GetMany(tb.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	brief, err := tb.store.GetManyBrief(tb.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != len(ids)-1 || len(brief) != len(full) {
		t.Fatalf("%d ids (one missing): GetMany %d jobs, GetManyBrief %d", len(ids), len(full), len(brief))
	}
	for i, f := range full {
		want := jobtype.Job{ID: f.ID, Name: f.Name, State: f.State, Attempt: f.Attempt, Backend: f.Backend, Node: f.Node,
			GPUs: f.GPUs, Progress: f.Progress, Submitter: f.Submitter, Team: f.Team, CreatedAt: f.CreatedAt,
			UpdatedAt: f.UpdatedAt, StartedAt: f.StartedAt, Spec: jobspec.Spec{Priority: f.Spec.Priority},
			CostUSD: f.CostUSD, Instance: f.Instance, Metrics: map[string]float64{}, Artifacts: []jobtype.Artifact{}}
		if f.Route != nil {
			want.Route = &jobtype.RouteInfo{Backend: f.Route.Backend, Site: f.Route.Site, Kind: f.Route.Kind}
		}
		if f.Trial != nil {
			want.Trial = &jobtype.TrialInfo{SweepID: f.Trial.SweepID, Gate: f.Trial.Gate}
		}
		if !reflect.DeepEqual(*brief[i], want) {
			t.Errorf("job %d brief:\n%+v\nwant\n%+v", i, *brief[i], want)
		}
		if f.Spec.Priority == "" || f.Team == "" || f.Route == nil || (f.State == jobtype.StateSucceeded && f.CostUSD == 0) {
			t.Errorf("job %d: the seed left a brief field empty: %+v", i, f)
		}
	}
}

// TestStates: each job's state as its record has it, "" for an id gone,
// in the order asked.
func TestStates(t *testing.T) {
	tb := setup(t)
	seeded, err := seedtest.Seed(tb.ctx, tb.store, seedtest.Cluster{Nodes: 1, GPUsPerNode: 2, Finished: 3, Running: 2, Queued: 2})
	if err != nil {
		t.Fatal(err)
	}
	ids := append(append(append([]string{}, seeded.Queued...), "j-missing"), append(seeded.Running, seeded.Finished...)...)
	got, err := tb.store.States(tb.ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) {
		t.Fatalf("%d states for %d ids", len(got), len(ids))
	}
	for i, id := range ids {
		var want jobtype.State
		if id != "j-missing" {
			j, err := tb.store.Get(tb.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			want = j.State
		}
		if got[i] != want {
			t.Errorf("%s: state %q, want %q", id, got[i], want)
		}
	}
	if got, err := tb.store.States(tb.ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("no ids: %v, %v", got, err)
	}
}

// BenchmarkGetMany2200 reads the records of 2,200 active jobs (200
// running, 2,000 queued, as the overview and /metrics do) whole
// (GetMany), brief (GetManyBrief) and whole through a JobCache that
// holds them all already, none changed (GetManyCached: what a placement
// round reads when nothing changed).
func BenchmarkGetMany2200(b *testing.B) {
	srv := redistest.Start(b)
	store := jobstore.New(srv.Client(), jobstore.Config{})
	ctx := context.Background()
	seeded, err := seedtest.Seed(ctx, store, seedtest.Cluster{Nodes: 25, GPUsPerNode: 8, Running: 200, Queued: 2000, Events: 20})
	if err != nil {
		b.Fatal(err)
	}
	ids := append(append([]string{}, seeded.Running...), seeded.Queued...)
	cache := &jobstore.JobCache{}
	cached := func(ctx context.Context, ids []string) ([]*jobtype.Job, error) {
		return store.GetManyCached(ctx, cache, ids)
	}
	if _, err := cached(ctx, ids); err != nil {
		b.Fatal(err)
	}

	for _, bc := range []struct {
		name string
		get  func(context.Context, []string) ([]*jobtype.Job, error)
	}{{"full", store.GetMany}, {"brief", store.GetManyBrief}, {"cached", cached}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				if jobs, err := bc.get(ctx, ids); err != nil || len(jobs) != len(ids) {
					b.Fatal(len(jobs), err)
				}
			}
		})
	}
}
