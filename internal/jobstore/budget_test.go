package jobstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestBudgets: reservations are all-or-none against every scope's limit,
// concurrent reservations never overshoot a limit, and settling releases
// the reservation and counts the actual cost.
func TestBudgets(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	mk := func() string {
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("b", jobspec.PriorityNormal)})
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	scopes := []jobstore.BudgetScope{{Scope: "backend:aws-eu", Limit: 100}, {Scope: "team:ml", Limit: 1000}}
	// 20 jobs of $15 race for a $100 backend budget: exactly 6 win.
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, lost := 0, 0
	var ids []string
	for range 20 {
		ids = append(ids, mk())
	}
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Reserve(ctx, id, "2026-12", 15, scopes)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, jobstore.ErrOverBudget) && strings.Contains(err.Error(), "backend:aws-eu"):
				lost++
			default:
				t.Errorf("reserve: %v", err)
			}
		}()
	}
	wg.Wait()
	if won != 6 || lost != 14 {
		t.Fatalf("won %d, lost %d; want 6 and 14", won, lost)
	}
	sp, err := s.Spends(ctx, "2026-12", []string{"backend:aws-eu", "team:ml"})
	if err != nil || sp["backend:aws-eu"].ReservedUSD != 90 || sp["team:ml"].ReservedUSD != 90 {
		t.Fatalf("spends %+v %v", sp, err)
	}
	// The team limit refuses too, and then nothing is reserved anywhere.
	other := mk()
	if err := s.Reserve(ctx, other, "2026-12", 950, []jobstore.BudgetScope{{Scope: "backend:aws-us", Limit: 0}, {Scope: "team:ml", Limit: 1000}}); !errors.Is(err, jobstore.ErrOverBudget) {
		t.Fatalf("over the team limit: %v", err)
	}
	if sp, _ := s.Spends(ctx, "2026-12", []string{"backend:aws-us"}); sp["backend:aws-us"].ReservedUSD != 0 {
		t.Fatalf("a refused reservation left %v reserved", sp)
	}
	// Settle one winner at a lower actual cost; twice is harmless.
	open, _ := s.OpenReservations(ctx)
	if len(open) != 6 {
		t.Fatalf("%d open reservations", len(open))
	}
	for range 2 {
		if err := s.Settle(ctx, open[0], 4.5); err != nil {
			t.Fatal(err)
		}
	}
	sp, _ = s.Spends(ctx, "2026-12", []string{"backend:aws-eu", "team:ml"})
	if sp["backend:aws-eu"].ReservedUSD != 75 || sp["backend:aws-eu"].SpentUSD != 4.5 || sp["team:ml"].SpentUSD != 4.5 {
		t.Fatalf("after settling: %+v", sp)
	}
}

