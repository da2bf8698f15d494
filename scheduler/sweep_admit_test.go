package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// chunkedRig is an admitRig whose store's filler lease is short and whose
// submits store one chunk before they answer, so that every sweep of more
// than jobstore.SweepChunk trials is admitted in the background.
func chunkedRig(t *testing.T, lease time.Duration) admitRig {
	t.Helper()
	r := newAdmitRig(t, admitConfig)
	r.store = jobstore.New(r.rdb, jobstore.Config{FillLease: lease})
	r.cfg.SweepInlineFill = time.Nanosecond
	r.s = New(r.rdb, r.store, r.cfg)
	return r
}

// randomSweep is a random sweep of n trials of admitSpec.
func randomSweep(t *testing.T, n int, extra string) *sweepspec.Sweep {
	t.Helper()
	sp, err := sweepspec.Parse([]byte(fmt.Sprintf(`{"job":%s,"parameters":{"training.learning_rate":{"log_uniform":[0.0001,0.1]}},"search":{"kind":"random","trials":%d,"seed":7}%s}`,
		admitSpec, n, extra)), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

var alice = plane.Principal{Name: "alice", Role: plane.RoleSubmitter, Team: "ml"}

// sweepOfState waits until sweep id is no longer admitting.
func (r admitRig) sweepSettled(t *testing.T, id string) *jobtype.Sweep {
	t.Helper()
	return waitfor.Value(t, time.Minute, "the sweep's admission over", func() *jobtype.Sweep {
		sw, err := r.store.GetSweep(r.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return sw
	}, func(sw *jobtype.Sweep) bool { return sw.State != jobtype.SweepAdmitting })
}

// checkWhole: sweep id holds n trials, each stored once at its index with
// its route and ledger record, the expansion's params, and the ledger
// verifies.
func (r admitRig) checkWhole(t *testing.T, sp *sweepspec.Sweep, id string, n int) {
	t.Helper()
	want, err := sp.Expand()
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := r.store.SweepTrials(r.ctx, id, 0, 0)
	if err != nil || len(jobs) != n || len(want) != n {
		t.Fatalf("%d trials listed (%v), want %d", len(jobs), err, n)
	}
	for i, j := range jobs {
		if j == nil || j.Trial == nil || j.Trial.Index != i || j.ID != jobstore.TrialID(id, i) || j.Route == nil || j.Route.LedgerSeq == 0 {
			t.Fatalf("trial %d: %+v", i, j)
		}
		if got, exp := fmt.Sprint(j.Trial.Params), fmt.Sprint(want[i].Params); got != exp {
			t.Fatalf("trial %d params %s, want %s", i, got, exp)
		}
	}
	if rep, err := r.led.Verify(r.ctx); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("ledger: %+v %v", rep, err)
	}
}

// TestSweepAdmittedInBackground: a submit answers once the first chunk is
// stored (admitting); the same key sent again meanwhile answers the same
// sweep; the rest is stored behind the answer, the sweep runs, and its
// first trials are admitted with their reservations.
func TestSweepAdmittedInBackground(t *testing.T) {
	r := chunkedRig(t, time.Minute)
	sp := randomSweep(t, 450, `,"max_parallel":3`)
	req := plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: alice, Idem: "ml/k1"}
	sw, existed, err := r.s.SubmitSweep(r.ctx, req)
	if err != nil || existed || sw.State != jobtype.SweepAdmitting || sw.Stored != jobstore.SweepChunk {
		t.Fatalf("answered %+v %v %v; want admitting with one chunk stored", sw, existed, err)
	}
	again := req
	again.ID = jobstore.NewSweepID(time.Now())
	if sw2, existed, err := r.s.SubmitSweep(r.ctx, again); err != nil || !existed || sw2.ID != sw.ID {
		t.Fatalf("the same key again: %+v %v %v", sw2, existed, err)
	}
	done := r.sweepSettled(t, sw.ID)
	if done.State != jobtype.SweepRunning || done.Stored != 450 {
		t.Fatalf("after the admission: %+v", done)
	}
	// The last chunk's script makes the sweep running; the filler admits
	// its first trials (reserving them) in the next call.
	waitfor.True(t, time.Minute, "the first trials admitted with their reservations", func() bool {
		sw, err := r.store.GetSweep(r.ctx, sw.ID)
		return err == nil && sw.ReservedUSD > 0
	})
	r.checkWhole(t, sp, sw.ID, 450)
	if n, _ := r.rdb.ZCard(r.ctx, "lathe:pending").Result(); n != 3 {
		t.Fatalf("%d trials pending, want max_parallel 3", n)
	}
	if n, _ := r.rdb.ZCard(r.ctx, "lathe:sweeps").Result(); n != 1 {
		t.Fatalf("%d sweeps stored, want 1", n)
	}
	_ = r.s.Stop(r.ctx)
}

// TestSweepAdmissionResumedByLeader: a sweep whose filler died after its
// first chunk (its scheduler killed) is finished by the leader's sweep
// duty once the filler's lease lapses: every trial stored once, in order,
// the sweep running, its first trials admitted and placed.
func TestSweepAdmissionResumedByLeader(t *testing.T) {
	r := chunkedRig(t, 300*time.Millisecond)
	sp := randomSweep(t, 730, `,"max_parallel":2`)
	req := plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: alice}
	// What a submit does before it answers, by a filler that then dies.
	r.storeFirstChunk(t, req, "dead-filler")
	if err := r.s.Start(r.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.s.Stop(context.Background()) })
	done := r.sweepSettled(t, req.ID)
	if done.State != jobtype.SweepRunning || done.Stored != 730 {
		t.Fatalf("after the resume: %+v", done)
	}
	r.checkWhole(t, sp, req.ID, 730)
	waitfor.True(t, 20*time.Second, "the first trials placed", func() bool {
		j, err := r.store.Get(r.ctx, jobstore.TrialID(req.ID, 0))
		return err == nil && j.State != jobtype.StateQueued
	})
}

