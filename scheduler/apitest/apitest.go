// Package apitest runs Lathe's control plane and its HTTP API together for
// tests: a real scheduler.Scheduler over the test's store and Redis, and
// the api.Server over it, as cmd/lathed wires them. It is test support
// (imported by _test files only), not a fake: both parts are the real ones.
package apitest

import (
	"context"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
)

// Rig is a control plane and its API.
type Rig struct {
	S   *scheduler.Scheduler
	API *api.Server
	// URL is where the API answers: an httptest server of its handler
	// (Serve), or its own listener (Start).
	URL string
}

// New builds the control plane with sc and its API with ac over store on
// rdb, without starting either. What both need and ac leaves unset (the
// logger, the job defaults, the ledger) is taken from sc, as cmd/lathed
// gives both the same.
func New(rdb redis.UniversalClient, store *jobstore.Store, sc scheduler.Config, ac api.Config) Rig {
	if ac.Logger == nil {
		ac.Logger = sc.Logger
	}
	if reflect.ValueOf(ac.Defaults).IsZero() {
		ac.Defaults = sc.Defaults
	}
	if ac.Ledger == nil {
		ac.Ledger = sc.Ledger
	}
	s := scheduler.New(rdb, store, sc)
	return Rig{S: s, API: api.New(s, rdb, store, ac)}
}

// Serve is New with the API served by an httptest server (closed when the
// test ends); the control plane is not started (no leader loop), so jobs
// stay where the API put them.
func Serve(t testing.TB, rdb redis.UniversalClient, store *jobstore.Store, sc scheduler.Config, ac api.Config) Rig {
	t.Helper()
	r := New(rdb, store, sc, ac)
	hs := httptest.NewServer(r.API.Handler())
	t.Cleanup(hs.Close)
	r.URL = hs.URL
	return r
}

// Start is New with both started: the leader loop, and the API on its own
// listener (ac.Listen, default 127.0.0.1:0) with its real http.Server and
// connection limits. Both stop when the test ends.
func Start(t testing.TB, rdb redis.UniversalClient, store *jobstore.Store, sc scheduler.Config, ac api.Config) Rig {
	t.Helper()
	if ac.Listen == "" {
		ac.Listen = "127.0.0.1:0"
	}
	r := New(rdb, store, sc, ac)
	if err := r.S.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.S.Stop(context.Background()) })
	if err := r.API.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.API.Stop(context.Background()) })
	r.URL = "http://" + r.API.Addr()
	return r
}
