package jobstore

// Sweeps (issue #13, docs/sweeps.md). A sweep's trials are ordinary jobs
// whose ids are derived from the sweep's id and their index (TrialID), so
// admitting the same sweep twice stores no second trial.
//
// Keys (besides each trial's job:<id> hash, which gains the fields
// sweep_id, trial_index, params, rung, stop_at_step, gate, stop_requested,
// stop_message, sweep_est_usd, sweep_est_gpu_h, pending_score,
// sweep_reserved_usd, sweep_reserved_gpu_h, sweep_settled_usd,
// sweep_settled_gpu_h: luaSweep in sweep_scripts.go says what each holds):
//
//	sweep:<id>            hash  the sweep's record (jobtype.Sweep)
//	sweep:<id>:trials     zset  every trial id, score = index
//	sweep:<id>:waiting    zset  trials not admitted yet (queued, not in pending), score = index
//	sweep:<id>:active     set   admitted trials holding a sweep reservation (not settled)
//	sweep:<id>:paused     set   paused trials (ASHA, between rungs)
//	sweeps                zset  every sweep id, score = created ms
//	sweeps:running        set   sweeps whose state is running (the leader's sweep duty walks it)
//	job:<id>:evals        list  a job's eval lines (the trainer's "eval" events, JSON), capped
//	sweepidem:<key>       string Idempotency-Key → "<sweep id> <fingerprint of spec and team>" (24 h)
//	tick:<schedule>:<ms>  string the run a schedule's tick made (SET NX: one run per tick)
//	schedule:<name>       hash  a schedule's last tick, its run and outcome

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
)

// MaxSweepTrials is the most trials one sweep has.
const MaxSweepTrials = 10000

// evalsMaxLen caps a job's eval lines (job:<id>:evals).
const evalsMaxLen = 2000

// NewSweepID returns a new sweep id: "s-" and sixteen characters, the same
// scheme as NewID (time-ordered).
func NewSweepID(now time.Time) string { return "s-" + NewID(now)[2:] }

// ValidSweepID reports whether id has the shape NewSweepID makes.
func ValidSweepID(id string) bool {
	return len(id) == 18 && id[:2] == "s-" && ValidID("j-"+id[2:])
}

// ErrTrialRetry: Retry was asked for a sweep's trial, which it does not
// retry (the sweep holds the trial's budget and place; re-entering them is
// not built).
var ErrTrialRetry = errors.New("retrying a sweep's trial is not supported yet")

// NewSweep is what CreateSweep stores, or one chunk of it (StoreTrials).
type NewSweep struct {
	// Sweep is the record to store (its ID set; state, counters and times
	// are the store's).
	Sweep jobtype.Sweep
	// IdempotencyKey, when set, makes a second CreateSweep with the same
	// key return the sweep the first stored.
	IdempotencyKey string
	// Total is the sweep's number of trials (0: len(Trials), the whole
	// sweep in one NewSweep).
	Total int
	// Trials are the trials to store, in index order (Trials[i].Index ==
	// the first's Index + i): every trial for CreateSweep, one chunk for
	// StoreTrials.
	Trials []NewTrial
}

// total is the sweep's number of trials.
func (ns NewSweep) total() int {
	if ns.Total > 0 {
		return ns.Total
	}
	return len(ns.Trials)
}

// NewTrial is one trial of a NewSweep: a NewJob (its ID must be
// TrialID(sweep, Index); Route and Records as for CreateLogged; its
// Submitter, Team and IdempotencyKey are not read: a trial has its
// sweep's) and what it adds.
type NewTrial struct {
	Job    NewJob
	Index  int
	Params []jobtype.Param
	// StopAtStep is the first attempt's step limit (ASHA's first rung; 0
	// none).
	StopAtStep int
	// EstUSD and EstGPUHours are what admitting the trial reserves
	// against the sweep's budgets (for ASHA: its first rung's share).
	EstUSD      float64
	EstGPUHours float64
}