// TestReserveInCreate: a job created with a reservation holds it from the
// script that stores it; concurrent creates never pass a limit, and those
// that would are stored held (route waiting, held reason naming the scope),
// never stored routed without a reservation. A route set with a
// reservation behaves the same, and a job held so is never dispatched.
func TestReserveInCreate(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	budget := &jobstore.BudgetReservation{Month: "2026-12", USD: 15,
		Scopes: []jobstore.BudgetScope{{Scope: "backend:aws-eu", Limit: 100}, {Scope: "team:ml", Limit: 0}}}
	route := &jobtype.RouteInfo{Backend: "aws-eu", Kind: "aws", Attempt: 1, EstCostUSD: 15}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []*jobtype.Job
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			created, err := s.CreateMany(ctx, []jobstore.NewJob{
				{Spec: spec("r", jobspec.PriorityNormal), Team: "ml", Route: route, Budget: budget},
				{Spec: spec("r", jobspec.PriorityNormal), Team: "ml", Route: route, Budget: budget}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			for _, c := range created {
				got = append(got, c.Job)
			}
		}()
	}
	wg.Wait()
	reserved, held := 0, 0
	for _, j := range got {
		stored, err := s.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case stored.BudgetReservedUSD == 15 && stored.Held == "" && !stored.Route.Waiting && j.BudgetReservedUSD == 15:
			reserved++
		case stored.BudgetReservedUSD == 0 && stored.Route.Waiting && j.Route.Waiting &&
			stored.Held == "budget reservation refused: $15.00 would pass backend:aws-eu's 2026-12 budget ($10.00 of $100.00 left)" && j.Held == stored.Held:
			held++
		default:
			t.Fatalf("job %s: reserved %v, held %q, route %+v (returned: held %q)", j.ID, stored.BudgetReservedUSD, stored.Held, stored.Route, j.Held)
		}
	}
	if reserved != 6 || held != 14 {
		t.Fatalf("%d reserved, %d held; want 6 and 14", reserved, held)
	}
	if sp, _ := s.Spends(ctx, "2026-12", []string{"backend:aws-eu", "team:ml"}); sp["backend:aws-eu"].ReservedUSD != 90 || sp["team:ml"].ReservedUSD != 90 {
		t.Fatalf("spends %+v", sp)
	}

	// A reroute with a reservation: the budget is full, so it is stored held.
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("r", jobspec.PriorityNormal), Team: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	set, err := s.SetRouteLogged(ctx, nil, jobstore.RouteUpdate{ID: j.ID, Route: route, Budget: budget})
	if err != nil || set.Held == "" || !set.Route.Waiting {
		t.Fatalf("reroute over budget: %+v %v", set, err)
	}
	// Held, it is never dispatched: a placement round that planned it on
	// the decision (before the reservation lost) loses the dispatch, or the
	// job would run with no reservation and its cost reach no budget.
	dispatch := jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: jobtype.CloudNode("aws-eu"), Backend: "aws-eu", Capacity: 100}
	var ce *jobstore.ConflictError
	if err := s.Dispatch(ctx, dispatch); !errors.As(err, &ce) {
		t.Fatalf("dispatch of a held job: %v, want a conflict", err)
	}
	small := &jobstore.BudgetReservation{Month: "2026-12", USD: 10, Scopes: budget.Scopes}
	set, err = s.SetRouteLogged(ctx, nil, jobstore.RouteUpdate{ID: j.ID, Route: route, Budget: small})
	if stored, _ := s.Get(ctx, j.ID); err != nil || set.Held != "" || stored.BudgetReservedUSD != 10 || stored.Held != "" {
		t.Fatalf("reroute within budget: %+v %v; stored %+v", set, err, stored)
	}
	if err := s.Dispatch(ctx, dispatch); err != nil {
		t.Fatalf("dispatch once reserved: %v", err)
	}
}

// TestRunTimeCounted: each attempt's run time is added once as it leaves
// running (to run_ms, and to local_run_ms on the local pool), at the
// store's clock: two local attempts of 90 s and 30 s make 120 s of both; a
// third on a cloud route adds to the run time only.
func TestRunTimeCounted(t *testing.T) {
	srv := redistest.Start(t)
	// Ten minutes ago as the start, so the clock stays behind the real one
	// (job ids carry it, and ids drawn in this process must not run ahead
	// of the real clock for later tests).
	now := time.Now().Add(-10 * time.Minute)
	s := jobstore.New(srv.Client(), jobstore.Config{Now: func() time.Time { return now }})
	ctx := context.Background()
	j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec("r", jobspec.PriorityNormal), Route: &jobtype.RouteInfo{Backend: "local", Kind: "local", Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(attempt int, d time.Duration, end func() error) {
		t.Helper()
		if err := s.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: attempt, Node: "n1", Backend: "local", Capacity: 4}); err != nil {
			t.Fatal(err)
		}
		if out, err := s.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: attempt, Node: "n1", Incarnation: "i", Lease: time.Hour}); err != nil || out != jobstore.Claimed {
			t.Fatalf("claim %d: %v %v", attempt, out, err)
		}
		now = now.Add(d)
		if err := end(); err != nil {
			t.Fatal(err)
		}
	}
	run(1, 90*time.Second, func() error { return s.Requeue(ctx, j.ID, 1, "exit", "exit status 1") })
	run(2, 30*time.Second, func() error { return s.Requeue(ctx, j.ID, 2, "exit", "exit status 1") })
	got, _ := s.Get(ctx, j.ID)
	if got.RunS != 120 || got.LocalRunS != 120 {
		t.Fatalf("after two local attempts: run %v s, local %v s; want 120 and 120", got.RunS, got.LocalRunS)
	}
	if err := s.SetRoute(ctx, j.ID, &jobtype.RouteInfo{Backend: "aws-eu", Kind: "aws", Attempt: 3}, ""); err != nil {
		t.Fatal(err)
	}
	run(3, 60*time.Second, func() error {
		return s.Finish(ctx, j.ID, 3, jobstore.Ending{State: jobtype.StateSucceeded})
	})
	got, _ = s.Get(ctx, j.ID)
	if got.RunS != 180 || got.LocalRunS != 120 {
		t.Fatalf("after a cloud attempt: run %v s, local %v s; want 180 and 120", got.RunS, got.LocalRunS)
	}
}
