package api

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/cron"
)

// listSchedules answers GET /api/v1/schedules: every schedule in force
// that the token may read (a schedule is its team's, as that team's jobs
// are: mayReadTeam), its next tick, its last tick's outcome and message,
// and its last run's state.
func (s opsView) listSchedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	p := principalOf(r)
	scheds := slices.DeleteFunc(slices.Clone(s.plane.Schedules()), func(sch cron.Schedule) bool { return !mayReadTeam(p, sch.Team) })
	names := make([]string, len(scheds))
	for i, sch := range scheds {
		names[i] = sch.Name
	}
	states, err := s.store.ScheduleStates(ctx, names)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := time.Now()
	out := wire.ScheduleList{Schedules: make([]wire.ScheduleInfo, len(scheds))}
	for i, sch := range scheds {
		out.Schedules[i] = s.scheduleInfo(ctx, sch, states[i], now)
	}
	writeJSON(w, http.StatusOK, out)
}

// scheduleInfo is sch's wire view at now with its stored state st.
func (s opsView) scheduleInfo(ctx context.Context, sch cron.Schedule, st jobstore.ScheduleState, now time.Time) wire.ScheduleInfo {
	si := wire.ScheduleInfo{Name: sch.Name, Cron: sch.Cron, Timezone: sch.Timezone, Kind: string(sch.Kind), File: sch.File,
		Team: sch.Team, Concurrency: string(sch.Concurrency), Missed: string(sch.Missed), StartingDeadline: sch.StartingDeadline.String(),
		Outcome: st.Outcome, Message: st.Message, TickRunID: st.TickRunID, LastRunID: st.RunID}
	if next := sch.Next(now); !next.IsZero() {
		si.NextTick = &next
	}
	if !st.Tick.IsZero() {
		t := st.Tick.UTC()
		si.LastTick = &t
	}
	if st.RunID != "" {
		// The state is a hint: without it the schedule is still the answer.
		if _, state, err := s.store.RunGoing(ctx, st.RunID); err == nil {
			si.LastRunState = state
		}
	}
	return si
}
