package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
)

// lease is this scheduler's hold on the leader lease: its fence while it
// leads (carried by every dispatch and reap as a fencing token, so a
// deposed leader's late writes are refused), and when it last saw Redis
// fail (the reaper holds off leases that expired around a Redis blip this
// scheduler saw itself).
type lease struct {
	id    string
	ttl   time.Duration
	store *jobstore.Store
	log   *slog.Logger

	current    atomic.Value // jobstore.Fence of the current term, "" when not leading
	redisErrAt atomic.Int64 // unix ms of the last Redis error seen (0: none)
}

// fence is the current term's fence, "" when not leading.
func (l *lease) fence() jobstore.Fence { return l.current.Load().(jobstore.Fence) }

// lost ends the term here (a fenced write was refused: another leads).
func (l *lease) lost() { l.current.Store(jobstore.Fence("")) }

// lead takes or renews the leader lease; it returns whether this scheduler
// leads for this pass. Any doubt (Redis unreachable) means not leading.
func (l *lease) lead(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	f, ok, err := l.store.AcquireLeadership(ctx, l.id, l.ttl)
	l.sawRedis(err)
	was := l.fence()
	switch {
	case err != nil || !ok:
		if was != "" {
			l.log.Warn("lost the leader lease; placement, reaping and repair stop here", slog.Any("err", err))
		}
		l.lost()
		return false
	case was != f:
		l.log.Info("leading", slog.String("id", l.id), slog.Int64("fencing_token", f.Token()))
	}
	l.current.Store(f)
	return true
}

// release gives the lease up (a clean stop), so another scheduler takes
// over at once instead of after the lease's end.
func (l *lease) release() {
	if f := l.fence(); f != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = l.store.ReleaseLeadership(ctx, f)
		cancel()
		l.lost()
	}
}

// sawRedis notes err, when it is one, as a Redis error this scheduler saw
// itself: the reaper holds off leases that expired around it (reaper.holdOff).
func (l *lease) sawRedis(err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		l.redisErrAt.Store(time.Now().UnixMilli())
	}
}

// lastRedisError is when this scheduler last saw a Redis error (zero: never).
func (l *lease) lastRedisError() time.Time {
	if ms := l.redisErrAt.Load(); ms != 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}
