package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/ledger/ledgertest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing"
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
budgets: {teams: {ml: 1000}}
`

const admitSpec = `{"name":"same","base_model":"tiny-char","dataset":"file:///data/train.jsonl","training":{"max_steps":300},"lora":{"rank":8},"resources":{"gpus":1},"priority":"batch"}`

// TestOneAdmissionPath: the same spec admitted as a submit, as a job of a
// batch, as a schedule's run and as a sweep's only trial is stored the
// same: the records are equal but for the id (and the output folder named
// after it), the times, and what only a trial has (its name "same-0", its
// sweep fields, its route's path "sweep"). Each holds its reservation from the script that
// stored it, and each decision is in the ledger under its job.
// admitRig is a control plane over a real redis-server with a priced
// local pool (admitConfig: $2 a GPU-hour, team ml's budget cfgText's), a
// ledger, a node with one H100 and tiny-char's learned speed on it, so
// every decision has a runtime and a cost ($0.083 for admitSpec).
type admitRig struct {
	ctx   context.Context
	rdb   *redis.Client
	store *jobstore.Store
	led   *ledger.Ledger
	s     *Scheduler
	cfg   Config
}

// runningSince makes job id's first attempt running on n1 for d already
// (dispatched and claimed through a store whose clock is d behind, as a
// worker would have), then starts the control plane.
func (r admitRig) runningSince(t *testing.T, id string, d time.Duration) {
	t.Helper()
	past := jobstore.New(r.rdb, jobstore.Config{Now: func() time.Time { return time.Now().Add(-d) }})
	if err := past.Dispatch(r.ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 4, GPUs: []int{0}}); err != nil {
		t.Fatal(err)
	}
	if out, err := past.Claim(r.ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "i1", Lease: time.Hour}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	if err := r.s.Start(r.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.s.Stop(context.Background()) })
}

func newAdmitRig(t *testing.T, cfgText string) admitRig {
	t.Helper()
	return newAdmitRigWith(t, cfgText, nil)
}

// newAdmitRigWith is newAdmitRig with mod applied to the scheduler's
// config before it is built.
func newAdmitRigWith(t *testing.T, cfgText string, mod func(*Config)) admitRig {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	cfg, err := routecfg.ParseConfig([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	led := ledgertest.New(t, rdb)
	sc := Config{Routing: cfg, Ledger: led, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}, PlaceInterval: 20 * time.Millisecond}
	if mod != nil {
		mod(&sc)
	}
	r := admitRig{ctx: context.Background(), rdb: rdb, store: store, led: led, s: New(rdb, store, sc), cfg: sc}
	if err := store.Heartbeat(r.ctx, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 4,
		GPUs: []jobtype.GPU{{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559}},
	}, jobstore.HeartbeatOptions{TTL: time.Hour, First: true}); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordStepTime(r.ctx, "tiny-char", "NVIDIA H100 80GB HBM3", 0.5); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOneAdmissionPath(t *testing.T) {
	r := newAdmitRig(t, admitConfig)
	ctx, rdb, store, led, s := r.ctx, r.rdb, r.store, r.led, r.s
	const secret = "admit-test-secret-0123456789"
	hs := httptest.NewServer(api.New(s, rdb, store, api.Config{Ledger: led, Logger: r.cfg.Logger, Defaults: r.cfg.Defaults,
		Tokens: []plane.Token{{Name: "alice", Secret: secret, Role: plane.RoleSubmitter, Team: "ml"}}}).Handler())
	t.Cleanup(hs.Close)
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
	spec, runID, existed, err := scheduledRun(t, s, p, admitSpec)
	if err != nil || existed {
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

// TestHeldJobDecidedWhenMoneyFrees: a job held because its reservation
// lost the race to the team's last dollars is decided again, and
// reserved, by the next placement round after a settlement frees money in
// the month; while nothing frees money it stays held and is not decided
// again.
func TestHeldJobDecidedWhenMoneyFrees(t *testing.T) {
	r := newAdmitRig(t, strings.Replace(admitConfig, "{ml: 1000}", "{ml: 0.10}", 1))
	ctx, store := r.ctx, r.store
	spec, err := jobspec.Parse([]byte(admitSpec))
	if err != nil {
		t.Fatal(err)
	}
	spec.Normalize(r.cfg.Defaults)
	created, err := r.s.Submit(ctx, plane.Admission{Who: plane.Principal{Name: "alice", Team: "ml"}, Jobs: []jobstore.NewJob{{Spec: spec}}})
	if err != nil || created[0].Job.BudgetReservedUSD <= 0 {
		t.Fatalf("first job: %+v %v", created, err)
	}
	first := created[0].Job
	// A second one whose decision read the spend before the first reserved:
	// its reservation in the create script loses, and it is stored held.
	month := jobstore.Month(time.Now())
	held, _, err := store.Create(ctx, jobstore.NewJob{Spec: spec.Clone(), Team: "ml", Route: first.Route,
		Budget: &jobstore.BudgetReservation{Month: month, USD: first.BudgetReservedUSD,
			Scopes: []jobstore.BudgetScope{{Scope: "backend:local"}, {Scope: "team:ml", Limit: 0.10}}}})
	if err != nil || held.Held == "" {
		t.Fatalf("second job not held: %+v %v", held, err)
	}
	if err := r.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.s.Stop(context.Background()) })
	// Rounds run (the first job is placed); the held one is not decided
	// again while no money frees: no decision of it on record.
	waitfor.True(t, 20*time.Second, "the first job placed", func() bool {
		j, _ := store.Get(ctx, first.ID)
		return j != nil && j.State != jobtype.StateQueued
	})
	n := 0
	_ = r.led.Range(ctx, held.ID, func(ledger.Record) error { n++; return nil })
	if j, _ := store.Get(ctx, held.ID); j.Held == "" || n != 0 {
		t.Fatalf("with no money freed: held %q, %d decisions recorded", j.Held, n)
	}
	// The first job ends at a cent: its reservation is freed.
	if _, err := store.Cancel(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if err := store.Settle(ctx, first.ID, 0.01); err != nil {
		t.Fatal(err)
	}
	j := waitfor.Value(t, 20*time.Second, "the held job decided again and reserved", func() *jobtype.Job {
		j, _ := store.Get(ctx, held.ID)
		return j
	}, func(j *jobtype.Job) bool { return j != nil && j.Held == "" && j.BudgetReservedUSD > 0 })
	if j.Route == nil || j.Route.Path != "budget" {
		t.Fatalf("route %+v, want one decided on path budget", j.Route)
	}
}

// TestSweepKeyFirst: the same sweep sent twice at once with one
// Idempotency-Key gives the same sweep both times, though the team's
// budget holds one sweep's reservation only: the key is claimed before
// anything is decided, so the second request waits for the first's
// outcome instead of being decided against the budget the first took.
// Ten teams, a pair of requests each, all at once; then the key sent
// again once the first sweep's money is spent (the same sweep, not a
// refusal); then a job's key and a batch's keys the same way.
func TestSweepKeyFirst(t *testing.T) {
	budgets := "budgets: {teams: {tj: 0.10, tb: 0.20, "
	for i := range 10 {
		budgets += fmt.Sprintf("t%d: 0.10, ", i)
	}
	r := newAdmitRig(t, strings.Replace(admitConfig, "budgets: {teams: {ml: 1000}}", strings.TrimSuffix(budgets, ", ")+"}}", 1))
	sp, err := sweepspec.Parse([]byte(`{"job":`+admitSpec+`,"parameters":{"lora.rank":{"grid":[8]}}}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		team string
		id   string
		err  error
	}
	out := make(chan result, 20)
	for i := range 10 {
		team := fmt.Sprintf("t%d", i)
		for range 2 {
			go func() {
				req := plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Idem: team + "/alice:nightly",
					Who: plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: team}}
				sw, _, err := r.s.SubmitSweep(r.ctx, req)
				res := result{team: team, err: err}
				if sw != nil {
					res.id = sw.ID
				}
				out <- res
			}()
		}
	}
	got := map[string][]string{}
	for range 20 {
		res := <-out
		if res.err != nil {
			t.Errorf("team %s: %v", res.team, res.err)
			continue
		}
		got[res.team] = append(got[res.team], res.id)
	}
	for team, ids := range got {
		if len(ids) != 2 || ids[0] != ids[1] {
			t.Errorf("team %s: sweeps %v, want one sweep twice", team, ids)
		}
	}
	// A retry after the first was stored, when the budget it took is
	// spent (its trial ended and settled at the team's whole $0.10: a
	// new sweep would be refused, TestSweepWaitsForReservedMoney): the
	// same sweep, not a refusal. (Fails when the key is looked up after
	// routing.)
	tid := jobstore.TrialID(got["t0"][0], 0)
	if _, err := r.store.Cancel(r.ctx, tid); err != nil {
		t.Fatal(err)
	}
	if err := r.store.Settle(r.ctx, tid, 0.10); err != nil {
		t.Fatal(err)
	}
	req := plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Idem: "t0/alice:nightly",
		Who: plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: "t0"}}
	sw, existed, err := r.s.SubmitSweep(r.ctx, req)
	if err != nil || !existed || sw.ID != got["t0"][0] {
		t.Fatalf("retry with the key: %+v existed=%v %v; want sweep %s", sw, existed, err, got["t0"][0])
	}
	// The same for a job's key: stored once, then sent again when the
	// team's budget is full of its own reservation.
	spec, err := jobspec.Parse([]byte(admitSpec))
	if err != nil {
		t.Fatal(err)
	}
	spec.Normalize(r.cfg.Defaults)
	a := plane.Admission{Who: plane.Principal{Name: "alice", Team: "tj"}, Jobs: []jobstore.NewJob{{Spec: spec, IdempotencyKey: "tj/alice:j"}}}
	first, err := r.s.Submit(r.ctx, a)
	if err != nil || first[0].Existed {
		t.Fatalf("the job: %+v %v", first, err)
	}
	again, err := r.s.Submit(r.ctx, a)
	if err != nil || !again[0].Existed || again[0].Job.ID != first[0].Job.ID {
		t.Fatalf("the job's retry: %+v %v; want job %s", again, err, first[0].Job.ID)
	}
	// And a batch's keys: two jobs that fill team tb's budget, sent twice
	// at once, then once more: the same two jobs every time.
	batch := plane.Admission{Who: plane.Principal{Name: "alice", Team: "tb"}, Batch: true, Jobs: []jobstore.NewJob{
		{Spec: spec, IdempotencyKey: "tb/alice/batch:k#0"}, {Spec: spec, IdempotencyKey: "tb/alice/batch:k#1"}}}
	type batchResult struct {
		ids string
		err error
	}
	bout := make(chan batchResult, 3)
	send := func() {
		cs, err := r.s.Submit(r.ctx, batch)
		var ids []string
		for _, c := range cs {
			ids = append(ids, c.Job.ID)
		}
		bout <- batchResult{strings.Join(ids, ","), err}
	}
	go send()
	go send()
	b1, b2 := <-bout, <-bout
	send()
	b3 := <-bout
	if b1.err != nil || b2.err != nil || b3.err != nil || b1.ids != b2.ids || b1.ids != b3.ids || strings.Count(b1.ids, ",") != 1 {
		t.Fatalf("the batch sent three times: %+v %+v %+v; want the same two jobs each time", b1, b2, b3)
	}
}