// SweepChunk is the most trials one StoreTrials call stores: a chunk's
// script (records, indexes, first events, ledger records) stays within
// a few milliseconds of Redis's time, so that no sweep, whatever its size,
// keeps Redis from its other clients (docs/sweeps.md, "Admission in
// bounded steps"). Measured with scripts/bench/sweep10k.sh on a 2-core
// machine: a chunk of 100 took 10-17 ms of Redis's time, over the 10 ms
// that other clients may wait; 50 took 5-11 ms; 25 leaves room.
const SweepChunk = 25

// ErrFillerBusy: another filler holds the admitting sweep (its lease has
// not lapsed); this one leaves it alone.
var ErrFillerBusy = errors.New("another scheduler is storing this sweep's trials")

// StaleChunkError: the chunk did not start where the sweep's stored
// trials end (another filler stored it): nothing was written; go on from
// Stored.
type StaleChunkError struct {
	ID     string
	From   int
	Stored int
}

func (e *StaleChunkError) Error() string {
	return fmt.Sprintf("sweep %s: a chunk from trial %d, but %d trials are stored", e.ID, e.From, e.Stored)
}

// StoreTrials stores one chunk of an admitting sweep (at most SweepChunk
// trials: ns.Trials, whose first Index is where the stored trials end)
// with their routes and ledger records, in one script: all of the chunk or
// none of it. The chunk from trial 0 also stores the sweep's record (state
// admitting), its indexes and its idempotency key; a sweep whose id or key
// is taken is returned with existed=true and nothing is stored. The chunk
// that stores the last trial moves the sweep to running; its trials all
// wait (the sweep:<id>:waiting set, gate max_parallel) until AdmitTrials
// admits them. owner names the filler: while its lease holds
// (Config.FillLease, renewed by each chunk; the leader's sweep duty
// resumes the sweep once it lapses) another owner's chunk is ErrFillerBusy. A chunk
// that does not start where the stored trials end is a *StaleChunkError;
// a sweep no longer admitting (cancelled) a *SweepConflictError.
func (s *Store) StoreTrials(ctx context.Context, l *ledger.Ledger, ns NewSweep, owner string) (sw *jobtype.Sweep, existed bool, err error) {
	if err := checkNewSweep(ns); err != nil {
		return nil, false, err
	}
	sid, now := ns.Sweep.ID, s.now()
	base, err := s.sweepArgs(ns, owner, now)
	if err != nil {
		return nil, false, err
	}
	var seq int64
	var mac string
	if l != nil {
		if seq, mac, err = l.Head(ctx); err != nil {
			return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: %w", sid, err)
		}
	}
	for {
		trials, tail, err := trialLedger(l, ns.Trials, seq, mac)
		if err != nil {
			return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: %w", sid, err)
		}
		args := append(base[:len(base):len(base)], trialArgs(trials, now)...)
		args = append(args, tail...)
		var keys []string
		if len(tail) > 0 {
			keys = l.Keys()
		}
		v, err := s.runReplicated(ctx, storeTrialsScript, keys, args...)
		if err != nil {
			return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: %w", sid, err)
		}
		res, ok := v.([]any)
		if !ok {
			return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: script answered %T", sid, v)
		}
		if ledger.IsCheckReply(res) {
			if seq, mac, err = l.CheckReply(res); err != nil {
				return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: %w", sid, err)
			}
			if err := ctx.Err(); err != nil {
				return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: %w", sid, err)
			}
			continue
		}
		if keys != nil {
			l.Appended()
		}
		return s.storeTrialsReply(ctx, ns, res)
	}
}

