//go:build linux

package trainer

import (
	"context"
	"testing"
	"time"
)

// The watchdog is a real process: this test binary run again as
// /proc/self/exe (the package's init makes it the watchdog).

// TestWatchdogStopsUnfedTrainer: nobody feeds the watchdog (a frozen
// worker) and nobody cancels the context; the trainer still gets SIGTERM
// after the timeout, checkpoints, and its group is gone.
func TestWatchdogStopsUnfedTrainer(t *testing.T) {
	checkNoLeak(t)
	sh := scriptFile(t, "checkpoint-on-term.sh")
	rec := newRecorder(t)
	wd := NewWatchdog(300 * time.Millisecond)
	res := await(t, runAsync(context.Background(), Config{Argv: []string{sh}, KillGrace: 2 * time.Second, Watchdog: wd, Logger: testLogger(t)}, rec), "Run")
	if res.ExitCode != 143 || res.Outcome != Failed {
		t.Fatalf("result = %+v, want the trainer's own exit 143 after the watchdog's SIGTERM", res)
	}
	if !wd.Starved() {
		t.Error("Starved() = false after the watchdog fired")
	}
	if _, events, _ := rec.snapshot(); len(events) != 1 || events[0].Kind != EventCheckpoint {
		t.Errorf("events = %+v, want the checkpoint written on SIGTERM", events)
	}
	if GroupAlive(res.PID) {
		t.Errorf("group %d alive after Run", res.PID)
	}
}

// TestWatchdogFedTrainerRuns: fed well within its timeout, the watchdog
// leaves the trainer alone; a cancel then ends it as usual, watchdog included.
func TestWatchdogFedTrainerRuns(t *testing.T) {
	checkNoLeak(t)
	sh := script(t, "echo ready\nsleep 1000 &\nwait\n")
	rec := newRecorder(t)
	ready := rec.waitFor("ready")
	wd := NewWatchdog(300 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, Config{Argv: []string{sh}, KillGrace: time.Second, Watchdog: wd, Logger: testLogger(t)}, rec)
	await(t, ready, "ready")
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		wd.Feed()
	}
	pids, _, _ := rec.snapshot()
	if !processLive(pids[0]) || wd.Starved() {
		t.Fatalf("the fed watchdog stopped the trainer (starved %v)", wd.Starved())
	}
	cancel()
	if res := await(t, done, "Run"); res.Outcome != Cancelled {
		t.Fatalf("result = %+v, want cancelled by the context", res)
	}
	if GroupAlive(pids[0]) {
		t.Errorf("group %d (trainer and watchdog) alive after Run", pids[0])
	}
}
