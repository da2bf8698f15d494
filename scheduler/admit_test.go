package scheduler

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/ledger/ledgertest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// admitConfig prices the local pool and gives team ml a budget, so that
// every admission routes, estimates and reserves.
const admitConfig = `
sites:
  dc: [onprem]
redis_site: dc
backends:
  local:
    kind: local
    site: dc
    price: {usd_per_gpu_hour: 2.00}
team_budgets_usd: {ml: 1000}
`

const admitSpec = `{"name":"same","base_model":"tiny-char","dataset":"file:///data/train.jsonl","training":{"max_steps":300},"lora":{"rank":8},"resources":{"gpus":1},"priority":"batch"}`

// TestOneAdmissionPath: the same spec admitted as a submit, as a job of a
// batch, as a schedule's run and as a sweep's only trial is stored the
// same: the records are equal but for the id (and the output folder named
// after it), the times, and what only a trial has (its name "same-0", its
// sweep fields, its route's path "sweep"). Each holds its reservation from the script that
// stored it, and each decision is in the ledger under its job.
func TestOneAdmissionPath(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	cfg, err := routecfg.ParseConfig([]byte(admitConfig))
	if err != nil {
		t.Fatal(err)
	}
	led := ledgertest.New(t, rdb)
	const secret = "admit-test-secret-0123456789"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	defaults := jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}
	s := New(rdb, store, Config{Routing: cfg, Ledger: led, Logger: quiet, Defaults: defaults})
	hs := httptest.NewServer(api.New(s, rdb, store, api.Config{Ledger: led, Logger: quiet, Defaults: defaults,
		Tokens: []plane.Token{{Name: "alice", Secret: secret, Role: plane.RoleSubmitter, Team: "ml"}}}).Handler())
	t.Cleanup(hs.Close)
	ctx := context.Background()
	// A node with a GPU, and the learned speed of tiny-char on it, so the
	// decision has a runtime and a cost.
	if err := store.Heartbeat(ctx, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 4,
		GPUs: []jobtype.GPU{{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559}},
	}, jobstore.HeartbeatOptions{TTL: time.Hour, First: true}); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordStepTime(ctx, "tiny-char", "NVIDIA H100 80GB HBM3", 0.5); err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) []byte {
		req, _ := http.NewRequest("POST", hs.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	var single jobtype.Job
	if err := json.Unmarshal(post("/api/v1/jobs", admitSpec), &single); err != nil {
		t.Fatal(err)
	}
	var batch struct{ Jobs []jobtype.Job }
	if err := json.Unmarshal(post("/api/v1/jobs/batch", `{"jobs":[`+admitSpec+`]}`), &batch); err != nil || len(batch.Jobs) != 1 {
		t.Fatalf("batch: %v %+v", err, batch)
	}
	p := plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: "ml"}
	spec, err := jobspec.Parse([]byte(admitSpec))
	if err != nil {
		t.Fatal(err)
	}
	spec.Normalize(s.cfg.Defaults)
	runID := jobstore.TickID("j-", "nightly", time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC))
	if _, existed, err := s.admit.admitRun(ctx, p, runID, spec); err != nil || existed {
		t.Fatalf("scheduled run: existed %v, %v", existed, err)
	}
	sp, err := sweepspec.Parse([]byte(`{"job":`+admitSpec+`,"parameters":{"lora.rank":{"grid":[8]}}}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sw, _, err := s.admit.admitSweep(ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: p})
	if err != nil {
		t.Fatal(err)
	}

	ids := map[string]string{"submit": single.ID, "batch": batch.Jobs[0].ID, "scheduled run": runID, "sweep trial": jobstore.TrialID(sw.ID, 0)}
	var want *jobtype.Job
	for _, path := range []string{"submit", "batch", "scheduled run", "sweep trial"} {
		j, err := store.Get(ctx, ids[path])
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if j.BudgetReservedUSD <= 0 || j.Route == nil || math.Abs(j.Route.EstCostUSD-j.BudgetReservedUSD) > 1e-6 || j.Route.LedgerSeq == 0 {
			t.Fatalf("%s: reserved %v, route %+v: want the estimate reserved and the decision on record", path, j.BudgetReservedUSD, j.Route)
		}
		if j.OutputURI != spec.JobOutputURI(j.ID) {
			t.Errorf("%s: output %s, want %s", path, j.OutputURI, spec.JobOutputURI(j.ID))
		}
		var recs []ledger.Record
		if err := led.Range(ctx, j.ID, func(r ledger.Record) error { recs = append(recs, r); return nil }); err != nil || len(recs) != 1 || recs[0].Kind != "decision" {
			t.Fatalf("%s: ledger records %+v %v", path, recs, err)
		}
		norm := *j
		if path == "sweep trial" {
			// A sweep names its trials after it ("same-0").
			if j.Name != "same-0" || j.Spec.Name != "same-0" {
				t.Errorf("trial named %q (spec %q), want same-0", j.Name, j.Spec.Name)
			}
			norm.Name, norm.Spec.Name = "same", "same"
		}
		norm.ID, norm.OutputURI, norm.CreatedAt, norm.UpdatedAt, norm.Trial = "", "", time.Time{}, time.Time{}, nil
		ri := *j.Route
		ri.DecidedAt, ri.LedgerSeq, ri.Path = time.Time{}, 0, ""
		norm.Route = &ri
		if want == nil {
			want = &norm
			continue
		}
		a, _ := json.Marshal(want)
		b, _ := json.Marshal(&norm)
		if string(a) != string(b) {
			t.Errorf("%s's record differs from submit's:\n%s\n%s", path, b, a)
		}
	}
}
