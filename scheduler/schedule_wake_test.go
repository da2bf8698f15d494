package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler/cron"
)

// TestIdleLeaderWakesForTick: a started Scheduler (a real redis-server,
// the real leader loop) whose passes come a minute apart (PlaceInterval
// 1m, the lease longer) and nothing else wakes, with an @every 1s job
// schedule: the loop wakes for each tick as it comes due, so ticks run
// every second, not once a minute (the loop used to wake only every
// PlaceInterval: this waited a minute for its second tick). Each run is
// stored within a second of its tick (issue #23: an idle leader starts
// ticks within 1 s); how late each was is logged.
func TestIdleLeaderWakesForTick(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(schedJob), 0o644); err != nil {
		t.Fatal(err)
	}
	ss, err := cron.Parse([]cron.Entry{{Name: "w", Cron: "@every 1s", Job: "job.yaml", Concurrency: "allow"}}, dir)
	if err != nil {
		t.Fatal(err)
	}
	s := New(rdb, store, Config{ID: "idle", Schedules: ss, PlaceInterval: time.Minute, LeaderTTL: 3 * time.Minute,
		Logger: slog.New(slog.NewTextHandler(&lockedBuf{}, nil)), Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}})
	ctx := context.Background()
	began := time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	// The first pass, at the start, runs the latest tick; the next three
	// come from wakes for the ticks alone.
	first := tickFloorMs(began, time.Second)
	var lates []string
	for tick := first.Add(time.Second); tick.Before(first.Add(4 * time.Second)); tick = tick.Add(time.Second) {
		id := jobstore.TickID("j-", "w", tick)
		waitfor.True(t, 15*time.Second, "the run of tick "+tick.Format("15:04:05"), func() bool {
			j, err := store.Get(ctx, id)
			if err == nil {
				late := j.CreatedAt.Sub(tick)
				lates = append(lates, fmt.Sprint(late.Round(time.Millisecond)))
				if late > time.Second {
					t.Errorf("tick %s: its run was stored %v after it, want within 1 s", tick.Format("15:04:05"), late)
				}
			}
			return err == nil
		})
	}
	t.Logf("three ticks run with passes a minute apart; each stored late by %v", lates)
}

// tickFloorMs is the last multiple of every since the Unix epoch at or
// before t (an @every schedule's tick).
func tickFloorMs(t time.Time, every time.Duration) time.Time {
	d := every.Milliseconds()
	return time.UnixMilli(t.UnixMilli() / d * d).UTC()
}

// TestWakeGapAfter: passes that wakes ask for come no closer than wakeGap,
// and after a long pass no closer than wakeShare times its length, so that
// rounds over a long queue take at most 1/wakeShare of a core however fast
// submits come.
func TestWakeGapAfter(t *testing.T) {
	for _, c := range []struct{ pass, want time.Duration }{
		{0, wakeGap},
		{wakeGap / wakeShare, wakeGap},
		{30 * time.Millisecond, wakeShare * 30 * time.Millisecond},
		{time.Second, wakeShare * time.Second},
	} {
		if got := wakeGapAfter(c.pass); got != c.want {
			t.Errorf("after a pass of %v: %v, want %v", c.pass, got, c.want)
		}
	}
}
