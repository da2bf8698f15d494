package jobstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestSetRouteNeedsTheQueuedAttempt: a routing decision is for one queued
// attempt. A job dispatched since it was read, or a route decided for
// another attempt, is refused with a ConflictError and keeps its route.
func TestSetRouteNeedsTheQueuedAttempt(t *testing.T) {
	srv := redistest.Start(t)
	s := jobstore.New(srv.Client(), jobstore.Config{})
	ctx := context.Background()
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("r", jobspec.PriorityNormal)})
	if err != nil {
		t.Fatal(err)
	}
	var ce *jobstore.ConflictError
	if err := s.SetRoute(ctx, j.ID, &jobtype.RouteInfo{Backend: "aws-eu", Attempt: 2}, ""); !errors.As(err, &ce) {
		t.Fatalf("route for attempt 2 of a job at attempt 1: %v, want a ConflictError", err)
	}
	if err := s.SetRoute(ctx, j.ID, &jobtype.RouteInfo{Backend: "local", Attempt: 1}, ""); err != nil {
		t.Fatalf("route for its queued attempt: %v", err)
	}
	if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRoute(ctx, j.ID, &jobtype.RouteInfo{Backend: "aws-eu", Attempt: 1}, ""); !errors.As(err, &ce) || ce.State != jobtype.StateDispatched {
		t.Fatalf("route for a dispatched job: %v, want a ConflictError naming dispatched", err)
	}
	if got, _ := s.Get(ctx, j.ID); got.Route == nil || got.Route.Backend != "local" {
		t.Fatalf("the dispatched job's route changed: %+v", got.Route)
	}
}
