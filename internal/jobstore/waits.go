package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

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

// RawWaits returns every waiting job's place in line from the last
// placement round, in one HGETALL, undecoded: job id → the WaitInfo's JSON
// as SetWaits stored it (empty before the first round), for a reader that
// decodes only some of them (WaitPosition, DecodeWait): the overview shows
// a page of the waiting jobs but orders them all by place in line.
func (s *Store) RawWaits(ctx context.Context) (map[string]string, error) {
	raw, err := s.rdb.HGetAll(ctx, s.key("waits")).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: waits: %w", err)
	}
	return raw, nil
}

// DecodeWait decodes one of RawWaits' values; ok is false for one that
// does not decode (a reader skips those: the waits are hints).
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

// WaitPosition is the place in line of a WaitInfo as SetWaits stores it
// (RawWaits' values), read without decoding the rest: json.Marshal writes
// {"position":N,… first. Wherever encoding/json could read it otherwise
// (a number it would not take, a second key it would match, which it does
// case-insensitively, an escape or a byte past ASCII after it that could
// spell one) the value is decoded whole instead. ok is false for a value
// that does not decode.
func WaitPosition(raw string) (pos int, ok bool) {
	const head = `{"position":`
	if n, ok := plainPosition(raw, head); ok {
		return n, true
	}
	var w jobtype.WaitInfo
	if json.Unmarshal([]byte(raw), &w) != nil {
		return 0, false
	}
	return w.Position, true
}

// plainPosition reads raw's leading {"position":N as WaitPosition does; ok
// false where it leaves it to encoding/json.
func plainPosition(raw, head string) (int, bool) {
	if len(raw) <= len(head) || raw[:len(head)] != head {
		return 0, false
	}
	i := len(head)
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		i++
	}
	digits := raw[len(head):i]
	if digits == "" || len(digits) > 9 || digits[0] == '0' && len(digits) > 1 || i == len(raw) || raw[i] != ',' && raw[i] != '}' {
		return 0, false
	}
	const key = `position"`
	for k := i; k < len(raw); k++ {
		c := raw[k]
		if c >= 0x80 || c == '\\' && k+1 < len(raw) && raw[k+1] == 'u' || k+len(key) <= len(raw) && strings.EqualFold(raw[k:k+len(key)], key) {
			return 0, false
		}
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}
