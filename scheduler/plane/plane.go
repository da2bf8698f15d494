// Package plane is the contract between Lathe's HTTP API (scheduler/api)
// and its control plane (scheduler): who asks (Principal, the roles and
// tokens), what the API may ask (Plane: every admission, cancel and
// retry goes through it), and the typed errors admission answers with.
// The API reads jobs through the store; it writes only through Plane.
package plane

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/scheduler/cron"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing"
)

// Plane is what the API asks of the control plane.
type Plane interface {
	// Admissible lists why spec (parsed and normalised) cannot run on
	// this deployment for p's team: a trainer it does not have, a path
	// outside the team's allowed roots (its own, or the deployment's), one
	// of lathed's own files as data.
	Admissible(p Principal, spec *jobspec.Spec) []jobspec.FieldError
	// Submit admits a's jobs, all or none (RefusedError when no backend
	// may run one of them), and stores them with their decisions' ledger
	// records and budget reservations in one store call.
	Submit(ctx context.Context, a Admission) ([]jobstore.Created, error)
	// Plan decides where a's jobs would go and stores nothing: the jobs
	// with their routes (a dry run).
	Plan(ctx context.Context, a Admission) ([]jobstore.NewJob, error)
	// SubmitSweep admits the sweep req asks for with all its trials
	// (InvalidError, RefusedError); existed: its idempotency key named a
	// sweep stored before.
	SubmitSweep(ctx context.Context, req SweepRequest) (sw *jobtype.Sweep, existed bool, err error)
	// PlanSweep expands and routes req's trials and stores nothing.
	PlanSweep(ctx context.Context, req SweepRequest) (jobstore.NewSweep, error)
	// Explain decides where spec would go for p under the what-ifs as,
	// storing and recording nothing; with the routing config's hash.
	Explain(ctx context.Context, p Principal, spec *jobspec.Spec, as policy.Assumptions) (routing.Decision, string, error)
	// Cancel cancels a job (durably, then its fast paths).
	Cancel(ctx context.Context, id string) (*jobtype.Job, error)
	// CancelSweep cancels a sweep and its trials that have not ended.
	CancelSweep(ctx context.Context, id string) (*jobtype.Sweep, int, error)
	// Retry makes a new attempt of a failed or cancelled job.
	Retry(ctx context.Context, id string) (*jobtype.Job, error)

	// IsLeader reports whether this scheduler leads now.
	IsLeader() bool
	// ReconcileStats are the cloud reconciler's counters.
	ReconcileStats() ReconcileStats
	// Routing is the routing config in force.
	Routing() *policy.RouteState
	// Schedules are the schedules in force.
	Schedules() []cron.Schedule
	// Metrics is the control plane's registry (decisions, rounds, ended
	// jobs); the API serves it with its own.
	Metrics() prometheus.Gatherer
	// SawRedis notes a Redis error the API saw (the reaper holds off
	// leases that expired around one).
	SawRedis(err error)
	// CheckEviction reads Redis's maxmemory-policy: an
	// *jobstore.EvictionPolicyError unless it is noeviction.
	CheckEviction(ctx context.Context) error
}

// Admission is jobs to admit together, all or none.
type Admission struct {
	Who Principal
	// Jobs: Spec parsed, normalised and admissible; IdempotencyKey scoped
	// or ""; ID "" (drawn by the control plane) or set. The control plane
	// fills in the rest.
	Jobs []jobstore.NewJob
	// Batch names each job in a refusal's reasons ("jobs[3]: …").
	Batch bool
}

// SweepRequest is one sweep to admit: the parsed spec, and who and what
// asks for it.
type SweepRequest struct {
	Spec     *sweepspec.Sweep
	ID       string // the sweep's id (drawn, or derived from a schedule's tick)
	Idem     string // idempotency key, scoped ("" none)
	Who      Principal
	Schedule string     // the schedule that made it ("" by hand)
	Tick     *time.Time // its tick
}

// ReconcileStats are the cloud reconciler's counters since start.
type ReconcileStats struct {
	Passes     int64 `json:"passes"`
	Failures   int64 `json:"failures"`   // passes of a backend that could not list or read
	Terminated int64 `json:"terminated"` // orphaned instances terminated
	Cancelled  int64 `json:"cancelled"`  // attempts ended cancelled by it (their worker gone)
}

// RefusedError is an admission that routing refused: no backend may run
// some of its jobs, and nothing was stored. Reasons name the job when the
// admission had several ("jobs[3]: …", "trials[2]: …").
type RefusedError struct {
	Reasons []string
	// Decision is the refusal of a one-job admission (nil otherwise).
	Decision *routing.Decision
	// What is "this job", "jobs of the batch" or "trials of the sweep".
	What string
}

func (e *RefusedError) Error() string {
	return "no backend may run " + e.What + ": " + strings.Join(e.Reasons, "; ")
}

// ErrOutcomeUnknown: the write that stores an admission got no answer from
// Redis (a timeout, a dropped connection): it may or may not have been
// stored. A retry with the same Idempotency-Key gets the outcome.
var ErrOutcomeUnknown = errors.New("the outcome is unknown: Redis did not answer the write")

// InvalidError is a sweep whose trials are not valid jobs here: every bad
// field, named "trials[i].field".
type InvalidError struct{ Fields []jobspec.FieldError }

func (e *InvalidError) Error() string {
	return jobspec.JoinFieldErrors("invalid sweep: ", e.Fields)
}
