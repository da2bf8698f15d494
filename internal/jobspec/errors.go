package jobspec

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxSpecBytes is the largest input Parse accepts (1 MiB). A job spec is a
// few hundred bytes; the limit only guards the parser.
const MaxSpecBytes = 1 << 20

// ErrTooLarge is wrapped by the error Parse returns for an input over
// MaxSpecBytes (the API answers 413). Test for it with errors.Is.
var ErrTooLarge = errors.New("job spec too large")

// maxErrors bounds how many problems one ValidationError carries; a hostile
// 1 MiB input must not become a 100 MB error response.
const maxErrors = 100

// maxValueLen bounds FieldError.Value, in runes.
const maxValueLen = 200

// FieldError is one problem with one field of a spec. It is what the API
// returns in the "fields" list of a 400 answer.
type FieldError struct {
	// Field is the dotted path of the field as the user wrote it:
	// "lora.rank", "residency[1]", "training.foo". It is "" for a problem
	// with the document as a whole (bad YAML, empty input).
	Field string `json:"field"`
	// Value is the offending value as written ("-4", "sometimes"), cut to
	// 200 characters; "" when the field is missing or the problem has no
	// single value.
	Value string `json:"value"`
	// Message says what is wrong ("must be between 1 and 1024",
	// "unknown field"). It does not repeat Field.
	Message string `json:"message"`
}

// Error formats e as `field: message (got "value")`, so a FieldError can be
// used as an error on its own.
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

// ValidationError is the error Parse returns for a spec that cannot be
// accepted, whatever the reason: bad YAML or JSON, unknown fields, wrong
// types, bad values. Errors lists every problem found, in document order for
// decoding problems followed by schema order for value rules; it is never
// empty.
type ValidationError struct {
	Errors []FieldError `json:"fields"`
}

// Error lists every problem on one line, separated by "; ".
func (e *ValidationError) Error() string { return JoinFieldErrors("invalid job spec: ", e.Errors) }

// JoinFieldErrors writes prefix and every problem on one line, separated
// by "; " (the job spec's and the routing config's errors alike).
func JoinFieldErrors(prefix string, errs []FieldError) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i, fe := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(fe.Error())
	}
	return b.String()
}

func truncate(s string) string { return TruncateValue(s) }

// TruncateValue cuts s to 200 runes for a FieldError's Value, marking the
// cut with "…". It keeps the result valid UTF-8 so it survives JSON
// encoding unchanged.
func TruncateValue(s string) string {
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
