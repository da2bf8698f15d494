package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
)

// TestTeamRootsAndScheduleFilesE2E: the real `lathed scheduler` and `lathe`
// binaries on a real redis-server, with teams alpha and beta each given
// their own folder (teams.<name>.allowed_roots). Team alpha's schedule
// file is a link to lathed's ledger key, team beta's names alpha's
// dataset: both ticks fail; `lathe schedules` shows each team only its own
// schedule, with a message naming the rule, and neither the CLI, the API
// nor lathed's log shows the key. Team beta's `lathe submit` of a job and
// `lathe sweep submit` of a sweep built on alpha's job file are refused,
// naming the field and the rule; alpha's own job is accepted.
func TestTeamRootsAndScheduleFilesE2E(t *testing.T) {
	t.Parallel()
	r := newSchedE2E(t, "")
	alpha, beta := filepath.Join(r.dir, "alpha"), filepath.Join(r.dir, "beta")
	for _, d := range []string{alpha, beta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := filepath.Join(r.data, "ledger.key")
	if err := ledger.GenerateKey(keyFile); err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(key))
	alphaJob := `{"name":"a","base_model":"tiny-char","dataset":"` + fileuri.FromPath(filepath.Join(alpha, "train.jsonl")) +
		`","output":{"uri":"` + fileuri.FromPath(filepath.Join(alpha, "out")) + `"}}`
	for p, body := range map[string]string{
		filepath.Join(alpha, "job.yaml"):  alphaJob,
		filepath.Join(beta, "job.yaml"):   alphaJob,
		filepath.Join(beta, "sweep.yaml"): "name: s\njob: ../alpha/job.yaml\nparameters:\n  lora.rank: {grid: [4, 8]}\n",
	} {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(keyFile, filepath.Join(alpha, "nightly.yaml")); err != nil {
		t.Fatal(err)
	}
	const aliceTok, bobTok, opsTok = "alice-token-0123456789", "bob-token-0123456789xx", "ops-token-0123456789xx"
	cfg := r.roots(t) + "teams:\n  alpha: {allowed_roots: [" + alpha + "]}\n  beta: {allowed_roots: [" + beta + "]}\n" +
		"auth:\n  tokens:\n" +
		"    - {name: alice, token: " + aliceTok + ", role: submitter, team: alpha}\n" +
		"    - {name: bob, token: " + bobTok + ", role: submitter, team: beta}\n" +
		"    - {name: ops, token: " + opsTok + ", role: admin, team: ops}\n" +
		"scheduler:\n  leader_ttl: 2s\n  place_interval: 100ms\nschedules:\n" +
		"  - {name: alpha-nightly, cron: \"@every 2s\", job: alpha/nightly.yaml, team: alpha, concurrency: allow}\n" +
		"  - {name: beta-nightly, cron: \"@every 2s\", job: beta/job.yaml, team: beta, concurrency: allow}\n"
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d, base := r.scheduler(t)

	schedulesAs := func(tok string) (map[string]wire.ScheduleInfo, string) {
		m, out := r.schedulesAs(t, base, tok)
		table, _, _ := cliAs(t, r.lathe, base, tok, "schedules")
		return m, out + table
	}
	waitfor.True(t, time.Minute, "both schedules' ticks failed", func() bool {
		m, _ := schedulesAs(opsTok)
		return m["alpha-nightly"].Outcome == jobstore.TickFailed && m["beta-nightly"].Outcome == jobstore.TickFailed
	})
	for tok, want := range map[string]struct{ name, msg string }{
		aliceTok: {"alpha-nightly", "not under an allowed root of team alpha (teams.alpha.allowed_roots: " + alpha + ")"},
		bobTok:   {"beta-nightly", "dataset: not under an allowed root of team beta (teams.beta.allowed_roots: " + beta + ")"},
	} {
		m, text := schedulesAs(tok)
		if len(m) != 1 || !strings.Contains(m[want.name].Message, want.msg) {
			t.Errorf("token %s… sees %v; want only %s, its message naming %q", tok[:5], m, want.name, want.msg)
		}
		if strings.Contains(text, secret) {
			t.Errorf("lathe schedules shows the ledger key to %s…", tok[:5])
		}
	}
	if _, text := schedulesAs(opsTok); strings.Contains(text, secret) || strings.Contains(text, "alpha/train.jsonl") {
		t.Errorf("lathe schedules (admin) shows what the files hold:\n%s", text)
	}
	if strings.Contains(d.output(), secret) {
		t.Errorf("lathed's log shows the ledger key")
	}

	// Team beta's own submits naming alpha's data are refused, naming the
	// field and the rule; alpha's are accepted.
	rule := "not under an allowed root of team beta (teams.beta.allowed_roots: " + beta + ")"
	if _, errOut, code := cliAs(t, r.lathe, base, bobTok, "submit", filepath.Join(alpha, "job.yaml")); code == 0 ||
		!strings.Contains(errOut, "dataset") || !strings.Contains(errOut, rule) {
		t.Errorf("beta's submit of alpha's job: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cliAs(t, r.lathe, base, bobTok, "sweep", "submit", filepath.Join(beta, "sweep.yaml")); code == 0 ||
		!strings.Contains(errOut, "trials[0].dataset") || !strings.Contains(errOut, rule) {
		t.Errorf("beta's sweep built on alpha's job file: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cliAs(t, r.lathe, base, aliceTok, "submit", filepath.Join(alpha, "job.yaml")); code != 0 {
		t.Errorf("alpha's own job: exit %d: %s", code, errOut)
	}
}
