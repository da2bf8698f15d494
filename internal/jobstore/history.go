package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// The leader's history of the pool: one capped list of samples, newest
// first, each a JSON object of about 150 bytes (360 samples, 6 hours at
// one a minute, are about 55 KB), so Redis stays small (docs/dashboard.md).

// AddHistory puts sample at the head of the history and trims it to its
// keep newest samples, in one transaction.
func (s *Store) AddHistory(ctx context.Context, sample jobtype.HistorySample, keep int) error {
	b, err := json.Marshal(sample)
	if err != nil {
		return fmt.Errorf("jobstore: history: %w", err)
	}
	pipe := s.rdb.TxPipeline()
	pipe.LPush(ctx, s.key("history"), b)
	pipe.LTrim(ctx, s.key("history"), 0, int64(keep-1))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("jobstore: history: %w", err)
	}
	return nil
}

// History returns the n newest samples (every sample kept when n <= 0),
// oldest first. A sample that does not decode is left out.
func (s *Store) History(ctx context.Context, n int) ([]jobtype.HistorySample, error) {
	raw, err := s.rdb.LRange(ctx, s.key("history"), 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("jobstore: history: %w", err)
	}
	out := make([]jobtype.HistorySample, 0, len(raw))
	for _, r := range raw {
		var h jobtype.HistorySample
		if json.Unmarshal([]byte(r), &h) == nil {
			out = append(out, h)
		}
	}
	slices.Reverse(out)
	return out, nil
}

// HistoryLen is how many samples the history holds.
func (s *Store) HistoryLen(ctx context.Context) (int64, error) {
	n, err := s.rdb.LLen(ctx, s.key("history")).Result()
	if err != nil {
		return 0, fmt.Errorf("jobstore: history: %w", err)
	}
	return n, nil
}
