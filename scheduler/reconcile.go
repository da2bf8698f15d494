package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lathe-ml/lathe/internal/cloud"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// CloudInstances is what the reconciler needs of a cloud backend (a
// cloud.Backend, such as backends/aws's Backend.Cloud): this cluster's
// managed instances, terminating one, and its billing rule.
type CloudInstances interface {
	Find(ctx context.Context, q cloud.Query) ([]cloud.Instance, error)
	Terminate(ctx context.Context, instanceID string) error
	Cost(launch, end time.Time, usdPerHour float64) float64
}

var _ CloudInstances = cloud.Backend(nil)

// ReconcileStats are the reconciler's counters (plane.ReconcileStats).
type ReconcileStats = plane.ReconcileStats

type reconcileCounters struct{ passes, failures, terminated, cancelled atomic.Int64 }

// ReconcileStats returns the reconciler's counters.
func (s *Scheduler) ReconcileStats() ReconcileStats { return s.rec.stats() }

func (c *reconcileCounters) stats() ReconcileStats {
	return ReconcileStats{Passes: c.passes.Load(), Failures: c.failures.Load(), Terminated: c.terminated.Load(), Cancelled: c.cancelled.Load()}
}

// reconciler is the leader's duty that terminates orphaned cloud
// instances (pass). The leader loop runs it at the start of each term,
// then every ReconcileEvery; each pass runs on a goroutine of its own, so
// a slow or throttled cloud API never holds up placement or the leader
// lease's renewal. Start passes with run; wait waits for the one under
// way.
type reconciler struct {
	clouds    map[string]CloudInstances
	store     *jobstore.Store
	log       *slog.Logger
	grace     time.Duration
	reapGrace time.Duration
	counters  *reconcileCounters
	leading   func() bool

	mu    sync.Mutex
	busy  bool // a pass is under way
	again bool // run was called meanwhile: one more pass after it
	wg    sync.WaitGroup
}

// reconcilerParams is what a reconciler is built from.
type reconcilerParams struct {
	Clouds    map[string]CloudInstances // Config.Clouds; none: the reconciler does nothing
	Store     *jobstore.Store
	Log       *slog.Logger
	Grace     time.Duration      // Config.ReconcileGrace
	ReapGrace time.Duration      // Config.ReapGrace: how long past its lease a cancelled attempt's worker counts as gone
	Counters  *reconcileCounters // where it counts its work (ReconcileStats)
	Leading   func() bool        // whether this scheduler still leads (before a pass asked for during another)
}

func newReconciler(p reconcilerParams) *reconciler {
	return &reconciler{clouds: p.Clouds, store: p.Store, log: p.Log, grace: p.Grace, reapGrace: p.ReapGrace,
		counters: p.Counters, leading: p.Leading}
}

// run starts a pass on its own goroutine and returns. Called while one is
// under way, it has one more pass run right after it (if this scheduler
// still leads then), as a pass is never skipped for a slow one.
func (r *reconciler) run(ctx context.Context) {
	if len(r.clouds) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		r.again = true
		return
	}
	r.busy = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			r.pass(ctx)
			r.mu.Lock()
			again := r.again && ctx.Err() == nil && r.leading()
			r.again = false
			if !again {
				r.busy = false
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
		}
	}()
}

// wait waits for the pass under way, if any (end its ctx first).
func (r *reconciler) wait() { r.wg.Wait() }

// pass (leader only) terminates every instance tagged
// managed by this cluster, older than ReconcileGrace, that is
// not the live attempt of its job (fail closed: a missing job, a missing or
// bad tag, an ended or cancelled job, another attempt, another backend).
// A failure to list instances or to read the store terminates nothing.
// When the terminated instance's attempt has a cancel asked and no worker
// holds its lease (the AWS worker is down), the reconciler also ends the
// attempt cancelled, with its cost.
func (r *reconciler) pass(ctx context.Context) {
	names := make([]string, 0, len(r.clouds))
	for n := range r.clouds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		r.reconcileBackend(ctx, name, r.clouds[name])
	}
}

// reconcileBackend is one pass over cloud backend: list its managed
// instances, read the jobs they run (liveAttempts), terminate those that
// run no live attempt (terminateOrphans), and end the cancelled attempts
// whose worker is down (endCancelledCloudAttempts).
func (r *reconciler) reconcileBackend(ctx context.Context, backend string, api CloudInstances) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r.counters.passes.Add(1)
	log := r.log.With(slog.String("component", "reconciler"), slog.String("backend", backend))
	insts, err := api.Find(ctx, cloud.Query{})
	if err != nil {
		r.counters.failures.Add(1)
		log.Warn("list managed instances failed; terminating nothing this pass", slog.Any("err", err))
		return
	}
	var mine []cloud.Instance // another backend's (same cluster) are its own pass's
	for _, in := range insts {
		if in.Backend == backend {
			mine = append(mine, in)
		}
	}
	jobs, live, err := r.liveAttempts(ctx, backend, mine)
	if err != nil {
		r.counters.failures.Add(1)
		log.Warn("read the store failed; terminating nothing this pass", slog.Any("err", err))
		return
	}
	terminated := r.terminateOrphans(ctx, log, api, cloud.Orphans(mine, live, time.Now(), r.grace), jobs)
	r.endCancelledCloudAttempts(ctx, log, backend, api, mine, terminated)
}

