package routecfg

import (
	"errors"
	"strconv"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// MaxConfigBytes is the largest config file ParseConfig reads (4 MiB).
const MaxConfigBytes = 4 << 20

// ErrTooLarge is wrapped by the error ParseConfig returns for an input over
// MaxConfigBytes.
var ErrTooLarge = errors.New("routing: config too large")

// maxErrors bounds how many problems one ConfigError carries.
const maxErrors = 100

// FieldError is one problem with one field of the routing config: the
// job spec's type (Field is the dotted path as written in the file,
// "backends.aws-eu.instance_types.p5.48xlarge.gpus"; Value the offending
// value cut to 200 characters; Message what is wrong), so the API and the
// CLI report both alike.
type FieldError = jobspec.FieldError

// ConfigError is the error ParseConfig returns for a routing config it
// cannot accept. Errors lists every problem found — decoding problems in
// document order, then the rules between fields — and is never empty.
type ConfigError struct {
	Errors []FieldError `json:"fields"`
}

// Error lists every problem on one line, separated by "; ".
func (e *ConfigError) Error() string {
	return jobspec.JoinFieldErrors("invalid routing config: ", e.Errors)
}

// truncate cuts s for a FieldError's Value, as the job spec does.
func truncate(s string) string { return jobspec.TruncateValue(s) }

// capErrors keeps the first maxErrors problems and says how many it dropped.
func capErrors(errs []FieldError) []FieldError {
	if len(errs) <= maxErrors {
		return errs
	}
	return append(errs[:maxErrors:maxErrors], FieldError{
		Message: "and " + strconv.Itoa(len(errs)-maxErrors) + " more problems",
	})
}
