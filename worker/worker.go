package worker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/backends/local/nvmlinventory"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// Worker consumes one node's asynq queue and runs its attempts.
type Worker struct {
	cfg         Config
	rdb         redis.UniversalClient
	store       *jobstore.Store
	log         *slog.Logger
	incarnation string
	srv         *asynq.Server

	// stopCtx is cancelled (cause errShutdown) when Stop begins, so running
	// trainers checkpoint and their attempts go back to the queue.
	stopCtx  context.Context
	stopFn   context.CancelCauseFunc
	hbDone   chan struct{}
	mu       sync.Mutex
	started  bool
	stopped  bool
	inflight sync.WaitGroup
	// rankLocks holds a lock per gang job with a rank here (lockRank),
	// guarded by rankMu; an entry goes when nobody holds or waits for it.
	rankMu    sync.Mutex
	rankLocks map[string]*rankLock

	invMu    sync.Mutex
	inv      nvmlinventory.Inventory // last reading
	trainers map[int]struct{}        // pids (= process groups) of running trainers
	gpuHeld  gpuHolds                // GPUs our trainers still run on (gpuhold.go)

	// cgroupDir is this worker's cgroup, parent of its attempts' cgroups;
	// "" when trainers run in process groups only. Set by Start.
	cgroupDir string
}

// errShutdown is the cause given to running attempts when the worker stops.
var errShutdown = errors.New("worker shutting down")

// New returns a Worker; Start runs it.
func New(rdb redis.UniversalClient, store *jobstore.Store, cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	w := &Worker{cfg: cfg, rdb: rdb, store: store, incarnation: hex.EncodeToString(b[:]), trainers: map[int]struct{}{},
		log: cfg.Logger.With(slog.String("component", "worker"), slog.String("node", cfg.Node))}
	w.stopCtx, w.stopFn = context.WithCancelCause(context.Background())
	return w, nil
}

// Node returns the worker's node name.
func (w *Worker) Node() string { return w.cfg.Node }

// Incarnation returns this process's incarnation id.
func (w *Worker) Incarnation() string { return w.incarnation }

func (w *Worker) nodeInfo() jobstore.Node {
	host, _ := os.Hostname()
	inv := w.lastInventory()
	return jobstore.Node{Name: w.cfg.Node, Incarnation: w.incarnation, Backend: "local", Slots: w.cfg.Slots,
		GPUs: w.nodeGPUs(inv), Driver: inv.Driver, CUDA: inv.CUDA, Simulated: inv.Simulated,
		CheckpointRoot: w.cfg.CheckpointRoot, Addr: w.cfg.AdvertiseAddr, Host: host, PID: os.Getpid()}
}

// predecessorDead reports whether p, a heartbeat under this node's name,
// came from a process on this host that no longer runs (a worker killed
// with -9 whose heartbeat has not expired yet). A zombie (killed, not yet
// reaped by its parent, e.g. a shell that has not waited for it) is dead.
func predecessorDead(p jobstore.Node) bool {
	host, _ := os.Hostname()
	if p.Host == "" || p.Host != host || p.PID <= 0 || p.PID == os.Getpid() {
		return false
	}
	if syscall.Kill(p.PID, 0) == syscall.ESRCH {
		return true
	}
	st, err := procState(p.PID)
	return err == nil && (st == 'Z' || st == 'X')
}

