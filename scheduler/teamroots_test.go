package scheduler_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// TestTeamRootsAtAdmission: with teams.beta.allowed_roots [/data/beta],
// team beta's submit, dry run, batch and sweep naming team alpha's dataset
// (or output) are refused with a 400 naming the field, the value and the
// rule; team alpha may use its own folder; team gamma, with no entry, uses
// the deployment's roots as before. A real redis-server and the real API.
func TestTeamRootsAtAdmission(t *testing.T) {
	deployment, _ := pathpolicy.New([]string{"/data"})
	teams, err := pathpolicy.NewTeamRoots(map[string][]string{"alpha": {"/data/alpha"}, "beta": {"/data/beta"}}, deployment)
	if err != nil {
		t.Fatal(err)
	}
	toks := []plane.Token{
		{Name: "alice", Secret: "alice-secret-0123456789", Role: plane.RoleSubmitter, Team: "alpha"},
		{Name: "bob", Secret: "bob-secret-0123456789xx", Role: plane.RoleSubmitter, Team: "beta"},
		{Name: "gus", Secret: "gus-secret-0123456789xx", Role: plane.RoleSubmitter, Team: "gamma"},
	}
	b := setup(t, scheduler.Config{AllowedRoots: deployment, TeamRoots: teams, Defaults: jobspec.Defaults{OutputURI: "file:///data/out"}},
		api.Config{Tokens: toks})
	auth := func(secret string) map[string]string { return map[string]string{"Authorization": "Bearer " + secret} }
	alice, bob, gus := auth(toks[0].Secret), auth(toks[1].Secret), auth(toks[2].Secret)

	alphaJob := `{"name":"a","base_model":"tiny-char","dataset":"file:///data/alpha/x.jsonl","output":{"uri":"file:///data/alpha/out"}}`
	const rule = "not under an allowed root of team beta (teams.beta.allowed_roots: /data/beta)"
	refused := func(what string, code int, body []byte, field string) {
		t.Helper()
		var e wire.Error
		if err := json.Unmarshal(body, &e); err != nil || code != 400 {
			t.Fatalf("%s: %d %s; want 400", what, code, body)
		}
		for _, fe := range e.Fields {
			if fe.Field == field && strings.HasPrefix(fe.Message, rule) && strings.HasPrefix(fe.Value, "file:///data/alpha/") {
				return
			}
		}
		t.Fatalf("%s: no %s field naming the value and the rule: %s", what, field, body)
	}

	if code, body := do(t, "POST", b.url+"/api/v1/jobs", alphaJob, alice); code != 201 {
		t.Fatalf("alpha in its own folder: %d %s", code, body)
	}
	code, body := do(t, "POST", b.url+"/api/v1/jobs", alphaJob, bob)
	refused("beta submit", code, body, "dataset")
	refused("beta submit", code, body, "output.uri")
	code, body = do(t, "POST", b.url+"/api/v1/jobs?dry_run=true", alphaJob, bob)
	refused("beta dry run", code, body, "dataset")
	code, body = do(t, "POST", b.url+"/api/v1/jobs/batch", `{"jobs":[`+goodBeta+`,`+alphaJob+`]}`, bob)
	refused("beta batch", code, body, "jobs[1].dataset")
	if strings.Contains(string(body), `"jobs[0]`) {
		t.Errorf("beta batch: its own job was refused too: %s", body)
	}
	// A sweep as lathe sweep submit sends it (the base job inline, as read
	// from alpha's job file).
	sweep := `{"name":"s","job":` + alphaJob + `,"parameters":{"lora.rank":{"grid":[4,8]}}}`
	code, body = do(t, "POST", b.url+"/api/v1/sweeps", sweep, bob)
	refused("beta sweep", code, body, "trials[0].dataset")
	code, body = do(t, "POST", b.url+"/api/v1/sweeps?dry_run=true", sweep, bob)
	refused("beta sweep dry run", code, body, "trials[0].dataset")
	if code, body := do(t, "POST", b.url+"/api/v1/sweeps", sweep, alice); code != 201 {
		t.Fatalf("alpha's sweep: %d %s", code, body)
	}
	// Gamma has no entry: the deployment's roots, alpha's folder included.
	if code, body := do(t, "POST", b.url+"/api/v1/jobs", alphaJob, gus); code != 201 {
		t.Fatalf("gamma under the deployment's roots: %d %s", code, body)
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs", `{"name":"g","base_model":"tiny-char","dataset":"file:///etc/shadow"}`, gus)
	if code != 400 || !strings.Contains(string(body), "not under an allowed root of this deployment (jobs.allowed_roots: /data)") {
		t.Fatalf("gamma outside the deployment's roots: %d %s", code, body)
	}
}

const goodBeta = `{"name":"b","base_model":"tiny-char","dataset":"file:///data/beta/x.jsonl","output":{"uri":"file:///data/beta/out"}}`
