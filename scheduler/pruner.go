package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
)

// pruneEvery is how often the leader applies the retention of finished jobs.
const pruneEvery = time.Minute

// pruner is the leader's duty that applies the retention of finished jobs.
type pruner struct {
	store        *jobstore.Store
	log          *slog.Logger
	keepFinished int
	finishedTTL  time.Duration
}

// prunerParams is what a pruner is built from.
type prunerParams struct {
	Store        *jobstore.Store
	Log          *slog.Logger
	KeepFinished int           // Config.KeepFinished (negative: no cap)
	FinishedTTL  time.Duration // Config.FinishedTTL (negative: no age limit)
}

func newPruner(p prunerParams) *pruner {
	return &pruner{store: p.Store, log: p.Log, keepFinished: p.KeepFinished, finishedTTL: p.FinishedTTL}
}

// run applies the retention of finished jobs (KeepFinished,
// FinishedTTL), at most 1000 deletions a pass, so Redis stays small under
// noeviction.
func (d *pruner) run(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	keep := d.keepFinished
	if keep < 0 {
		keep = 0 // PruneFinished: 0 = no cap
	}
	var before time.Time
	if d.finishedTTL > 0 {
		before = time.Now().Add(-d.finishedTTL)
	}
	if keep == 0 && before.IsZero() {
		return
	}
	n, err := d.store.PruneFinished(ctx, keep, before, 1000)
	if err != nil {
		d.log.Warn("retention: prune finished jobs", slog.Any("err", err))
	}
	if n > 0 {
		d.log.Info("retention: deleted finished jobs", slog.Int("deleted", n), slog.Int("keep_finished", d.keepFinished))
	}
}
