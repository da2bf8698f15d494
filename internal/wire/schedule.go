package wire

import "time"

// ScheduleList is the answer of GET /api/v1/schedules: the schedules of the
// daemon config in force, in the config's order; never null.
type ScheduleList struct {
	Schedules []ScheduleInfo `json:"schedules"`
}

// ScheduleInfo is one schedule as GET /api/v1/schedules and
// `lathe schedules -o json` show it: its config, its next tick, and what
// its last tick did.
type ScheduleInfo struct {
	Name string `json:"name"`
	Cron string `json:"cron"`
	// Timezone is the IANA zone the cron expression is read in.
	Timezone string `json:"timezone"`
	// Kind is job or sweep; File the job or sweep file a tick starts.
	Kind             string `json:"kind"`
	File             string `json:"file"`
	Team             string `json:"team,omitempty"`
	Concurrency      string `json:"concurrency"`
	Missed           string `json:"missed"`
	StartingDeadline string `json:"starting_deadline"`
	// NextTick is the first tick after now (nil when there is none within
	// five years).
	NextTick *time.Time `json:"next_tick,omitempty"`
	// LastTick is the last tick decided (nil: none yet), Outcome what it
	// did (claimed, started, replaced, skipped, failed) and Message why.
	LastTick *time.Time `json:"last_tick,omitempty"`
	Outcome  string     `json:"outcome,omitempty"`
	Message  string     `json:"message,omitempty"`
	// TickRunID is the run the last tick made or was to make.
	TickRunID string `json:"tick_run_id,omitempty"`
	// LastRunID is the schedule's last run that started, LastRunState its
	// state now ("" when it is no longer stored, or could not be read).
	LastRunID    string `json:"last_run_id,omitempty"`
	LastRunState string `json:"last_run_state,omitempty"`
}
