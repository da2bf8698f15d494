package apiclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"
)

// Writes with an Idempotency-Key are safe to send again: the scheduler
// answers a key it has seen with the first outcome. So a submit with a
// key that got no answer (the connection dropped, a timeout) or a 503
// (Redis did not answer the scheduler, "outcome_unknown" when the write
// itself may have happened) is sent again, with the same key, a few times.

// writeTries is how many times a keyed write is sent at most, and
// writeBackoff the wait before the second (doubled each time after).
const (
	writeTries   = 5
	writeBackoff = 200 * time.Millisecond
)

// NewIdempotencyKey is a fresh random key, for a write the user gave none
// for (the CLI sends one with every submit, so its own retries and the
// user's are safe).
func NewIdempotencyKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "cli-" + hex.EncodeToString(b[:])
}

// resendable reports whether err may be a write that never reached
// Redis, or whose outcome is unknown: no answer at all, or a 503.
func resendable(err error) bool {
	var ae *APIError
	return errors.Is(err, ErrUnreachable) || (errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable)
}

// keyed sends a write carrying idempotency key key (send: one try), again
// while it fails retryably and tries are left; with no key, once.
func (c *Client) keyed(ctx context.Context, key string, send func() error) error {
	err := send()
	wait := writeBackoff
	for try := 1; key != "" && try < writeTries && resendable(err); try++ {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait *= 2
		err = send()
	}
	return err
}