// TestSweepWaitsForReservedMoney: while another sweep of the team holds
// the team's budget reserved, a new sweep is admitted and its trial waits
// with a gate naming the budget (it is not refused whole); when the first
// trial settles the waiting one is admitted with its reservation. A sweep
// whose money is spent, not reserved, is still refused.
func TestSweepWaitsForReservedMoney(t *testing.T) {
	r := newAdmitRig(t, strings.Replace(admitConfig, "{ml: 1000}", "{ml: 0.10}", 1))
	ctx, store := r.ctx, r.store
	sp, err := sweepspec.Parse([]byte(`{"job":`+admitSpec+`,"parameters":{"lora.rank":{"grid":[8]}}}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	who := plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: "ml"}
	submit := func() (*jobtype.Sweep, error) {
		sw, _, err := r.s.SubmitSweep(ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: who})
		return sw, err
	}
	first, err := submit()
	if err != nil {
		t.Fatal(err)
	}
	second, err := submit()
	if err != nil {
		t.Fatalf("a sweep while the team's budget is reserved by another: %v", err)
	}
	trial := func(sw *jobtype.Sweep) *jobtype.Job {
		j, err := store.Get(ctx, jobstore.TrialID(sw.ID, 0))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	if j := trial(second); j.BudgetReservedUSD != 0 || !strings.Contains(j.Trial.Gate, "team:ml's") {
		t.Fatalf("second sweep's trial: reserved %v, gate %q", j.BudgetReservedUSD, j.Trial.Gate)
	}
	// The first trial ends at a cent: its money frees, the second's trial
	// is admitted with its reservation.
	ft := trial(first)
	if _, err := store.Cancel(ctx, ft.ID); err != nil {
		t.Fatal(err)
	}
	if err := store.Settle(ctx, ft.ID, 0.01); err != nil {
		t.Fatal(err)
	}
	if err := store.SettleTrial(ctx, first.ID, ft.ID, 0.01, 0); err != nil {
		t.Fatal(err)
	}
	if adm, err := store.AdmitTrials(ctx, second.ID); err != nil || len(adm.IDs) != 1 {
		t.Fatalf("admit after the money freed: %+v %v", adm, err)
	}
	if j := trial(second); j.BudgetReservedUSD <= 0 {
		t.Fatalf("second sweep's trial admitted without its reservation: %+v", j)
	}
	// Spent, not reserved: $0.095 of $0.10 gone, the next sweep is refused.
	st := trial(second)
	if _, err := store.Cancel(ctx, st.ID); err != nil {
		t.Fatal(err)
	}
	if err := store.Settle(ctx, st.ID, 0.085); err != nil {
		t.Fatal(err)
	}
	var re *plane.RefusedError
	if _, err := submit(); !errors.As(err, &re) {
		t.Fatalf("a sweep over the team's spent budget: %v, want a refusal", err)
	}
}

// TestSweepCapOnActualSpend: a sweep capped at $0.10 whose one trial was
// estimated at $0.083 but has run three times as long ($0.25 at $2 a
// GPU-hour for 7.5 minutes) is stopped by the sweep duty: the trial's stop
// is asked with reason budget, naming what was spent, though no estimate
// passed the cap.
func TestSweepCapOnActualSpend(t *testing.T) {
	r := newAdmitRig(t, admitConfig)
	ctx := r.ctx
	_, id := r.cappedSweepRunning(t, 450*time.Second)
	j := waitfor.Value(t, 20*time.Second, "the trial asked to stop for the sweep's budget", func() *jobtype.Job {
		j, _ := r.store.Get(ctx, id)
		return j
	}, func(j *jobtype.Job) bool {
		return j != nil && j.Trial != nil && j.Trial.StopRequested == jobtype.ReasonBudget
	})
	if j.State != jobtype.StateRunning || !j.CancelRequested {
		t.Fatalf("trial %s, cancel requested %v: want running, asked to stop", j.State, j.CancelRequested)
	}
}

// TestTeamCapOnActualSpend: a job of team ml (budget $0.10) estimated at
// $0.083 that has run 7.5 minutes ($0.25 at $2 a GPU-hour) is asked to
// stop, reason budget, by the leader's settle duty: the team's cap limits
// what its running jobs really cost, not only their estimates.
func TestTeamCapOnActualSpend(t *testing.T) {
	r := newAdmitRig(t, strings.Replace(admitConfig, "{ml: 1000}", "{ml: 0.10}", 1))
	ctx := r.ctx
	spec, err := jobspec.Parse([]byte(admitSpec))
	if err != nil {
		t.Fatal(err)
	}
	spec.Normalize(r.cfg.Defaults)
	created, err := r.s.Submit(ctx, plane.Admission{Who: plane.Principal{Name: "alice", Team: "ml"}, Jobs: []jobstore.NewJob{{Spec: spec}}})
	if err != nil {
		t.Fatal(err)
	}
	id := created[0].Job.ID
	r.runningSince(t, id, 450*time.Second)
	waitfor.True(t, 20*time.Second, "the job asked to stop for its team's budget", func() bool {
		evs, _ := r.store.Events(ctx, id, "", 100)
		for _, e := range evs {
			if e.Type == "stop_requested" && strings.Contains(string(e.Data), `"reason":"budget"`) {
				return true
			}
		}
		return false
	})
}

// TestCapGuardsLookAhead: with a kill grace of 2 minutes, a trial (and a
// job of team ml) that has run 60 s at $2 a GPU-hour, $0.033 of a $0.10
// cap, is asked to stop while the cap is far from reached: by the time
// the guard's next pass could stop it (its interval plus the kill grace,
// 121 s for the sweep, 122 s for the team) it would be, $0.10. The stop
// names both figures. A late first pass (a busy machine) moves them by
// $0.0006 a second, and the spend to now stays under $0.095 for 110 s.
// (Without the look-ahead it is stopped only once its cost reached the
// cap, two minutes later: the wait for the stop times out.)
func TestCapGuardsLookAhead(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		start        func(r *admitRig) string
		why          string
	}{
		{"sweep", admitConfig, func(r *admitRig) string { _, id := r.cappedSweepRunning(t, 60*time.Second); return id },
			`sweep budget reached: \$0\.0[3-9] of \$0\.10 spent, \$0\.1\d once its running trials are stopped`},
		{"team", strings.Replace(admitConfig, "{ml: 1000}", "{ml: 0.10}", 1), func(r *admitRig) string {
			spec, err := jobspec.Parse([]byte(admitSpec))
			if err != nil {
				t.Fatal(err)
			}
			spec.Normalize(r.cfg.Defaults)
			created, err := r.s.Submit(r.ctx, plane.Admission{Who: plane.Principal{Name: "alice", Team: "ml"}, Jobs: []jobstore.NewJob{{Spec: spec}}})
			if err != nil {
				t.Fatal(err)
			}
			r.runningSince(t, created[0].Job.ID, 60*time.Second)
			return created[0].Job.ID
		}, `team ml's monthly budget reached: \$0\.0[3-9] of \$0\.10 spent, \$0\.1\d once its running jobs are stopped`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newAdmitRigWith(t, tc.config, func(c *Config) { c.KillGrace = 2 * time.Minute })
			id := tc.start(&r)
			msg := waitfor.Value(t, 20*time.Second, "job "+id+" asked to stop for its budget", func() string {
				msg, _ := r.rdb.HGet(r.ctx, "lathe:job:"+id, "stop_message").Result()
				return msg
			}, func(msg string) bool { return msg != "" })
			if !regexp.MustCompile(tc.why).MatchString(msg) {
				t.Fatalf("stop message %q; want it to match %q", msg, tc.why)
			}
		})
	}
}

