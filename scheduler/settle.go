package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/policy"
)

// settleEvery is how often the leader settles the budget reservations of
// jobs that ended.
const settleEvery = 2 * time.Second

// settler is the leader's duty that settles the budget reservations of
// jobs that ended.
type settler struct {
	store   *jobstore.Store
	log     *slog.Logger
	routing func() *policy.RouteState
	stop    func(ctx context.Context, j *jobtype.Job, st jobtype.State)
	// lead is how far ahead the team guard looks: the settle interval
	// plus the kill grace (guardTeams).
	lead time.Duration

	// queued and looked are the queued count and the time of the last
	// look for jobs whose team's money is spent (endUnfundable).
	queued int64
	looked time.Time
}

// unfundableEvery bounds how long the settler goes without looking for
// jobs whose team's money is spent when nothing settles and the queue
// keeps its size.
const unfundableEvery = 30 * time.Second

// settlerParams is what a settler is built from.
type settlerParams struct {
	Store   *jobstore.Store
	Log     *slog.Logger
	Routing func() *policy.RouteState // the routing config in force (its prices)
	// Stop tells a running job asked to stop (the cancel fast path).
	Stop func(ctx context.Context, j *jobtype.Job, st jobtype.State)
	// StopLead is how long a running job asked to stop may go on
	// costing: the kill grace (the guard adds its own interval).
	StopLead time.Duration
}

func newSettler(p settlerParams) *settler {
	return &settler{store: p.Store, log: p.Log, routing: p.Routing, stop: p.Stop, lead: settleEvery + p.StopLead}
}

// run settles the budget reservation of every job that ended: its
// reservation is released and its actual cost counted — GPU-hours it ran
// (started to finished, × its GPUs) × its backend's price per GPU-hour. A
// job that never started costs nothing; a cloud attempt's instance cost is
// on the job already (jobstore.AddCost).
func (d *settler) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d.endUnfundable(ctx, d.settle(ctx))
}

// settle is run's settling and the guard of the teams' caps; it reports
// whether it settled a job.
func (d *settler) settle(ctx context.Context) bool {
	ids, err := d.store.OpenReservations(ctx)
	if err != nil || len(ids) == 0 {
		return false
	}
	// Every queued and running job holds a reservation: read their states
	// first and the whole records only of those that ended (re-read whole
	// every 2 s, 2,200 of them were most of an idle leader's Redis load).
	states, err := d.store.States(ctx, ids)
	if err != nil {
		return false
	}
	var ended, running []string
	for i, id := range ids {
		switch {
		case states[i].Terminal():
			ended = append(ended, id)
		case states[i] == jobtype.StateRunning:
			running = append(running, id)
		}
	}
	// The guard looks after the ended jobs are settled: a job that ended
	// since the last pass is in neither the settled spend nor the running
	// jobs' cost until then, and a guard before its settlement would miss
	// its cost for a whole pass.
	settled := d.settleEnded(ctx, ended)
	d.guardTeams(ctx, running)
	return settled
}

// settleEnded settles the budgets of the jobs ended (ids read as
// terminal); it reports whether it settled one.
func (d *settler) settleEnded(ctx context.Context, ended []string) bool {
	if len(ended) == 0 {
		return false
	}
	jobs, err := d.store.GetMany(ctx, ended)
	if err != nil {
		return false
	}
	settled := false
	rs := d.routing()
	for _, j := range jobs {
		if j == nil || !j.State.Terminal() {
			continue
		}
		// Cloud attempts added their instances' cost to the job as each
		// instance ended (the AWS worker); a local last attempt adds its
		// GPU-hours here.
		actual, _ := policy.JobUsage(rs.Config, j)
		if err := d.store.Settle(ctx, j.ID, actual); err != nil {
			d.log.Warn("settle budget", slog.String("job_id", j.ID), slog.Any("err", err))
			continue
		}
		settled = true
		d.log.Debug("budget settled", slog.String("job_id", j.ID), slog.Float64("usd", actual))
	}
	return settled
}

