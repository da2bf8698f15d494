package scheduler

import (
	"context"
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
	ended   func(*jobtype.Job)
}

// settlerParams is what a settler is built from.
type settlerParams struct {
	Store   *jobstore.Store
	Log     *slog.Logger
	Routing func() *policy.RouteState // the routing config in force (its prices)
	Ended   func(*jobtype.Job)        // a settled job, for the metrics
}

func newSettler(p settlerParams) *settler {
	return &settler{store: p.Store, log: p.Log, routing: p.Routing, ended: p.Ended}
}

// run settles the budget reservation of every job that ended: its
// reservation is released and its actual cost counted — GPU-hours it ran
// (started to finished, × its GPUs) × its backend's price per GPU-hour. A
// job that never started costs nothing; a cloud attempt's instance cost is
// on the job already (jobstore.AddCost).
func (d *settler) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ids, err := d.store.OpenReservations(ctx)
	if err != nil || len(ids) == 0 {
		return
	}
	// Every queued and running job holds a reservation: read their states
	// first and the whole records only of those that ended (re-read whole
	// every 2 s, 2,200 of them were most of an idle leader's Redis load).
	states, err := d.store.States(ctx, ids)
	if err != nil {
		return
	}
	ended := ids[:0]
	for i, id := range ids {
		if states[i].Terminal() {
			ended = append(ended, id)
		}
	}
	if len(ended) == 0 {
		return
	}
	jobs, err := d.store.GetMany(ctx, ended)
	if err != nil {
		return
	}
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
		d.ended(j)
		d.log.Debug("budget settled", slog.String("job_id", j.ID), slog.Float64("usd", actual))
	}
}
