package jobstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// sweepOf builds a NewSweep of n trials (each estimated at $1 and 0.5
// GPU-h, with one decision record), its sweep record as set changes it.
func sweepOf(n int, set func(*jobtype.Sweep)) jobstore.NewSweep {
	id := jobstore.NewSweepID(time.Now())
	sw := jobtype.Sweep{ID: id, Name: "lr", Search: "grid", Metric: "eval_loss", Goal: "minimize", MaxParallel: n,
		Submitter: "ada", Team: "ml", Spec: json.RawMessage(`{"name":"lr"}`)}
	if set != nil {
		set(&sw)
	}
	ns := jobstore.NewSweep{Sweep: sw}
	for i := range n {
		tid := jobstore.TrialID(id, i)
		ns.Trials = append(ns.Trials, jobstore.NewTrial{
			Job: jobstore.NewJob{ID: tid, Spec: spec(fmt.Sprintf("lr-%d", i), jobspec.PriorityBatch), OutputURI: "file:///out/{id}",
				Route: &jobtype.RouteInfo{Backend: "local", Path: "submit"},
				Records: func(seq int64) []ledger.Record {
					return []ledger.Record{{Kind: "decision", JobID: tid, Body: json.RawMessage(`{}`)}}
				}},
			Index: i, Params: []jobtype.Param{{Path: "training.learning_rate", Value: 0.001 * float64(i+1)}},
			EstUSD: 1, EstGPUHours: 0.5})
	}
	return ns
}

func testLedger(s *jobstore.Store) *ledger.Ledger {
	return ledger.New(s.Redis(), bytes.Repeat([]byte{7}, ledger.MinKeySize), s.Prefix())
}

// pendingHas reports whether id is in the pending set.
func pendingHas(t *testing.T, b testBundle, id string) bool {
	t.Helper()
	_, err := b.store.Redis().ZScore(b.ctx, b.store.Prefix()+"pending", id).Result()
	return err == nil
}

// TestCreateSweep: one call stores the sweep, every trial (a job with its
// trial fields and route) and one ledger record per trial (each route
// naming its record); the first max_parallel trials are admitted (pending,
// reserved against the sweep), the others wait with gate max_parallel; a
// second call with the same id, or the same idempotency key, stores nothing
// and returns the first sweep.
func TestCreateSweep(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	led := testLedger(s)
	ns := sweepOf(5, func(sw *jobtype.Sweep) { sw.MaxParallel = 2 })
	ns.IdempotencyKey = "nightly-1"
	sw, existed, err := s.CreateSweep(ctx, led, ns)
	if err != nil || existed {
		t.Fatalf("create: %v existed=%v", err, existed)
	}
	if sw.State != jobtype.SweepRunning || sw.Trials != 5 || sw.MaxParallel != 2 || sw.ReservedUSD != 2 || sw.ReservedGPUHours != 1 ||
		sw.SpentUSD != 0 || sw.Stalled != "" || sw.Name != "lr" || sw.Metric != "eval_loss" || sw.Team != "ml" || string(sw.Spec) != `{"name":"lr"}` {
		t.Fatalf("sweep: %+v", sw)
	}
	trials, err := s.SweepTrials(ctx, sw.ID, 0, 0)
	if err != nil || len(trials) != 5 {
		t.Fatalf("trials: %d, %v", len(trials), err)
	}
	for i, j := range trials {
		tr := j.Trial
		if j.ID != jobstore.TrialID(sw.ID, i) || j.State != jobtype.StateQueued || j.Attempt != 1 || tr == nil || tr.SweepID != sw.ID ||
			tr.Index != i || len(tr.Params) != 1 || tr.Params[0].Path != "training.learning_rate" || j.OutputURI != "file:///out/"+j.ID {
			t.Fatalf("trial %d: %+v (trial %+v)", i, j, tr)
		}
		admitted := i < 2
		if pendingHas(t, b, j.ID) != admitted || (tr.Gate == "") != admitted || (!admitted && tr.Gate != jobtype.ReasonMaxParallel) {
			t.Fatalf("trial %d: pending=%v gate %q; want admitted=%v", i, pendingHas(t, b, j.ID), tr.Gate, admitted)
		}
		if j.Route == nil || j.Route.LedgerSeq != int64(i+1) {
			t.Fatalf("trial %d: route %+v, want ledger seq %d", i, j.Route, i+1)
		}
	}
	sets, err := s.SweepSetsOf(ctx, sw.ID)
	if err != nil || sets.Waiting != 3 || sets.Active != 2 || sets.Paused != 0 {
		t.Fatalf("sets: %+v %v", sets, err)
	}
	// Again, by id and by key (another id): nothing new.
	if again, existed, err := s.CreateSweep(ctx, led, ns); err != nil || !existed || again.ID != sw.ID {
		t.Fatalf("again: %+v %v %v", again, existed, err)
	}
	other := sweepOf(2, nil)
	other.IdempotencyKey = "nightly-1"
	other.Sweep.Spec = ns.Sweep.Spec
	if again, existed, err := s.CreateSweep(ctx, led, other); err != nil || !existed || again.ID != sw.ID {
		t.Fatalf("same key: %+v %v %v", again, existed, err)
	}
	other.Sweep.Spec = json.RawMessage(`{"name":"other"}`)
	if _, _, err := s.CreateSweep(ctx, led, other); !errors.Is(err, jobstore.ErrIdempotencyConflict) {
		t.Fatalf("same key, another spec: %v", err)
	}
	if n, _ := s.Redis().ZCard(ctx, s.Prefix()+"jobs").Result(); n != 5 {
		t.Fatalf("%d jobs stored, want 5", n)
	}
	rep, err := led.Verify(ctx)
	if err != nil || len(rep.Problems) > 0 || rep.Records != 5 {
		t.Fatalf("ledger: %+v %v (want 5 records)", rep, err)
	}
	if running, _ := s.RunningSweeps(ctx); len(running) != 1 || running[0] != sw.ID {
		t.Fatalf("running sweeps: %v", running)
	}
}

