package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
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
// (parse, expand and check every trial, route and store them in chunks
// with their records, routes and ledger records), until the sweep is
// running (every trial stored, the first admitted); answer-ms is the
// submit's answer alone.
func BenchmarkSweepSubmit10000(b *testing.B) {
	url, store := sweepServer(b)
	var answer time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		st := submitSweep(b, url, bigSweep(10000, i))
		answer += time.Since(t0)
		waitSweepRunning(b, store, st.Sweep.ID)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "trials/s")
	b.ReportMetric(float64(answer.Milliseconds())/float64(b.N), "answer-ms")
}

// waitSweepRunning waits until sweep id has left admitting (every trial
// stored), failing when it ended another way.
func waitSweepRunning(tb testing.TB, store *jobstore.Store, id string) {
	tb.Helper()
	sw := waitfor.Value(tb, 2*time.Minute, "the sweep's trials all stored", func() *jobtype.Sweep {
		sw, err := store.GetSweep(context.Background(), id)
		if err != nil {
			tb.Fatal(err)
		}
		return sw
	}, func(sw *jobtype.Sweep) bool { return sw.State != jobtype.SweepAdmitting })
	if sw.State != jobtype.SweepRunning || sw.Stored != sw.Trials {
		tb.Fatalf("sweep %s: %s with %d of %d trials stored (%s)", id, sw.State, sw.Stored, sw.Trials, sw.Message)
	}
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

// TestSweep10000Listable: one submit of a 10,000-trial sweep is answered
// before its trials are all stored (admitting); once the sweep runs every
// trial is listable through the API with its routing decision, the ledger
// holds one decision record per trial and verifies.
func TestSweep10000Listable(t *testing.T) {
	url, store := sweepServer(t)
	st := submitSweep(t, url, bigSweep(10000, 1))
	if st.Sweep.Trials != 10000 || st.Sweep.State != jobtype.SweepAdmitting || st.Sweep.Stored >= 10000 || st.Sweep.Stored%jobstore.SweepChunk != 0 {
		t.Fatalf("answered %s with %d of %d trials stored; want admitting, whole chunks", st.Sweep.State, st.Sweep.Stored, st.Sweep.Trials)
	}
	// Following the admission reads the record alone.
	resp, err := http.Get(url + "/api/v1/sweeps/" + st.Sweep.ID + "?record_only=true")
	if err != nil {
		t.Fatal(err)
	}
	var rec wire.SweepStatus
	err = json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || rec.Sweep == nil || rec.Sweep.ID != st.Sweep.ID || rec.Sweep.Trials != 10000 || rec.Leaderboard != nil {
		t.Fatalf("record_only: %d %+v (%v); want the record without a leaderboard", resp.StatusCode, rec, err)
	}
	if resp, err = http.Get(url + "/api/v1/sweeps/" + st.Sweep.ID + "?record_only=maybe"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("record_only=maybe: %v %v; want 400", resp.StatusCode, err)
	}
	resp.Body.Close()
	waitSweepRunning(t, store, st.Sweep.ID)
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
	rep, err := ledger.New(store.Redis(), bytes.Repeat([]byte("k"), ledger.MinKeySize), "lathe:").Verify(context.Background())
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("ledger verify: %+v %v", rep, err)
	}
}
