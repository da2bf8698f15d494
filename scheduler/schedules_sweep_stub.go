package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/lathe-ml/lathe/scheduler/schedule"
)

// startScheduledSweep admits the sweep file of sch as sweep runID for
// tick. A stub until the sweep admission is built (docs/sweeps.md): each
// tick of a sweep schedule is recorded failed with this error.
func (s *Scheduler) startScheduledSweep(ctx context.Context, sch schedule.Schedule, runID string, tick time.Time) error {
	return errors.New("sweep schedules: the sweep admission is not built yet")
}
