package sweepspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// baseJob is a small valid job, inline.
const baseJob = `job: {name: tiny, base_model: tiny-char, dataset: "s3://bucket/train.jsonl", training: {max_steps: 10}}` + "\n"

// mustParse parses spec (after baseJob) or fails the test.
func mustParse(t testing.TB, spec string) *Sweep {
	t.Helper()
	s, err := Parse([]byte(baseJob+spec), Options{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// mustExpand expands s or fails the test.
func mustExpand(t testing.TB, s *Sweep) []Trial {
	t.Helper()
	trials, err := s.Expand()
	if err != nil {
		t.Fatalf("Expand: %v", err)
	}
	return trials
}

// fieldErrors returns the problems of a *jobspec.ValidationError, failing
// the test for any other error.
func fieldErrors(t testing.TB, err error) []jobspec.FieldError {
	t.Helper()
	var ve *jobspec.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %T %v is not a *jobspec.ValidationError", err, err)
	}
	if len(ve.Errors) == 0 {
		t.Fatal("ValidationError with no problems")
	}
	return ve.Errors
}

// findField returns the problem naming field, if any.
func findField(errs []jobspec.FieldError, field string) (jobspec.FieldError, bool) {
	for _, fe := range errs {
		if fe.Field == field {
			return fe, true
		}
	}
	return jobspec.FieldError{}, false
}

// wantField fails the test unless err names field with a message
// containing msg (and, when value is not "", that value).
func wantField(t testing.TB, err error, field, msg, value string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one naming %q", field)
	}
	errs := fieldErrors(t, err)
	fe, ok := findField(errs, field)
	if !ok {
		t.Fatalf("no problem names %q; got %v", field, err)
	}
	if !strings.Contains(fe.Message, msg) {
		t.Errorf("%s: message %q does not contain %q", field, fe.Message, msg)
	}
	if value != "" && fe.Value != value {
		t.Errorf("%s: value %q, want %q", field, fe.Value, value)
	}
}
