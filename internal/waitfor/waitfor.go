// Package waitfor is the one polling helper of Lathe's tests: a test waits on
// a condition, never on a sleep of a guessed length (README, "Tests").
//
//	waitfor.True(t, time.Minute, "job running", func() bool { … })
//	j := waitfor.Value(t, time.Minute, "job done", get, func(j Job) bool { … })
//
// The poll interval starts at 5 ms and doubles up to 100 ms, so a condition
// that is already true costs nothing and a slow one does not spin. On timeout
// the test fails with what it waited for and, for Value, the last value seen.
package waitfor

import (
	"fmt"
	"testing"
	"time"
)

const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 100 * time.Millisecond
)

// True polls cond until it returns true, failing the test (t.Fatalf) when it
// has not within the given time.
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(within, cond) {
		t.Fatalf("timed out after %s waiting for %s", within, what)
	}
}

// Value polls get until ok holds for its result and returns that result. On
// timeout it fails the test, printing the last value get returned (%+v).
func Value[T any](t testing.TB, within time.Duration, what string, get func() T, ok func(T) bool) T {
	t.Helper()
	var last T
	if !poll(within, func() bool { last = get(); return ok(last) }) {
		t.Fatalf("timed out after %s waiting for %s; last: %s", within, what, fmt.Sprintf("%+v", last))
	}
	return last
}

// NoError polls f until it returns nil. On timeout it fails the test with the
// last error.
func NoError(t testing.TB, within time.Duration, what string, f func() error) {
	t.Helper()
	var err error
	if !poll(within, func() bool { err = f(); return err == nil }) {
		t.Fatalf("timed out after %s waiting for %s: %v", within, what, err)
	}
}

// Poll polls cond as True does and reports whether it held within the given
// time, failing nothing: for a goroutine other than the test's, where
// t.Fatal is not allowed, or a wait whose end the test checks by itself.
func Poll(within time.Duration, cond func() bool) bool { return poll(within, cond) }

// poll reports whether cond held before the deadline.
func poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	d := firstPoll
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(d)
		if d < maxPoll {
			d *= 2
		}
	}
}
