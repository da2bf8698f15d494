package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/backends/aws/imdsfake"
)

// TestIMDSClient against imdsfake (a FAKE IMDSv2): no notice is nil, an
// expired token is replaced, a notice is read.
func TestIMDSClient(t *testing.T) {
	f := imdsfake.New()
	defer f.Close()
	c := newIMDSClient(f.URL() + "/")
	n, err := c.notice(t.Context())
	if err != nil || n != nil {
		t.Fatalf("before Interrupt: %+v, %v", n, err)
	}
	f.ExpireTokens()
	f.Interrupt("terminate", time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC))
	n, err = c.notice(t.Context())
	if err != nil || n == nil || n.Action != "terminate" || n.Time != "2026-12-02T16:00:00Z" {
		t.Fatalf("after Interrupt with an expired token: %+v, %v", n, err)
	}
	if f.Rejected() != 1 {
		t.Fatalf("Rejected = %d, want 1 (the expired token)", f.Rejected())
	}
}

// TestWatchSpotWithoutIMDS: an unreachable IMDS is logged, not fatal; the
// watch ends with its context.
func TestWatchSpotWithoutIMDS(t *testing.T) {
	f := imdsfake.New()
	url := f.URL()
	f.Close() // nothing listens there now
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		watchSpot(ctx, url, 5*time.Millisecond, slog.New(slog.DiscardHandler), func(SpotNotice) { t.Error("notice without IMDS") })
		close(done)
	}()
	cancel()
	<-done
}