// TestSweepCancelFinishedByDuty: a sweep whose cancel was cut short (the
// sweep marked cancelled, its trials still queued, as when the request
// timed out after the first of its chunks) is finished by the leader's
// sweep duty: every trial not started ends cancelled, and one dispatched
// (to a node with no worker here) is asked to cancel.
func TestSweepCancelFinishedByDuty(t *testing.T) {
	r := newAdmitRig(t, admitConfig)
	ctx := r.ctx
	sp, err := sweepspec.Parse([]byte(`{"job":`+admitSpec+`,"parameters":{"lora.rank":{"grid":[4,8,16,32,64]}},"max_parallel":2}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sw, _, err := r.s.SubmitSweep(ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()),
		Who: plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: "ml"}})
	if err != nil {
		t.Fatal(err)
	}
	// The cut-short cancel: the sweep record says cancelled, nothing else ran.
	if err := r.rdb.HSet(ctx, "lathe:sweep:"+sw.ID, "state", string(jobtype.SweepCancelled)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.s.Stop(context.Background()) })
	waitfor.True(t, 20*time.Second, "every trial of the cancelled sweep ended or asked to", func() bool {
		jobs, err := r.store.SweepTrials(ctx, sw.ID, 0, 0)
		if err != nil || len(jobs) != 5 {
			return false
		}
		for _, j := range jobs {
			if j == nil || !(j.State.Terminal() || j.CancelRequested) {
				return false
			}
		}
		return true
	})
}

// cappedSweepRunning submits a one-trial sweep capped at $0.10 for team ml
// and makes its trial's attempt run for 450 s (past the cap at its price).
func (r *admitRig) cappedSweepRunning(t *testing.T, ran time.Duration) (*jobtype.Sweep, string) {
	t.Helper()
	sp, err := sweepspec.Parse([]byte(`{"job":`+admitSpec+`,"parameters":{"lora.rank":{"grid":[8]}},"budget_usd":0.10}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sw, _, err := r.s.SubmitSweep(r.ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()),
		Who: plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: "ml"}})
	if err != nil {
		t.Fatal(err)
	}
	id := jobstore.TrialID(sw.ID, 0)
	r.runningSince(t, id, ran)
	return sw, id
}

