package apiclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/wire"
)

// ErrUnreachable is wrapped by every error where the scheduler gave no
// answer: the connection was refused or dropped, or no answer came within
// the timeout. Test with errors.Is.
var ErrUnreachable = errors.New("scheduler unreachable")

// ErrChecksum is wrapped by Artifact's error when the bytes received do not
// hash to the X-Lathe-SHA256 the scheduler announced.
var ErrChecksum = errors.New("sha256 mismatch")

// Error codes the scheduler puts in an error answer's "code" (docs/api.md).
const (
	CodeInvalid     = wire.CodeInvalid     // 400: the body or spec is bad; Fields lists every bad field
	CodeNotFound    = wire.CodeNotFound    // 404: no such job or artifact
	CodeConflict    = wire.CodeConflict    // 409: the transition isn't allowed; State holds the job's state
	CodeTooLarge    = wire.CodeTooLarge    // 413: the body is over the limit
	CodeRefused     = wire.CodeRefused     // 422: no backend may run the job (or a job of the batch); Reasons says why
	CodeUnavailable = wire.CodeUnavailable // 503: the scheduler cannot reach Redis
	CodeInternal    = wire.CodeInternal    // 500: anything else
)

// APIError is an error answer from the scheduler. Status is always set;
// Code and Message come from the JSON body when it had one (Message falls
// back to the body text or the status text).
type APIError struct {
	Status  int
	Code    string
	Message string
	// Fields lists every bad field of a 400 "invalid" answer.
	Fields []jobspec.FieldError
	// State is the job's current state in a 409 "conflict" answer.
	State string
	// Reasons of a 422 "refused" answer: why no backend may run the job,
	// one line each (a batch's are prefixed "jobs[i]: ").
	Reasons []string
}

// Error formats e as "scheduler answered <status> <code>: <message>".
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scheduler answered %d", e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.State != "" {
		b.WriteString(" (job state " + e.State + ")")
	}
	for _, f := range e.Fields {
		fmt.Fprintf(&b, "; %s: %s", f.Field, f.Message)
	}
	for _, r := range e.Reasons {
		b.WriteString("; " + r)
	}
	return b.String()
}

// Unavailable reports whether e is a 503: the scheduler is up but cannot
// serve (with Code "unavailable": Redis is down or unreachable).
func (e *APIError) Unavailable() bool {
	return e.Status == http.StatusServiceUnavailable || e.Code == CodeUnavailable
}

// decodeAPIError reads resp's body (up to 64 KiB) into an *APIError.
func decodeAPIError(resp *http.Response) *APIError {
	e := &APIError{Status: resp.StatusCode}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body wire.Error // a wire.BatchRefusal reads as one too
	if err := json.Unmarshal(data, &body); err == nil && (body.Error != "" || body.Code != "") {
		e.Code, e.Message, e.Fields, e.State, e.Reasons = body.Code, body.Error, body.Fields, string(body.State), body.Reasons
		return e
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	e.Message = msg
	return e
}