// endUnfundable ends, stopped with reason budget, every job waiting for
// admission (held, or a sweep's trial behind a gate; holding no
// reservation) whose team's month cannot fund it: its estimate is more
// than the team's limit less what the team has spent (settled). What is
// reserved settles at most at its actual cost, and spent only grows in a
// month, so no settlement will ever free enough: without this the job
// (and its sweep) would wait, queued, until the month ends, as a submit
// of it now is refused. It looks after a pass that settled a job (the
// spend moved), when the queue's size changed (a job held since), and at
// least every unfundableEvery.
func (d *settler) endUnfundable(ctx context.Context, settled bool) {
	limits := d.routing().Config.TeamBudgetsUSD
	if len(limits) == 0 {
		return
	}
	n, err := d.store.QueuedCount(ctx)
	if err != nil {
		return
	}
	if !settled && n == d.queued && time.Since(d.looked) < unfundableEvery {
		return
	}
	ids, err := d.store.WaitingForMoney(ctx)
	if err != nil {
		return
	}
	d.queued, d.looked = n, time.Now()
	if len(ids) == 0 {
		return
	}
	month := jobstore.Month(time.Now())
	var scopes []string
	for team := range limits {
		scopes = append(scopes, "team:"+team)
	}
	spends, err := d.store.Spends(ctx, month, scopes)
	if err != nil {
		return
	}
	jobs, err := d.store.GetMany(ctx, ids)
	if err != nil {
		return
	}
	for _, j := range jobs {
		if j == nil || j.State != jobtype.StateQueued || j.BudgetReservedUSD > 0 || j.Route == nil || limits[j.Team] <= 0 {
			continue
		}
		limit, spent := limits[j.Team], spends["team:"+j.Team].SpentUSD
		if est := j.Route.EstCostUSD; est > limit-spent+1e-9 {
			why := fmt.Sprintf("team %s's %s budget cannot fund it: $%.2f of $%.2f spent, its estimate $%.2f is more than the $%.2f left", j.Team, month, spent, limit, est, max(limit-spent, 0))
			// The queue shrinks: the next pass looks again (a trial
			// behind may wait for the money now).
			if _, err := d.store.Stop(ctx, j.ID, jobtype.ReasonBudget, why); err == nil {
				d.log.Info("job ended: its team's budget cannot fund it", slog.String("job_id", j.ID), slog.String("why", why))
			}
		}
	}
}

// guardTeams stops the running jobs (of those holding a reservation:
// running) of every team whose month will have cost its budget by the
// time they could be stopped after the next pass: what it spent (settled)
// plus what its running jobs will have cost lead (the settle interval
// plus the kill grace) from now, not settled yet. Each is stopped, reason
// budget (a running one checkpoints). The budget is not passed while the
// passes come on time and stops take no longer than the kill grace; a
// late pass or a slow stop passes it by the running jobs' cost over that
// lateness. A job that started last month counts whole in this one (it
// errs to stopping early).
func (d *settler) guardTeams(ctx context.Context, running []string) {
	limits := d.routing().Config.TeamBudgetsUSD
	if len(limits) == 0 || len(running) == 0 {
		return
	}
	jobs, err := d.store.GetMany(ctx, running)
	if err != nil {
		return
	}
	cfg, now := d.routing().Config, time.Now()
	live, ahead := map[string]float64{}, map[string]float64{}
	for _, j := range jobs {
		if j != nil && j.State == jobtype.StateRunning && limits[j.Team] > 0 {
			u, _ := policy.JobUsageAt(cfg, j, now)
			live[j.Team] += max(u-j.SettledCostUSD, 0)
			u, _ = policy.JobUsageAt(cfg, j, now.Add(d.lead))
			ahead[j.Team] += max(u-j.SettledCostUSD, 0)
		}
	}
	for team, usd := range live {
		spends, err := d.store.Spends(ctx, jobstore.Month(now), []string{"team:" + team})
		if err != nil {
			return
		}
		settled := spends["team:"+team].SpentUSD
		limit, total, later := limits[team], settled+usd, settled+ahead[team]
		if later < limit {
			continue
		}
		why := fmt.Sprintf("team %s's monthly budget reached: $%.2f of $%.2f spent, $%.2f once its running jobs are stopped (settled and running jobs so far)", team, total, limit, later)
		n := 0
		for _, j := range jobs {
			if j == nil || j.Team != team || j.State != jobtype.StateRunning || j.CancelRequested {
				continue // asked to stop (or cancelled) already
			}
			st, err := d.store.Stop(ctx, j.ID, jobtype.ReasonBudget, why)
			if err == nil && st == jobtype.StateRunning {
				d.stop(ctx, j, st)
				n++
			}
		}
		if n > 0 {
			d.log.Warn("team budget reached: running jobs stopped", slog.String("team", team), slog.Int("jobs", n), slog.String("why", why))
		}
	}
}
