package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// remoteNode is the lifecycle the AWS and the slurm worker share: the
// backend's node (jobtype.CloudNode) registered and heartbeated, its queue
// consumed by a handler that only claims (dispatched → provisioning) and
// hands over, attempts adopted from a previous incarnation, each attempt
// watched in its own goroutine until its end is recorded or the worker
// detaches. What an attempt does is run's.
type remoteNode struct {
	label       string // "aws" or "slurm": in errors and logs
	backend     string
	eventType   string // of the worker's notes (EventCloud, EventSlurm)
	node        string
	rdb         redis.UniversalClient
	store       *jobstore.Store
	log         *slog.Logger
	incarnation string
	info        jobstore.Node
	timings     remoteTimings
	// run carries a claimed attempt to its end and returns the store
	// write that records it (nil: nothing to write).
	run func(ctx context.Context, job *jobtype.Job) endFunc
	// refresh, when set, updates the node's record before each heartbeat.
	refresh func(ctx context.Context, n *jobstore.Node)
	// sweep, when set, runs after each adoption pass (the slurm worker's
	// orphans).
	sweep func(ctx context.Context)
	srv   *asynq.Server

	ctx    context.Context // cancelled (errDetach) when Stop begins
	stop   context.CancelCauseFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	active map[string]bool // job ids watched by this process
	state  int             // 0 new, 1 started, 2 stopped
	hbDone chan struct{}
}

// remoteTimings are the durations a remoteNode runs by.
type remoteTimings struct {
	HeartbeatTTL, LeaseTTL, PollInterval, TaskCheckInterval time.Duration
}

// errDetach is the cause given to watched attempts when the worker stops:
// they stop watching and write nothing; their instances or Slurm jobs keep
// running.
var errDetach = errors.New("worker stopping: detached from its attempts")

// init gives r, made with its label, backend, eventType, rdb, store, log
// and timings, its node name, a fresh incarnation and its logger's
// attributes (not started).
func (r *remoteNode) init() {
	r.log = r.log.With(slog.String("component", r.label+"-worker"), slog.String("backend", r.backend))
	var b [8]byte
	_, _ = rand.Read(b[:])
	r.node, r.incarnation, r.active = jobtype.CloudNode(r.backend), hex.EncodeToString(b[:]), map[string]bool{}
	r.ctx, r.stop = context.WithCancelCause(context.Background())
}

// Node is the backend's node name (and queue): cloud:<backend>.
func (r *remoteNode) Node() string { return r.node }

// Incarnation is this process's incarnation id.
func (r *remoteNode) Incarnation() string { return r.incarnation }

