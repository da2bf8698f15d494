package scheduler

import (
	"context"
	"sync"
	"time"
)

// duty is one of the leader's periodic jobs (placer, reaper, repair,
// pruner, settle), each in its own file with its own state.
type duty struct {
	name  string
	every time.Duration // 0: every pass of the leader loop
	run   func(ctx context.Context)
	last  time.Time
}

// leaderLoop runs the duties while this scheduler leads: on every pass it
// takes or renews the leader lease, then runs, in order, each duty whose
// time has come. A pass comes every PlaceInterval, or at once on Wake
// (which also makes the next placement round a full one). The duties run
// one after another on its goroutine, so none of them needs a lock for its
// own state. Start once; Stop is safe to call twice.
type leaderLoop struct {
	s       *Scheduler
	placer  *placer
	duties  []*duty
	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
}

func newLeaderLoop(s *Scheduler) *leaderLoop {
	p := newPlacer(s)
	r := &reaper{s: s}
	return &leaderLoop{s: s, placer: p, duties: []*duty{
		{name: "reaper", run: r.run},
		{name: "placer", run: p.round},
		{name: "repair", every: s.cfg.RepairAfter / 2, run: (&repairer{s}).run},
		{name: "pruner", every: pruneEvery, run: (&pruner{s}).run},
		{name: "settle", every: settleEvery, run: (&settler{s}).run},
		{name: "sweeps", every: sweepEvery, run: (&sweeper{s}).run},
		{name: "schedules", every: scheduleEvery, run: (&scheduleDuty{s: s}).run},
	}}
}

// Start runs the loop until Stop or ctx ends.
func (l *leaderLoop) Start(ctx context.Context) {
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go l.loop(ctx)
}

// Stop ends the loop and waits for the pass under way.
func (l *leaderLoop) Stop() {
	l.stopped.Do(func() {
		if l.cancel != nil {
			l.cancel()
			<-l.done
		}
	})
}

func (l *leaderLoop) loop(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.s.cfg.PlaceInterval)
	defer t.Stop()
	for {
		if l.s.lead(ctx) {
			for _, d := range l.duties {
				if d.every == 0 || time.Since(d.last) >= d.every {
					d.run(ctx)
					d.last = time.Now()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.s.wake:
			l.placer.forceRound() // a submit, retry or cancel: always a full round
		}
	}
}
