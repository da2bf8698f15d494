package scheduler_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
)

// TestBudgetsAPI: GET /api/v1/budgets lists each backend with its spend and
// reservations for the month, and refuses a bad month naming the field.
func TestBudgetsAPI(t *testing.T) {
	b := setup(t, scheduler.Config{})
	code, body := do(t, "GET", b.url+"/api/v1/budgets?month=2026-13", "", nil)
	if code != 400 || !strings.Contains(string(body), `"field":"month"`) {
		t.Fatalf("bad month: %d %s", code, body)
	}
	j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "x", BaseModel: "tiny-char", Dataset: "file:///d",
		Priority: jobspec.PriorityNormal, Trainer: "reference"}})
	if err != nil {
		t.Fatal(err)
	}
	month := jobstore.Month(time.Now())
	if err := b.store.Reserve(b.ctx, j.ID, month, 2.5, []jobstore.BudgetScope{{Scope: "backend:local"}}); err != nil {
		t.Fatal(err)
	}
	code, body = do(t, "GET", b.url+"/api/v1/budgets", "", nil)
	var got wire.Budgets
	if code != 200 || json.Unmarshal(body, &got) != nil || got.Month != month || len(got.Scopes) != 1 ||
		got.Scopes[0].Scope != "backend:local" || got.Scopes[0].ReservedUSD != 2.5 || got.Scopes[0].SpentUSD != 0 {
		t.Fatalf("budgets: %d %s", code, body)
	}
	if err := b.store.Settle(b.ctx, j.ID, 1.25); err != nil {
		t.Fatal(err)
	}
	_, body = do(t, "GET", b.url+"/api/v1/budgets?month="+month, "", nil)
	if json.Unmarshal(body, &got) != nil || got.Scopes[0].ReservedUSD != 0 || got.Scopes[0].SpentUSD != 1.25 {
		t.Fatalf("after settling: %s", body)
	}
	// A second settlement after a retry counts only the new part.
	if err := b.store.Reserve(b.ctx, j.ID, month, 1, []jobstore.BudgetScope{{Scope: "backend:local"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Settle(b.ctx, j.ID, 2); err != nil {
		t.Fatal(err)
	}
	_, body = do(t, "GET", b.url+"/api/v1/budgets?month="+month, "", nil)
	if json.Unmarshal(body, &got) != nil || got.Scopes[0].SpentUSD != 2 {
		t.Fatalf("after a second settlement of the whole cost 2: %s", body)
	}
}

// TestBudgetsTeamSeesItsOwn: a token limited to its team reads its own
// team's budget row and the backends' rows, never another team's; an
// all-teams token reads every row. The dashboard's budgets panel reads
// this with the token as a Basic password (a GET: readAPI).
func TestBudgetsTeamSeesItsOwn(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{Tokens: monTokens})
	scopes := func(auth map[string]string) []string {
		t.Helper()
		code, body := do(t, "GET", b.url+"/api/v1/budgets", "", auth)
		var got wire.Budgets
		if code != 200 || json.Unmarshal(body, &got) != nil {
			t.Fatalf("budgets: %d %s", code, body)
		}
		var s []string
		for _, r := range got.Scopes {
			s = append(s, r.Scope)
		}
		return s
	}
	basic := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+monViewer))}
	if got, want := strings.Join(scopes(basic), ","), "backend:local,team:a"; got != want {
		t.Errorf("team a's viewer (Basic) reads %s, want %s", got, want)
	}
	if got, want := strings.Join(scopes(bearer(monSubmitter)), ","), "backend:local,team:a,team:ops"; got != want {
		t.Errorf("an all-teams submitter reads %s, want %s", got, want)
	}
	if got, want := strings.Join(scopes(bearer(monAdmin)), ","), "backend:local,team:a,team:ops"; got != want {
		t.Errorf("the admin reads %s, want %s", got, want)
	}
}