// start registers the node with slots (failing if another live worker
// runs it), purges its stale tasks, starts taking its queue and adopting.
func (r *remoteNode) start(ctx context.Context, slots int) error {
	host, _ := os.Hostname()
	info := jobstore.Node{Backend: r.label, Slots: slots, Host: host, PID: os.Getpid()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != 0 {
		return fmt.Errorf("worker: %s: already started", r.label)
	}
	info.Name, info.Incarnation, info.StartedAt = r.node, r.incarnation, time.Now().UTC()
	r.info = info
	if err := r.store.Heartbeat(ctx, info, jobstore.HeartbeatOptions{TTL: r.timings.HeartbeatTTL, First: true, PredecessorDead: predecessorDead}); err != nil {
		return fmt.Errorf("worker: %s: register node %s: %w", r.label, r.node, err)
	}
	purgeStaleTasks(ctx, r.rdb, r.store, r.node, r.log)
	// Concurrency 4: a handler only claims and hands over; watching runs apart.
	srv, err := startServer(r.rdb, r.node, 4, r.timings.TaskCheckInterval, 0, r.log, r.handle)
	if err != nil {
		return err
	}
	r.srv = srv
	r.hbDone = make(chan struct{})
	go r.heartbeat()
	r.wg.Add(1)
	go r.adoptLoop()
	r.state = 1
	return nil
}

// Stop stops taking tasks and detaches from every watched attempt: they
// keep running and keep their state; the next worker of the backend adopts
// them. Safe to call twice.
func (r *remoteNode) Stop(ctx context.Context) error {
	r.mu.Lock()
	if r.state != 1 {
		r.mu.Unlock()
		return nil
	}
	r.state = 2
	r.mu.Unlock()
	r.srv.Stop()
	r.stop(errDetach)
	stopNode(ctx, r.srv, &r.wg, r.hbDone, r.store, r.node, r.incarnation, r.log, "stop: attempts still detaching")
	r.log.Info(r.label + " worker stopped; its attempts keep running and are adopted by the next one")
	return nil
}

func (r *remoteNode) heartbeat() {
	defer close(r.hbDone)
	t := time.NewTicker(r.timings.HeartbeatTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		if r.refresh != nil {
			// Its own budget, so a slow Slurm never costs the heartbeat.
			rctx, rcancel := context.WithTimeout(r.ctx, r.timings.HeartbeatTTL/6)
			r.refresh(rctx, &r.info)
			rcancel()
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.timings.HeartbeatTTL/3)
		if err := r.store.Heartbeat(ctx, r.info, jobstore.HeartbeatOptions{TTL: r.timings.HeartbeatTTL}); err != nil {
			r.log.Warn("heartbeat failed; retrying", slog.Any("err", err))
		}
		cancel()
	}
}

// handle claims an attempt (dispatched → provisioning: the record in
// Redis before anything is launched or submitted) and hands it to its
// watcher. It returns nil whenever the store has the outcome, so asynq
// never retries.
func (r *remoteNode) handle(ctx context.Context, t *asynq.Task) error {
	job, _, err := claimTask(ctx, t, r.log, r.store, func() bool { return r.ctx.Err() != nil },
		func(ctx context.Context, id string, attempt int) (jobstore.ClaimOutcome, error) {
			return r.store.ClaimCloud(ctx, jobstore.ClaimParams{ID: id, Attempt: attempt, Node: r.node, Incarnation: r.incarnation, Lease: r.timings.LeaseTTL})
		})
	if job != nil {
		r.watch(job)
	}
	return err
}

// adoptLoop takes over, at start and then every few polls, the backend's
// provisioning and running attempts held by another incarnation (a worker
// that stopped or died: only one live worker runs a backend's node).
func (r *remoteNode) adoptLoop() {
	defer r.wg.Done()
	t := time.NewTicker(3 * r.timings.PollInterval)
	defer t.Stop()
	for {
		r.adoptOnce()
		if r.sweep != nil {
			ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
			r.sweep(ctx)
			cancel()
		}
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *remoteNode) adoptOnce() {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	jobs, err := r.store.NodeAttempts(ctx, r.node, 10000)
	if err != nil {
		r.log.Warn("adopt: list the backend's attempts", slog.Any("err", err))
		return
	}
	for _, j := range jobs {
		if r.watching(j.ID) {
			continue
		}
		if j.Incarnation == r.incarnation {
			// Ours but unwatched: its watcher gave up writing its end
			// (Redis away for long); watch it again.
			r.watch(j)
			continue
		}
		err := r.store.Adopt(ctx, jobstore.AdoptParams{ID: j.ID, Attempt: j.Attempt, Node: r.node, From: j.Incarnation, To: r.incarnation, Lease: r.timings.LeaseTTL})
		if err != nil {
			r.log.Info("adopt: attempt moved on", slog.String("job_id", j.ID), slog.Any("err", err))
			continue
		}
		r.log.Info("adopted an attempt left by a previous worker; re-attaching", slog.String("job_id", j.ID),
			slog.Int("attempt", j.Attempt), slog.String("from_incarnation", j.Incarnation))
		if cur, err := r.store.Get(ctx, j.ID); err == nil {
			r.watch(cur)
		}
	}
}

func (r *remoteNode) watching(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[id]
}

// watch runs the attempt of job in its own goroutine until it ends (and
// its end is recorded) or the worker detaches.
func (r *remoteNode) watch(job *jobtype.Job) {
	r.mu.Lock()
	if r.active[job.ID] || r.state == 2 {
		r.mu.Unlock()
		return
	}
	r.active[job.ID] = true
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.active, job.ID)
			r.mu.Unlock()
		}()
		log := r.log.With(slog.String("job_id", job.ID), slog.Int("attempt", job.Attempt))
		end := r.run(r.ctx, job)
		for end != nil {
			err := recordEnd(log, end)
			if err == nil {
				return
			}
			log.Error("attempt end not recorded; trying again", slog.Any("err", err))
			select {
			case <-r.ctx.Done():
				return // the next worker adopts it and ends it again
			case <-time.After(r.timings.PollInterval):
			}
		}
	}()
}

// renewLease extends the lease of attempt n of job id: cancelled is true
// when a cancel was asked, lost when the store says the attempt is no
// longer this worker's. A transient error is neither: what the attempt
// runs (an instance, a Slurm job) is left alone.
func (r *remoteNode) renewLease(ctx context.Context, log *slog.Logger, id string, n int) (cancelled, lost bool) {
	rctx, cancel := context.WithTimeout(ctx, r.timings.PollInterval)
	defer cancel()
	req, err := r.store.Renew(rctx, id, n, r.incarnation, r.timings.LeaseTTL)
	switch {
	case err == nil:
		return req, false
	case errors.Is(err, jobstore.ErrPreemptRequested):
		return false, false // only local batch jobs are preempted by Lathe
	case errors.Is(err, jobstore.ErrConflict), errors.Is(err, jobstore.ErrNotFound):
		log.Warn("the store moved on from this attempt; no longer watching it", slog.Any("err", err))
		return false, true
	default:
		log.Warn("lease renewal failed; what the attempt runs is left alone", slog.Any("err", err))
		return false, false
	}
}

// waitRenewing waits d, renewing the lease of attempt n of job id every
// PollInterval. It returns early with stop when the worker detached or
// lost the attempt, with cancelled when a cancel was asked.
func (r *remoteNode) waitRenewing(ctx context.Context, log *slog.Logger, id string, n int, d time.Duration) (cancelled, stop bool) {
	deadline := time.Now().Add(d)
	t := time.NewTicker(r.timings.PollInterval)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false, true
		case <-t.C:
		}
		if cancelled, lost := r.renewLease(ctx, log, id, n); lost || cancelled {
			return cancelled, lost
		}
	}
	return false, false
}

// note appends an event of eventType (the worker's notes: control-plane
// metadata, it may cross sites) to attempt n of job id, and logs it.
func (r *remoteNode) note(ctx context.Context, log *slog.Logger, id string, n int, msg string) {
	log.Info(msg)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := r.store.Append(wctx, id, n, []jobstore.EventIn{{Type: r.eventType,
		Data: mustRaw(map[string]string{"backend": r.backend, "message": msg})}}); err != nil {
		log.Debug(r.eventType+" event not written", slog.Any("err", err))
	}
}