// CreateSweep stores a whole sweep: its record and every trial, chunk by
// chunk (StoreTrials, SweepChunk trials a script), then admits the first
// trials (AdmitTrials: in index order while max_parallel and the budgets
// allow, each with its reservations). Each chunk is all or nothing; a
// sweep cut short between chunks stays admitting, and the scheduler's
// sweep duty finishes it (scheduler/sweeps.go). A sweep whose id (or
// idempotency key) is taken is returned with existed=true and nothing is
// stored. An idempotency key naming a sweep stored from another spec or by
// another team is an ErrIdempotencyConflict. The scheduler stores sweeps
// with StoreTrials itself (to answer before a big one is stored); this is
// the whole path in one call.
func (s *Store) CreateSweep(ctx context.Context, l *ledger.Ledger, ns NewSweep) (sw *jobtype.Sweep, existed bool, err error) {
	if err := checkNewSweep(ns); err != nil {
		return nil, false, err
	}
	owner := NewID(s.now())
	all, total := ns.Trials, ns.total()
	for from := 0; from < len(all); from += SweepChunk {
		chunk := ns
		chunk.Total, chunk.Trials = total, all[from:min(from+SweepChunk, len(all))]
		sw, existed, err = s.StoreTrials(ctx, l, chunk, owner)
		if err != nil || existed {
			return sw, existed, err
		}
	}
	if _, err := s.AdmitTrials(ctx, ns.Sweep.ID); err != nil {
		return nil, false, err
	}
	sw, err = s.GetSweep(ctx, ns.Sweep.ID)
	return sw, false, err
}

// storeTrialsReply turns the store script's reply into StoreTrials's.
func (s *Store) storeTrialsReply(ctx context.Context, ns NewSweep, res []any) (*jobtype.Sweep, bool, error) {
	sid := ns.Sweep.ID
	code, _ := first(res).(int64)
	str := func(i int) string {
		if len(res) > i {
			v, _ := res[i].(string)
			return v
		}
		return ""
	}
	switch code {
	case codeDone:
		sw, err := s.GetSweep(ctx, sid)
		return sw, false, err
	case codeExisting:
		sw, err := s.GetSweep(ctx, str(1))
		return sw, true, err
	case codeNotFound:
		return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: sweep %w", sid, ErrNotFound)
	case codeIdemConflict:
		return nil, false, fmt.Errorf("jobstore: create sweep %s: idempotency key %q names sweep %s, created from another spec or by another team: %w",
			sid, ns.IdempotencyKey, str(1), ErrIdempotencyConflict)
	case codeConflict:
		switch str(1) {
		case "taken":
			return nil, false, fmt.Errorf("jobstore: create sweep %s: trial id %s is taken by a job stored before", sid, str(2))
		case "busy":
			return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: %w", sid, ErrFillerBusy)
		case "stale":
			stored, _ := strconv.Atoi(str(2))
			return nil, false, fmt.Errorf("jobstore: store trials: %w", &StaleChunkError{ID: sid, From: ns.Trials[0].Index, Stored: stored})
		}
		return nil, false, fmt.Errorf("jobstore: store trials: %w",
			&SweepConflictError{ID: sid, State: jobtype.SweepState(str(1)), Want: "storing trials needs an admitting sweep"})
	}
	return nil, false, fmt.Errorf("jobstore: store trials of sweep %s: unexpected script reply %v", sid, res)
}

// checkNewSweep checks what CreateSweep or StoreTrials is given before
// anything is built.
func checkNewSweep(ns NewSweep) error {
	sid := ns.Sweep.ID
	if !ValidSweepID(sid) {
		return fmt.Errorf("jobstore: create sweep: invalid sweep id %q (want NewSweepID's shape)", sid)
	}
	total, n := ns.total(), len(ns.Trials)
	if total > MaxSweepTrials {
		return fmt.Errorf("jobstore: create sweep %s: %d trials; a sweep has 1 to %d", sid, total, MaxSweepTrials)
	}
	if n == 0 {
		return fmt.Errorf("jobstore: create sweep %s: no trials given; a sweep has 1 to %d", sid, MaxSweepTrials)
	}
	from := ns.Trials[0].Index
	if from < 0 || from+n > total {
		return fmt.Errorf("jobstore: create sweep %s: trials %d to %d of a sweep of %d", sid, from, from+n-1, total)
	}
	for name, v := range map[string]float64{"budget_usd": ns.Sweep.BudgetUSD, "budget_gpu_hours": ns.Sweep.BudgetGPUHours} {
		if !(v >= 0) || math.IsInf(v, 1) {
			return fmt.Errorf("jobstore: create sweep %s: %s = %v: want a finite number ≥ 0", sid, name, v)
		}
	}
	for i, t := range ns.Trials {
		if t.Index != from+i {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d].index = %d: want %d (trials in index order)", sid, from+i, t.Index, from+i)
		}
		if want := TrialID(sid, t.Index); t.Job.ID != want {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d].id = %q: want %q (TrialID)", sid, t.Index, t.Job.ID, want)
		}
		if t.Job.Spec == nil {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d] has no spec", sid, t.Index)
		}
		if !(t.EstUSD >= 0) || math.IsInf(t.EstUSD, 1) || !(t.EstGPUHours >= 0) || math.IsInf(t.EstGPUHours, 1) {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d] estimates $%v and %v GPU-h: want finite numbers ≥ 0", sid, t.Index, t.EstUSD, t.EstGPUHours)
		}
		if t.StopAtStep < 0 {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d].stop_at_step = %d: want ≥ 0", sid, t.Index, t.StopAtStep)
		}
	}
	return nil
}

