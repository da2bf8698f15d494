package jobstore_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
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
