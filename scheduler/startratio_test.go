package scheduler

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// TestPlacerLearnsStarts: a job dispatched to the owned pool on its first
// attempt, routed there at submit with a wait estimate, leaves its wait
// over that estimate in the store for routing's odds (policy.StartRatio);
// a job whose route was decided again leaves none.
func TestPlacerLearnsStarts(t *testing.T) {
	store := jobstore.New(redistest.Start(t).Client(), jobstore.Config{})
	p := &placer{store: store, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	created := time.Now().Add(-20 * time.Minute)
	p.learnStart(ctx, &jobtype.Job{ID: "a", Attempt: 1, CreatedAt: created,
		Route: &jobtype.RouteInfo{Kind: routecfg.KindLocal, Path: "submit", EstWaitS: 600}})
	p.learnStart(ctx, &jobtype.Job{ID: "b", Attempt: 1, CreatedAt: created,
		Route: &jobtype.RouteInfo{Kind: routecfg.KindLocal, Path: "spill-over", EstWaitS: 600}})
	got, err := store.ReadRouting(ctx, jobstore.RoutingQuery{Pool: "local", Month: jobstore.Month(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.StartRatios) != 1 || got.StartRatios[0] < 2 || got.StartRatios[0] > 2.5 {
		t.Fatalf("start ratios %v; want one, about 2 (20 minutes against 10)", got.StartRatios)
	}
}
