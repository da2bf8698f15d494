package api

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// outcomeFake is a fake control plane (a stand-in for the scheduler, for
// this test alone): its Submit fails as a create script whose reply Redis
// never sent does; the methods the test does not reach are the embedded
// nil interface's.
type outcomeFake struct{ plane.Plane }

func (outcomeFake) Admissible(plane.Principal, *jobspec.Spec) []jobspec.FieldError { return nil }
func (outcomeFake) SawRedis(error)                                                 {}
func (outcomeFake) Metrics() prometheus.Gatherer                                   { return prometheus.NewRegistry() }
func (outcomeFake) Submit(context.Context, plane.Admission) ([]jobstore.Created, error) {
	return nil, fmt.Errorf("%w: jobstore: create: %w", plane.ErrOutcomeUnknown, context.DeadlineExceeded)
}

// TestOutcomeUnknownAnswer: a submit whose storing write got no answer
// from Redis is answered 503 outcome_unknown, telling to send it again
// with the same Idempotency-Key (not "Redis is unreachable", which would
// say nothing was stored).
func TestOutcomeUnknownAnswer(t *testing.T) {
	rdb := redistest.Start(t).Client()
	s := New(outcomeFake{}, rdb, jobstore.New(rdb, jobstore.Config{}), Config{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	req, _ := http.NewRequest("POST", hs.URL+"/api/v1/jobs", strings.NewReader(`{"name":"x","base_model":"tiny-char","dataset":"file:///d.jsonl"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "K")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"outcome_unknown"`) ||
		!strings.Contains(string(body), "same Idempotency-Key") {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}
}

// storedSweepFake is a fake control plane (a stand-in for the scheduler,
// for this test alone): its SubmitSweep answers a sweep as stored.
type storedSweepFake struct{ plane.Plane }

func (storedSweepFake) Admissible(plane.Principal, *jobspec.Spec) []jobspec.FieldError { return nil }
func (storedSweepFake) SawRedis(error)                                                 {}
func (storedSweepFake) Metrics() prometheus.Gatherer                                   { return prometheus.NewRegistry() }
func (storedSweepFake) SubmitSweep(_ context.Context, req plane.SweepRequest) (*jobtype.Sweep, bool, error) {
	return &jobtype.Sweep{ID: req.ID, Name: "s", Trials: 2, State: jobtype.SweepRunning}, false, nil
}

// TestStoredSweepAnsweredWhenItsReadFails: a sweep stored, whose trials
// cannot be read for the answer (Redis went away just after), is answered
// 201 with its record, never "unavailable" (which says nothing was stored).
func TestStoredSweepAnsweredWhenItsReadFails(t *testing.T) {
	rdb := redistest.Start(t).Client()
	gone := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	defer gone.Close()
	s := New(storedSweepFake{}, rdb, jobstore.New(gone, jobstore.Config{}), Config{})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	spec := `{"name":"s","job":{"name":"x","base_model":"tiny-char","dataset":"file:///d.jsonl"},"parameters":{"training.learning_rate":{"grid":[0.1,0.2]}},"search":"grid"}`
	resp, err := http.Post(hs.URL+"/api/v1/sweeps", "application/json", strings.NewReader(spec))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(body), `"id":"s-`) || !strings.Contains(string(body), `"state":"running"`) {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
