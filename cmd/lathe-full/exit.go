package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/redact"
)

// Exit codes of the lathe CLI.
const (
	exitOK          = 0   // success; for submit --wait, the job succeeded
	exitFailed      = 1   // the job failed or was cancelled, or the API said no
	exitUsage       = 2   // bad flags or arguments, an invalid job spec, or one no backend may run (refused)
	exitUnreachable = 3   // no scheduler answered, or it cannot reach Redis
	exitInterrupted = 130 // Ctrl-C; a submitted job keeps running
)

// exitError is an error with the exit code it maps to. A nil err means the
// command already said everything on stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf returns an error that exits with exitUsage.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// failedErrorf returns an error that exits with exitFailed.
func failedErrorf(format string, args ...any) error {
	return &exitError{code: exitFailed, err: fmt.Errorf(format, args...)}
}

// typed reports whether err already says which exit code it maps to.
// Errors that are not typed come from cobra itself (unknown flags, commands
// or argument counts): usage errors.
func typed(err error) bool {
	var ee *exitError
	var ae *apiclient.APIError
	return errors.As(err, &ee) || errors.As(err, &ae) ||
		errors.Is(err, apiclient.ErrUnreachable) || errors.Is(err, context.Canceled)
}

// report prints err to stderr, prefixed "lathe: ", and returns its exit
// code. It is the one place errors become exit codes.
func report(stderr io.Writer, server string, err error) int {
	if err == nil {
		return exitOK
	}
	server = redact.URL(server) // a --server with a password never reaches the terminal
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "lathe: %v\n", ee.err)
		}
		return ee.code
	}
	var ae *apiclient.APIError
	if errors.As(err, &ae) {
		return reportAPIError(stderr, server, ae, err)
	}
	if errors.Is(err, apiclient.ErrUnreachable) {
		// Most often nothing runs there yet: say how to start it.
		if errors.Is(err, syscall.ECONNREFUSED) {
			fmt.Fprintf(stderr, "lathe: no Lathe scheduler at %s (connection refused). %s\n", server, startHint)
		} else {
			fmt.Fprintf(stderr, "lathe: no Lathe scheduler answered at %s (%s). %s\n", server, transportDetail(err), startHint)
		}
		return exitUnreachable
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "lathe: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(stderr, "lathe: %v\nRun 'lathe --help' for usage.\n", err)
	return exitUsage
}

// reportAPIError is report for an error the scheduler's API answered, ae
// (found in err): the scheduler or its Redis unavailable, a refused job, a
// missing object, a rejected request, or another failure.
func reportAPIError(stderr io.Writer, server string, ae *apiclient.APIError, err error) int {
	switch {
	case ae.Code == apiclient.CodeUnavailable:
		fmt.Fprintf(stderr, "lathe: the scheduler at %s says Redis is down/unreachable: %s\n", server,
			strings.TrimPrefix(ae.Message, "Redis is unreachable: "))
		return exitUnreachable
	case ae.Unavailable():
		fmt.Fprintf(stderr, "lathe: the scheduler at %s is unavailable (HTTP %d): %s\n", server, ae.Status, ae.Message)
		return exitUnreachable
	case ae.Code == apiclient.CodeRefused:
		// The job cannot run as written (residency, data sites, GPUs,
		// budgets): like an invalid spec, it needs changing.
		for _, r := range ae.Reasons {
			fmt.Fprintf(stderr, "refused: %s\n", r)
		}
		fmt.Fprintf(stderr, "lathe: the scheduler refused the job: %s\n(lathe route --explain FILE shows every backend and why)\n", ae.Message)
		return exitUsage
	case ae.Code == apiclient.CodeNotFound && ae.Message != "":
		// The scheduler's words say what is missing: "job j-1 not found".
		fmt.Fprintf(stderr, "lathe: %s\n", termSafe(ae.Message))
		return exitFailed
	case ae.Code == apiclient.CodeInvalid || len(ae.Fields) > 0:
		printFieldErrors(stderr, ae.Fields)
		fmt.Fprintf(stderr, "lathe: the scheduler rejected the request: %s\n", ae.Message)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "lathe: %v\n", err)
		return exitFailed
	}
}

// startHint is what a user with no scheduler running can do.
const startHint = "Start one with: lathed up   (or set --server / LATHE_SERVER)"

// transportDetail is the innermost reason of a failed request, without the
// method and URL that net/http puts before it ("EOF", "i/o timeout").
func transportDetail(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), apiclient.ErrUnreachable.Error()+": ")
}

// printFieldErrors prints one line per bad field:
//
//	error: lora.rank = "-4": must be between 1 and 1024
func printFieldErrors(w io.Writer, fields []jobspec.FieldError) {
	for _, f := range fields {
		switch {
		case f.Field == "":
			fmt.Fprintf(w, "error: %s\n", f.Message)
		case f.Value == "":
			fmt.Fprintf(w, "error: %s: %s\n", f.Field, f.Message)
		default:
			fmt.Fprintf(w, "error: %s = %q: %s\n", f.Field, f.Value, f.Message)
		}
	}
}
