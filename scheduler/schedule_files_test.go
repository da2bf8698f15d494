package scheduler

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/cron"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// fileRig is a Scheduler (not started: the test runs its schedule duty)
// on a real redis-server, with an allowed root holding team alpha's and
// team beta's folders (their own roots) and lathed's data dir (as the
// default config has it), a ledger key and a root-only secret outside the
// roots, each holding a marker no schedule message, log line or API
// answer may show.
type fileRig struct {
	*schedRig                  // one Scheduler: passAt, state
	s                          *Scheduler
	log                        *lockedBuf
	root, alpha, beta, dataDir string
	ledgerKey, secret          string // the markers
}

func newFileRig(t *testing.T, entries ...cron.Entry) *fileRig {
	t.Helper()
	srv := redistest.Start(t)
	root := t.TempDir()
	r := &fileRig{schedRig: &schedRig{ctx: context.Background(), store: jobstore.New(srv.Client(), jobstore.Config{}), dir: root}, log: &lockedBuf{}, root: root,
		alpha: filepath.Join(root, "alpha"), beta: filepath.Join(root, "beta"), dataDir: filepath.Join(root, "lathe-data"),
		ledgerKey: "4c45444745524b45592d6f662d6c61746865640a", secret: "ROOT-ONLY-SECRET-LINE"}
	for _, d := range []string{r.alpha, r.beta, r.dataDir, filepath.Join(root, "shared")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(r.dataDir, "ledger.key"), r.ledgerKey+"\n", 0o600)
	deployment, _ := pathpolicy.New([]string{root})
	teams, err := pathpolicy.NewTeamRoots(map[string][]string{"alpha": {r.alpha}, "beta": {r.beta}}, deployment)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cron.Parse(entries, root)
	if err != nil {
		t.Fatal(err)
	}
	r.s = New(srv.Client(), r.store, Config{Schedules: ss, Logger: slog.New(slog.NewTextHandler(r.log, nil)),
		AllowedRoots: deployment, TeamRoots: teams, DataDeny: pathpolicy.DataDeny(r.dataDir, "", "", nil),
		Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(filepath.Join(root, "shared", "out"))}})
	r.ss, r.logs = []*Scheduler{r.s}, []*lockedBuf{r.log}
	return r
}

