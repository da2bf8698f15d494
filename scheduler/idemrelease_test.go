package scheduler

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestClaimReleasedWhenRedisReturns: an admission holds its claim on a
// sweep's idempotency key when redis-server (AOF on) is killed, so its
// release fails; Redis comes back from its AOF with the claim in it. The
// claim is released as soon as Redis answers again, not a minute later
// when it lapses (claimTTL): the key can be claimed again at once, so a
// request sent again with it is admitted instead of waiting and being
// answered 503. (Fails without releaseKey's retries: the claim stays.)
func TestClaimReleasedWhenRedisReturns(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{AOF: true})
	rdb := srv.Client()
	ctx := context.Background()
	ad := &admission{store: jobstore.New(rdb, jobstore.Config{}), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	const key = "team/alice:nightly"
	existing, release, err := ad.claimKey(ctx, jobstore.IdemSweep, key, "fp")
	if err != nil || existing != "" || release == nil {
		t.Fatalf("claimKey: %q %v", existing, err)
	}
	srv.Kill()
	aof, err := os.ReadFile(filepath.Join(srv.Dir, "appendonlydir", "appendonly.aof.1.incr.aof"))
	if err != nil || !bytes.Contains(aof, []byte("lathe:sweepidem:"+key)) || !bytes.Contains(aof, []byte("pending:")) {
		t.Fatalf("the AOF does not hold the claim (%v):\n%q", err, aof)
	}
	release() // Redis is down: this release is not answered
	srv.Restart()
	waitfor.True(t, claimTTL/4, "the claim released once Redis answered again", func() bool {
		n, err := rdb.Exists(ctx, "lathe:sweepidem:"+key).Result()
		return err == nil && n == 0
	})
	other, release2, err := ad.claimKey(ctx, jobstore.IdemSweep, key, "fp")
	if err != nil || other != "" || release2 == nil {
		t.Fatalf("claim after the release: %q %v", other, err)
	}
	release2()
}
