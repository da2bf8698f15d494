package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// sweepFields are the sweep hash's fields decodeSweep reads, in its order.
var sweepFields = []string{"id", "name", "state", "search", "metric", "goal", "trials", "max_parallel",
	"budget_usd", "budget_gpu_h", "reserved_usd", "spent_usd", "reserved_gpu_h", "spent_gpu_h", "stalled",
	"submitter", "team", "schedule", "tick", "created_at", "updated_at", "finished_at", "spec", "stored", "message"}

// GetSweep reads a sweep's record (ErrNotFound when there is none).
func (s *Store) GetSweep(ctx context.Context, id string) (*jobtype.Sweep, error) {
	if !ValidSweepID(id) {
		return nil, fmt.Errorf("jobstore: get sweep %q: %w", id, ErrNotFound)
	}
	vals, err := s.rdb.HMGet(ctx, s.key("sweep", id), sweepFields...).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: get sweep %s: %w", id, err)
	}
	return decodeSweep(id, vals)
}

func decodeSweep(id string, vals []any) (*jobtype.Sweep, error) {
	str := func(i int) string { v, _ := vals[i].(string); return v }
	num := func(i int) float64 { f, _ := strconv.ParseFloat(str(i), 64); return f }
	if str(2) == "" {
		return nil, fmt.Errorf("jobstore: get sweep %s: %w", id, ErrNotFound)
	}
	sw := &jobtype.Sweep{ID: id, Name: str(1), State: jobtype.SweepState(str(2)), Search: str(3), Metric: str(4), Goal: str(5),
		BudgetUSD: num(8), BudgetGPUHours: num(9), ReservedUSD: num(10), SpentUSD: num(11), ReservedGPUHours: num(12),
		SpentGPUHours: num(13), Stalled: str(14), Submitter: str(15), Team: str(16), Schedule: str(17)}
	sw.Trials, _ = strconv.Atoi(str(6))
	sw.MaxParallel, _ = strconv.Atoi(str(7))
	if t := msTime(str(18)); !t.IsZero() {
		sw.Tick = &t
	}
	sw.CreatedAt, sw.UpdatedAt = msTime(str(19)), msTime(str(20))
	if t := msTime(str(21)); !t.IsZero() {
		sw.FinishedAt = &t
	}
	if spec := str(22); spec != "" && spec != "null" {
		if !json.Valid([]byte(spec)) {
			return nil, fmt.Errorf("jobstore: get sweep %s: corrupt record: field spec is not JSON", id)
		}
		sw.Spec = json.RawMessage(spec)
	}
	sw.Message = str(24)
	sw.Stored = sw.Trials
	if sw.State == jobtype.SweepAdmitting || str(23) != "" {
		// A record from before chunked admission has no stored field: all
		// its trials were stored with it.
		sw.Stored, _ = strconv.Atoi(str(23))
	}
	return sw, nil
}

// ListSweeps lists sweeps newest first from cursor ("" the newest): cursor
// is the last id of the previous page; next is "" when there are no more.
func (s *Store) ListSweeps(ctx context.Context, cursor string, limit int) (sweeps []*jobtype.Sweep, next string, err error) {
	if limit <= 0 {
		limit = 50
	}
	start := int64(0)
	if cursor != "" {
		if !ValidSweepID(cursor) {
			return nil, "", fmt.Errorf("jobstore: list sweeps: bad cursor %q", cursor)
		}
		r, err := s.rdb.ZRevRank(ctx, s.key("sweeps"), cursor).Result()
		if errors.Is(err, redis.Nil) {
			return nil, "", fmt.Errorf("jobstore: list sweeps: cursor %s: sweep %w", cursor, ErrNotFound)
		}
		if err != nil {
			return nil, "", fmt.Errorf("jobstore: list sweeps: %w", err)
		}
		start = r + 1
	}
	ids, err := s.rdb.ZRevRange(ctx, s.key("sweeps"), start, start+int64(limit)).Result()
	if err != nil {
		return nil, "", fmt.Errorf("jobstore: list sweeps: %w", err)
	}
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, s.key("sweep", id), sweepFields...)
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, "", fmt.Errorf("jobstore: list sweeps: %w", err)
		}
	}
	sweeps = make([]*jobtype.Sweep, 0, len(ids))
	for i, c := range cmds {
		sw, err := decodeSweep(ids[i], c.Val())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		sweeps = append(sweeps, sw)
	}
	return sweeps, next, nil
}

// RunningSweeps lists the ids of the sweeps the sweep duty walks: those
// whose state is running, and cancelled ones until their admitted trials
// are settled (FinishSweep takes them out).
func (s *Store) RunningSweeps(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.key("sweeps", "running")).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: running sweeps: %w", err)
	}
	return ids, nil
}

