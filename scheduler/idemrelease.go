package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
)

// releaseRetryMax bounds the wait between tries of a claim's release that
// Redis did not answer (releaseKey).
const releaseRetryMax = time.Second

// releaseKey drops this admission's claim (token) on idempotency key of
// kind: its admission stored nothing, or does not know whether it did.
// Releasing is safe either way: the release script drops only token's
// placeholder, and a create script that stored the job or sweep replaced
// it.
//
// Redis not answering is often why the admission failed, and then the
// release fails too; the claim would stay until it lapses (lapses, claimTTL
// after it was made), and every request sent again with the key would wait
// for it and be answered 503 all that while (a kill -9 of redis-server
// during sweep admissions: up to a minute; TestRedisKillDuringSweepAdmissions).
// So a release Redis did not answer is tried again in the background until
// Redis answers, the client is closed (the process stops), or the claim
// lapses by itself.
func (ad *admission) releaseKey(ctx context.Context, kind jobstore.IdemKind, key, token string, lapses time.Time) {
	ctx = context.WithoutCancel(ctx)
	err := ad.store.ReleaseIdem(ctx, kind, key, token)
	if !retryRelease(err) {
		return
	}
	go func() {
		wait := 50 * time.Millisecond
		for tries := 2; time.Now().Add(wait).Before(lapses); tries++ {
			time.Sleep(wait)
			err := ad.store.ReleaseIdem(ctx, kind, key, token)
			if !retryRelease(err) {
				if err == nil {
					ad.log.Info("released an idempotency key's claim once Redis answered again", slog.String("kind", string(kind)), slog.Int("tries", tries))
				}
				return
			}
			wait = min(2*wait, releaseRetryMax)
		}
	}()
}

// retryRelease reports whether a release that ended with err is tried
// again: Redis did not answer, and the client is not closed.
func retryRelease(err error) bool {
	return err != nil && jobstore.Unreachable(err) && !errors.Is(err, redis.ErrClosed)
}
