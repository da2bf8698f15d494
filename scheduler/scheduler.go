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
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/scheduler/cron"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Config configures a Scheduler. Zero values take the defaults stated.
type Config struct {
	// Listen is the API's address; default 127.0.0.1:8080.
	Listen string
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
	// MaxBodyBytes caps a request body; default 1 MiB (a batch: 16×).
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading a request's headers; default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included, so a
	// client that sends its body byte by byte (or never) is cut off;
	// default 30s. A follow stream, an artifact download and an audit
	// export lift it once their request is read.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response; default 60s. Streams (follow,
	// artifact, audit export) extend it before each write, so it bounds one
	// stalled write, not the stream.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new request
	// for this long; default 60s.
	IdleTimeout time.Duration
	// MaxConns caps the API's open connections, follow streams included;
	// one more is answered 503 and closed before it is read. Default 4096;
	// negative: no cap.
	MaxConns int
	// MaxConnsPerIP caps the open connections of one client IP (429 and
	// closed beyond it), so one host cannot take every slot. Default 256;
	// negative: no cap.
	MaxConnsPerIP int
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
	// reaper.run), the reaper holds off this long before it reaps it anyway.
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
	// FinishedTTL deletes finished jobs created longer ago than this;
	// default 30 days; negative means no age limit.
	FinishedTTL time.Duration
	// AllowedRoots are the folders file:// datasets and outputs must be
	// under (checked by their text here; the worker checks again with links
	// resolved). Nil: no restriction (lathed always sets it).
	AllowedRoots pathpolicy.Roots
	// DataDeny lists lathed's own files and folders that no dataset or
	// eval_dataset may be, whatever AllowedRoots say (pathpolicy.DataDeny of
	// the data dir, and the config, tokens and ledger key files); refused at
	// submit, naming the field. The worker checks again on its machine.
	// Nil: none.
	DataDeny pathpolicy.Deny
	// Tokens are the API tokens. Empty means an open API (every request is
	// an anonymous admin): only for a scheduler on loopback, which lathed
	// enforces. /healthz is always open.
	Tokens []Token
	// FollowRedis, when set, serves the blocking stream reads of event
	// follows (SSE), so many `lathe logs -f` cannot take every connection
	// of the API's pool; default the API's own client.
	FollowRedis redis.UniversalClient
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
	// NoEvictionCheck turns off /healthz's check of Redis's
	// maxmemory-policy (for the embedded miniredis, which never evicts and
	// does not report one). Default false: every /healthz reads the policy
	// and answers 503 unless it is noeviction.
	NoEvictionCheck bool
	// Schedules are the schedules the leader runs (the config's
	// schedules:, schedules.go); SetSchedules replaces them. Nil: none.
	Schedules []cron.Schedule
	// TestHoldScheduledSweep is a test hook: a scheduled sweep, expanded
	// and routed, waits this long before it is stored (so a test can kill
	// the leader in the middle of a sweep's expansion). 0, the default: no
	// wait. lathed sets it from LATHE_TEST_HOLD_SCHEDULED_SWEEP.
	TestHoldScheduledSweep time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if len(c.Trainers) == 0 {
		c.Trainers = []string{"reference"}
	}
	c.Defaults = jobspec.DeploymentDefaults(c.Defaults)
	if c.KillGrace <= 0 {
		c.KillGrace = 10 * time.Second
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 60 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = 4096 // negative stays: no cap
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = 256
	}
	if c.RedisTimeout <= 0 {
		c.RedisTimeout = 1500 * time.Millisecond
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

// Scheduler serves the API and places jobs.
type Scheduler struct {
	cfg     Config
	rdb     redis.UniversalClient
	store   *jobstore.Store
	follow  *jobstore.Store // store over Config.FollowRedis
	client  *asynq.Client
	insp    *asynq.Inspector
	log     *slog.Logger
	wake    chan struct{}
	httpSrv *http.Server
	ln      net.Listener

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	leader  *leaderLoop // the leader's duties (duty.go)

	redisErrAt atomic.Int64                      // unix ms of the last Redis error this scheduler saw itself (0: none)
	fence      atomic.Value                      // jobstore.Fence of the current term, "" when not leading
	route      atomic.Pointer[policy.RouteState] // the routing config in force
	rec        reconcileCounters                 // the reconciler's work (ReconcileStats; reconcile.go)

	evictPolicy atomic.Value // string: Redis's maxmemory-policy as /healthz last read it

	scheds atomic.Pointer[[]cron.Schedule] // the schedules in force (schedules.go)

	metrics *metrics   // GET /metrics (metrics.go)
	api     *apiServer // the HTTP API (api.go)
}

// New returns a Scheduler over rdb; Start runs it.
func New(rdb redis.UniversalClient, store *jobstore.Store, cfg Config) *Scheduler {
	cfg = cfg.withDefaults()
	s := &Scheduler{cfg: cfg, rdb: rdb, store: store,
		client: asynq.NewClientFromRedisClient(rdb), insp: asynq.NewInspectorFromRedisClient(rdb),
		log: cfg.Logger.With(slog.String("component", "scheduler")), wake: make(chan struct{}, 1)}
	s.follow = store
	s.fence.Store(jobstore.Fence(""))
	rc := cfg.Routing
	if len(rc.Sites) == 0 {
		implicit, err := routecfg.ParseConfig(nil)
		if err != nil {
			panic("scheduler: routing's implicit config does not parse: " + err.Error()) // a bug in routing, not input
		}
		rc = implicit
	}
	s.route.Store(policy.NewRouteState(rc))
	s.scheds.Store(&cfg.Schedules)
	s.metrics = newMetrics(s)
	if cfg.FollowRedis != nil {
		s.follow = store.WithClient(cfg.FollowRedis)
	}
	s.api = newAPI(s)
	return s
}

// Handler returns the HTTP API handler (for tests and embedding).
func (s *Scheduler) Handler() http.Handler { return s.api.routes() }

// Addr is the API's listening address once started.
func (s *Scheduler) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Start listens on Config.Listen and starts the placer.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("scheduler: already started")
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("scheduler: listen %s: %w", s.cfg.Listen, err)
	}
	ln = newConnLimiter(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerIP, s.log)
	s.ln = ln
	s.httpSrv = &http.Server{Handler: s.api.routes(), ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout,
		WriteTimeout: s.cfg.WriteTimeout, IdleTimeout: s.cfg.IdleTimeout}
	go func() {
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", slog.Any("err", err))
		}
	}()
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	s.leader = newLeaderLoop(s)
	s.leader.Start(pctx)
	s.started = true
	s.log.Info("scheduler started", slog.String("listen", ln.Addr().String()))
	if len(s.cfg.Tokens) == 0 {
		s.log.Warn("no API tokens configured: the API is OPEN to anyone who can reach it (allowed on loopback only)", slog.String("listen", ln.Addr().String()))
	} else {
		s.log.Info("API tokens loaded", slog.Int("tokens", len(s.cfg.Tokens)))
	}
	return nil
}

