package waitfor

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of stopping the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestTrueReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	True(t, time.Minute, "third call", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Fatalf("cond called %d times, want 3", n.Load())
	}
}

func TestTrueFailsWhenTheConditionNeverHolds(t *testing.T) {
	r := &recorder{TB: t}
	True(r, 20*time.Millisecond, "never", func() bool { return false })
	if r.failed == "" {
		t.Fatal("True did not fail on a condition that never held")
	}
}

func TestValueReturnsTheValueThatMatched(t *testing.T) {
	var n atomic.Int32
	got := Value(t, time.Minute, "4", func() int32 { return n.Add(1) }, func(v int32) bool { return v == 4 })
	if got != 4 {
		t.Fatalf("Value = %d, want 4", got)
	}
}

func TestNoErrorFailsWithTheLastError(t *testing.T) {
	r := &recorder{TB: t}
	NoError(r, 20*time.Millisecond, "an answer", func() error { return errors.New("refused") })
	if !strings.Contains(r.failed, "refused") {
		t.Fatalf("NoError's failure %q does not name the last error", r.failed)
	}
}

func TestPollReportsWithoutFailing(t *testing.T) {
	var n atomic.Int32
	if !Poll(time.Minute, func() bool { return n.Add(1) >= 2 }) {
		t.Fatal("Poll = false on a condition that held")
	}
	if Poll(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll = true on a condition that never held")
	}
}
