package routing

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
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

// FieldError is one problem with one field of the routing config, like
// jobspec.FieldError.
type FieldError struct {
	// Field is the dotted path as written in the file:
	// "backends.aws-eu.instance_types.p5.48xlarge.gpus", "sites.eu[1]";
	// "" for the document as a whole.
	Field string `json:"field"`
	// Value is the offending value as written, cut to 200 characters; ""
	// when missing or when there is no single value.
	Value string `json:"value"`
	// Message says what is wrong; it does not repeat Field.
	Message string `json:"message"`
}

// Error formats e as `field: message (got "value")`.
func (e FieldError) Error() string {
	var b strings.Builder
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	if e.Value != "" {
		b.WriteString(" (got ")
		b.WriteString(strconv.Quote(e.Value))
		b.WriteString(")")
	}
	return b.String()
}

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
