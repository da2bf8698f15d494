package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// outcomeFake is a fake control plane (a stand-in for the scheduler, for
// this test alone): its Submit fails as a create script whose reply Redis
// never sent does; the methods the test does not reach are the embedded
// nil interface's.
type outcomeFake struct{ plane.Plane }

func (outcomeFake) Admissible(*jobspec.Spec) []jobspec.FieldError { return nil }
func (outcomeFake) SawRedis(error)                                {}
func (outcomeFake) Metrics() prometheus.Gatherer                  { return prometheus.NewRegistry() }
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
