package routing

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// MaxConfigBytes is the largest config file ParseConfig reads (4 MiB).
const MaxConfigBytes = 4 << 20

// ErrTooLarge is wrapped by the error ParseConfig returns for an input over
// MaxConfigBytes.
var ErrTooLarge = errors.New("routing: config too large")

// maxErrors bounds how many problems one ConfigError carries.
const maxErrors = 100

// maxValueLen bounds FieldError.Value, in runes.
const maxValueLen = 200

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
	var b strings.Builder
	b.WriteString("invalid routing config: ")
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(fe.Error())
	}
	return b.String()
}

// truncate cuts s to maxValueLen runes, keeping it valid UTF-8.
func truncate(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if utf8.RuneCountInString(s) <= maxValueLen {
		return s
	}
	n := 0
	for i := range s {
		if n == maxValueLen {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// capErrors keeps the first maxErrors problems and says how many it dropped.
func capErrors(errs []FieldError) []FieldError {
	if len(errs) <= maxErrors {
		return errs
	}
	return append(errs[:maxErrors:maxErrors], FieldError{
		Message: "and " + strconv.Itoa(len(errs)-maxErrors) + " more problems",
	})
}
