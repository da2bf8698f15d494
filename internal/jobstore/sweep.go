package jobstore

// Sweeps (issue #13, docs/sweeps.md). A sweep's trials are ordinary jobs
// whose ids are derived from the sweep's id and their index (TrialID), so
// admitting the same sweep twice stores no second trial.
//
// Keys (besides each trial's job:<id> hash, which gains the fields
// sweep_id, trial_index, params, rung, stop_at_step, gate, stop_requested,
// sweep_reserved_usd, sweep_reserved_gpu_h):
//
//	sweep:<id>            hash  the sweep's record (jobtype.Sweep)
//	sweep:<id>:trials     zset  every trial id, score = index
//	sweep:<id>:waiting    zset  trials not admitted yet (queued, not in pending), score = index
//	sweep:<id>:active     set   admitted trials holding a sweep reservation (not settled)
//	sweep:<id>:paused     set   paused trials (ASHA, between rungs)
//	sweeps                zset  every sweep id, score = created ms
//	sweeps:running        set   sweeps whose state is running (the leader's sweep duty walks it)
//	job:<id>:evals        list  a job's eval lines (the trainer's "eval" events, JSON), capped
//	tick:<schedule>:<ms>  string the run a schedule's tick made (SET NX: one run per tick)
//	schedule:<name>       hash  a schedule's last tick, its run and outcome

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
)

// errSweepNotBuilt marks the parts of the sweep store not written yet.
var errSweepNotBuilt = errors.New("jobstore: sweeps are not built yet (issue #13)")

// MaxSweepTrials is the most trials one sweep has.
const MaxSweepTrials = 10000

// NewSweepID returns a new sweep id: "s-" and sixteen characters, the same
// scheme as NewID (time-ordered).
func NewSweepID(now time.Time) string { return "s-" + NewID(now)[2:] }

// ValidSweepID reports whether id has the shape NewSweepID makes.
func ValidSweepID(id string) bool {
	return len(id) == 18 && id[:2] == "s-" && ValidID("j-"+id[2:])
}

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
// TrialID(sweep, Index); Route and Records as for CreateLogged) and what
// it adds.
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
// is returned with existed=true and nothing is stored.
func (s *Store) CreateSweep(ctx context.Context, l *ledger.Ledger, ns NewSweep) (sw *jobtype.Sweep, existed bool, err error) {
	return nil, false, errSweepNotBuilt
}

// Admitted is what AdmitTrials did.
type Admitted struct {
	// IDs are the trials it admitted (in index order).
	IDs []string
	// Stalled says why it stopped before the waiting set was empty (""
	// when it was not stopped by a budget): also stored on the sweep.
	Stalled string
}

// AdmitTrials admits waiting trials of a running sweep in index order
// while fewer than max_parallel are active and each one's estimate fits
// the sweep's budgets (reserved atomically: concurrent calls never
// overshoot a cap). One script.
func (s *Store) AdmitTrials(ctx context.Context, sweepID string) (Admitted, error) {
	return Admitted{}, errSweepNotBuilt
}

// SettleTrial ends the sweep reservation of a trial whose attempt ended
// (terminal or paused): its reservation is released, and usd and gpuHours
// — the trial's whole cost and GPU-hours so far — are counted as spent,
// less what an earlier settlement of the trial counted. It leaves the
// active set. Safe to call twice.
func (s *Store) SettleTrial(ctx context.Context, sweepID, trialID string, usd, gpuHours float64) error {
	return errSweepNotBuilt
}

// Pause ends attempt attempt of trial id paused (running → paused, OpPause)
// with its metrics, at step step: the attempt reached its step limit and
// checkpointed. With a cancel asked it ends cancelled; with a stop asked,
// stopped.
func (s *Store) Pause(ctx context.Context, id string, attempt int, step int, metrics map[string]float64) error {
	return errSweepNotBuilt
}

// PromoteParams is one ASHA promotion.
type PromoteParams struct {
	SweepID, ID string
	Attempt     int // the paused attempt
	Rung        int // the rung it is promoted to
	StopAtStep  int // that rung's step limit (0: run to the end)
	EstUSD      float64
	EstGPUHours float64
}

// Promote moves a paused trial to queued as attempt+1 into the pending
// set with StopAtStep, reserving its estimate against the sweep's budgets
// (OpPromote); ErrOverBudget (nothing written) when it does not fit.
func (s *Store) Promote(ctx context.Context, p PromoteParams) error {
	return errSweepNotBuilt
}

// Stop ends a trial stopped with reason and message: a waiting (queued,
// unadmitted) or paused trial at once (OpStop); a dispatched, provisioning
// or running one gets stop_requested and its owner ends it stopped.
// Returns the state the trial was found in.
func (s *Store) Stop(ctx context.Context, id, reason, msg string) (jobtype.State, error) {
	return "", errSweepNotBuilt
}

// GetSweep reads a sweep's record (ErrNotFound when there is none).
func (s *Store) GetSweep(ctx context.Context, id string) (*jobtype.Sweep, error) {
	return nil, errSweepNotBuilt
}

// ListSweeps lists sweeps newest first from cursor ("" the newest).
func (s *Store) ListSweeps(ctx context.Context, cursor string, limit int) (sweeps []*jobtype.Sweep, next string, err error) {
	return nil, "", errSweepNotBuilt
}

// RunningSweeps lists the ids of the sweeps whose state is running.
func (s *Store) RunningSweeps(ctx context.Context) ([]string, error) {
	return nil, errSweepNotBuilt
}

// SweepTrials lists a sweep's trials in index order from index from
// (limit ≤ 0: all).
func (s *Store) SweepTrials(ctx context.Context, sweepID string, from, limit int) ([]*jobtype.Job, error) {
	return nil, errSweepNotBuilt
}

// SweepSets are the sizes of a sweep's waiting, active and paused sets:
// a running sweep whose sets are all empty has every trial ended.
type SweepSets struct {
	Waiting, Active, Paused int
	ActiveIDs, PausedIDs    []string
}

// SweepSetsOf reads them.
func (s *Store) SweepSetsOf(ctx context.Context, sweepID string) (SweepSets, error) {
	return SweepSets{}, errSweepNotBuilt
}

// FinishSweep marks a running sweep done once its waiting, active and
// paused sets are empty (checked in the script; false when they are not).
func (s *Store) FinishSweep(ctx context.Context, sweepID string) (bool, error) {
	return false, errSweepNotBuilt
}

// CancelSweep cancels a sweep and every trial that has not ended (a
// waiting or queued or paused trial at once, the others get
// cancel_requested). Returns how many trials it cancelled or asked.
func (s *Store) CancelSweep(ctx context.Context, sweepID string) (int, error) {
	return 0, errSweepNotBuilt
}

// EvalPoint is one eval line of a job (the trainer's "eval" event).
type EvalPoint struct {
	Attempt int                `json:"attempt"`
	Step    int                `json:"step"`
	Metrics map[string]float64 `json:"metrics"`
}

// Evals reads a job's eval lines, oldest first.
func (s *Store) Evals(ctx context.Context, id string) ([]EvalPoint, error) {
	return nil, errSweepNotBuilt
}

// ClaimTick records that schedule's tick at `at` made run runID, once:
// won=false and the run recorded by whoever claimed it first otherwise
// (SET NX). The claim is kept for a week.
func (s *Store) ClaimTick(ctx context.Context, schedule string, at time.Time, runID string) (won bool, existing string, err error) {
	return s.claimTick(ctx, schedule, at, runID)
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
