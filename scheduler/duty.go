package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// duty is one of the leader's periodic jobs (placer, reaper, repair,
// pruner, settle, sweeps, schedules, reconciler, history), each in its own file
// with its own state, built from what it uses (its params struct).
type duty struct {
	name   string
	every  time.Duration // 0: every pass of the leader loop
	onLead bool          // also at once when this scheduler becomes the leader
	run    func(ctx context.Context)
	last   time.Time
}

// leaderLoop runs the duties while this scheduler leads: on every pass it
// takes or renews the leader lease, then runs, in order, each duty whose
// time has come. A pass comes every PlaceInterval, at once on Wake
// (which also makes the next placement round a full one), and, while this
// scheduler leads, when a schedule's next tick comes due (nextTick), so
// an idle leader starts a tick on time, not up to PlaceInterval late. The duties run
// one after another on its goroutine, so none of them needs a lock for its
// own state (the reconciler's passes run on a goroutine of their own:
// reconcile.go). Start once; Stop is safe to call twice.
type leaderLoop struct {
	lead       func(ctx context.Context) bool // takes or renews the lease: whether this scheduler leads
	fence      func() jobstore.Fence          // the current term's fence ("" when not leading)
	wake       <-chan struct{}
	interval   time.Duration
	nextTick   func(now time.Time) time.Time // the schedules' next tick (zero: none)
	placer     *placer
	reconciler *reconciler
	duties     []*duty
	term       jobstore.Fence // the term the duties last ran in
	cancel     context.CancelFunc
	done       chan struct{}
	stopped    sync.Once
}

// newLeaderLoop builds the leader loop and its duties over s: the one place
// that hands each duty its part of the Scheduler.
func newLeaderLoop(s *Scheduler) *leaderLoop {
	cfg := s.cfg
	fenced := s.lease.lost
	q := &enqueuer{client: s.client, log: s.log, defaultMaxRuntime: cfg.Defaults.MaxRuntime, killGrace: cfg.KillGrace}
	p := newPlacer(placerParams{Store: s.store, Log: s.log, Router: s.router, Queue: q, Fence: s.lease.fence, Fenced: fenced,
		PlaceScan: cfg.PlaceScan, DefaultMaxRuntime: cfg.Defaults.MaxRuntime, ObserveRound: s.metrics.placeRound.Observe})
	r := newReaper(reaperParams{Store: s.store, Log: s.log, Grace: cfg.ReapGrace, MassExpiryWait: cfg.MassExpiryWait,
		LeaseTTL: cfg.LeaseTTL, Fence: s.lease.fence, Fenced: fenced, SawRedis: s.SawRedis, LastRedisError: s.lease.lastRedisError,
		Wake: s.Wake})
	rep := newRepairer(repairerParams{Store: s.store, Log: s.log, Tasks: s.insp, Queue: q, RepairAfter: cfg.RepairAfter})
	hist := newHistorian(historianParams{Store: s.store, Log: s.log, Keep: cfg.HistoryKeep})
	pr := newPruner(prunerParams{Store: s.store, Log: s.log, KeepFinished: cfg.KeepFinished, FinishedTTL: cfg.FinishedTTL, Pruned: hist.prunedJobs})
	st := newSettler(settlerParams{Store: s.store, Log: s.log, Routing: s.Routing,
		Stop: func(ctx context.Context, j *jobtype.Job, st jobtype.State) { s.cancelFastPath(ctx, j, st) }, StopLead: cfg.KillGrace})
	sw := newSweeper(sweeperParams{Store: s.store, Log: s.log, Routing: s.Routing,
		StopTrial: func(ctx context.Context, j *jobtype.Job, st jobtype.State) { s.cancelFastPath(ctx, j, st) },
		Wake:      s.Wake, Resume: s.admit.resumeSweep, StopLead: cfg.KillGrace})
	sch := newScheduleRunner(scheduleRunnerParams{Store: s.store, Log: s.log, Schedules: s.Schedules, Defaults: cfg.Defaults,
		Admit: admitterOf(s), SawRedis: s.SawRedis})
	rec := newReconciler(reconcilerParams{Clouds: cfg.Clouds, Store: s.store, Log: s.log, Grace: cfg.ReconcileGrace,
		ReapGrace: cfg.ReapGrace, Counters: &s.rec, Leading: s.IsLeader})
	return &leaderLoop{lead: s.lease.lead, fence: s.lease.fence, wake: s.wake, interval: cfg.PlaceInterval, nextTick: sch.nextTick,
		placer: p, reconciler: rec, duties: []*duty{
			{name: "reaper", run: r.run},
			{name: "placer", run: p.round},
			{name: "repair", every: cfg.RepairAfter / 2, run: rep.run},
			{name: "pruner", every: pruneEvery, run: pr.run},
			{name: "settle", every: settleEvery, run: st.run},
			{name: "sweeps", every: sweepEvery, run: sw.run},
			{name: "schedules", every: scheduleEvery, run: sch.run},
			{name: "reconciler", every: cfg.ReconcileEvery, onLead: true, run: rec.run},
			{name: "history", every: cfg.HistoryEvery, onLead: true, run: hist.run},
		}}
}

