package jobstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestRedisErrorClasses: real failures of a real redis-server are
// classified by type: a stopped server is unreachable, a write at
// maxmemory under noeviction is out of memory (and not unreachable), and
// a file's error or a plain error is neither.
func TestRedisErrorClasses(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	err := rdb.Set(ctx, "k", "v", 0).Err()
	if !jobstore.OutOfMemory(fmt.Errorf("jobstore: create: %w", err)) || jobstore.Unreachable(err) {
		t.Fatalf("a write at maxmemory: %v (out of memory %v, unreachable %v)", err, jobstore.OutOfMemory(err), jobstore.Unreachable(err))
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = rdb.Ping(short).Err()
	if !jobstore.Unreachable(fmt.Errorf("jobstore: get: %w", err)) || jobstore.OutOfMemory(err) {
		t.Fatalf("a stopped redis-server: %v not classified unreachable", err)
	}
	for _, e := range []error{&fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}, errors.New("connection refused"), redis.Nil, nil} {
		if jobstore.Unreachable(e) || jobstore.OutOfMemory(e) {
			t.Errorf("%v classified as a Redis failure", e)
		}
	}
}