func write(t *testing.T, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// jobIn is a valid job spec whose dataset and output are in dir.
func jobIn(dir string) string {
	return `{"name":"nightly","base_model":"tiny-char","dataset":"` + fileuri.FromPath(filepath.Join(dir, "train.jsonl")) +
		`","output":{"uri":"` + fileuri.FromPath(filepath.Join(dir, "out")) + `"}}`
}

// TestScheduleFilesOpenedLikeDatasets: a schedule's job file that is
// swapped for a link to lathed's ledger key (team alpha's, and a schedule
// with no team, whose roots hold the data dir), for a link to a root-only
// file outside the roots, or that holds text that is no job spec; a team
// beta job file naming alpha's dataset; and a beta sweep file built on
// alpha's job file: each tick fails with a message that names the file,
// the field and the rule, and neither the message, the log nor GET
// /api/v1/schedules shows anything read from the files.
func TestScheduleFilesOpenedLikeDatasets(t *testing.T) {
	r := newFileRig(t,
		cron.Entry{Name: "swap", Cron: "@every 10s", Job: "alpha/job.yaml", Team: "alpha", Concurrency: "allow"},
		cron.Entry{Name: "noteam", Cron: "@every 10s", Job: "shared/job.yaml", Concurrency: "allow"},
		cron.Entry{Name: "outside", Cron: "@every 10s", Job: "shared/outside.yaml", Concurrency: "allow"},
		cron.Entry{Name: "garbage", Cron: "@every 10s", Job: "alpha/garbage.yaml", Team: "alpha", Concurrency: "allow"},
		cron.Entry{Name: "beta-job", Cron: "@every 10s", Job: "beta/job.yaml", Team: "beta", Concurrency: "allow"},
		cron.Entry{Name: "beta-sweep", Cron: "@every 10s", Sweep: "beta/sweep.yaml", Team: "beta", Concurrency: "allow"},
	)
	write(t, filepath.Join(r.alpha, "job.yaml"), jobIn(r.alpha), 0o644)
	write(t, filepath.Join(r.root, "shared", "job.yaml"), jobIn(filepath.Join(r.root, "shared")), 0o644)
	outside := filepath.Join(t.TempDir(), "shadow")
	write(t, outside, r.secret+":$6$salt$hash:19000:0:99999:7:::\n", 0o600)
	if err := os.Symlink(outside, filepath.Join(r.root, "shared", "outside.yaml")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(r.alpha, "garbage.yaml"), "name: "+r.secret+"\napi_key: "+r.secret+"\ntraining: {epochs: "+r.secret+"}\n", 0o600)
	write(t, filepath.Join(r.beta, "job.yaml"), jobIn(r.alpha), 0o644)
	write(t, filepath.Join(r.beta, "sweep.yaml"), "name: s\njob: ../alpha/job.yaml\nparameters:\n  lora.rank: {grid: [4, 8]}\n", 0o644)

	// The first tick: alpha's own job file runs.
	r.passAt(t0.Add(time.Second))
	for name, want := range map[string]string{"swap": jobstore.TickStarted, "noteam": jobstore.TickStarted} {
		if st := r.state(t, name); st.Outcome != want {
			t.Fatalf("%s at the first tick: %+v, want %s", name, st, want)
		}
	}
	// Then the job files are swapped for links to the ledger key.
	for _, p := range []string{filepath.Join(r.alpha, "job.yaml"), filepath.Join(r.root, "shared", "job.yaml")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(r.dataDir, "ledger.key"), p); err != nil {
			t.Fatal(err)
		}
	}
	r.passAt(t0.Add(11 * time.Second))

	alphaRule := "not under an allowed root of team alpha (teams.alpha.allowed_roots: " + r.alpha + ")"
	betaRule := "not under an allowed root of team beta (teams.beta.allowed_roots: " + r.beta + ")"
	for name, want := range map[string][]string{
		"swap":       {"job file " + filepath.Join(r.alpha, "job.yaml") + ": " + alphaRule},
		"noteam":     {"job file " + filepath.Join(r.root, "shared", "job.yaml") + ": is lathed's own file, never readable by a job (the ledger key)"},
		"outside":    {"job file " + filepath.Join(r.root, "shared", "outside.yaml") + ": not under an allowed root of this deployment (jobs.allowed_roots: " + r.root + ")"},
		"garbage":    {"job file " + filepath.Join(r.alpha, "garbage.yaml") + ": invalid", "api_key: unknown field", "training.epochs: invalid"},
		"beta-job":   {"job file " + filepath.Join(r.beta, "job.yaml") + ": invalid", "dataset: " + betaRule, "output.uri: " + betaRule},
		"beta-sweep": {"sweep file " + filepath.Join(r.beta, "sweep.yaml") + ": its base job (job:): " + betaRule},
	} {
		st := r.state(t, name)
		if st.Outcome != jobstore.TickFailed {
			t.Errorf("%s: %+v, want failed", name, st)
			continue
		}
		for _, w := range want {
			if !strings.Contains(st.Message, w) {
				t.Errorf("%s: message %q lacks %q", name, st.Message, w)
			}
		}
	}

	// Nothing read from the files shows: not in the states, the log or
	// the API (an admin's view, which lists every schedule).
	hs := httptest.NewServer(api.New(r.s, r.store.Redis(), r.store, api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tokens: []plane.Token{{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"}}}).Handler())
	defer hs.Close()
	listed := getSchedules(t, hs.URL, "admin-secret-0123456789")
	if len(listed) != 6 {
		t.Fatalf("the admin sees %d schedules, want 6", len(listed))
	}
	body, _ := json.Marshal(listed)
	for where, text := range map[string]string{"the API": string(body), "the log": r.log.String()} {
		for _, leak := range []string{r.ledgerKey, r.secret, "$6$salt", fileuri.FromPath(filepath.Join(r.alpha, "train.jsonl")), "../alpha/job.yaml", outside} {
			if strings.Contains(text, leak) {
				t.Errorf("%s shows %q", where, leak)
			}
		}
	}
	if !strings.Contains(r.log.String(), "schedule: run not started") {
		t.Errorf("the log does not say the runs did not start:\n%s", r.log.String())
	}
}

// TestSchedulesAPIShowsATeamItsOwn: GET /api/v1/schedules lists a team's
// token only its team's schedules (and their messages); an all_teams
// token and an admin see every schedule.
func TestSchedulesAPIShowsATeamItsOwn(t *testing.T) {
	r := newFileRig(t,
		cron.Entry{Name: "a1", Cron: "@hourly", Job: "alpha/job.yaml", Team: "alpha"},
		cron.Entry{Name: "b1", Cron: "@hourly", Job: "beta/job.yaml", Team: "beta"},
		cron.Entry{Name: "none", Cron: "@hourly", Job: "beta/job.yaml"},
	)
	toks := []plane.Token{
		{Name: "av", Secret: "alpha-viewer-0123456789", Role: plane.RoleViewer, Team: "alpha"},
		{Name: "bs", Secret: "beta-submitter-01234567", Role: plane.RoleSubmitter, Team: "beta"},
		{Name: "aud", Secret: "auditor-secret-01234567", Role: plane.RoleViewer, Team: "x", AllTeams: true},
		{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"},
	}
	hs := httptest.NewServer(api.New(r.s, r.store.Redis(), r.store, api.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tokens: toks}).Handler())
	defer hs.Close()
	for secret, want := range map[string][]string{
		toks[0].Secret: {"a1"},
		toks[1].Secret: {"b1"},
		toks[2].Secret: {"a1", "b1", "none"},
		toks[3].Secret: {"a1", "b1", "none"},
	} {
		var got []string
		for _, s := range getSchedules(t, hs.URL, secret) {
			got = append(got, s.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("token %s… sees %v, want %v", secret[:6], got, want)
		}
	}
}

func getSchedules(t *testing.T, base, secret string) []wire.ScheduleInfo {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/v1/schedules", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l wire.ScheduleList
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&l) != nil {
		t.Fatalf("GET /api/v1/schedules: %d", resp.StatusCode)
	}
	return l.Schedules
}

// TestScheduleMessageShowsNoValue: what a schedule's message says of a
// spec that is not valid, not admissible or refused never holds a value
// of the file: not a field's value, not text a parser quoted, not a key
// that is no name, not a routing reason; admission's rules and the
// parsers' cap are kept.
func TestScheduleMessageShowsNoValue(t *testing.T) {
	const secret = "SECRET-VALUE"
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"fields": {&jobspec.ValidationError{Errors: []jobspec.FieldError{
			{Field: "lora.rank", Value: secret, Message: "must be between 1 and 1024"},
			{Field: "output.formats[0]", Value: secret, Message: `unknown format "` + secret + `" (known: safetensors)`},
			{Field: "k: " + secret, Value: secret, Message: "unknown field"},
			{Value: secret, Message: "a job spec must be a mapping of fields, not a string"},
			{Message: "and 3 more problems"},
		}}, "lora.rank: invalid; output.formats[0]: invalid; a field: unknown field; the file: invalid; and 3 more problems"},
		"admission": {&plane.InvalidError{Fields: []jobspec.FieldError{
			{Field: "trials[0].dataset", Value: "file:///" + secret, Message: msgNotUnder + "an allowed root of team b (teams.b.allowed_roots: /b) (and 3 more trials)"},
		}}, "trials[0].dataset: not under an allowed root of team b (teams.b.allowed_roots: /b) (and 3 more trials)"},
		"refused": {&plane.RefusedError{What: "this job", Reasons: []string{"dataset s3://" + secret + "/x is in no site"}},
			"refused: no backend may run this job (1 reason; `lathe submit --dry-run /f.yaml` says why)"},
	} {
		got := scheduleMessage(c.err, "lathe submit --dry-run", "/f.yaml")
		if strings.Contains(got, secret) || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q; want it to hold %q and no value", name, got, c.want)
		}
	}
}
