package scheduler_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// GET /api/v1/decisions (the dashboard's routing panel) against a real
// redis-server holding a ledger of two teams' decisions and refusals.

const (
	decAdmin = "dec-admin-secret-0123456789"
	decSubA  = "dec-sub-a-secret-0123456789"
	decSubB  = "dec-sub-b-secret-0123456789"
	decViewA = "dec-view-a-secret-0123456789"
	decViewB = "dec-view-b-secret-0123456789"
	decAll   = "dec-view-all-secret-0123456789"
)

var decTokens = []plane.Token{
	{Name: "root", Secret: decAdmin, Role: plane.RoleAdmin, Team: "ops"},
	{Name: "sub-a", Secret: decSubA, Role: plane.RoleSubmitter, Team: "a"},
	{Name: "sub-b", Secret: decSubB, Role: plane.RoleSubmitter, Team: "b"},
	{Name: "view-a", Secret: decViewA, Role: plane.RoleViewer, Team: "a"},
	{Name: "view-b", Secret: decViewB, Role: plane.RoleViewer, Team: "b"},
	{Name: "view-all", Secret: decAll, Role: plane.RoleViewer, Team: "c", AllTeams: true},
}

// decisionsSetup submits, as team a, a job the local pool takes and one no
// site may hold (refused), and as team b two taken and one refused.
func decisionsSetup(t *testing.T) bundle {
	t.Helper()
	cfg, err := routecfg.ParseConfig([]byte(routeConfig))
	if err != nil {
		t.Fatal(err)
	}
	b := auditSetup(t, scheduler.Config{Routing: cfg}, api.Config{Tokens: decTokens})
	for _, s := range []struct{ secret, name, residency string }{
		{decSubA, "a-eu", `["eu"]`}, {decSubB, "b-eu-1", `["eu"]`}, {decSubA, "a-us", `["us"]`},
		{decSubB, "b-us", `["us"]`}, {decSubB, "b-eu-2", `["eu"]`},
	} {
		code, body := do(t, "POST", b.url+"/api/v1/jobs", spec(s.name, s.residency, ""), bearer(s.secret))
		if want := map[bool]int{true: 422, false: 201}[strings.HasSuffix(s.name, "-us")]; code != want {
			t.Fatalf("submit %s: %d %s, want %d", s.name, code, body, want)
		}
	}
	return b
}