// SweepTrials lists a sweep's trials in index order from index from
// (limit ≤ 0: all).
func (s *Store) SweepTrials(ctx context.Context, sweepID string, from, limit int) ([]*jobtype.Job, error) {
	by := &redis.ZRangeBy{Min: strconv.Itoa(max(from, 0)), Max: "+inf"}
	if limit > 0 {
		by.Count = int64(limit)
	}
	ids, err := s.rdb.ZRangeByScore(ctx, s.key("sweep", sweepID, "trials"), by).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: trials of %s: %w", sweepID, err)
	}
	return s.GetMany(ctx, ids)
}

// SweepSets are the sizes of a sweep's waiting, active and paused sets:
// a running sweep whose sets are all empty has every trial ended.
type SweepSets struct {
	Waiting, Active, Paused int
	ActiveIDs, PausedIDs    []string
}

// SweepSetsOf reads them.
func (s *Store) SweepSetsOf(ctx context.Context, sweepID string) (SweepSets, error) {
	pipe := s.rdb.Pipeline()
	w := pipe.ZCard(ctx, s.key("sweep", sweepID, "waiting"))
	a := pipe.SMembers(ctx, s.key("sweep", sweepID, "active"))
	p := pipe.SMembers(ctx, s.key("sweep", sweepID, "paused"))
	if _, err := pipe.Exec(ctx); err != nil {
		return SweepSets{}, fmt.Errorf("jobstore: sets of sweep %s: %w", sweepID, err)
	}
	return SweepSets{Waiting: int(w.Val()), Active: len(a.Val()), Paused: len(p.Val()), ActiveIDs: a.Val(), PausedIDs: p.Val()}, nil
}

// FinishSweep marks a running sweep done once its waiting, active and
// paused sets are empty (checked in the script; false when they are not),
// and takes it out of RunningSweeps; a cancelled sweep whose sets are
// empty leaves RunningSweeps, still cancelled (true). A sweep done before
// answers true.
func (s *Store) FinishSweep(ctx context.Context, sweepID string) (bool, error) {
	res, err := finishSweepScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, sweepID, ms(s.now())).Slice()
	if err != nil {
		return false, fmt.Errorf("jobstore: finish sweep %s: %w", sweepID, err)
	}
	err = sweepReplyErr(res, sweepID, "finish sweep", "")
	if errors.Is(err, ErrConflict) {
		return false, nil
	}
	return err == nil, err
}

// SetSweepMessage sets sweep id's message (why its admission was given
// up).
func (s *Store) SetSweepMessage(ctx context.Context, id, msg string) error {
	if !ValidSweepID(id) {
		return fmt.Errorf("jobstore: sweep message %q: %w", id, ErrNotFound)
	}
	if err := s.rdb.HSet(ctx, s.key("sweep", id), "message", msg).Err(); err != nil {
		return fmt.Errorf("jobstore: sweep message %s: %w", id, err)
	}
	return nil
}

// cancelSweepChunk is how many trials one cancel sweep script looks at.
const cancelSweepChunk = 100

// CancelSweep cancels a sweep and every trial that has not ended (a
// waiting or queued or paused trial at once, the others get
// cancel_requested). Returns how many trials it cancelled or asked. The
// sweep is cancelled by the first of its scripts (one per cancelSweepChunk trials), so
// the sweep duty admits and promotes nothing more of it; calling it again
// finishes what a call cut short did not. A sweep that is done is a
// *SweepConflictError.
func (s *Store) CancelSweep(ctx context.Context, sweepID string) (int, error) {
	total := 0
	for from := 0; ; from += cancelSweepChunk {
		res, err := cancelSweepScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, sweepID, from, cancelSweepChunk, ms(s.now()),
			s.cfg.EventsMaxLen, jobtype.ReasonSweepCancelled).Slice()
		if err != nil {
			return total, fmt.Errorf("jobstore: cancel sweep %s: %w", sweepID, err)
		}
		code, _ := first(res).(int64)
		if len(res) != 3 {
			return total, fmt.Errorf("jobstore: cancel sweep %s: unexpected script reply %v", sweepID, res)
		}
		switch code {
		case codeNotFound:
			return total, fmt.Errorf("jobstore: cancel sweep %s: sweep %w", sweepID, ErrNotFound)
		case codeConflict:
			return total, fmt.Errorf("jobstore: cancel sweep: %w", &SweepConflictError{ID: sweepID, State: jobtype.SweepDone, Want: "cancel needs a sweep that is not done"})
		}
		n, _ := res[1].(int64)
		seen, _ := res[2].(int64)
		total += int(n)
		if seen < cancelSweepChunk {
			return total, nil
		}
	}
}
