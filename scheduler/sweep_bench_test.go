package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
)

// bigSweep is a random sweep of n trials of the bench job, inline.
func bigSweep(n int, seed int) []byte {
	return []byte(fmt.Sprintf(`{"name":"bench-sweep","job":%s,"parameters":{"training.learning_rate":{"log_uniform":[0.0001,0.1]},"lora.rank":{"int_uniform":[1,1024]}},"search":{"kind":"random","trials":%d,"seed":%d},"objective":{"metric":"eval_loss","goal":"minimize"},"max_parallel":100}`,
		benchSpec, n, seed))
}

// sweepServer is a scheduler's API over its own redis-server, with a
// ledger, so that each trial's decision record is written too.
func sweepServer(tb testing.TB) (string, *jobstore.Store) {
	srv := redistest.Start(tb)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	hs := httptest.NewServer(apitest.New(rdb, store, scheduler.Config{Logger: quiet, Defaults: jobspec.Defaults{OutputURI: "file:///tmp/lathe-bench"},
		Ledger: ledger.New(rdb, bytes.Repeat([]byte("k"), ledger.MinKeySize), "lathe:")}, api.Config{}).API.Handler())
	tb.Cleanup(hs.Close)
	return hs.URL, store
}

func submitSweep(tb testing.TB, url string, body []byte) wire.SweepStatus {
	resp, err := http.Post(url+"/api/v1/sweeps", "application/json", bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var st wire.SweepStatus
	if resp.StatusCode != http.StatusCreated {
		var e wire.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		tb.Fatalf("status %d: %+v", resp.StatusCode, e)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		tb.Fatal(err)
	}
	return st
}

// BenchmarkSweepSubmit10000: one 10,000-trial sweep per op through the API
// (parse, expand, validate and route every trial, one CreateSweep script
// with every trial's record, route and ledger record).
func BenchmarkSweepSubmit10000(b *testing.B) {
	url, _ := sweepServer(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		submitSweep(b, url, bigSweep(10000, i))
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "trials/s")
}

// BenchmarkEnqueueRaw10000 is its baseline: 10,000 raw asynq enqueues of
// the bench job's payload per op, one after another, on the same kind of
// Redis.
func BenchmarkEnqueueRaw10000(b *testing.B) {
	srv := redistest.Start(b)
	c := asynq.NewClientFromRedisClient(srv.Client())
	payload := []byte(benchSpec)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := 0; k < 10000; k++ {
			if _, err := c.Enqueue(asynq.NewTask("bench", payload), asynq.Queue("bench"), asynq.MaxRetry(0)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "enqueues/s")
}

// TestSweep10000Listable: after one submit of a 10,000-trial sweep, every
// trial is listable through the API with its routing decision, and the
// ledger holds one decision record per trial.
func TestSweep10000Listable(t *testing.T) {
	url, store := sweepServer(t)
	st := submitSweep(t, url, bigSweep(10000, 1))
	if st.Sweep.Trials != 10000 {
		t.Fatalf("sweep has %d trials", st.Sweep.Trials)
	}
	seen, cursor := 0, ""
	for {
		resp, err := http.Get(url + "/api/v1/jobs?limit=1000&sweep=" + st.Sweep.ID + "&cursor=" + cursor)
		if err != nil {
			t.Fatal(err)
		}
		var l wire.JobList
		err = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range l.Jobs {
			if j.Trial == nil || j.Trial.Index != seen || j.Route == nil || j.Route.LedgerSeq == 0 {
				t.Fatalf("trial %d listed as %+v (route %+v)", seen, j.Trial, j.Route)
			}
			seen++
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	if seen != 10000 {
		t.Fatalf("listed %d trials, want 10000", seen)
	}
	n, err := store.Redis().XLen(context.Background(), "lathe:ledger").Result()
	if err != nil || n < 10000 {
		t.Fatalf("ledger holds %d records (%v), want at least one per trial", n, err)
	}
}
