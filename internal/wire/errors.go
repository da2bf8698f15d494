package wire

import (
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Error codes of an Error's Code (docs/api.md, Errors).
const (
	CodeInvalid             = "invalid"                // 400: the body or spec is bad; Fields lists every bad field
	CodeUnauthorized        = "unauthorized"           // 401: no valid API token
	CodeForbidden           = "forbidden"              // 403: the token may not, or a cross-site request
	CodeNotFound            = "not_found"              // 404: no such job or artifact
	CodeConflict            = "conflict"               // 409: the transition isn't allowed; State holds the job's state
	CodeIdempotencyConflict = "idempotency_conflict"   // 409: the Idempotency-Key names a job of another spec
	CodeTooLarge            = "too_large"              // 413: the body is over the limit
	CodeUnsupportedMedia    = "unsupported_media_type" // 415: a body that is not JSON or YAML
	CodeMisdirected         = "misdirected"            // 421: open mode and a Host that is not loopback
	CodeRefused             = "refused"                // 422: no backend may run the job; Reasons says why
	CodeUnavailable         = "unavailable"            // 503: Redis is unreachable (501: no ledger)
	CodeInternal            = "internal"               // 500: anything else
)

// Error is the body of every error answer. Fields, State, Reasons and
// Decision are omitted when empty: Fields in a 400 invalid, State in a 409
// conflict, Reasons in a 422 refused (a single submit's also carries the
// Decision; a batch's reasons are prefixed "jobs[i]: ", see BatchRefusal).
type Error struct {
	Error  string               `json:"error"`
	Code   string               `json:"code"`
	Fields []jobspec.FieldError `json:"fields,omitempty"`
	State  jobtype.State        `json:"state,omitempty"`
	// Reasons say why no backend may run the job, one line each.
	Reasons []string `json:"reasons,omitempty"`
	// Decision is the refused routing decision of a single submit.
	Decision *Decision `json:"decision,omitempty"`
}

// BatchRefusal is the 422 answer of POST /api/v1/jobs/batch when a job of
// the batch may run nowhere: every refused job's reasons, prefixed
// "jobs[i]: ", and no decision. Its fields come in this order on the
// wire; a client reads it as an Error.
type BatchRefusal struct {
	Code    string   `json:"code"`
	Error   string   `json:"error"`
	Reasons []string `json:"reasons"`
}