// sweepArgs are the store script's ARGV up to the trials: the sweep's
// record, the chunk's place, and the fields every trial shares.
func (s *Store) sweepArgs(ns NewSweep, owner string, now time.Time) ([]any, error) {
	sw, total := ns.Sweep, ns.total()
	maxp := sw.MaxParallel
	if maxp <= 0 {
		maxp = total
	}
	spec := []byte(sw.Spec)
	if len(spec) == 0 {
		spec = []byte("null")
	}
	if !json.Valid(spec) {
		return nil, fmt.Errorf("jobstore: create sweep %s: spec is not valid JSON", sw.ID)
	}
	fp := ""
	if ns.IdempotencyKey != "" {
		fp = idemFingerprint(spec, sw.Team)
	}
	tick := ""
	if sw.Tick != nil {
		tick = ms(*sw.Tick)
	}
	var fields []any
	if ns.Trials[0].Index == 0 {
		fields = []any{"id", sw.ID, "name", sw.Name, "state", string(jobtype.SweepAdmitting), "search", sw.Search,
			"metric", sw.Metric, "goal", sw.Goal, "trials", total, "stored", 0, "max_parallel", maxp,
			"budget_usd", fmtF(sw.BudgetUSD), "budget_gpu_h", fmtF(sw.BudgetGPUHours), "reserved_usd", "0", "spent_usd", "0",
			"reserved_gpu_h", "0", "spent_gpu_h", "0", "submitter", sw.Submitter, "team", sw.Team,
			"schedule", sw.Schedule, "tick", tick, "created_at", ms(now), "updated_at", ms(now), "spec", string(spec)}
	}
	common := []any{"state", string(jobtype.StateQueued), "attempt", 1, "created_at", ms(now), "updated_at", ms(now),
		"sweep_id", sw.ID, "rung", 0}
	if sw.Submitter != "" || sw.Team != "" {
		common = append(common, "submitter", sw.Submitter, "team", sw.Team)
	}
	args := make([]any, 0, 16+len(fields)+len(common))
	args = append(args, s.cfg.Prefix, sw.ID, ns.IdempotencyKey, fp, int(s.cfg.IdempotencyTTL.Seconds()), ms(now),
		s.cfg.EventsMaxLen, mustJSON(jobtype.StateChange{To: jobtype.StateQueued}), ns.Trials[0].Index, total, owner,
		s.cfg.FillLease.Milliseconds())
	args = append(args, len(fields))
	args = append(args, fields...)
	args = append(args, len(common))
	return append(args, common...), nil
}

