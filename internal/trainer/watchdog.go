package trainer

import (
	"os"
	"sync"
	"time"
)

// Watchdog stops a trainer whose caller stopped feeding it. It exists for
// a worker that cannot stop its trainer itself because it does not run at
// all (SIGSTOP, a process frozen or swapped out): on Linux, Run starts a
// small watchdog process next to the trainer, in the trainer's process
// group (and its cgroup, Config.Cgroup), that sends the group SIGTERM, then
// SIGKILL to the group and the whole cgroup after Config.KillGrace,
// when Feed has not been called for Timeout, or when the caller's process
// is gone. The worker feeds it after each lease renewal, so a trainer never
// outlives its lease by more than Timeout + KillGrace, whatever happens to
// the worker.
type Watchdog struct {
	// Timeout is how long the watchdog waits for a Feed. Required (> 0).
	Timeout time.Duration

	mu      sync.Mutex
	feed    *os.File // write end of the feed pipe while the trainer runs
	last    time.Time
	starved bool
}

// NewWatchdog returns a Watchdog with the given timeout, fed now.
func NewWatchdog(timeout time.Duration) *Watchdog {
	return &Watchdog{Timeout: timeout, last: time.Now()}
}

// Feed tells the watchdog the trainer may go on. It never blocks for long
// and is safe to call at any time, before the trainer starts or after it
// ended included.
func (d *Watchdog) Feed() {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if now.Sub(d.last) > d.Timeout {
		d.starved = true
	}
	d.last = now
	if d.feed != nil {
		_ = d.feed.SetWriteDeadline(now.Add(10 * time.Millisecond))
		_, _ = d.feed.Write([]byte{1})
	}
}

// Starved reports whether Timeout ever passed without a Feed, which is
// when the watchdog stops the trainer: a trainer that then ended did so
// because of the watchdog, not because it failed.
func (d *Watchdog) Starved() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.starved || time.Since(d.last) > d.Timeout
}
