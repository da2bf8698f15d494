package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/worker"
)

// Benchmarks run against one real redis-server each; compare the figures of
// one run as ratios (docs/benchmarks.md, scripts/bench/run.sh).

const benchSpec = `{"name":"bench","base_model":"tiny-char","dataset":"file:///data/train.jsonl","resources":{"gpus":0}}`

// benchParallelism × GOMAXPROCS goroutines submit at once, in both benchmarks.
const benchParallelism = 4

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// benchServer starts a scheduler's API over its own redis-server.
func benchServer(b *testing.B) string {
	srv := redistest.Start(b)
	rdb := srv.Client()
	hs := httptest.NewServer(apitest.New(rdb, jobstore.New(rdb, jobstore.Config{}), scheduler.Config{Logger: quiet,
		Defaults: jobspec.Defaults{OutputURI: "file:///tmp/lathe-bench"}}, api.Config{}).API.Handler())
	b.Cleanup(hs.Close)
	return hs.URL
}

// post sends body and drains the answer; false (after b.Error) unless 201.
func post(b *testing.B, c *http.Client, url string, body []byte) bool {
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Error(err)
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b.Errorf("status %d", resp.StatusCode)
		return false
	}
	return true
}

// BenchmarkSubmitAPI: POST /api/v1/jobs through a real HTTP server (parse,
// validate, normalise, one Lua create script).
func BenchmarkSubmitAPI(b *testing.B) {
	url := benchServer(b) + "/api/v1/jobs"
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := &http.Client{}
		for pb.Next() {
			if !post(b, c, url, []byte(benchSpec)) {
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
}

// BenchmarkSubmitAPISerial: POST /api/v1/jobs one at a time, as a shell
// loop of `lathe submit` sends them: each submit's latency (its reads, its
// create script, its HTTP) with nothing beside it.
func BenchmarkSubmitAPISerial(b *testing.B) {
	url := benchServer(b) + "/api/v1/jobs"
	c := &http.Client{}
	b.ResetTimer()
	for range b.N {
		if !post(b, c, url, []byte(benchSpec)) {
			return
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
}

// batchSize is how many specs one BenchmarkSubmitBatchAPI request carries
// (a nightly sweep's size).
const batchSize = 100

// BenchmarkSubmitBatchAPI: POST /api/v1/jobs/batch with batchSize specs per
// request: the same parse, validation and normalisation per spec, one Lua
// script call per batch. b.N counts jobs, so submits/s compares with
// BenchmarkSubmitAPI and BenchmarkEnqueueRaw.
func BenchmarkSubmitBatchAPI(b *testing.B) {
	url := benchServer(b) + "/api/v1/jobs/batch"
	var body bytes.Buffer
	body.WriteString(`{"jobs":[`)
	for i := range batchSize {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(benchSpec)
	}
	body.WriteString(`]}`)
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := &http.Client{}
		for {
			// One request per batchSize iterations (the last may be short).
			n := 0
			for n < batchSize && pb.Next() {
				n++
			}
			if n == 0 {
				return
			}
			if !post(b, c, url, body.Bytes()) || n < batchSize {
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
}

// BenchmarkHTTPFloor is the same HTTP client and server with a handler
// that reads the body and answers 201 at once, touching no Redis: the floor
// under any per-request API on this machine.
func BenchmarkHTTPFloor(b *testing.B) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"j-0"}`))
	}))
	defer hs.Close()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := &http.Client{}
		for pb.Next() {
			resp, err := c.Post(hs.URL, "application/json", bytes.NewReader([]byte(benchSpec)))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
}

// BenchmarkEnqueueRaw is the baseline: a raw asynq enqueue of a payload of
// the same size on the same kind of Redis.
func BenchmarkEnqueueRaw(b *testing.B) {
	srv := redistest.Start(b)
	c := asynq.NewClientFromRedisClient(srv.Client())
	payload := []byte(benchSpec)
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Enqueue(asynq.NewTask("bench", payload), asynq.Queue("bench"), asynq.MaxRetry(0)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "enqueues/s")
}

// BenchmarkSubmitToStart measures, on an idle worker, the time from the API
// accepting a job (created_at) to the trainer's cmd.Start returning (the
// "started" event), through the placer, the dispatch script, asynq and the
// claim. The trainer is /bin/true: its run time is not part of the figure.
func BenchmarkSubmitToStart(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	dir := b.TempDir()
	w, err := worker.New(rdb, store, worker.Config{Node: "bench", Slots: 1, DataDir: dir, Logger: quiet,
		Trainers: map[string][]string{"reference": {"/bin/sh", "-c", "printf x > \"$LATHE_OUTPUT_DIR/a.bin\""}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer w.Stop(ctx)
	base := apitest.Start(b, rdb, store, scheduler.Config{Logger: quiet, Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(filepath.Join(dir, "out"))}}, api.Config{}).URL
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := http.Post(base+"/api/v1/jobs", "application/json", bytes.NewReader([]byte(benchSpec)))
		if err != nil {
			b.Fatal(err)
		}
		var j jobtype.Job
		_ = json.NewDecoder(resp.Body).Decode(&j)
		resp.Body.Close()
		var started time.Time
		for deadline := time.Now().Add(30 * time.Second); ; {
			cur, err := store.Get(ctx, j.ID)
			if err == nil && cur.State.Terminal() {
				if cur.State != jobtype.StateSucceeded {
					b.Fatalf("job %s: %s %s", j.ID, cur.State, cur.Error)
				}
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("job %s never finished", j.ID)
			}
			time.Sleep(time.Millisecond)
		}
		evs, _ := store.Events(ctx, j.ID, "", 100)
		for _, e := range evs {
			if e.Type == "started" {
				started = e.Time
			}
		}
		if started.IsZero() {
			b.Fatalf("no started event for %s", j.ID)
		}
		lat = append(lat, started.Sub(j.CreatedAt))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "p90-ms")
}