// TestSweepCancelWhileAdmitting: a sweep cancelled while admitting stores
// no more trials (its filler's next chunk is refused, and no duty resumes
// it); every trial stored ends cancelled and the sweep leaves the duty's
// set.
func TestSweepCancelWhileAdmitting(t *testing.T) {
	r := chunkedRig(t, 200*time.Millisecond)
	sp := randomSweep(t, 300, "")
	req := plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: alice}
	f := r.storeFirstChunk(t, req, "slow-filler")
	if _, _, err := r.s.CancelSweep(r.ctx, req.ID); err != nil {
		t.Fatal(err)
	}
	// The filler wakes up and goes on: nothing more is stored.
	if done, err := r.s.admit.fill(r.ctx, f, jobstore.SweepChunk, time.Now().Add(time.Minute)); err != nil || done {
		t.Fatalf("fill after the cancel: done=%v %v", done, err)
	}
	if err := r.s.Start(r.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.s.Stop(context.Background()) })
	waitfor.True(t, 20*time.Second, "the cancelled sweep out of the duty's set", func() bool {
		ids, err := r.store.RunningSweeps(r.ctx)
		return err == nil && len(ids) == 0
	})
	sw, err := r.store.GetSweep(r.ctx, req.ID)
	if err != nil || sw.State != jobtype.SweepCancelled || sw.Stored != jobstore.SweepChunk {
		t.Fatalf("sweep %+v %v", sw, err)
	}
	jobs, _ := r.store.SweepTrials(r.ctx, req.ID, 0, 0)
	if len(jobs) != jobstore.SweepChunk {
		t.Fatalf("%d trials stored, want the first chunk's %d", len(jobs), jobstore.SweepChunk)
	}
	for _, j := range jobs {
		if j.State != jobtype.StateCancelled {
			t.Fatalf("trial %s %s", j.ID, j.State)
		}
	}
}