// Start registers the node (failing if another live worker holds its name),
// starts heartbeats and the asynq server on node:<name>.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("worker: already started")
	}
	if w.cfg.uids != nil {
		for _, d := range []string{w.cfg.DataDir, w.cfg.CheckpointRoot, w.cfg.ScriptsDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("worker: %w", err)
			}
		}
		if err := reachable(w.cfg.DataDir, w.cfg.CheckpointRoot, w.cfg.ScriptsDir); err != nil {
			return err
		}
	}
	inv, err := w.readInventory(ctx)
	if err != nil {
		return fmt.Errorf("worker: read GPU inventory: %w", err)
	}
	n := w.nodeInfo()
	n.StartedAt = time.Now().UTC()
	if err := w.store.Heartbeat(ctx, n, jobstore.HeartbeatOptions{TTL: w.cfg.HeartbeatTTL, First: true, PredecessorDead: predecessorDead}); err != nil {
		return fmt.Errorf("worker: register node: %w", err)
	}
	w.warnTrainerUser()
	// Only now, the node's one live worker, may it touch the node's cgroup.
	if err := w.setupCgroup(); err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = w.store.RemoveNode(rctx, w.cfg.Node, w.incarnation)
		cancel()
		return err
	}
	// Before taking work: no trainer of a previous incarnation may survive;
	// the attempts of those it killed are dead and go back to the queue now.
	gone, err := w.killOrphans()
	if err != nil {
		return err
	}
	w.releaseDead(ctx, gone)
	w.purgeStaleTasks(ctx)
	if w.srv, err = startServer(w.rdb, jobtype.NodeQueue(w.cfg.Node), w.cfg.Slots+len(inv.GPUs), w.cfg.TaskCheckInterval,
		w.cfg.ShutdownTimeout, w.log, w.handle); err != nil {
		return err
	}
	w.hbDone = make(chan struct{})
	go w.heartbeat(n)
	w.started = true
	w.log.Info("worker started", slog.Int("slots", w.cfg.Slots), slog.Int("gpus", len(inv.GPUs)),
		slog.Bool("simulated_gpus", inv.Simulated), slog.String("incarnation", w.incarnation),
		slog.String("queue", jobtype.NodeQueue(w.cfg.Node)))
	return nil
}

func (w *Worker) heartbeat(n jobstore.Node) {
	defer close(w.hbDone)
	t := time.NewTicker(w.cfg.HeartbeatTTL / 3)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-w.stopCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(w.stopCtx, w.cfg.HeartbeatTTL/3)
		if _, err := w.readInventory(ctx); err != nil {
			w.log.Warn("heartbeat: read GPU inventory; sending the last reading", slog.Any("err", err))
		}
		started := n.StartedAt
		n = w.nodeInfo()
		n.StartedAt = started
		err := w.store.Heartbeat(ctx, n, jobstore.HeartbeatOptions{TTL: w.cfg.HeartbeatTTL})
		cancel()
		switch {
		case err != nil && !failing:
			failing = true
			w.log.Warn("heartbeat failed; retrying", slog.Any("err", err))
		case err == nil && failing:
			failing = false
			w.log.Info("heartbeat restored")
		}
	}
}

// Stop stops taking tasks, sends SIGTERM to running trainers (their
// attempts checkpoint and go back to the queue as new attempts), waits for
// them up to ShutdownTimeout, and removes the node's heartbeat. Safe to call
// twice.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started || w.stopped {
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	w.mu.Unlock()
	w.srv.Stop() // no new tasks
	w.stopFn(errShutdown)
	stopNode(ctx, w.srv, &w.inflight, w.hbDone, w.store, w.cfg.Node, w.incarnation, w.log, "stop: attempts still running")
	if w.cgroupDir != "" {
		_ = syscall.Rmdir(w.cgroupDir) // when empty: the next Start makes it again
	}
	w.log.Info("worker stopped")
	return nil
}

// slogAdapter adapts asynq's printf-style Logger to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a slogAdapter) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a slogAdapter) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a slogAdapter) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a slogAdapter) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }

// stopNode is the end of a worker's Stop (local or cloud), once its asynq
// server takes no task and its attempts were told to stop: it waits for
// them up to ctx's deadline, shuts asynq down, waits for the heartbeat loop
// and removes the node's heartbeat.
func stopNode(ctx context.Context, srv *asynq.Server, running *sync.WaitGroup, hbDone <-chan struct{}, store *jobstore.Store,
	node, incarnation string, log *slog.Logger, stillRunning string) {
	done := make(chan struct{})
	go func() { running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		log.Warn(stillRunning, slog.Any("err", ctx.Err()))
	}
	srv.Shutdown()
	<-hbDone
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := store.RemoveNode(rctx, node, incarnation); err != nil {
		log.Warn("stop: remove node heartbeat", slog.Any("err", err))
	}
}