// Start runs the loop until Stop or ctx ends.
func (l *leaderLoop) Start(ctx context.Context) {
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go l.loop(ctx)
}

// Stop ends the loop and waits for the pass under way (and the
// reconciler's).
func (l *leaderLoop) Stop() {
	l.stopped.Do(func() {
		if l.cancel != nil {
			l.cancel()
			<-l.done
			l.reconciler.wait()
		}
	})
}

func (l *leaderLoop) loop(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	tick := time.NewTimer(time.Hour)
	tick.Stop()
	defer tick.Stop()
	for {
		passAt := time.Now()
		var tickDue <-chan time.Time // nil: no wake for a tick
		if l.lead(ctx) {
			f := l.fence()
			newTerm := f != l.term
			l.term = f
			for _, d := range l.duties {
				if d.every == 0 || time.Since(d.last) >= d.every || (newTerm && d.onLead) {
					d.run(ctx)
					d.last = time.Now()
				}
			}
			if at := l.nextTick(time.Now()); !at.IsZero() {
				tick.Reset(time.Until(at))
				tickDue = tick.C
			}
		} else {
			l.term = ""
		}
		gap := wakeGapAfter(time.Since(passAt))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-tickDue:
		case <-l.wake:
			l.placer.forceRound() // a submit, retry or cancel: always a full round
			if !l.settle(ctx, passAt, gap, t.C, tickDue) {
				return
			}
		}
	}
}

// wakeGap is the least time between the starts of two passes that wakes
// ask for: a burst of submits (a shell loop of lathe submit, a batch of
// retries) shares one placement round per wakeGap instead of making one
// full round each, which on a small machine took the CPU the submits
// needed (docs/benchmarks.md, "lathe submit against sbatch"). A wake after
// a quiet spell is served at once.
const wakeGap = 50 * time.Millisecond

// wakeShare bounds the share of a core that passes asked for by wakes may
// take, to 1/wakeShare: after a pass of d, the next such pass starts no
// sooner than wakeShare × d later. A round reads every pending job, so
// with thousands queued it takes tens of milliseconds, and wakeGap alone
// let a burst of submits spend most of a core on rounds, the core the
// submits needed (docs/benchmarks.md). What it costs: a job submitted
// behind 2,000 others (a pass of ~25 ms) is placed up to 200 ms later.
const wakeShare = 8

// wakeGapAfter is the least time from the start of a pass that took d to
// the start of the next pass a wake asks for.
func wakeGapAfter(d time.Duration) time.Duration {
	return max(wakeGap, wakeShare*d)
}

// settle waits, after a wake, until gap has passed since the pass that
// started at passAt, taking in the wakes that come meanwhile; false when
// ctx ended. A tick of the ticker (tick) or a schedule's tick that comes
// due (due; nil: none) ends the wait at once: wakes make passes come sooner than the ticker's, never
// later, so the duties that run on the ticker (the settle that checks a
// sweep's cap on actual spend) keep their pace however long a pass is.
func (l *leaderLoop) settle(ctx context.Context, passAt time.Time, gap time.Duration, tick, due <-chan time.Time) bool {
	wait := gap - time.Since(passAt)
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-tick:
	case <-due:
	}
	select {
	case <-l.wake:
	default:
	}
	return true
}
