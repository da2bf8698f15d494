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

// NewSweep is what CreateSweep stores.
type NewSweep struct {
	// Sweep is the record to store (its ID set; state, counters and times
	// are the store's).
	Sweep jobtype.Sweep
	// IdempotencyKey, when set, makes a second CreateSweep with the same
	// key return the sweep the first stored.
	IdempotencyKey string
	// Trials are every trial, in index order (Trials[i].Index == i).
	Trials []NewTrial
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

// CreateSweep stores the sweep's record, all its trials (the first ones
// admitted — in the pending set, their estimates reserved against the
// sweep's budgets — while max_parallel and the budgets allow; the others
// waiting with their gate), their routes and ledger records, in one
// script: all or nothing. A sweep whose id (or idempotency key) is taken
// is returned with existed=true and nothing is stored. MaxParallel ≤ 0
// admits as many as the budgets allow. An idempotency key naming a sweep
// stored from another spec or by another team is an
// ErrIdempotencyConflict.
func (s *Store) CreateSweep(ctx context.Context, l *ledger.Ledger, ns NewSweep) (sw *jobtype.Sweep, existed bool, err error) {
	if err := checkNewSweep(ns); err != nil {
		return nil, false, err
	}
	sid, now := ns.Sweep.ID, s.now()
	base, err := s.sweepArgs(ns, now)
	if err != nil {
		return nil, false, err
	}
	var seq int64
	var mac string
	if l != nil {
		if seq, mac, err = l.Head(ctx); err != nil {
			return nil, false, fmt.Errorf("jobstore: create sweep %s: %w", sid, err)
		}
	}
	for {
		trials, tail, err := trialLedger(l, ns.Trials, seq, mac)
		if err != nil {
			return nil, false, fmt.Errorf("jobstore: create sweep %s: %w", sid, err)
		}
		args := append(base[:len(base):len(base)], trialArgs(trials, now)...)
		args = append(args, tail...)
		var keys []string
		if len(tail) > 0 {
			keys = l.Keys()
		}
		res, err := createSweepScript.Run(ctx, s.rdb, keys, args...).Slice()
		if err != nil {
			return nil, false, fmt.Errorf("jobstore: create sweep %s: %w", sid, err)
		}
		if ledger.IsCheckReply(res) {
			if seq, mac, err = l.CheckReply(res); err != nil {
				return nil, false, fmt.Errorf("jobstore: create sweep %s: %w", sid, err)
			}
			if err := ctx.Err(); err != nil {
				return nil, false, fmt.Errorf("jobstore: create sweep %s: %w", sid, err)
			}
			continue
		}
		return s.createSweepReply(ctx, ns, res)
	}
}

// createSweepReply turns the create script's reply into CreateSweep's.
func (s *Store) createSweepReply(ctx context.Context, ns NewSweep, res []any) (*jobtype.Sweep, bool, error) {
	sid := ns.Sweep.ID
	code, _ := first(res).(int64)
	var id string
	if len(res) > 1 {
		id, _ = res[1].(string)
	}
	switch code {
	case codeDone:
		sw, err := s.GetSweep(ctx, sid)
		return sw, false, err
	case codeExisting:
		sw, err := s.GetSweep(ctx, id)
		return sw, true, err
	case codeIdemConflict:
		return nil, false, fmt.Errorf("jobstore: create sweep %s: idempotency key %q names sweep %s, created from another spec or by another team: %w",
			sid, ns.IdempotencyKey, id, ErrIdempotencyConflict)
	case codeConflict:
		return nil, false, fmt.Errorf("jobstore: create sweep %s: trial id %s is taken by a job stored before", sid, id)
	}
	return nil, false, fmt.Errorf("jobstore: create sweep %s: unexpected script reply %v", sid, res)
}

// checkNewSweep checks what CreateSweep is given before anything is built.
func checkNewSweep(ns NewSweep) error {
	sid := ns.Sweep.ID
	if !ValidSweepID(sid) {
		return fmt.Errorf("jobstore: create sweep: invalid sweep id %q (want NewSweepID's shape)", sid)
	}
	n := len(ns.Trials)
	if n == 0 || n > MaxSweepTrials {
		return fmt.Errorf("jobstore: create sweep %s: %d trials; a sweep has 1 to %d", sid, n, MaxSweepTrials)
	}
	for name, v := range map[string]float64{"budget_usd": ns.Sweep.BudgetUSD, "budget_gpu_hours": ns.Sweep.BudgetGPUHours} {
		if !(v >= 0) || math.IsInf(v, 1) {
			return fmt.Errorf("jobstore: create sweep %s: %s = %v: want a finite number ≥ 0", sid, name, v)
		}
	}
	for i, t := range ns.Trials {
		if t.Index != i {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d].index = %d: want %d (trials in index order)", sid, i, t.Index, i)
		}
		if want := TrialID(sid, i); t.Job.ID != want {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d].id = %q: want %q (TrialID)", sid, i, t.Job.ID, want)
		}
		if t.Job.Spec == nil {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d] has no spec", sid, i)
		}
		if !(t.EstUSD >= 0) || math.IsInf(t.EstUSD, 1) || !(t.EstGPUHours >= 0) || math.IsInf(t.EstGPUHours, 1) {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d] estimates $%v and %v GPU-h: want finite numbers ≥ 0", sid, i, t.EstUSD, t.EstGPUHours)
		}
		if t.StopAtStep < 0 {
			return fmt.Errorf("jobstore: create sweep %s: trials[%d].stop_at_step = %d: want ≥ 0", sid, i, t.StopAtStep)
		}
	}
	return nil
}

