package jobstore

import (
	"context"
	"fmt"
	"strings"
)

// EvictionPolicyError says that Redis may evict keys: its maxmemory-policy
// is not noeviction. asynq loses tasks to eviction and Lathe loses jobs
// (docs/design.md), so a scheduler reports it on /healthz and lathed refuses to
// start on such a Redis.
type EvictionPolicyError struct {
	// Policy is the maxmemory-policy Redis reported.
	Policy string
}

func (e *EvictionPolicyError) Error() string {
	return fmt.Sprintf("maxmemory-policy is %s; Lathe needs noeviction (evicted keys are lost jobs and tasks). Fix: redis-cli CONFIG SET maxmemory-policy noeviction, and set 'maxmemory-policy noeviction' in redis.conf so it survives a restart", e.Policy)
}

// CheckNoEviction reads Redis's maxmemory-policy (INFO memory) and returns
// an *EvictionPolicyError unless it is noeviction; other errors are
// Redis's, wrapped.
func (s *Store) CheckNoEviction(ctx context.Context) error {
	info, err := s.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return fmt.Errorf("jobstore: read INFO memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			if v != "noeviction" {
				return &EvictionPolicyError{Policy: v}
			}
			return nil
		}
	}
	return fmt.Errorf("jobstore: Redis did not report maxmemory_policy in INFO memory; cannot confirm noeviction")
}