// TestClaimReleasedWhenRedisReturns: an admission holds its claim on a
// sweep's idempotency key when redis-server (AOF on) is killed, so its
// release fails; Redis comes back from its AOF with the claim in it. The
// claim is released as soon as Redis answers again, not a minute later
// when it lapses (claimTTL): the key can be claimed again at once, so a
// request sent again with it is admitted instead of waiting and being
// answered 503. (Fails without releaseKey's retries: the claim stays.)
func TestClaimReleasedWhenRedisReturns(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{AOF: true})
	rdb := srv.Client()
	ctx := context.Background()
	ad := &admission{store: jobstore.New(rdb, jobstore.Config{}), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	const key = "team/alice:nightly"
	existing, release, err := ad.claimKey(ctx, jobstore.IdemSweep, key, "fp")
	if err != nil || existing != "" || release == nil {
		t.Fatalf("claimKey: %q %v", existing, err)
	}
	srv.Kill()
	aof, err := os.ReadFile(filepath.Join(srv.Dir, "appendonlydir", "appendonly.aof.1.incr.aof"))
	if err != nil || !bytes.Contains(aof, []byte("lathe:sweepidem:"+key)) || !bytes.Contains(aof, []byte("pending:")) {
		t.Fatalf("the AOF does not hold the claim (%v):\n%q", err, aof)
	}
	release() // Redis is down: this release is not answered
	srv.Restart()
	waitfor.True(t, claimTTL/4, "the claim released once Redis answered again", func() bool {
		n, err := rdb.Exists(ctx, "lathe:sweepidem:"+key).Result()
		return err == nil && n == 0
	})
	other, release2, err := ad.claimKey(ctx, jobstore.IdemSweep, key, "fp")
	if err != nil || other != "" || release2 == nil {
		t.Fatalf("claim after the release: %q %v", other, err)
	}
	release2()
}

