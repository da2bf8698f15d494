package scheduler

import (
	"context"
	"log/slog"
	"time"
)

// pruneEvery is how often the leader applies the retention of finished jobs.
const pruneEvery = time.Minute

// pruner is the leader's duty that applies the retention of finished jobs.
type pruner struct{ s *Scheduler }

// run applies the retention of finished jobs (KeepFinished,
// FinishedTTL), at most 1000 deletions a pass, so Redis stays small under
// noeviction.
func (d *pruner) run(ctx context.Context) {
	s := d.s
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	keep := s.cfg.KeepFinished
	if keep < 0 {
		keep = 0 // PruneFinished: 0 = no cap
	}
	var before time.Time
	if s.cfg.FinishedTTL > 0 {
		before = time.Now().Add(-s.cfg.FinishedTTL)
	}
	if keep == 0 && before.IsZero() {
		return
	}
	n, err := s.store.PruneFinished(ctx, keep, before, 1000)
	if err != nil {
		s.log.Warn("retention: prune finished jobs", slog.Any("err", err))
	}
	if n > 0 {
		s.log.Info("retention: deleted finished jobs", slog.Int("deleted", n), slog.Int("keep_finished", s.cfg.KeepFinished))
	}
}
