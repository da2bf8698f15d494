package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated: a write that stores an admission (a submit, a batch,
// a sweep's chunk of trials) ran on the primary, but fewer replicas than
// Config.MinReplicas acknowledged it within Config.ReplicaTimeout. It may
// survive or not: a failover now could promote a replica without it.
// Unreachable reports it, so the API answers "outcome unknown" (503) and
// the client sends the write again with its Idempotency-Key.
var ErrNotReplicated = errors.New("too few replicas acknowledged the write")

// runReplicated runs script with keys and args and, when
// Config.MinReplicas is set, sends WAIT MinReplicas ReplicaTimeout on the
// same connection right after it (one pipeline, one round trip): the
// script's answer is returned only once that many replicas hold the write,
// else an error wrapping ErrNotReplicated. The script is sent by its SHA;
// a Redis that does not have it (a new primary after a failover: the
// script cache is not replicated) answers NOSCRIPT without running
// anything, and the script is loaded and the pipeline sent again.
func (s *Store) runReplicated(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	if s.cfg.MinReplicas <= 0 {
		return script.Run(ctx, s.rdb, keys, args...).Result()
	}
	for try := 0; ; try++ {
		pipe := s.rdb.Pipeline()
		res := script.EvalSha(ctx, pipe, keys, args...)
		// Pipeliner has no Wait: Do sends the same command.
		wait := pipe.Do(ctx, "wait", s.cfg.MinReplicas, s.cfg.ReplicaTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx) // each command's error is read below
		if err := res.Err(); err != nil {
			if try == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
				if lerr := script.Load(ctx, s.rdb).Err(); lerr != nil {
					return nil, lerr
				}
				continue
			}
			return nil, err
		}
		n, err := wait.Int64()
		if err != nil {
			return nil, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
		}
		if n < int64(s.cfg.MinReplicas) {
			return nil, fmt.Errorf("%w: %d of %d within %s", ErrNotReplicated, n, s.cfg.MinReplicas, s.cfg.ReplicaTimeout)
		}
		return res.Val(), nil
	}
}

// MinReplicas is Config.MinReplicas: how many replicas must acknowledge
// an admission's write before it is answered (0: none is waited for).
func (s *Store) MinReplicas() int { return s.cfg.MinReplicas }

// replicaTimeout is the default of Config.ReplicaTimeout.
const replicaTimeout = 500 * time.Millisecond