// lostReply is a go-redis hook that loses the answer of the first command
// whose arguments hold match: the command runs in Redis, and the caller
// gets io.ErrUnexpectedEOF, as when the primary dies after running it.
type lostReply struct {
	match string
	done  bool
}

func (h *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.done || err != nil || !strings.Contains(fmt.Sprint(cmd.Args()...), h.match) {
			return err
		}
		h.done = true
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

// TestClaimWithLostAnswerReleased: the claim of an idempotency key is
// stored but its answer is lost (a stand-in hook: the script runs in the
// real Redis, the client gets io.ErrUnexpectedEOF, as when a Sentinel
// primary is killed after replicating it). The claim is dropped, so a
// request sent again with the key claims it at once instead of waiting up
// to claimTTL for it to lapse. (Fails without the release on an
// unreachable claim: the key stays claimed.)
func TestClaimWithLostAnswerReleased(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	const key = "team/alice:lost"
	rdb.AddHook(&lostReply{match: "lathe:sweepidem:" + key})
	ctx := context.Background()
	ad := &admission{store: jobstore.New(rdb, jobstore.Config{}), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, _, err := ad.claimKey(ctx, jobstore.IdemSweep, key, "fp"); !jobstore.Unreachable(err) {
		t.Fatalf("claimKey with its answer lost: %v, want an unreachable error", err)
	}
	if n, err := rdb.Exists(ctx, "lathe:sweepidem:"+key).Result(); err != nil || n != 0 {
		t.Fatalf("the claim whose answer was lost is still there (%d, %v)", n, err)
	}
	cctx, cancel := context.WithTimeout(ctx, claimTTL/4)
	defer cancel()
	other, release, err := ad.claimKey(cctx, jobstore.IdemSweep, key, "fp")
	if err != nil || other != "" || release == nil {
		t.Fatalf("claim sent again: %q %v", other, err)
	}
	release()
}

// TestMultiNodeAdmission: a job that spans nodes is admitted for the
// local pool (a submit and a batch), with two nodes that fit it; a sweep
// whose trials span nodes is refused naming resources.nodes.
func TestMultiNodeAdmission(t *testing.T) {
	r := newAdmitRig(t, admitConfig)
	ctx, rdb, store, s := r.ctx, r.rdb, r.store, r.s
	if err := store.Heartbeat(ctx, jobstore.Node{Name: "n2", Incarnation: "i2", Backend: "local", Slots: 4,
		GPUs: []jobtype.GPU{{Index: 0, UUID: "GPU-b", Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559}},
	}, jobstore.HeartbeatOptions{TTL: time.Hour, First: true}); err != nil {
		t.Fatal(err)
	}
	const secret = "admit-test-secret-0123456789"
	hs := httptest.NewServer(api.New(s, rdb, store, api.Config{Ledger: r.led, Logger: r.cfg.Logger, Defaults: r.cfg.Defaults,
		Tokens: []plane.Token{{Name: "alice", Secret: secret, Role: plane.RoleSubmitter, Team: "ml"}}}).Handler())
	t.Cleanup(hs.Close)
	gang := strings.Replace(admitSpec, `"resources":{"gpus":1}`, `"resources":{"gpus":1,"nodes":2}`, 1)
	for _, c := range []struct{ path, body string }{{"/api/v1/jobs", gang}, {"/api/v1/jobs/batch", `{"jobs":[` + gang + `]}`}} {
		req, _ := http.NewRequest("POST", hs.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			t.Errorf("POST %s: %d %s; want the gang admitted for the local pool", c.path, resp.StatusCode, b)
		}
	}
	p := plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: "ml"}
	sp, err := sweepspec.Parse([]byte(`{"job":`+gang+`,"parameters":{"lora.rank":{"grid":[8]}}}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.admit.admitSweep(ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: p}); err == nil ||
		!strings.Contains(err.Error(), "resources.nodes") || !strings.Contains(err.Error(), "sweeps do not run trials that span nodes") {
		t.Errorf("sweep: %v; want a refusal naming resources.nodes", err)
	}
}

// TestGangRefusedOffLocal: a decision that sends a job spanning nodes to a
// cloud backend is refused, naming the backend and its kind; one to the
// local pool, or of one node, stands.
func TestGangRefusedOffLocal(t *testing.T) {
	cloud := routing.Decision{Backend: "aws-eu", Candidates: []routing.Candidate{{Backend: "local", Kind: "local"}, {Backend: "aws-eu", Kind: "aws"}}}
	if d := refuseGangOffLocal(cloud, 2); !d.Refused || !strings.Contains(d.Reasons[0], "backend aws-eu (aws)") || !strings.Contains(d.Reasons[0], "resources.nodes 2") {
		t.Fatalf("gang to aws: %+v", d)
	}
	if d := refuseGangOffLocal(cloud, 1); d.Refused {
		t.Fatalf("one node to aws refused: %+v", d)
	}
	local := cloud
	local.Backend = "local"
	if d := refuseGangOffLocal(local, 2); d.Refused {
		t.Fatalf("gang to local refused: %+v", d)
	}
}

// scheduledRun admits body as a schedule's run would (admitRun), under a
// tick's id; it returns the spec as parsed and normalised and the id.
func scheduledRun(t *testing.T, s *Scheduler, p plane.Principal, body string) (*jobspec.Spec, string, bool, error) {
	t.Helper()
	spec, err := jobspec.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	spec.Normalize(s.cfg.Defaults)
	runID := jobstore.TickID("j-", "nightly", time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC))
	_, existed, err := s.admit.admitRun(context.Background(), p, runID, spec)
	return spec, runID, existed, err
}