// Stop stops the placer and the API (waiting for open requests up to
// ctx's deadline). Safe to call twice.
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
	if f := s.leaderFence(); f != "" {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.store.ReleaseLeadership(rctx, f)
		cancel()
		s.fence.Store(jobstore.Fence(""))
	}
	err := s.httpSrv.Shutdown(ctx)
	if err != nil {
		_ = s.httpSrv.Close()
	}
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

// IsLeader reports whether this scheduler holds the leader lease now.
func (s *Scheduler) IsLeader() bool { return s.leaderFence() != "" }

func (s *Scheduler) leaderFence() jobstore.Fence { return s.fence.Load().(jobstore.Fence) }

// lead takes or renews the leader lease; it returns whether this scheduler
// leads for this pass. Any doubt (Redis unreachable) means not leading.
func (s *Scheduler) lead(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaderTTL/3)
	defer cancel()
	f, ok, err := s.store.AcquireLeadership(ctx, s.cfg.ID, s.cfg.LeaderTTL)
	s.sawRedis(err)
	was := s.leaderFence()
	switch {
	case err != nil || !ok:
		if was != "" {
			s.log.Warn("lost the leader lease; placement, reaping and repair stop here", slog.Any("err", err))
		}
		s.fence.Store(jobstore.Fence(""))
		return false
	case was != f:
		s.log.Info("leading", slog.String("id", s.cfg.ID), slog.Int64("fencing_token", f.Token()))
	}
	s.fence.Store(f)
	return true
}

// checkEviction reads Redis's maxmemory-policy (for /healthz) and logs when
// it turns bad or good again, once per change.
func (s *Scheduler) checkEviction(ctx context.Context) error {
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

// sawRedis notes err, when it is one, as a Redis error this scheduler saw
// itself: the reaper holds off leases that expired around it (reaper.run).
func (s *Scheduler) sawRedis(err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		s.redisErrAt.Store(time.Now().UnixMilli())
	}
}

// lastRedisError is when this scheduler last saw a Redis error (zero: never).
func (s *Scheduler) lastRedisError() time.Time {
	if ms := s.redisErrAt.Load(); ms != 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}
