package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/poolstate"
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

// TestReadRoutingIsTheSeparateReads: ReadRouting's one pipeline reads what
// PoolPressureOf, Spends, StepTimes and Nodes read one call each: with
// nothing stored (no pressure, no spend, no node), and with each stored.
func TestReadRoutingIsTheSeparateReads(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	q := jobstore.RoutingQuery{Pool: "local", Month: "2026-12", Scopes: []string{"backend:local", "team:ml"}, Nodes: true}
	same := func(when string) {
		t.Helper()
		got, err := s.ReadRouting(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		p, err1 := s.PoolPressureOf(ctx, q.Pool)
		sp, err2 := s.Spends(ctx, q.Month, q.Scopes)
		st, err3 := s.StepTimes(ctx)
		nodes, err4 := s.Nodes(ctx)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
		want := jobstore.RoutingReads{Nodes: nodes, Pressure: p, Spends: sp, StepTimes: st}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: ReadRouting %+v, the separate reads %+v", when, got, want)
		}
		q2 := q
		q2.Nodes = false
		if got, err := s.ReadRouting(ctx, q2); err != nil || got.Nodes != nil {
			t.Fatalf("%s, without nodes: %+v %v", when, got.Nodes, err)
		}
	}
	same("nothing stored")
	if err := s.Heartbeat(ctx, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 2,
		GPUs: []jobtype.GPU{{Index: 0, UUID: "G0"}}}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPoolPressure(ctx, "local", jobstore.PoolPressure{HealthyGPUs: 1, RunningGPUHours: 2.5}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordStepTime(ctx, "tiny-char", "H100", 0.25); err != nil {
		t.Fatal(err)
	}
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("r", jobspec.PriorityNormal), Team: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve(ctx, j.ID, q.Month, 3, []jobstore.BudgetScope{{Scope: "backend:local"}, {Scope: "team:ml", Limit: 10}}); err != nil {
		t.Fatal(err)
	}
	same("each stored")
	if got, _ := s.ReadRouting(ctx, q); len(got.Nodes) != 1 || got.Pressure.HealthyGPUs != 1 || got.Spends["team:ml"].ReservedUSD != 3 || len(got.StepTimes) != 1 {
		t.Fatalf("read %+v: want the node, the pressure, the reservation and the step time stored", got)
	}
}

// TestStartRatiosKept: the store keeps the newest start ratios,
// poolstate.StartRatiosKept of them, and ReadRouting returns them sorted;
// a ratio that is none (NaN, infinite, negative) is refused, naming it.
func TestStartRatiosKept(t *testing.T) {
	srv := redistest.Start(t)
	s := jobstore.New(srv.Client(), jobstore.Config{})
	ctx := context.Background()
	n := poolstate.StartRatiosKept + 10
	for i := range n {
		if err := s.RecordStartRatio(ctx, float64(n-i)); err != nil { // newest smallest
			t.Fatal(err)
		}
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), -1} {
		if err := s.RecordStartRatio(ctx, bad); err == nil || !strings.Contains(err.Error(), fmt.Sprint(bad)) {
			t.Errorf("ratio %v: %v; want refused, naming it", bad, err)
		}
	}
	got, err := s.ReadRouting(ctx, jobstore.RoutingQuery{Pool: "local", Month: "2026-12"})
	if err != nil {
		t.Fatal(err)
	}
	r := got.StartRatios
	if len(r) != poolstate.StartRatiosKept || !slices.IsSorted(r) || r[0] != 1 || r[len(r)-1] != float64(poolstate.StartRatiosKept) {
		t.Fatalf("%d ratios from %v to %v, sorted %v; want the newest %d, 1 to %d, sorted", len(r), r[0], r[len(r)-1], slices.IsSorted(r),
			poolstate.StartRatiosKept, poolstate.StartRatiosKept)
	}
}