// TestSweepAdmissionGivenUp: a trial of a later chunk that no backend may
// run (it asks for more GPUs than any node has) ends the admission: the
// sweep is cancelled with a message naming the trial, and no trial of it
// was ever admitted.
func TestSweepAdmissionGivenUp(t *testing.T) {
	r := chunkedRig(t, time.Minute)
	var lrs []string
	for i := range 100 {
		lrs = append(lrs, fmt.Sprint(0.0001*float64(i+1)))
	}
	sp, err := sweepspec.Parse([]byte(`{"job":`+admitSpec+`,"parameters":{"resources.gpus":{"grid":[1,64]},"training.learning_rate":{"grid":[`+
		strings.Join(lrs, ",")+`]}}}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sw, _, err := r.s.SubmitSweep(r.ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: alice})
	if err != nil {
		t.Fatalf("submit: %v (the first chunk's trials all fit)", err)
	}
	done := r.sweepSettled(t, sw.ID)
	if done.State != jobtype.SweepCancelled || !strings.Contains(done.Message, "trials[100]") {
		t.Fatalf("after the admission: %s, message %q; want cancelled naming trials[100]", done.State, done.Message)
	}
	if n, _ := r.rdb.ZCard(r.ctx, "lathe:pending").Result(); n != 0 {
		t.Fatalf("%d trials pending", n)
	}
	jobs, _ := r.store.SweepTrials(r.ctx, sw.ID, 0, 0)
	for _, j := range jobs {
		if j.State != jobtype.StateCancelled || j.StartedAt != nil {
			t.Fatalf("trial %s %s", j.ID, j.State)
		}
	}
}

// storeFirstChunk stores req's record and first chunk as a submit does
// before it answers, by a filler named owner that stores nothing more.
func (r *admitRig) storeFirstChunk(t *testing.T, req plane.SweepRequest, owner string) *sweepFill {
	t.Helper()
	exp, err := drawSweep(req)
	if err != nil {
		t.Fatal(err)
	}
	f := &sweepFill{req: req, exp: exp, owner: owner}
	trials, err := r.s.admit.trials(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := r.s.admit.planTrials(r.ctx, req, trials, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.store.StoreTrials(r.ctx, r.led, f.chunk(first), f.owner); err != nil {
		t.Fatal(err)
	}
	return f
}

// gridOfLRs is a grid sweep of admitSpec over lora.rank's ranks (sorted
// before training.learning_rate, so each rank is n trials in a row) and n
// learning rates.
func gridOfLRs(t *testing.T, ranks string, n int) *sweepspec.Sweep {
	t.Helper()
	lrs := make([]string, n)
	for i := range lrs {
		lrs[i] = fmt.Sprint(0.00001 * float64(i+1))
	}
	sp, err := sweepspec.Parse([]byte(`{"job":`+admitSpec+`,"parameters":{"lora.rank":{"grid":`+ranks+`},"training.learning_rate":{"grid":[`+
		strings.Join(lrs, ",")+`]}}}`), sweepspec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// TestSweepInvalidTrialRefusedWhole: a sweep of up to checkInline trials
// with one invalid trial is refused whole, naming the trial and the
// field, and nothing of it is stored.
func TestSweepInvalidTrialRefusedWhole(t *testing.T) {
	r := chunkedRig(t, time.Minute)
	sp := gridOfLRs(t, "[8,0]", checkInline/2)
	_, _, err := r.s.SubmitSweep(r.ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: alice})
	var inv *plane.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), fmt.Sprintf("trials[%d].lora.rank", checkInline/2)) {
		t.Fatalf("submit: %v; want an InvalidError naming trials[%d].lora.rank", err, checkInline/2)
	}
	if keys, _ := r.rdb.Keys(r.ctx, "lathe:sweep:*").Result(); len(keys) != 0 {
		t.Fatalf("stored %v", keys)
	}
}

// TestSweepInvalidLaterTrialGivesUp: in a sweep bigger than checkInline, a
// trial past the first checkInline that is not a valid job (lora.rank 0)
// is found as its chunk is stored: the admission is given up, the sweep
// cancelled with a message naming the trial and the field, and no trial
// of it admitted.
func TestSweepInvalidLaterTrialGivesUp(t *testing.T) {
	r := chunkedRig(t, time.Minute)
	sp := gridOfLRs(t, "[8,0]", checkInline)
	sw, _, err := r.s.SubmitSweep(r.ctx, plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: alice})
	if err != nil {
		t.Fatalf("submit: %v (its first %d trials are valid)", err, checkInline)
	}
	done := r.sweepSettled(t, sw.ID)
	want := fmt.Sprintf("trials[%d].lora.rank", checkInline)
	if done.State != jobtype.SweepCancelled || !strings.Contains(done.Message, want) || done.Stored != checkInline {
		t.Fatalf("after the admission: %s with %d stored, message %q; want cancelled with %d stored, naming %s", done.State, done.Stored, done.Message, checkInline, want)
	}
	if n, _ := r.rdb.ZCard(r.ctx, "lathe:pending").Result(); n != 0 {
		t.Fatalf("%d trials pending", n)
	}
}

// TestSweepSharedProblemNamedOnce: a problem every trial shares (a dataset
// outside the allowed roots) is named once, for the first trial, with how
// many more trials have it.
func TestSweepSharedProblemNamedOnce(t *testing.T) {
	r := newAdmitRig(t, admitConfig)
	r.cfg.AllowedRoots = []string{t.TempDir()}
	r.s = New(r.rdb, r.store, r.cfg)
	_, _, err := r.s.SubmitSweep(r.ctx, plane.SweepRequest{Spec: randomSweep(t, 20, ""), ID: jobstore.NewSweepID(time.Now()), Who: alice})
	var inv *plane.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("submit: %v; want an InvalidError", err)
	}
	var dataset []jobspec.FieldError
	for _, fe := range inv.Fields {
		if strings.HasSuffix(fe.Field, ".dataset") {
			dataset = append(dataset, fe)
		}
	}
	if len(dataset) != 1 || dataset[0].Field != "trials[0].dataset" || !strings.HasSuffix(dataset[0].Message, "(and 19 more trials)") {
		t.Fatalf("dataset problems %+v; want one, for trials[0], naming 19 more trials", dataset)
	}
}
