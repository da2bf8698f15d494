package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/lathe-ml/lathe/internal/specpath"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/scheduler/cron"
)

// startSweep admits the sweep file of sch as sweep runID for
// tick, for the principal schedule:<name> of the schedule's team. The
// sweep file and a base job it names by path are daemon-side files of the
// trusted config (a relative job path is relative to the sweep file).
// runID is derived from the tick, so a second start (another scheduler, a
// new leader after a crash between the tick's claim and this) finds the
// sweep stored and stores nothing.
func (d *scheduleRunner) startSweep(ctx context.Context, sch cron.Schedule, runID string, tick time.Time) error {
	body, err := readLimited(sch.File, sweepspec.MaxSpecBytes)
	if err != nil {
		return fmt.Errorf("sweep file %s: %w", sch.File, err)
	}
	dir := filepath.Dir(sch.File)
	sp, err := sweepspec.Parse(body, sweepspec.Options{ReadJob: func(path string) ([]byte, error) {
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		b, err := readLimited(path, maxScheduledFile)
		if err != nil {
			return nil, err
		}
		return specpath.Resolve(b, filepath.Dir(path)), nil
	}})
	if err != nil {
		return fmt.Errorf("sweep file %s: %w", sch.File, err)
	}
	p := principal{Name: "schedule:" + sch.Name, Role: RoleSubmitter, Team: sch.Team}
	t := tick.UTC()
	sw, existed, err := d.admit.admitSweep(ctx, sweepRequest{spec: sp, id: runID, p: p, schedule: sch.Name, tick: &t})
	if err != nil {
		return fmt.Errorf("sweep file %s: %w", sch.File, err)
	}
	d.log.Info("schedule: sweep admitted", slog.String("schedule", sch.Name), slog.String("sweep_id", sw.ID),
		slog.Int("trials", sw.Trials), slog.Bool("existed", existed))
	return nil
}
