package jobstore

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Unreachable reports whether err means Redis could not be reached in
// time or cannot serve yet: a deadline, a network error (refused, reset,
// closed mid-reply), the client's pool closed or exhausted, or Redis
// loading its dataset (a LOADING reply), a replica or a primary cut off
// from its own (READONLY, MASTERDOWN: a failover under way), or a write
// too few replicas acknowledged (ErrNotReplicated). Classified by the errors' types
// and Redis's reply codes, never by their text.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// A file's error (a schedule's job file that is gone): not Redis,
		// though *fs.PathError has the method set of a net.Error.
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) || redis.IsLoadingError(err) ||
		errors.Is(err, ErrNotReplicated) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err)
}

// OutOfMemory reports whether err is Redis refusing a write at maxmemory
// under noeviction (an OOM reply).
func OutOfMemory(err error) bool { return err != nil && redis.IsOOMError(err) }
