package apiclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// ErrStop, returned by a Follow callback, ends Follow early with a nil error.
var ErrStop = errors.New("stop following")

// errBroken marks a stream that ended in the middle: Follow reconnects.
var errBroken = errors.New("event stream broken")

// callbackError carries an error returned by Follow's callback unchanged.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// Follow streams the job's events after the stream id after (from the start
// when empty) and calls fn for each, in order. It returns nil when the
// scheduler ends the stream, which it does after the job's terminal state
// and its last event, or when fn returns ErrStop; any other error from fn
// ends Follow and is returned as is. SSE messages named "error" (the
// scheduler's notes of its own transient failures) are skipped.
//
// Once a stream has been opened, a dropped connection, an unreachable
// scheduler or a 5xx answer is retried a few times with exponential
// backoff, resuming with after= the last event received, so fn sees no
// event twice; a failure to open the first stream is returned at once.
// Follow has no overall timeout.
func (c *Client) Follow(ctx context.Context, id, after string, fn func(jobtype.Event) error) error {
	last := after
	failures := 0
	connected := false
	for {
		got, opened, err := c.followOnce(ctx, id, &last, fn)
		connected = connected || opened
		if err == nil {
			return nil
		}
		var cbErr *callbackError
		if errors.As(err, &cbErr) {
			if errors.Is(cbErr.err, ErrStop) {
				return nil
			}
			return cbErr.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("apiclient: follow %s: %w", id, ctx.Err())
		}
		if !connected || !retryable(err) {
			return err // final, or the first connection failed: nothing to resume
		}
		if got > 0 {
			failures = 0
		}
		failures++
		if failures > c.followRetries {
			return fmt.Errorf("apiclient: follow %s: gave up after %d reconnects: %w", id, c.followRetries, err)
		}
		if err := sleep(ctx, c.backoff(failures)); err != nil {
			return fmt.Errorf("apiclient: follow %s: %w", id, err)
		}
	}
}

// retryable reports whether Follow should reconnect after err.
func retryable(err error) bool {
	if errors.Is(err, errBroken) || errors.Is(err, ErrUnreachable) {
		return true
	}
	var apiErr *APIError
	return errors.As(err, &apiErr) && apiErr.Status >= 500
}

// backoff is the wait before reconnect n (1-based): followBackoff doubled
// each time, at most 8×.
func (c *Client) backoff(n int) time.Duration {
	d := c.followBackoff
	for i := 1; i < n && i < 4; i++ {
		d *= 2
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// followOnce opens one event stream and reads it to its end. It advances
// *last past every event handed to fn and returns how many it handed and
// whether the stream was opened.
func (c *Client) followOnce(ctx context.Context, id string, last *string, fn func(jobtype.Event) error) (n int, opened bool, err error) {
	q := url.Values{"follow": {"true"}}
	if *last != "" {
		q.Set("after", *last)
	}
	req, err := c.newRequest(ctx, http.MethodGet, jobPath(id, "/events"), q, nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := c.send(ctx, req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return 0, false, fmt.Errorf("apiclient: follow %s: expected text/event-stream, got %q", id, resp.Header.Get("Content-Type"))
	}
	err = readSSE(resp.Body, func(m sseMessage) error {
		if m.event == "error" {
			// The scheduler's note of a transient failure on its side (it
			// keeps the stream open and retries): not a job event.
			return nil
		}
		var ev jobtype.Event
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			return fmt.Errorf("apiclient: follow %s: event %q: bad data: %w", id, m.id, err)
		}
		if ev.ID == "" {
			ev.ID = m.id
		}
		if ev.Type == "" {
			ev.Type = m.event
		}
		if err := fn(ev); err != nil {
			return &callbackError{err}
		}
		n++
		if m.id != "" {
			*last = m.id
		} else if ev.ID != "" {
			*last = ev.ID
		}
		return nil
	})
	return n, true, err
}

// sseMessage is one dispatched server-sent event.
type sseMessage struct {
	id, event, data string
}

// readSSE parses a text/event-stream body and calls fn for each event that
// carries data. It returns nil at a clean end of stream (EOF between
// events), an error wrapping errBroken when the stream ends or fails in the
// middle, and fn's error as is.
func readSSE(r io.Reader, fn func(sseMessage) error) error {
	br := bufio.NewReader(r)
	var ev sseBuilder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && line == "" && !ev.pending {
				return nil
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("%w: %w", errBroken, err)
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case line == "":
			if err := ev.dispatch(fn); err != nil {
				return err
			}
		case strings.HasPrefix(line, ":"):
			// comment or keep-alive
		default:
			ev.add(line)
		}
	}
}

// sseBuilder gathers the fields of the event being read.
type sseBuilder struct {
	m       sseMessage
	data    strings.Builder
	hasData bool
	pending bool // a field was read since the last dispatch
}

// add reads one field line ("field: value"); fields other than id, event
// and data are ignored, and data lines are joined with '\n'.
func (ev *sseBuilder) add(line string) {
	ev.pending = true
	field, value, _ := strings.Cut(line, ":")
	value = strings.TrimPrefix(value, " ")
	switch field {
	case "id":
		ev.m.id = value
	case "event":
		ev.m.event = value
	case "data":
		if ev.hasData {
			ev.data.WriteByte('\n')
		}
		ev.data.WriteString(value)
		ev.hasData = true
	}
}

// dispatch ends the event at a blank line: fn gets it when it carries
// data, and ev starts over empty.
func (ev *sseBuilder) dispatch(fn func(sseMessage) error) error {
	if ev.hasData {
		ev.m.data = ev.data.String()
		if err := fn(ev.m); err != nil {
			return err
		}
	}
	ev.m, ev.hasData, ev.pending = sseMessage{}, false, false
	ev.data.Reset()
	return nil
}