// sweepArgs are the create script's ARGV up to the trials: the sweep's
// record, its admission limits, and the fields every trial shares.
func (s *Store) sweepArgs(ns NewSweep, now time.Time) ([]any, error) {
	sw := ns.Sweep
	maxp := sw.MaxParallel
	if maxp <= 0 {
		maxp = len(ns.Trials)
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
	fields := []any{"id", sw.ID, "name", sw.Name, "state", string(jobtype.SweepRunning), "search", sw.Search,
		"metric", sw.Metric, "goal", sw.Goal, "trials", len(ns.Trials), "max_parallel", maxp,
		"budget_usd", fmtF(sw.BudgetUSD), "budget_gpu_h", fmtF(sw.BudgetGPUHours), "reserved_usd", "0", "spent_usd", "0",
		"reserved_gpu_h", "0", "spent_gpu_h", "0", "submitter", sw.Submitter, "team", sw.Team,
		"schedule", sw.Schedule, "tick", tick, "created_at", ms(now), "updated_at", ms(now), "spec", string(spec)}
	common := []any{"state", string(jobtype.StateQueued), "attempt", 1, "created_at", ms(now), "updated_at", ms(now),
		"sweep_id", sw.ID, "rung", 0}
	if sw.Submitter != "" || sw.Team != "" {
		common = append(common, "submitter", sw.Submitter, "team", sw.Team)
	}
	args := make([]any, 0, 16+len(fields)+len(common))
	args = append(args, s.cfg.Prefix, sw.ID, ns.IdempotencyKey, fp, int(s.cfg.IdempotencyTTL.Seconds()), ms(now),
		s.cfg.EventsMaxLen, mustJSON(jobtype.StateChange{To: jobtype.StateQueued}), maxp, fmtF(sw.BudgetUSD), fmtF(sw.BudgetGPUHours), Month(now))
	args = append(args, len(fields))
	args = append(args, fields...)
	args = append(args, len(common))
	return append(args, common...), nil
}

// trialArgs are the create script's per-trial ARGV (trials: NewSweep's
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
		fields = append(fields, "gate", "") // last: the script sets the gate of a trial that waits
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

// AdmitTrials admits waiting trials of a running sweep in index order
// while fewer than max_parallel are active and each one's estimate fits
// the sweep's budgets (reserved atomically: concurrent calls never
// overshoot a cap). One script. A trial that ended or paused does not
// count as active (the sweep duty settles it); the waiting trial admission
// stopped at gets the gate that stopped it (the trials behind it keep the
// gate they were given last: rewriting thousands of gates a call is not
// worth it; the sweep's Stalled says what holds it now). A sweep that is
// not running is a *SweepConflictError.
func (s *Store) AdmitTrials(ctx context.Context, sweepID string) (Admitted, error) {
	now := s.now()
	res, err := admitScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, sweepID, ms(now), Month(now)).Slice()
	if err != nil {
		return Admitted{}, fmt.Errorf("jobstore: admit trials of %s: %w", sweepID, err)
	}
	if err := sweepReplyErr(res, sweepID, "admit trials", "admitting needs a running sweep"); err != nil {
		return Admitted{}, err
	}
	a := Admitted{}
	a.Stalled, _ = res[1].(string)
	own, _ := res[2].(int64)
	a.OwnBudget = own == 1
	for _, v := range res[3:] {
		if id, ok := v.(string); ok {
			a.IDs = append(a.IDs, id)
		}
	}
	return a, nil
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