// trialArgs are the store script's per-trial ARGV (trials: NewSweep's
// with their routes' ledger sequence numbers set; now: the sweep's
// creation, which orders them in the pending set).
func trialArgs(trials []NewTrial, now time.Time) []any {
	args := make([]any, 0, 1+len(trials)*23)
	args = append(args, len(trials))
	for _, t := range trials {
		nj := t.Job
		out := strings.ReplaceAll(nj.OutputURI, "{id}", nj.ID)
		score := strconv.FormatFloat(PendingScore(nj.Spec.Priority, now), 'f', 0, 64)
		fields := []any{"id", nj.ID, "name", nj.Spec.Name, "spec", mustJSON(nj.Spec), "output_uri", out,
			"trial_index", t.Index, "params", mustJSON(params(t.Params)), "stop_at_step", t.StopAtStep,
			"sweep_est_usd", fmtF(t.EstUSD), "sweep_est_gpu_h", fmtF(t.EstGPUHours), "pending_score", score}
		if nj.Route != nil {
			fields = append(fields, "route", mustJSON(nj.Route))
		}
		if b := nj.Budget; b != nil && b.USD > 0 && len(b.Scopes) > 0 {
			// What admitting it reserves of its team's and backend's budgets.
			fields = append(fields, "reserve_usd", fmtF(b.USD), "reserve_scopes", scopeList(b.Scopes))
		}
		fields = append(fields, tallyFieldsOf(nj.Spec, nj.Route)...)
		fields = append(fields, "gate", jobtype.ReasonMaxParallel) // every trial waits until AdmitTrials admits it
		args = append(args, nj.ID, score, fmtF(t.EstUSD), fmtF(t.EstGPUHours), len(fields))
		args = append(args, fields...)
	}
	return args
}

// scopeList is scopes as a trial's reserve_scopes holds them: "scope
// limit scope limit".
func scopeList(scopes []BudgetScope) string {
	parts := make([]string, 0, 2*len(scopes))
	for _, sc := range scopes {
		parts = append(parts, sc.Scope, fmtF(sc.Limit))
	}
	return strings.Join(parts, " ")
}

// params is ps, never nil (stored as [] rather than null).
func params(ps []jobtype.Param) []jobtype.Param {
	if ps == nil {
		return []jobtype.Param{}
	}
	return ps
}

// trialLedger builds the trials' ledger records sealed on the head (seq,
// mac), numbering them in trial order and setting each route's LedgerSeq
// (as createLogged does): the trials to store, and the create script's
// ledger ARGV (none without a ledger or records).
func trialLedger(l *ledger.Ledger, in []NewTrial, seq int64, mac string) ([]NewTrial, []any, error) {
	if l == nil {
		return in, nil, nil
	}
	trials := append([]NewTrial(nil), in...)
	var recs []ledger.Record
	next := seq + 1
	for i := range trials {
		build := trials[i].Job.Records
		if build == nil {
			continue
		}
		rs := build(next)
		if len(rs) == 0 {
			continue
		}
		if r := trials[i].Job.Route; r != nil {
			ri := *r
			ri.LedgerSeq = next
			trials[i].Job.Route = &ri
		}
		recs = append(recs, rs...)
		next += int64(len(rs))
	}
	if len(recs) == 0 {
		return trials, nil, nil
	}
	sealed, err := l.Seal(seq, mac, recs)
	if err != nil {
		return nil, nil, err
	}
	tail := append([]any{strconv.FormatInt(seq, 10), mac, len(sealed)}, ledger.EntryArgs(sealed)...)
	return trials, tail, nil
}

// fmtF formats a float for a script argument.
func fmtF(x float64) string { return strconv.FormatFloat(x, 'f', 6, 64) }

// Admitted is what AdmitTrials did.
type Admitted struct {
	// IDs are the trials it admitted (in index order).
	IDs []string
	// Stalled says why it stopped before the waiting set was empty (""
	// when it was not stopped by a budget): also stored on the sweep.
	Stalled string
	// OwnBudget: Stalled is the sweep's own budget, which nothing frees
	// while none of its trials runs (a team's or a backend's frees as
	// other jobs settle).
	OwnBudget bool
}

// admitChunk is the most trials one admit script admits: each admission
// reserves in up to three budgets, so a sweep of 10,000 trials with no
// max_parallel is admitted in bounded steps (docs/sweeps.md).
const admitChunk = 200