// wantDecisions is what the ledger holds of team's (every team's for ""):
// its decision and refusal records, newest first, as rows.
func wantDecisions(t *testing.T, b bundle, team string) []wire.DecisionRow {
	t.Helper()
	var rows []wire.DecisionRow
	// Range checks no MAC: any key reads the records.
	led := ledger.New(b.rdb, bytes.Repeat([]byte{'x'}, ledger.MinKeySize), "lathe:")
	err := led.Range(b.ctx, "", func(r ledger.Record) error {
		if (r.Kind != "decision" && r.Kind != "refusal") || (team != "" && r.Team != team) {
			return nil
		}
		var body struct {
			Path, Name string
			Attempt    int
			Decision   wire.Decision
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			return err
		}
		d := body.Decision
		rows = append(rows, wire.DecisionRow{Time: r.Time, Kind: r.Kind, JobID: r.JobID, JobName: body.Name, Team: r.Team,
			Path: body.Path, Attempt: body.Attempt, Backend: d.Backend, Site: d.Site, Refused: d.Refused, Waiting: d.Waiting,
			Reasons: d.Reasons, EstCostUSD: d.EstCostUSD})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(rows)
	return rows
}

// TestDecisionsTeamFilter: each reader gets the ledger's decisions and
// refusals it may see, newest first, equal to the records; a team's
// viewer gets its team's only, and its answer names nothing of another
// team's (no job, name, token or count).
func TestDecisionsTeamFilter(t *testing.T) {
	b := decisionsSetup(t)
	for _, c := range []struct{ secret, team, answerTeam string }{
		{decViewA, "a", "a"}, {decViewB, "b", "b"}, {decSubA, "a", "a"}, {decAdmin, "", ""}, {decAll, "", ""},
	} {
		code, body := do(t, "GET", b.url+"/api/v1/decisions", "", bearer(c.secret))
		var got wire.Decisions
		if code != 200 || json.Unmarshal(body, &got) != nil {
			t.Fatalf("GET /api/v1/decisions as %s: %d %s", c.secret, code, body)
		}
		want := wantDecisions(t, b, c.team)
		if got.Team != c.answerTeam || fmt.Sprint(got.Decisions) != fmt.Sprint(want) {
			t.Errorf("as %s: team %q, decisions\n%+v\nwant\n%+v", c.secret, got.Team, got.Decisions, want)
		}
		names := map[string]int{"a": 2, "b": 3, "": 5}[c.team]
		if len(got.Decisions) != names || got.Decisions[0].Time.Before(got.Decisions[len(got.Decisions)-1].Time) {
			t.Errorf("as %s: %d decisions, want %d, newest first: %+v", c.secret, len(got.Decisions), names, got.Decisions)
		}
		for _, d := range got.Decisions {
			if d.JobName == "" || d.Path != "submit" || d.Refused != strings.HasSuffix(d.JobName, "-us") ||
				(d.Refused && (d.JobID != "" || d.Kind != "refusal" || len(d.Reasons) == 0)) || (!d.Refused && (d.JobID == "" || d.Backend != "local")) {
				t.Errorf("as %s: row %+v", c.secret, d)
			}
		}
		if c.team == "a" && (strings.Contains(string(body), "b-") || strings.Contains(string(body), "sub-b") || strings.Contains(string(body), `"seq"`)) {
			t.Errorf("team a's answer names team b's records or a sequence number: %s", body)
		}
	}
	code, body := do(t, "GET", b.url+"/api/v1/decisions?limit=1", "", bearer(decViewB))
	var one wire.Decisions
	if code != 200 || json.Unmarshal(body, &one) != nil || len(one.Decisions) != 1 || one.Decisions[0].JobName != "b-eu-2" {
		t.Errorf("limit=1 as team b: %d %s, want b-eu-2 only", code, body)
	}
}

// TestDecisionsAuthAndLimits: 401 without a token, a viewer's token as
// bearer or Basic password reads, Basic writes nothing (the path has no
// write: 405), a bad limit is a 400 naming it and its value, and a
// scheduler without a ledger answers 501.
func TestDecisionsAuthAndLimits(t *testing.T) {
	b := decisionsSetup(t)
	if code, body := do(t, "GET", b.url+"/api/v1/decisions", "", nil); code != 401 {
		t.Errorf("no token: %d %s, want 401", code, body)
	}
	basic := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("me:"+decViewA))}
	if code, body := do(t, "GET", b.url+"/api/v1/decisions?limit=200", "", basic); code != 200 {
		t.Errorf("viewer's Basic password: %d %s, want 200", code, body)
	}
	if code, body := do(t, "POST", b.url+"/api/v1/decisions", `{}`, basic); code != 405 {
		t.Errorf("POST with Basic: %d %s, want 405", code, body)
	}
	for _, v := range []string{"abc", "-1", "0", "201", "1000000", "1.5"} {
		code, body := do(t, "GET", b.url+"/api/v1/decisions?limit="+v, "", bearer(decViewA))
		var e wire.Error
		_ = json.Unmarshal(body, &e)
		if code != 400 || e.Code != "invalid" || len(e.Fields) != 1 || e.Fields[0].Field != "limit" || e.Fields[0].Value != v ||
			!strings.Contains(e.Fields[0].Message, "1–200") {
			t.Errorf("limit=%s: %d %s, want 400 naming limit and %s", v, code, body, v)
		}
	}
	nb := setup(t, scheduler.Config{})
	if code, body := do(t, "GET", nb.url+"/api/v1/decisions", "", nil); code != 501 {
		t.Errorf("no ledger: %d %s, want 501", code, body)
	}
}