// TestCreateSweepBudgets: admission stops at the first trial whose
// estimate does not fit a budget; it waits with the budget's gate, which
// is also the sweep's stalled, and every later trial waits (with the gate
// it was stored with: a sweep's trials are stored before any is admitted).
func TestCreateSweepBudgets(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	for _, c := range []struct {
		name   string
		set    func(*jobtype.Sweep)
		admits int
		gate   string
	}{
		{"usd", func(sw *jobtype.Sweep) { sw.BudgetUSD = 2.5 }, 2, "sweep budget: next trial $1.00, $0.50 of $2.50 left"},
		{"gpu hours", func(sw *jobtype.Sweep) { sw.BudgetGPUHours = 1.5 }, 3, "sweep budget: next trial 0.50 GPU-h, 0.00 of 1.50 GPU-h left"},
		{"exact", func(sw *jobtype.Sweep) { sw.BudgetUSD = 4 }, 4, "sweep budget: next trial $1.00, $0.00 of $4.00 left"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sw, _, err := s.CreateSweep(ctx, nil, sweepOf(6, c.set))
			if err != nil {
				t.Fatal(err)
			}
			if sw.Stalled != c.gate || sw.ReservedUSD != float64(c.admits) {
				t.Fatalf("stalled %q reserved $%v; want %q and $%d", sw.Stalled, sw.ReservedUSD, c.gate, c.admits)
			}
			trials, _ := s.SweepTrials(ctx, sw.ID, 0, 0)
			for i, j := range trials {
				gate := c.gate
				if i > c.admits {
					gate = jobtype.ReasonMaxParallel
				}
				if admitted := i < c.admits; pendingHas(t, b, j.ID) != admitted || (!admitted && j.Trial.Gate != gate) {
					t.Fatalf("trial %d: pending=%v gate %q", i, pendingHas(t, b, j.ID), j.Trial.Gate)
				}
			}
		})
	}
}

