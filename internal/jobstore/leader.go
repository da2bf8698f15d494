package jobstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Leadership: one scheduler leads (placement, reaping, repair; later cron
// and the cloud reconciler). The lease is the key "leader" = "<id>|<token>"
// with a TTL; the token comes from INCR "leader:epoch", so every new term
// has a larger one. Writes the leader makes carry its lease value as a
// fence, and the scripts refuse them once the lease belongs to another term.

// acquireScript takes or renews the lease. ARGV: prefix, id, ttl ms.
// Returns the lease value held by id, or "" when another holds it.
var acquireScript = redis.NewScript(`
local key = ARGV[1] .. 'leader'
local cur = redis.call('GET', key)
if cur then
  local sep = string.find(cur, '|', 1, true)
  if sep and string.sub(cur, 1, sep - 1) == ARGV[2] then
    redis.call('PEXPIRE', key, ARGV[3])
    return cur
  end
  return ''
end
local token = redis.call('INCR', ARGV[1] .. 'leader:epoch')
local val = ARGV[2] .. '|' .. token
redis.call('SET', key, val, 'PX', ARGV[3])
return val
`)

// releaseScript gives the lease up if id still holds it. ARGV: prefix, value.
var releaseScript = redis.NewScript(`
if redis.call('GET', ARGV[1] .. 'leader') == ARGV[2] then return redis.call('DEL', ARGV[1] .. 'leader') end
return 0
`)

// Fence is a leader's lease value ("<id>|<token>"); the zero Fence means
// "not fenced" (no leader election in use).
type Fence string

// Token is the fencing token of f (0 for the zero Fence).
func (f Fence) Token() int64 {
	_, t, _ := strings.Cut(string(f), "|")
	n, _ := strconv.ParseInt(t, 10, 64)
	return n
}

// AcquireLeadership takes or renews the leader lease for id. It returns the
// lease value (the fence for this term) and true when id leads.
func (s *Store) AcquireLeadership(ctx context.Context, id string, ttl time.Duration) (Fence, bool, error) {
	v, err := acquireScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, id, ttl.Milliseconds()).Text()
	if err != nil {
		return "", false, fmt.Errorf("jobstore: leadership: %w", err)
	}
	return Fence(v), v != "", nil
}

// ReleaseLeadership ends term f early (a clean shutdown), if it still holds.
func (s *Store) ReleaseLeadership(ctx context.Context, f Fence) error {
	if err := releaseScript.Run(ctx, s.rdb, nil, s.cfg.Prefix, string(f)).Err(); err != nil {
		return fmt.Errorf("jobstore: release leadership: %w", err)
	}
	return nil
}

// Leader returns the current lease value ("" when nobody leads).
func (s *Store) Leader(ctx context.Context) (Fence, error) {
	v, err := s.rdb.Get(ctx, s.key("leader")).Result()
	if err == redis.Nil {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("jobstore: leader: %w", err)
	}
	return Fence(v), nil
}
