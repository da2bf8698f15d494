package jobstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Events returns up to n events of job id after stream id after ("" from
// the start).
func (s *Store) Events(ctx context.Context, id, after string, n int64) ([]jobtype.Event, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := s.rdb.XRangeN(ctx, s.key("job", id, "events"), start, "+", n).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: events %s: %w", id, err)
	}
	return decodeEvents(msgs), nil
}

// WaitEvents blocks up to block for events of job id after stream id after
// (use "0" or "" for the start) and returns them; none on timeout.
func (s *Store) WaitEvents(ctx context.Context, id, after string, block time.Duration, n int64) ([]jobtype.Event, error) {
	if after == "" {
		after = "0"
	}
	res, err := s.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{s.key("job", id, "events"), after}, Count: n, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jobstore: wait events %s: %w", id, err)
	}
	var out []jobtype.Event
	for _, st := range res {
		out = append(out, decodeEvents(st.Messages)...)
	}
	return out, nil
}

func decodeEvents(msgs []redis.XMessage) []jobtype.Event {
	out := make([]jobtype.Event, 0, len(msgs))
	for _, m := range msgs {
		e := jobtype.Event{ID: m.ID}
		e.Type, _ = m.Values["type"].(string)
		if a, ok := m.Values["attempt"].(string); ok {
			e.Attempt, _ = strconv.Atoi(a)
		}
		if t, ok := m.Values["time"].(string); ok {
			e.Time = msTime(t)
		}
		if d, ok := m.Values["data"].(string); ok && json.Valid([]byte(d)) {
			e.Data = json.RawMessage(d)
		} else {
			e.Data = json.RawMessage(`{}`)
		}
		out = append(out, e)
	}
	return out
}
