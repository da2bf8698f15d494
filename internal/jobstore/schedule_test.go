package jobstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestClaimTick: the first claim of a tick wins; every later one, whatever
// run id it brings, gets the first's run; another tick or schedule is its
// own claim; the claim expires after a week.
func TestClaimTick(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := jobstore.New(srv.Client(), jobstore.Config{})
	at := time.Date(2026, 3, 10, 2, 0, 0, 0, time.UTC)
	id := jobstore.TickID("j-", "nightly", at)
	if !jobstore.ValidID(id) || id != jobstore.TickID("j-", "nightly", at) || id == jobstore.TickID("j-", "other", at) {
		t.Fatalf("tick ids: %s", id)
	}
	if won, existing, err := s.ClaimTick(ctx, "nightly", at, id); err != nil || !won || existing != id {
		t.Fatalf("first claim: %v %q %v", won, existing, err)
	}
	if won, existing, err := s.ClaimTick(ctx, "nightly", at, "j-someotherid0000"); err != nil || won || existing != id {
		t.Fatalf("second claim: %v %q %v", won, existing, err)
	}
	if won, _, err := s.ClaimTick(ctx, "nightly", at.Add(24*time.Hour), "x"); err != nil || !won {
		t.Fatalf("the next tick: %v %v", won, err)
	}
	if won, _, err := s.ClaimTick(ctx, "other", at, "y"); err != nil || !won {
		t.Fatalf("another schedule's tick: %v %v", won, err)
	}
	ttl, err := srv.Client().TTL(ctx, "lathe:tick:nightly:"+tickMs(at)).Result()
	if err != nil || ttl <= 6*24*time.Hour || ttl > 7*24*time.Hour {
		t.Fatalf("claim TTL %s %v", ttl, err)
	}
}

// TestScheduleState: a state reads back as written; a write of an earlier
// tick than the stored one is refused; a schedule without state reads as
// the zero state.
func TestScheduleState(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := jobstore.New(srv.Client(), jobstore.Config{})
	at := time.Date(2026, 3, 10, 2, 0, 0, 0, time.UTC)
	st := jobstore.ScheduleState{Tick: at, Outcome: jobstore.TickStarted, TickRunID: "j-a", Kind: "job", RunID: "j-a", RunTick: at}
	if ok, err := s.SetScheduleState(ctx, "n", st); err != nil || !ok {
		t.Fatalf("set: %v %v", ok, err)
	}
	got, err := s.ScheduleStateOf(ctx, "n")
	if err != nil || !got.Tick.Equal(at) || got.Outcome != jobstore.TickStarted || got.RunID != "j-a" || got.UpdatedAt.IsZero() {
		t.Fatalf("read back: %+v %v", got, err)
	}
	old := st
	old.Tick, old.Outcome = at.Add(-time.Hour), jobstore.TickSkipped
	if ok, err := s.SetScheduleState(ctx, "n", old); err != nil || ok {
		t.Fatalf("an earlier tick's write: %v %v", ok, err)
	}
	same := st
	same.Outcome = jobstore.TickReplaced
	if ok, err := s.SetScheduleState(ctx, "n", same); err != nil || !ok {
		t.Fatalf("the same tick's write: %v %v", ok, err)
	}
	sts, err := s.ScheduleStates(ctx, []string{"n", "none"})
	if err != nil || len(sts) != 2 || sts[0].Outcome != jobstore.TickReplaced || !sts[1].Tick.IsZero() || sts[1].Outcome != "" {
		t.Fatalf("states: %+v %v", sts, err)
	}
}

func tickMs(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