// AdmitTrials admits waiting trials of a running sweep in index order
// while fewer than max_parallel are active and each one's estimate fits
// the sweep's budgets and its team's and backend's (reserved atomically
// with the admission: concurrent calls never overshoot a cap). One script
// per admitChunk trials. A trial that ended or paused does not count as
// active (the sweep duty settles it); the waiting trial admission stopped
// at gets the gate that stopped it (the trials behind it keep the gate
// they were given last: rewriting thousands of gates a call is not worth
// it; the sweep's Stalled says what holds it now). A sweep that is not
// running is a *SweepConflictError.
func (s *Store) AdmitTrials(ctx context.Context, sweepID string) (Admitted, error) {
	a := Admitted{}
	for {
		now := s.now()
		res, err := admitScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, sweepID, ms(now), Month(now), admitChunk).Slice()
		if err != nil {
			return a, fmt.Errorf("jobstore: admit trials of %s: %w", sweepID, err)
		}
		if err := sweepReplyErr(res, sweepID, "admit trials", "admitting needs a running sweep"); err != nil {
			return a, err
		}
		a.Stalled, _ = res[1].(string)
		own, _ := res[2].(int64)
		a.OwnBudget = own == 1
		for _, v := range res[3:] {
			if id, ok := v.(string); ok {
				a.IDs = append(a.IDs, id)
			}
		}
		if len(res)-3 < admitChunk {
			return a, nil
		}
	}
}

// SweepConflictError says why a sweep write lost: the sweep's state does
// not allow it. errors.Is(err, ErrConflict) is true.
type SweepConflictError struct {
	ID    string
	State jobtype.SweepState
	Want  string
}

func (e *SweepConflictError) Error() string {
	return fmt.Sprintf("sweep %s is %s: %s", e.ID, e.State, e.Want)
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *SweepConflictError) Unwrap() error { return ErrConflict }

// sweepReplyErr reads a sweep script's {code, state, …} reply: nil for
// DONE, ErrNotFound, or a *SweepConflictError saying want.
func sweepReplyErr(res []any, id, op, want string) error {
	code, _ := first(res).(int64)
	if len(res) < 2 {
		return fmt.Errorf("jobstore: %s %s: unexpected script reply %v", op, id, res)
	}
	switch code {
	case codeDone:
		return nil
	case codeNotFound:
		return fmt.Errorf("jobstore: %s %s: sweep %w", op, id, ErrNotFound)
	}
	st, _ := res[1].(string)
	return fmt.Errorf("jobstore: %s: %w", op, &SweepConflictError{ID: id, State: jobtype.SweepState(st), Want: want})
}

// SettleTrial ends the sweep reservation of a trial whose attempt ended
// (terminal or paused): its reservation is released, and usd and gpuHours
// — the trial's whole cost and GPU-hours so far — are counted as spent,
// less what an earlier settlement of the trial counted. It leaves the
// active set. Safe to call twice.
func (s *Store) SettleTrial(ctx context.Context, sweepID, trialID string, usd, gpuHours float64) error {
	if !(usd >= 0) || !(gpuHours >= 0) || math.IsInf(usd, 1) || math.IsInf(gpuHours, 1) {
		return fmt.Errorf("jobstore: settle trial %s: $%v and %v GPU-h: want finite numbers ≥ 0", trialID, usd, gpuHours)
	}
	err := settleTrialScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, sweepID, trialID, fmtF(usd), fmtF(gpuHours)).Err()
	if err != nil {
		return fmt.Errorf("jobstore: settle trial %s of %s: %w", trialID, sweepID, err)
	}
	return nil
}

// TrialID is the job id of trial index of sweep sweepID: "j-", the sweep
// id's sixteen characters, "-" and the index in five digits
// ("j-0123456789abcdef-00042"), so trials list in index order. ValidID
// accepts it.
func TrialID(sweepID string, index int) string {
	return "j-" + sweepID[2:] + "-" + fmt.Sprintf("%05d", index)
}

// TickID is the run id of schedule's tick at `at`, with prefix "j-" (a
// job) or "s-" (a sweep): ten characters of the tick's time in
// milliseconds (as NewID) and six of a hash of the schedule's name, so
// every scheduler derives the same id for the same tick.
func TickID(prefix, schedule string, at time.Time) string {
	id := NewIDAt(at, fnv32(schedule)>>3)
	return prefix + id[2:]
}

func fnv32(s string) uint64 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return uint64(h.Sum32())
}
