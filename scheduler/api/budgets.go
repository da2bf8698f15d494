package api

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// budgets answers GET /api/v1/budgets[?month=YYYY-MM]: for each backend of
// the config and each team (with a budget, or holding a token), the month's
// limit, what was spent (settled jobs: local GPU-hours × price, cloud
// instance time × price) and what is reserved by jobs not settled yet.
// A token limited to its team gets its own team's row and the backends'
// (aggregates, as /queues), never another team's row (teamRows).
func (s opsView) budgets(w http.ResponseWriter, r *http.Request) {
	month := r.URL.Query().Get("month")
	if month == "" {
		month = jobstore.Month(time.Now())
	} else if _, err := time.Parse("2006-01", month); err != nil {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad month", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "month", Value: month, Message: "want YYYY-MM"}}})
		return
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	rows, err := s.budgetRows(ctx, month)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Budgets{Month: month, Scopes: teamRows(rows, principalOf(r))})
}

// teamRows is rows as p may read them: every row for an all-teams token,
// else the backends' rows and p's team's row only.
func teamRows(rows []wire.BudgetRow, p plane.Principal) []wire.BudgetRow {
	if allTeams(p) {
		return rows
	}
	return slices.DeleteFunc(rows, func(b wire.BudgetRow) bool {
		team, ok := strings.CutPrefix(b.Scope, "team:")
		return ok && team != p.Team
	})
}

// budgetRows is month's row of every backend of the config and every team
// (with a budget, or holding a token), sorted by scope: one Redis call
// (jobstore.Spends). GET /api/v1/budgets and the overview both read it.
func (s opsView) budgetRows(ctx context.Context, month string) ([]wire.BudgetRow, error) {
	limits, kinds, scopes := s.budgetScopes()
	spends, err := s.store.Spends(ctx, month, scopes)
	if err != nil {
		return nil, err
	}
	rows := make([]wire.BudgetRow, 0, len(scopes))
	for _, sc := range scopes {
		sp := spends[sc]
		rows = append(rows, wire.BudgetRow{Scope: sc, Kind: kinds[sc], LimitUSD: limits[sc], SpentUSD: sp.SpentUSD, ReservedUSD: sp.ReservedUSD})
	}
	return rows, nil
}

// budgetScopes returns every budget scope ("backend:<name>", "team:<team>")
// sorted, with its monthly limit (0: none) and, for a backend, its kind:
// each backend of the routing config, each team with a budget, each team
// a token names. GET /api/v1/budgets and /metrics read the same scopes.
func (s opsView) budgetScopes() (limits map[string]float64, kinds map[string]string, scopes []string) {
	rs := s.plane.Routing()
	limits, kinds = map[string]float64{}, map[string]string{}
	for _, b := range rs.Config.Backends {
		limits["backend:"+b.Name] = b.BudgetUSDPerMonth
		kinds["backend:"+b.Name] = b.Kind
	}
	for team, l := range rs.Config.TeamBudgetsUSD {
		limits["team:"+team] = l
	}
	for _, t := range s.tokenSet().tokens {
		if t.Team != "" {
			if _, ok := limits["team:"+t.Team]; !ok {
				limits["team:"+t.Team] = 0
			}
		}
	}
	scopes = make([]string, 0, len(limits))
	for sc := range limits {
		scopes = append(scopes, sc)
	}
	sort.Strings(scopes)
	return limits, kinds, scopes
}
