package jobstore

// Schedules (issue #13, docs/sweeps.md "Schedules"): what the leader's
// schedule duty remembers of each schedule between passes and leaders.
// The tick claims themselves are ClaimTick's (sweep.go).
//
//	schedule:<name>  hash  last_tick (ms), state (ScheduleState JSON)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Outcomes of a schedule's tick (ScheduleState.Outcome).
const (
	// TickClaimed: the tick is claimed and its run is being started; a
	// state left so (the leader died before the run was stored) makes the
	// next pass start the run.
	TickClaimed = "claimed"
	TickStarted = "started"
	// TickReplaced: started after cancelling the run before it.
	TickReplaced = "replaced"
	// TickSkipped: not run (concurrency: forbid while the last run was
	// going, or missed); Message says why.
	TickSkipped = "skipped"
	// TickFailed: the run could not be started (bad file, refused by
	// routing …); Message says why. The next tick tries again.
	TickFailed = "failed"
)

// ScheduleState is what the store keeps of a schedule: its last decided
// tick and what became of it, and its last run.
type ScheduleState struct {
	// Tick is the last tick decided (run, skipped or failed); zero: none.
	Tick    time.Time `json:"tick"`
	Outcome string    `json:"outcome"`
	Message string    `json:"message,omitempty"`
	// TickRunID is the run the tick made or was to make ("" when skipped).
	TickRunID string `json:"tick_run_id,omitempty"`
	// Kind is job or sweep.
	Kind string `json:"kind,omitempty"`
	// RunID and RunTick are the schedule's last run that was started (the
	// one concurrency looks at), and its tick.
	RunID     string    `json:"run_id,omitempty"`
	RunTick   time.Time `json:"run_tick"`
	UpdatedAt time.Time `json:"updated_at"`
}

// setScheduleScript writes a schedule's state unless the stored one is of
// a later tick (a deposed leader's late write loses).
//
//	KEYS[1] schedule:<name>
//	ARGV    tick ms, state JSON
//	reply   1 written, 0 refused (the stored tick is later)
var setScheduleScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'last_tick') or '-1')
if cur > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'last_tick', ARGV[1], 'state', ARGV[2])
return 1
`)

// SetScheduleState stores name's state; false (nothing written) when the
// stored state is of a later tick.
func (s *Store) SetScheduleState(ctx context.Context, name string, st ScheduleState) (bool, error) {
	if st.UpdatedAt.IsZero() {
		st.UpdatedAt = s.now().UTC()
	}
	b, err := json.Marshal(st)
	if err != nil {
		return false, fmt.Errorf("jobstore: schedule %s: %w", name, err)
	}
	n, err := setScheduleScript.Run(ctx, s.rdb, []string{s.key("schedule", name)}, st.Tick.UnixMilli(), b).Int()
	if err != nil {
		return false, fmt.Errorf("jobstore: schedule %s: set state: %w", name, err)
	}
	return n == 1, nil
}

// ScheduleStateOf reads name's state (the zero state when it has none).
func (s *Store) ScheduleStateOf(ctx context.Context, name string) (ScheduleState, error) {
	sts, err := s.ScheduleStates(ctx, []string{name})
	if err != nil {
		return ScheduleState{}, err
	}
	return sts[0], nil
}

// ScheduleStates reads the states of names in one round trip, in order.
func (s *Store) ScheduleStates(ctx context.Context, names []string) ([]ScheduleState, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(names))
	for i, n := range names {
		cmds[i] = pipe.HGet(ctx, s.key("schedule", n), "state")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: schedule states: %w", err)
	}
	out := make([]ScheduleState, len(names))
	for i, c := range cmds {
		v, err := c.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("jobstore: schedule %s: %w", names[i], err)
		}
		if err := json.Unmarshal([]byte(v), &out[i]); err != nil {
			return nil, fmt.Errorf("jobstore: schedule %s: state: %w", names[i], err)
		}
	}
	return out, nil
}

// RunGoing reports whether a schedule's run id (a job "j-…" or a sweep
// "s-…"; "" none) has not ended, and its state. A run no longer in the
// store (pruned) has ended.
func (s *Store) RunGoing(ctx context.Context, id string) (bool, string, error) {
	switch {
	case id == "":
		return false, "", nil
	case ValidSweepID(id):
		sw, err := s.GetSweep(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return false, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return sw.State == jobtype.SweepRunning, string(sw.State), nil
	}
	j, err := s.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	return !j.State.Terminal(), string(j.State), nil
}
