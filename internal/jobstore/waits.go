package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// SetWaits replaces the waiting jobs' places in line (the leader writes
// them after each placement round): one hash, job id → WaitInfo JSON.
func (s *Store) SetWaits(ctx context.Context, waits map[string]jobtype.WaitInfo) error {
	vals := make([]any, 0, 2*len(waits))
	for id, w := range waits {
		b, _ := json.Marshal(w)
		vals = append(vals, id, b)
	}
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, s.key("waits"))
	if len(vals) > 0 {
		pipe.HSet(ctx, s.key("waits"), vals...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: set waits: %w", err)
	}
	return nil
}

// WaitOf returns job id's place in line from the last placement round, or
// nil when the round did not list it (placed, not queued, or no round yet).
func (s *Store) WaitOf(ctx context.Context, id string) (*jobtype.WaitInfo, error) {
	v, err := s.rdb.HGet(ctx, s.key("waits"), id).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jobstore: wait of %s: %w", id, err)
	}
	var w jobtype.WaitInfo
	if err := json.Unmarshal([]byte(v), &w); err != nil {
		return nil, fmt.Errorf("jobstore: wait of %s: %w", id, err)
	}
	return &w, nil
}

// Waits returns every waiting job's place in line from the last placement
// round (job id → WaitInfo), in one HGETALL; empty before the first round.
// An entry that does not decode is skipped: the waits are hints.
func (s *Store) Waits(ctx context.Context) (map[string]jobtype.WaitInfo, error) {
	raw, err := s.rdb.HGetAll(ctx, s.key("waits")).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: waits: %w", err)
	}
	out := make(map[string]jobtype.WaitInfo, len(raw))
	for id, v := range raw {
		var w jobtype.WaitInfo
		if json.Unmarshal([]byte(v), &w) == nil {
			out[id] = w
		}
	}
	return out, nil
}

// RawWaits is Waits without the decoding: job id → the WaitInfo's JSON as
// SetWaits stored it, for a reader that decodes only some of them
// (WaitPosition, DecodeWait): the overview shows a page of the waiting
// jobs but orders them all by place in line.
func (s *Store) RawWaits(ctx context.Context) (map[string]string, error) {
	raw, err := s.rdb.HGetAll(ctx, s.key("waits")).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: waits: %w", err)
	}
	return raw, nil
}

// DecodeWait decodes one of RawWaits' values; ok is false for one that
// does not decode (Waits skips those).
func DecodeWait(raw string) (w jobtype.WaitInfo, ok bool) {
	return w, json.Unmarshal([]byte(raw), &w) == nil
}

// WaitsOf is the place in line of each of ids the last placement round
// listed (job id → WaitInfo; ids it did not list are absent), in one
// HMGET; an entry that does not decode is left out (the waits are hints).
func (s *Store) WaitsOf(ctx context.Context, ids []string) (map[string]jobtype.WaitInfo, error) {
	out := map[string]jobtype.WaitInfo{}
	if len(ids) == 0 {
		return out, nil
	}
	vals, err := s.rdb.HMGet(ctx, s.key("waits"), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: waits of %d jobs: %w", len(ids), err)
	}
	for i, v := range vals {
		if raw, ok := v.(string); ok {
			if w, ok := DecodeWait(raw); ok {
				out[ids[i]] = w
			}
		}
	}
	return out, nil
}
