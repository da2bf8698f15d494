// Package scheduler is Lathe's control plane: the HTTP API (JSON), and the
// placer that moves jobs from the pending set onto a node's asynq queue.
// It keeps no state outside Redis; the job store is the authority.
//
//	POST /api/v1/jobs ──► jobspec.Parse + Normalize ──► jobstore.Create (queued, pending set)
//	                                                          │ (wake)
//	placer: pending set (priority, submit time) ──► node with a free slot
//	        ──► jobstore.Dispatch (reserve + dispatched, one Lua script)
//	        ──► asynq enqueue on node:<name>, TaskID <job>:<attempt>, MaxRetry(0)
//	repair: a dispatched attempt whose task is missing is enqueued again
package scheduler

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/scheduler/cron"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Config configures a Scheduler. Zero values take the defaults stated.
type Config struct {
	// Defaults fill what a job spec leaves out (residency [onprem],
	// max_runtime 24h, output under the data dir, trainer reference).
	Defaults jobspec.Defaults
	// Trainers are the trainer names a job may ask for; default [reference].
	Trainers []string
	// KillGrace is the workers' SIGTERM → SIGKILL grace; the asynq task
	// timeout is max_runtime + KillGrace + one minute, so the worker's own
	// max_runtime timer always fires first and the store records the
	// timeout (asynq's 30-minute default never applies). Default 10s.
	KillGrace time.Duration
	// RedisTimeout bounds each request's Redis work, so the API answers 503
	// within 2 s when Redis is away; default 1.5s.
	RedisTimeout time.Duration
	// Routing is the routing config (sites, backends, buckets, budgets);
	// the zero value is routing's implicit one: one site "local" [onprem]
	// with one local backend, as a deployment without routing config.
	Routing routecfg.Config
	// Ledger records every routing decision; nil records nothing (tests
	// that do not look at it). lathed always sets it.
	Ledger *ledger.Ledger
	// PlaceScan is how many pending jobs (in queue order) one placement
	// round looks at; default 10000. Jobs beyond wait for a later round and
	// get no place in line until then.
	PlaceScan int
	// PlaceInterval is how often the placer looks at the pending set when
	// nothing wakes it; default 500ms.
	PlaceInterval time.Duration
	// RepairAfter is how long a dispatched attempt may lack its asynq task
	// before the repair loop enqueues it again; default 10s.
	RepairAfter time.Duration
	// ReapGrace is how long past an attempt's lease end the reaper waits
	// before it requeues the attempt (its worker is gone). Workers stop
	// their own trainers half a lease after their last renewal, so with the
	// default lease (30s) and kill grace (10s) no two trainers of a job ever
	// overlap. Default 5s.
	ReapGrace time.Duration
	// MassExpiryWait: when an attempt's lease expired while this scheduler
	// itself could not reach Redis (a Redis blip, not a dead worker: see
	// reaper.holdOff), the reaper holds off this long before it reaps it anyway.
	// Default 2m.
	MassExpiryWait time.Duration
	// LeaseTTL is the workers' attempt lease (worker.lease_ttl), the window
	// before a lease's end in which a Redis error this scheduler saw makes
	// the reaper hold off. Default 30s.
	LeaseTTL time.Duration
	// ID names this scheduler in the leader lease; default host-pid-random.
	ID string
	// LeaderTTL is the leader lease's length. The leader renews it on
	// every placer pass; another scheduler takes over within LeaderTTL of
	// the leader's death. Every dispatch and reap carries the lease value
	// as a fencing token, so a deposed leader's late writes are refused.
	// Default 5s.
	LeaderTTL time.Duration
	// KeepFinished caps how many finished jobs (succeeded, failed,
	// cancelled) stay in Redis; the leader deletes the oldest beyond it
	// (record and events; artifacts on disk stay). Default 10000; negative
	// means no cap.
	KeepFinished int
	// HistoryEvery is how often the leader samples the pool into the
	// history the dashboard charts (queue depth, waits, throughput, GPU
	// use); default 1m. HistoryKeep is how many samples are kept (a capped
	// Redis list, about 150 bytes a sample); default 360, 6 hours at the
	// default interval.
	HistoryEvery time.Duration
	HistoryKeep  int
	// FinishedTTL deletes finished jobs created longer ago than this;
	// default 30 days; negative means no age limit.
	FinishedTTL time.Duration
	// AllowedRoots are the folders file:// datasets and outputs must be
	// under (checked by their text here; the worker checks again with links
	// resolved). Nil: no restriction (lathed always sets it).
	AllowedRoots pathpolicy.Roots
	// TeamRoots are the roots of the teams that have their own
	// (teams.<name>.allowed_roots): a job of such a team, and a schedule
	// file of its schedules, must lie under its own roots instead of
	// AllowedRoots (lathed checks at start that each lies under
	// AllowedRoots when jobs.allowed_roots is set). Checked per admission
	// with the submitting principal's team. Nil: every team uses
	// AllowedRoots.
	TeamRoots pathpolicy.TeamRoots
	// DataDeny lists lathed's own files and folders that no dataset or
	// eval_dataset may be, whatever AllowedRoots say (pathpolicy.DataDeny of
	// the data dir, and the config, tokens and ledger key files); refused at
	// submit, naming the field. The worker checks again on its machine.
	// Nil: none.
	DataDeny pathpolicy.Deny
	// Clouds are the cloud backends the leader's reconciler watches, by
	// backend name (lathed builds them from the aws backends of the
	// config). Nil: no reconciler.
	Clouds map[string]CloudInstances
	// ReconcileEvery is how often the reconciler runs (and once when a
	// scheduler becomes the leader); default 3m.
	ReconcileEvery time.Duration
	// ReconcileGrace: an instance younger than this is never terminated as
	// an orphan (its attempt may not be recorded as live yet); default 10m.
	ReconcileGrace time.Duration
	// Schedules are the schedules the leader runs (the config's
	// schedules:, schedules.go); SetSchedules replaces them. Nil: none.
	Schedules []cron.Schedule
	// SweepInlineFill is how long a sweep's submit stores its trials
	// before it answers (the rest is stored in the background); default
	// 100 ms (sweeps.go).
	SweepInlineFill time.Duration
	// TestHoldScheduledSweep is a test hook: a scheduled sweep, expanded
	// and routed, waits this long before it is stored (so a test can kill
	// the leader in the middle of a sweep's expansion). 0, the default: no
	// wait. lathed sets it from LATHE_TEST_HOLD_SCHEDULED_SWEEP.
	TestHoldScheduledSweep time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if len(c.Trainers) == 0 {
		c.Trainers = []string{"reference"}
	}
	c.Defaults = jobspec.DeploymentDefaults(c.Defaults)
	if c.KillGrace <= 0 {
		c.KillGrace = 10 * time.Second
	}
	if c.SweepInlineFill <= 0 {
		c.SweepInlineFill = inlineFill
	}
	if c.PlaceScan <= 0 {
		c.PlaceScan = 10000
	}
	if c.PlaceInterval <= 0 {
		c.PlaceInterval = 500 * time.Millisecond
	}
	if c.RepairAfter <= 0 {
		c.RepairAfter = 10 * time.Second
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		c.ID = fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
	}
	if c.KeepFinished == 0 {
		c.KeepFinished = 10000
	}
	if c.HistoryEvery <= 0 {
		c.HistoryEvery = time.Minute
	}
	if c.HistoryKeep <= 0 {
		c.HistoryKeep = 360
	}
	if c.FinishedTTL == 0 {
		c.FinishedTTL = 30 * 24 * time.Hour
	}
	if c.LeaderTTL <= 0 {
		c.LeaderTTL = 5 * time.Second
	}
	if c.ReapGrace <= 0 {
		c.ReapGrace = 5 * time.Second
	}
	if c.ReconcileEvery <= 0 {
		c.ReconcileEvery = 3 * time.Minute
	}
	if c.ReconcileGrace <= 0 {
		c.ReconcileGrace = 10 * time.Minute
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.MassExpiryWait <= 0 {
		c.MassExpiryWait = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Scheduler is the control plane: admission (admit.go), routing
// (route.go) and the leader's duties (duty.go). It implements plane.Plane,
// what the API (scheduler/api) asks of it.
type Scheduler struct {
	cfg    Config
	rdb    redis.UniversalClient
	store  *jobstore.Store
	client *asynq.Client
	insp   *asynq.Inspector
	log    *slog.Logger
	wake   chan struct{}

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	leader  *leaderLoop // the leader's duties (duty.go)

	rec reconcileCounters // the reconciler's work (ReconcileStats; reconcile.go)

	evictPolicy atomic.Value // string: Redis's maxmemory-policy as /healthz last read it

	scheds atomic.Pointer[[]cron.Schedule] // the schedules in force (schedules.go)

	router  *router    // the routing config in force and re-routings (route.go)
	lease   *lease     // the leader lease (lease.go)
	admit   *admission // every job's way into the store (admit.go)
	metrics *metrics   // the control plane's instruments (metrics.go), served by the API
}

// New returns a Scheduler over rdb; Start runs it.
func New(rdb redis.UniversalClient, store *jobstore.Store, cfg Config) *Scheduler {
	cfg = cfg.withDefaults()
	s := &Scheduler{cfg: cfg, rdb: rdb, store: store,
		client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		log: cfg.Logger.With(slog.String("component", "scheduler")), wake: make(chan struct{}, 1)}
	s.lease = &lease{id: cfg.ID, ttl: cfg.LeaderTTL, store: store, log: s.log}
	s.lease.current.Store(jobstore.Fence(""))
	rc := cfg.Routing
	if len(rc.Sites) == 0 {
		implicit, err := routecfg.ParseConfig(nil)
		if err != nil {
			panic("scheduler: routing's implicit config does not parse: " + err.Error()) // a bug in routing, not input
		}
		rc = implicit
	}
	s.router = &router{store: store, log: s.log, ledger: cfg.Ledger, wake: s.Wake}
	s.router.state.Store(policy.NewRouteState(rc))
	s.scheds.Store(&cfg.Schedules)
	s.metrics = newMetrics(s)
	s.router.metrics = s.metrics
	s.admit = &admission{cfg: cfg, store: store, log: s.log, router: s.router, metrics: s.metrics, wake: s.Wake}
	s.admit.bgCtx, s.admit.bgStop = context.WithCancel(context.Background())
	return s
}

// Start starts the leader loop (placement, reaping, repair, the other
// duties) under the leader lease. The API (scheduler/api) is served apart.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("scheduler: already started")
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.leader = newLeaderLoop(s)
	s.leader.Start(pctx)
	s.started = true
	s.log.Info("scheduler started", slog.String("id", s.cfg.ID))
	return nil
}

// Stop stops the leader loop and gives up the leader lease. Safe to call
// twice.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started || s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()
	s.cancel()
	s.leader.Stop()
	s.admit.bgStop() // a sweep being stored: the next leader resumes it
	s.admit.bg.Wait()
	s.lease.release()
	s.log.Info("scheduler stopped")
	return nil
}

// Wake asks the placer to look at the pending set now.
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Metrics is the control plane's registry (metrics.go); the API serves
// it at GET /metrics with its own.
func (s *Scheduler) Metrics() prometheus.Gatherer { return s.metrics.reg }

var _ plane.Plane = (*Scheduler)(nil)

// IsLeader reports whether this scheduler holds the leader lease now.
func (s *Scheduler) IsLeader() bool { return s.lease.fence() != "" }

// CheckEviction reads Redis's maxmemory-policy (for /healthz) and logs when
// it turns bad or good again, once per change.
func (s *Scheduler) CheckEviction(ctx context.Context) error {
	err := s.store.CheckNoEviction(ctx)
	var pe *jobstore.EvictionPolicyError
	policy := "noeviction"
	if errors.As(err, &pe) {
		policy = pe.Policy
	} else if err != nil {
		return err
	}
	if prev := s.evictPolicy.Swap(policy); prev != nil && prev.(string) != policy {
		if pe != nil {
			s.log.Error("Redis's maxmemory-policy changed: Redis may now evict jobs and tasks; /healthz answers 503 until it is noeviction again",
				slog.String("policy", policy), slog.String("was", prev.(string)))
		} else {
			s.log.Info("Redis's maxmemory-policy is noeviction again", slog.String("was", prev.(string)))
		}
	} else if prev == nil && pe != nil {
		s.log.Error("Redis's maxmemory-policy is not noeviction: Redis may evict jobs and tasks", slog.String("policy", policy))
	}
	return err
}

// SawRedis notes err, when it is one, as a Redis error this scheduler saw
// (plane.Plane's: the API reports the ones it sees).
func (s *Scheduler) SawRedis(err error) { s.lease.sawRedis(err) }

// metrics is the control plane's Prometheus side (docs/metrics.md): its
// own registry (never the global one) and the instruments the placer and the
// routing paths observe (the endings and their run times are counted in
// the store: scheduler/api/metrics.go). The API serves it at GET
// /metrics with its own collector of the store's figures.
type metrics struct {
	reg            *prometheus.Registry
	placeRound     prometheus.Histogram
	routeDecisions *prometheus.CounterVec
}

// newMetrics builds s's registry and instruments; New calls it once.
func newMetrics(s *Scheduler) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.placeRound = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "lathe_placement_round_duration_seconds",
		Help:    "Duration of one full placement round of the leader's placer (read, decide, apply).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})
	m.routeDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lathe_routing_decisions_total",
		Help: "Routing decisions this scheduler made, by chosen backend (\"\" when refused), path (submit, placement, retry, preemption, spill-over, config reload) and outcome (routed, waiting, refused).",
	}, []string{"backend", "path", "outcome"})
	m.reg.MustRegister(m.placeRound, m.routeDecisions)
	return m
}

// observeDecision counts one routing decision.
func (m *metrics) observeDecision(path, backend string, refused, waiting bool) {
	outcome := "routed"
	switch {
	case refused:
		outcome, backend = "refused", ""
	case waiting:
		outcome = "waiting"
	}
	m.routeDecisions.WithLabelValues(backend, path, outcome).Inc()
}