// TestCreateSweepRefuses: what CreateSweep is given is checked first;
// nothing is stored for a bad sweep.
func TestCreateSweepRefuses(t *testing.T) {
	b := setup(t)
	for _, c := range []struct {
		name string
		mut  func(*jobstore.NewSweep)
		want string
	}{
		{"bad id", func(ns *jobstore.NewSweep) { ns.Sweep.ID = "s-nope" }, `invalid sweep id "s-nope"`},
		{"no trials", func(ns *jobstore.NewSweep) { ns.Trials = nil }, "no trials given"},
		{"index", func(ns *jobstore.NewSweep) { ns.Trials[1].Index = 2 }, "trials[1].index = 2: want 1"},
		{"trial id", func(ns *jobstore.NewSweep) { ns.Trials[0].Job.ID = jobstore.NewID(time.Now()) }, "trials[0].id"},
		{"estimate", func(ns *jobstore.NewSweep) { ns.Trials[1].EstUSD = -1 }, "trials[1] estimates $-1"},
		{"budget", func(ns *jobstore.NewSweep) { ns.Sweep.BudgetUSD = -2 }, "budget_usd = -2"},
		{"spec", func(ns *jobstore.NewSweep) { ns.Sweep.Spec = json.RawMessage(`{`) }, "spec is not valid JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := sweepOf(2, nil)
			c.mut(&ns)
			if _, _, err := b.store.CreateSweep(b.ctx, nil, ns); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
	big := sweepOf(1, nil)
	big.Trials = make([]jobstore.NewTrial, jobstore.MaxSweepTrials+1)
	if _, _, err := b.store.CreateSweep(b.ctx, nil, big); err == nil || !strings.Contains(err.Error(), "10001 trials") {
		t.Fatalf("too many trials: %v", err)
	}
	if n, _ := b.store.Redis().DBSize(b.ctx).Result(); n != 0 {
		t.Fatalf("%d keys stored by refused sweeps", n)
	}
}

// TestCreateSweepMaxTrials: a sweep of MaxSweepTrials trials, each with a
// ledger record, is stored in one call (timed: docs target is under a
// second) and listed whole, in index order.
func TestCreateSweepMaxTrials(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	ns := sweepOf(jobstore.MaxSweepTrials, func(sw *jobtype.Sweep) { sw.MaxParallel = 8 })
	start := time.Now()
	sw, _, err := s.CreateSweep(ctx, testLedger(s), ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CreateSweep of %d trials with ledger records: %v", jobstore.MaxSweepTrials, time.Since(start))
	trials, err := s.SweepTrials(ctx, sw.ID, 0, 0)
	if err != nil || len(trials) != jobstore.MaxSweepTrials {
		t.Fatalf("listed %d trials, %v", len(trials), err)
	}
	for i, j := range trials {
		if j.Trial == nil || j.Trial.Index != i {
			t.Fatalf("trial %d: %+v", i, j.Trial)
		}
	}
	page, err := s.SweepTrials(ctx, sw.ID, 9990, 5)
	if err != nil || len(page) != 5 || page[0].Trial.Index != 9990 {
		t.Fatalf("page from 9990: %d trials, %v", len(page), err)
	}
	if sets, _ := s.SweepSetsOf(ctx, sw.ID); sets.Active != 8 || sets.Waiting != jobstore.MaxSweepTrials-8 {
		t.Fatalf("sets: %+v", sets)
	}
}

// BenchmarkCreateSweep10000 times CreateSweep of MaxSweepTrials trials,
// each with a ledger record, against a real redis-server.
func BenchmarkCreateSweep10000(b *testing.B) {
	srv := redistest.Start(b)
	bb := testBundle{store: jobstore.New(srv.Client(), jobstore.Config{}), ctx: context.Background()}
	led := testLedger(bb.store)
	for b.Loop() {
		ns := sweepOf(jobstore.MaxSweepTrials, func(sw *jobtype.Sweep) { sw.MaxParallel = 8 })
		if _, _, err := bb.store.CreateSweep(bb.ctx, led, ns); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCreateSweepLedgerRace: sweeps created while other appenders move
// the ledger's head are sealed again on the new head: the chain verifies,
// every trial has one decision record, and its route names it.
func TestCreateSweepLedgerRace(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	led := testLedger(s)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	sweeps := make([]jobstore.NewSweep, 3)
	for g := range 6 {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			if g < len(sweeps) {
				sweeps[g] = sweepOf(50, nil)
				if _, _, err := s.CreateSweep(ctx, led, sweeps[g]); err != nil {
					errs <- err
				}
				return
			}
			for range 20 {
				if _, err := led.Append(ctx, ledger.Record{Kind: "other", Body: json.RawMessage(`{}`)}); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rep, err := led.Verify(ctx)
	if err != nil || len(rep.Problems) > 0 || rep.Records != 3*20+3*50 {
		t.Fatalf("ledger: %d records, %+v, %v; want %d", rep.Records, rep.Problems, err, 3*20+3*50)
	}
	decision := map[string]int64{}
	if err := led.Range(ctx, "", func(r ledger.Record) error {
		if r.Kind == "decision" {
			if _, dup := decision[r.JobID]; dup {
				t.Errorf("two decisions for %s", r.JobID)
			}
			decision[r.JobID] = r.Seq
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range sweeps {
		trials, err := s.SweepTrials(ctx, ns.Sweep.ID, 0, 0)
		if err != nil || len(trials) != 50 {
			t.Fatalf("trials of %s: %d %v", ns.Sweep.ID, len(trials), err)
		}
		for _, j := range trials {
			if seq, ok := decision[j.ID]; !ok || j.Route == nil || j.Route.LedgerSeq != seq {
				t.Fatalf("trial %s: route %+v, its decision is record %d", j.ID, j.Route, seq)
			}
		}
	}
}

// TestStoreTrialsChunks: a sweep stored chunk by chunk. The first chunk
// stores the record (admitting, nothing admitted); a chunk that does not
// start where the stored trials end, another filler's chunk while the
// first filler's lease holds, and a chunk after a cancel store nothing;
// the last chunk moves the sweep to running with every trial waiting
// until AdmitTrials; the ledger verifies after it all.
func TestStoreTrialsChunks(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	led := testLedger(s)
	ns := sweepOf(250, func(sw *jobtype.Sweep) { sw.MaxParallel = 3 })
	chunk := func(from, to int) jobstore.NewSweep {
		c := ns
		c.Total, c.Trials = len(ns.Trials), ns.Trials[from:to]
		return c
	}
	sw, existed, err := s.StoreTrials(ctx, led, chunk(0, 100), "filler-a")
	if err != nil || existed || sw.State != jobtype.SweepAdmitting || sw.Stored != 100 || sw.Trials != 250 {
		t.Fatalf("first chunk: %+v %v %v", sw, existed, err)
	}
	if n, _ := s.Redis().ZCard(ctx, s.Prefix()+"pending").Result(); n != 0 {
		t.Fatalf("%d trials pending while the sweep is admitting, want 0", n)
	}
	var stale *jobstore.StaleChunkError
	if _, _, err := s.StoreTrials(ctx, led, chunk(200, 250), "filler-a"); !errors.As(err, &stale) || stale.Stored != 100 {
		t.Fatalf("a chunk past the stored trials: %v", err)
	}
	if _, _, err := s.StoreTrials(ctx, led, chunk(100, 200), "filler-b"); !errors.Is(err, jobstore.ErrFillerBusy) {
		t.Fatalf("another filler while the lease holds: %v", err)
	}
	if sw, _, err = s.StoreTrials(ctx, led, chunk(100, 200), "filler-a"); err != nil || sw.Stored != 200 || sw.State != jobtype.SweepAdmitting {
		t.Fatalf("second chunk: %+v %v", sw, err)
	}
	// The first filler's lease lapses (it died): another one goes on.
	s.Redis().Del(ctx, s.Prefix()+"sweep:"+sw.ID+":filler")
	if sw, _, err = s.StoreTrials(ctx, led, chunk(200, 250), "filler-b"); err != nil || sw.Stored != 250 || sw.State != jobtype.SweepRunning {
		t.Fatalf("last chunk: %+v %v", sw, err)
	}
	if n, _ := s.Redis().ZCard(ctx, s.Prefix()+"sweep:"+sw.ID+":waiting").Result(); n != 250 {
		t.Fatalf("%d trials waiting, want all 250", n)
	}
	if a, err := s.AdmitTrials(ctx, sw.ID); err != nil || len(a.IDs) != 3 {
		t.Fatalf("admit: %+v %v", a, err)
	}
	if _, _, err := s.StoreTrials(ctx, led, chunk(200, 250), "filler-b"); !errors.Is(err, jobstore.ErrConflict) {
		t.Fatalf("a chunk of a running sweep: %v", err)
	}
	if rep, err := led.Verify(ctx); err != nil || len(rep.Problems) > 0 || rep.Records != 250 {
		t.Fatalf("ledger: %+v %v (want 250 records)", rep, err)
	}

	// Cancelled while admitting: the next chunk stores nothing, and every
	// trial stored is cancelled.
	ns = sweepOf(150, nil)
	if sw, _, err = s.StoreTrials(ctx, led, chunk(0, 100), "filler-c"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.CancelSweep(ctx, sw.ID); err != nil || n != 100 {
		t.Fatalf("cancel: %d %v", n, err)
	}
	var gone *jobstore.SweepConflictError
	if _, _, err := s.StoreTrials(ctx, led, chunk(100, 150), "filler-c"); !errors.As(err, &gone) || gone.State != jobtype.SweepCancelled {
		t.Fatalf("a chunk after the cancel: %v", err)
	}
	if n, _ := s.Redis().Exists(ctx, s.Prefix()+"job:"+jobstore.TrialID(sw.ID, 100)).Result(); n != 0 {
		t.Fatal("a trial was stored after the cancel")
	}
	trials, err := s.SweepTrials(ctx, sw.ID, 0, 0)
	if err != nil || len(trials) != 100 {
		t.Fatalf("%d trials %v", len(trials), err)
	}
	for _, j := range trials {
		if j.State != jobtype.StateCancelled {
			t.Fatalf("trial %s is %s after the cancel", j.ID, j.State)
		}
	}
	if rep, err := led.Verify(ctx); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("ledger: %+v %v", rep, err)
	}
}
