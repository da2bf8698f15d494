package scheduler

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// Schedule files are read as datasets are, and their errors never show
// what is in them. The leader (often root) reads a schedule's job or
// sweep file, and the base job a sweep file names, at each tick; the
// schedule's message is shown by GET /api/v1/schedules and the log. So
// the file is opened with pathpolicy.Roots.Open under the allowed roots
// of the schedule's team (or the deployment's), never lathed's own files
// (Config.DataDeny), never through a link that appears after the check,
// a regular file of at most the limit; and an error names the file (the
// config's path), the field and the rule, never a value read from it.

// fileError is a schedule file that could not be read: why says so in
// Lathe's own words (no path read from a file, no link's target).
type fileError struct {
	why string
	err error
}

func (e *fileError) Error() string { return e.why }
func (e *fileError) Unwrap() error { return e.err }

// readScheduleFile reads path, a schedule's file (or a scheduled sweep's
// base job file) of team, as a dataset is opened: under team's allowed
// roots (rootsFor; "/" when the deployment sets none), not one of
// lathed's own files (Config.DataDeny), with no link followed after the
// check, a regular file of at most limit bytes. Its error is a
// *fileError.
func (ad *admission) readScheduleFile(team, path string, limit int64) ([]byte, error) {
	roots, key := ad.rootsFor(team)
	if roots == nil {
		roots = pathpolicy.Roots{"/"}
	}
	f, err := roots.Open(path, ad.cfg.DataDeny)
	if err != nil {
		return nil, &fileError{why: openRefusal(err, roots, key), err: err}
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, &fileError{why: "not a regular file", err: err}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fileError{why: "cannot be read", err: err}
	}
	if int64(len(b)) > limit {
		return nil, &fileError{why: fmt.Sprintf("over %d bytes", limit)}
	}
	return b, nil
}

// openRefusal says why pathpolicy.Roots.Open refused a schedule file,
// naming the rule: never the link's target nor the path resolved.
func openRefusal(err error, roots pathpolicy.Roots, key string) string {
	var de *pathpolicy.DeniedError
	switch {
	case errors.Is(err, pathpolicy.ErrOutside):
		return "not under " + pathpolicy.Rule(roots, key)
	case errors.As(err, &de):
		return fmt.Sprintf("%v (%s)", pathpolicy.ErrDenied, de.Entry.Why)
	case errors.Is(err, pathpolicy.ErrDenied):
		return pathpolicy.ErrDenied.Error() + " (a hard link to one of them)"
	case errors.Is(err, pathpolicy.ErrSymlink):
		return pathpolicy.ErrSymlink.Error()
	case errors.Is(err, pathpolicy.ErrNotData):
		return "not a regular file"
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	return "cannot be opened"
}

// startError is a scheduled run that did not start: msg (scheduleMessage)
// is what its schedule's state and the log say; err, the cause, is kept
// for errors.Is and jobstore.Unreachable.
type startError struct {
	msg string
	err error
}

func (e *startError) Error() string { return e.msg }
func (e *startError) Unwrap() error { return e.err }

// startFailed is err of starting the run of what (the schedule's "job
// file PATH"), said without a value of the file: check names the CLI
// command that shows the details to whoever may read file ("" for none).
func startFailed(what, check, file string, err error) error {
	return &startError{msg: what + ": " + scheduleMessage(err, check, file), err: err}
}

// scheduleMessage says what err is, for a schedule's message: a file that
// could not be read (fileError) says why; a spec that is not valid, or
// not admissible here, names each bad field (checkedField) with Lathe's
// rule when it is one of admissible's (ruleMessage) and "invalid"
// otherwise, never the value; a refusal by routing says so. Any other
// error (the store's) is Lathe's own text.
func scheduleMessage(err error, check, file string) string {
	var (
		fe     *fileError
		ve     *jobspec.ValidationError
		ie     *plane.InvalidError
		re     *plane.RefusedError
		fields []jobspec.FieldError
	)
	hint := ""
	if check != "" {
		hint = fmt.Sprintf("; `%s %s` shows the details", check, file)
	}
	switch {
	case errors.As(err, &fe):
		return fe.why
	case errors.As(err, &re):
		n := fmt.Sprintf("%d reasons", len(re.Reasons))
		if len(re.Reasons) == 1 {
			n = "1 reason"
		}
		return fmt.Sprintf("refused: no backend may run %s (%s; `%s %s` says why)", re.What, n, check, file)
	case errors.As(err, &ve):
		fields = ve.Errors
	case errors.As(err, &ie):
		fields = ie.Fields
	case errors.Is(err, jobspec.ErrTooLarge):
		return "too large"
	default:
		return err.Error()
	}
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		if n, ok := strings.CutSuffix(strings.TrimPrefix(f.Message, "and "), " more problems"); ok && f.Field == "" && isDigits(n) {
			parts = append(parts, f.Message) // the parsers' cap
			continue
		}
		parts = append(parts, checkedField(f.Field)+": "+ruleMessage(f.Message))
	}
	return "invalid (values from the file are not shown" + hint + "): " + strings.Join(parts, "; ")
}

// checkedField is field (a spec's dotted path, "trials[3].lora.rank") when
// it reads as one, else "a field" (a key of the file that is not a name,
// or the document as a whole: "the file").
func checkedField(field string) string {
	if field == "" {
		return "the file"
	}
	if len(field) > 100 {
		return "a field"
	}
	for _, c := range field {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.-[]", c)
		if !ok {
			return "a field"
		}
	}
	return field
}

// ruleMessage is msg when it is one of admissible's (it names the rule
// and holds no value of the spec), else "invalid".
func ruleMessage(msg string) string {
	for _, p := range []string{msgNoTrainer, msgNotUnder, pathpolicy.ErrDenied.Error()} {
		if strings.HasPrefix(msg, p) {
			return msg
		}
	}
	if msg == "unknown field" || msg == "duplicate key" {
		return msg
	}
	return "invalid"
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