// startServer starts the asynq server of a worker's queue (local or cloud)
// with handle for attempt tasks.
func startServer(rdb redis.UniversalClient, queue string, concurrency int, taskCheck, shutdownTimeout time.Duration, log *slog.Logger,
	handle func(context.Context, *asynq.Task) error) (*asynq.Server, error) {
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       concurrency,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: taskCheck,
		ShutdownTimeout:   shutdownTimeout,
		Logger:            slogAdapter{log.With(slog.String("component", "asynq"))},
		// The store records every outcome; an error here only means the
		// store could not be written, and asynq must not retry (MaxRetry 0).
		IsFailure: func(err error) bool { return err != nil },
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(jobtype.TaskType, handle)
	if err := srv.Start(mux); err != nil {
		return nil, fmt.Errorf("worker: start asynq server on %s: %w", queue, err)
	}
	return srv, nil
}

// warnTrainerUser says, at every start, who trainers run as when that
// is not a user of their own: loudly for root (written out as run_as:
// root), plainly for lathed's own user (lathed not root, no run_as).
func (w *Worker) warnTrainerUser() {
	switch {
	case w.cfg.rootTrainers:
		w.log.Error("TRAINERS RUN AS ROOT: a trainer can read lathed's environment, its ledger key, its config and tokens, " +
			"connect to its Redis and leave its cgroup. Leave worker.run_as unset (lathed then runs each trainer as a user of its own) or name an unprivileged user.")
	case w.cfg.sameUser:
		w.log.Warn("trainers run as lathed's own user (lathed is not root): a trainer can read what that user can, lathed's data dir included "+
			"(its ledger key, its Redis socket). Run lathed as root (trainers then run as users of their own) where jobs come from more than one team.",
			slog.Int("uid", os.Geteuid()))
	case w.cfg.uids != nil:
		w.log.Info("trainers run as users of their own", slog.String("uids", fmt.Sprintf("%d-%d", w.cfg.uids.first, w.cfg.uids.last)))
	}
}

// setupCgroup finds and makes this worker's cgroup (Config.CgroupRoot),
// named for its node and its data dir, since a previous incarnation is the
// same node with the same data dir.
func (w *Worker) setupCgroup() error {
	root := w.cfg.CgroupRoot
	auto := root == "" || root == CgroupAuto
	noCgroup := func(err error) {
		w.log.Error("NO USABLE CGROUP V2: escaped trainer processes CANNOT BE CONTAINED. Trainers run in process groups only: "+
			"a process a trainer moves out of its group (setsid, a double fork) outlives its attempt, keeps its GPU and its files. "+
			"Set worker.cgroup_root to a writable cgroup v2 directory (Linux 5.14+), or to none to accept this.", slog.Any("err", err))
	}
	switch {
	case root == CgroupNone:
		w.log.Warn("worker.cgroup_root is none: trainers run in process groups only; a process a trainer moves out of its group (setsid, a double fork) outlives its attempt")
		return nil
	case auto:
		r, err := trainer.AutoCgroupRoot()
		if err != nil {
			noCgroup(err)
			return nil
		}
		root = r
	}
	sum := sha256.Sum256([]byte(w.cfg.DataDir))
	dir := filepath.Join(root, w.cfg.Node+"-"+hex.EncodeToString(sum[:4]))
	if err := trainer.PrepareCgroup(dir); err != nil {
		if auto {
			// The cgroup auto found is not this worker's to use (another
			// user's lathed made it: a root lathed's "lathe" cgroup seen
			// by a non-root one): the documented fallback, loudly.
			noCgroup(fmt.Errorf("worker.cgroup_root auto found %s: %w", dir, err))
			return nil
		}
		return fmt.Errorf("worker: worker.cgroup_root = %q: %w", w.cfg.CgroupRoot, err)
	}
	w.cgroupDir = dir
	w.log.Info("trainers run in cgroups of their own", slog.String("cgroup", dir))
	return nil
}

// attemptCgroup is the cgroup of one attempt, or "" without cgroups.
func (w *Worker) attemptCgroup(id string, attempt int) string {
	if w.cgroupDir == "" {
		return ""
	}
	return filepath.Join(w.cgroupDir, id+"-"+strconv.Itoa(attempt))
}
