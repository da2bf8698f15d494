package scheduler_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
)

// TestNotFoundSaysWhat: a job or sweep that does not exist is answered 404
// with what a user reads ("job j-nope not found"), not the store's
// wrapping ("jobstore: get …"), on every path that names one.
func TestNotFoundSaysWhat(t *testing.T) {
	b := setup(t, scheduler.Config{})
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/api/v1/jobs/j-nope", "job j-nope not found"},
		{"GET", "/api/v1/jobs/j-00000000000000zz", "job j-00000000000000zz not found"},
		{"GET", "/api/v1/jobs/j-nope/events", "job j-nope not found"},
		{"GET", "/api/v1/jobs/j-nope/events?follow=true", "job j-nope not found"},
		{"GET", "/api/v1/jobs/j-nope/artifacts/adapter_model.safetensors", "job j-nope not found"},
		{"GET", "/api/v1/jobs/j-nope/gpu", "job j-nope not found"},
		{"POST", "/api/v1/jobs/j-nope/cancel", "job j-nope not found"},
		{"POST", "/api/v1/jobs/j-nope/retry", "job j-nope not found"},
		{"GET", "/api/v1/jobs/a%20b", `job "a b" not found`},
		{"GET", "/api/v1/sweeps/s-nope", "sweep s-nope not found"},
		{"GET", "/api/v1/sweeps/s-00000000000000zz", "sweep s-00000000000000zz not found"},
		{"POST", "/api/v1/sweeps/s-00000000000000zz/cancel", "sweep s-00000000000000zz not found"},
	} {
		code, body := do(t, c.method, b.url+c.path, "", nil)
		var e wire.Error
		if err := json.Unmarshal(body, &e); err != nil || code != 404 || e.Code != "not_found" || e.Error != c.want {
			t.Errorf("%s %s: %d %s, want 404 not_found %q", c.method, c.path, code, body, c.want)
		}
	}
}

// TestRedisDownSaysNoPackage: with Redis gone, a 503 says Redis is
// unreachable and why, without the store's wrapping.
func TestRedisDownSaysNoPackage(t *testing.T) {
	b := setup(t, scheduler.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: b.srv.Addr, MaxRetries: 1, ContextTimeoutEnabled: true})
	hs := httptest.NewServer(apitest.New(rdb, jobstore.New(rdb, jobstore.Config{}), scheduler.Config{Logger: quiet}, api.Config{}).API.Handler())
	defer hs.Close()
	b.srv.Kill()
	for _, p := range []string{"/api/v1/jobs/j-00000000000000zz", "/api/v1/jobs", "/api/v1/queues"} {
		code, body := do(t, "GET", hs.URL+p, "", nil)
		var e wire.Error
		if err := json.Unmarshal(body, &e); err != nil || code != 503 || !strings.HasPrefix(e.Error, "Redis is unreachable: ") ||
			strings.Contains(e.Error, "jobstore:") {
			t.Errorf("GET %s with Redis down: %d %s", p, code, body)
		}
	}
}