// liveAttempts reads the job each of backend's instances insts runs (by
// its tags): jobs by id (a job not found is left out) and, of those, the
// attempt of each whose attempt is live on backend (liveCloudAttempt).
func (r *reconciler) liveAttempts(ctx context.Context, backend string, insts []cloud.Instance) (jobs map[string]*jobtype.Job, live map[string]int, err error) {
	jobs, live = map[string]*jobtype.Job{}, map[string]int{}
	for _, in := range insts {
		id, _, ok := in.JobAttempt()
		if !ok || jobs[id] != nil {
			continue
		}
		j, err := r.store.Get(ctx, id)
		switch {
		case errors.Is(err, jobstore.ErrNotFound):
			continue // no job: not live
		case err != nil:
			return nil, nil, err
		}
		jobs[id] = j
		if liveCloudAttempt(j, backend) {
			live[id] = j.Attempt
		}
	}
	return jobs, live, nil
}

// terminateOrphans terminates each of orphans (instances that run no
// live attempt; jobs holds the jobs read for them, to log why) and
// reports which it terminated, by instance id.
func (r *reconciler) terminateOrphans(ctx context.Context, log *slog.Logger, api CloudInstances, orphans []cloud.Instance, jobs map[string]*jobtype.Job) map[string]bool {
	terminated := map[string]bool{}
	for _, in := range orphans {
		id, attempt, _ := in.JobAttempt()
		why := "no job " + id
		if j := jobs[id]; j != nil {
			why = fmt.Sprintf("job %s is %s at attempt %d, cancel asked: %v", id, j.State, j.Attempt, j.CancelRequested)
		}
		if err := api.Terminate(ctx, in.ID); err != nil {
			r.counters.failures.Add(1)
			log.Warn("terminate orphaned instance failed", slog.String("instance_id", in.ID), slog.Any("err", err))
			continue
		}
		n := r.counters.terminated.Add(1)
		log.Warn("terminated an instance without a live attempt", slog.String("instance_id", in.ID),
			slog.String("job_id", id), slog.Int("attempt", attempt), slog.String("why", why),
			slog.Duration("age", time.Since(in.LaunchTime).Round(time.Second)), slog.Int64("terminated_total", n))
		terminated[in.ID] = true
	}
	return terminated
}

// liveCloudAttempt: the job's current attempt runs on backend and may go
// on (not ended, no cancel asked).
func liveCloudAttempt(j *jobtype.Job, backend string) bool {
	switch j.State {
	case jobtype.StateDispatched, jobtype.StateProvisioning, jobtype.StateRunning:
	default:
		return false
	}
	return !j.CancelRequested && j.Node == jobtype.CloudNode(backend)
}

// endCancelledCloudAttempts writes cancelled for the backend's attempts
// whose cancel was asked while no AWS worker holds them (lease lapsed: a
// worker that does ends them itself) and whose instance is gone (or never
// was): terminated by this pass or earlier, or not launched yet. The
// instance's cost, when the job records it, is added once.
func (r *reconciler) endCancelledCloudAttempts(ctx context.Context, log *slog.Logger, backend string, api CloudInstances, mine []cloud.Instance, terminated map[string]bool) {
	atts, err := r.store.NodeAttempts(ctx, jobtype.CloudNode(backend), 10000)
	if err != nil {
		log.Warn("list the backend's attempts", slog.Any("err", err))
		return
	}
	alive := map[string]bool{}
	for _, in := range mine {
		if !in.Gone() && !terminated[in.ID] {
			alive[in.ID] = true
		}
	}
	now := time.Now()
	for _, j := range atts {
		if !j.CancelRequested || (j.LeaseUntil != nil && now.Before(j.LeaseUntil.Add(r.reapGrace))) {
			continue
		}
		inst := j.Instance
		if inst != nil && inst.Attempt != j.Attempt {
			inst = nil
		}
		if inst != nil && alive[inst.ID] {
			continue // still running: terminated by a later pass (it is no longer live)
		}
		if inst != nil {
			end := now
			if inst.TerminatedAt != nil {
				end = *inst.TerminatedAt
			}
			if _, err := r.store.AddAttemptCost(ctx, j.ID, j.Attempt, api.Cost(inst.LaunchTime, end, inst.USDPerHour)); err != nil {
				log.Warn("record the instance's cost", slog.String("job_id", j.ID), slog.Any("err", err))
			}
		}
		msg := "cancelled while its AWS worker was down"
		if inst != nil {
			msg += "; the reconciler made sure instance " + inst.ID + " is terminated"
		}
		err := r.store.Finish(ctx, j.ID, j.Attempt, jobstore.Ending{State: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled, Error: msg})
		if err != nil {
			log.Warn("end the cancelled attempt", slog.String("job_id", j.ID), slog.Any("err", err))
			continue
		}
		r.counters.cancelled.Add(1)
		log.Info("cancelled attempt ended by the reconciler", slog.String("job_id", j.ID), slog.Int("attempt", j.Attempt))
	}
}
