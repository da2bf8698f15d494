package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/seedtest"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
)

// dashboardEndpoints are the reads BenchmarkDashboard100k times, in this
// order: the floor first (the HTTP round trip, a Redis PING and INFO), then
// the overview as the API answers it by default (its first 100 waiting
// jobs) and as the dashboard page polls it every 2 s (scheduler/api/ui/app.js:
// counts only, no waiting rows), what else the page polls, and a
// Prometheus scrape. A build from before waiting_limit answers every
// waiting job to both overview rows. In a path, {running} is a running job's id,
// {finished} a succeeded job's, {sweep} a sweep's and {last} the id of the
// running job's last event. Add a panel's endpoint with one line.
var dashboardEndpoints = []struct{ name, path string }{
	{"floor: GET /healthz (PING, eviction check)", "/healthz"},
	{"GET /api/v1/overview", "/api/v1/overview"},
	{"GET /api/v1/overview?waiting_limit=0", "/api/v1/overview?waiting_limit=0"},
	{"GET /api/v1/jobs?limit=200", "/api/v1/jobs?limit=200"},
	{"GET /api/v1/sweeps?limit=10", "/api/v1/sweeps?limit=10"},
	{"GET /api/v1/sweeps/{id}", "/api/v1/sweeps/{sweep}"},
	{"GET /api/v1/jobs/{id} (running)", "/api/v1/jobs/{running}"},
	{"GET /api/v1/jobs/{id}/events (first)", "/api/v1/jobs/{running}/events"},
	{"GET /api/v1/jobs/{id}/events?after=", "/api/v1/jobs/{running}/events?after={last}"},
	{"GET /api/v1/jobs/{id} (succeeded)", "/api/v1/jobs/{finished}"},
	{"GET /api/v1/budgets", "/api/v1/budgets"},
	{"GET /api/v1/history", "/api/v1/history"},
	{"GET /metrics", "/metrics"},
}

// dashboardSweeps is how many sweeps of configs/examples/sweep-grid.yaml
// (6 trials each) the benchmark submits through the API; the seeded queued
// jobs are 2,000 less their trials.
const dashboardSweeps = 10

// BenchmarkDashboard100k times the dashboard's JSON endpoints and a
// /metrics scrape against the real `lathed scheduler` process over a real
// redis-server holding 100,000 jobs: LATHE_BENCH_FINISHED finished (default
// 97,800, with their events, artifacts and costs), 200 running on 25
// heartbeating nodes of 8 GPUs (every GPU held; their attempt tasks held
// active in the 25 nodes' asynq queues by seedtest.Workers) and 2,000
// queued (1,940 seeded, 60 trials of 10 sweeps). Each endpoint is asked
// LATHE_BENCH_REQUESTS times (default 200) one after another after a
// warm-up; it prints p50, p99 and the ratio of each to the floor's; the
// Redis commands and round trips per request, counted exactly by an
// in-process scheduler on the same Redis over LATHE_BENCH_COUNTED requests
// (default 20; countDashboard; the binary's
// own duties write and read in the background, so INFO deltas around its
// requests would be noise); the idle leader's background rate; and the
// process's VmRSS and VmHWM.
// Run it with -benchtime 1x (scripts/bench/dashboard.sh); LATHE_BENCH_LATHED
// names another lathed binary to time (the counts are this tree's).
func BenchmarkDashboard100k(b *testing.B) {
	finished, requests := envInt(b, "LATHE_BENCH_FINISHED", 97800), envInt(b, "LATHE_BENCH_REQUESTS", 200)
	lathed, lathe := binaries(b)
	if v := os.Getenv("LATHE_BENCH_LATHED"); v != "" {
		lathed = v // another build to time, e.g. an earlier commit's for a before/after
	}
	srv := redistest.Start(b)
	rdb := srv.Client()
	ctx := context.Background()
	t0 := time.Now()
	seeded, err := seedtest.Seed(ctx, jobstore.New(rdb, jobstore.Config{}), seedtest.Cluster{Nodes: 25, GPUsPerNode: 8,
		Finished: finished, Running: 200, Queued: 2000 - 6*dashboardSweeps, Events: 20})
	if err != nil {
		b.Fatal(err)
	}
	stop, err := seedtest.Workers(ctx, rdb, seeded)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	mem, _ := rdb.Info(ctx, "memory").Result()
	logf("seeded %d finished, %d running, %d queued jobs in %.1f s; redis %s", len(seeded.Finished), len(seeded.Running),
		len(seeded.Queued), time.Since(t0).Seconds(), infoField(mem, "used_memory_human"))
	cfg := filepath.Join(b.TempDir(), "lathe.yaml")
	if err := os.WriteFile(cfg, []byte("jobs:\n  keep_finished: 1000000\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(redistest.FreePort(b))
	d := startDaemon(b, lathed, "scheduler", "--config", cfg, "--data-dir", b.TempDir(), "--redis-url", srv.URL(),
		"--listen", strings.TrimPrefix(base, "http://"), "--log-level", "warn")
	waitHTTP(b, base, d)
	vars := map[string]string{"{running}": seeded.Running[0], "{finished}": seeded.Finished[len(seeded.Finished)-1]}
	for range dashboardSweeps {
		out, errOut, code := cli(b, lathe, base, "sweep", "submit", "configs/examples/sweep-grid.yaml", "-o", "json")
		var sw struct{ Sweep struct{ ID string } }
		if code != 0 || json.Unmarshal([]byte(out), &sw) != nil || sw.Sweep.ID == "" {
			b.Fatalf("sweep submit exited %d: %s %s", code, out, errOut)
		}
		vars["{sweep}"] = sw.Sweep.ID
	}
	time.Sleep(5 * time.Second) // the leader's first rounds: routes, places in line, settlements
	vars["{last}"] = lastEventID(b, base+"/api/v1/jobs/"+seeded.Running[0]+"/events")
	logf("scheduler pid %d after start: %s", d.cmd.Process.Pid, procMem(b, d.cmd.Process.Pid))
	counted := envInt(b, "LATHE_BENCH_COUNTED", 20)
	for i := 0; i < b.N; i++ {
		runs := timeDashboard(ctx, b, rdb, endpointURLs(base, vars), requests)
		countDashboard(b, srv.Addr, endpointURLs("", vars), runs, counted)
		logDashboard(b, runs, counted)
	}
	logf("scheduler after the requests: %s", procMem(b, d.cmd.Process.Pid))
	counts, err := jobstore.New(rdb, jobstore.Config{}).CountByState(ctx)
	if err != nil {
		b.Fatal(err)
	}
	logf("jobs by state at the end: %v; asynq queues: %d", counts, rdb.SCard(ctx, "asynq:queues").Val())
	rss, hwm := procKB(b, d.cmd.Process.Pid, "VmRSS"), procKB(b, d.cmd.Process.Pid, "VmHWM")
	b.ReportMetric(float64(rss)/1024, "rss-MiB")
	b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
}

// endpointRun is one endpoint's figures.
type endpointRun struct {
	p50, p99    time.Duration
	cmds, trips float64        // Redis commands and round trips per request
	by          map[string]int // commands by name, over the counted requests
}

// endpointURLs are dashboardEndpoints' paths on base with vars filled in.
func endpointURLs(base string, vars map[string]string) []string {
	urls := make([]string, len(dashboardEndpoints))
	for i, e := range dashboardEndpoints {
		urls[i] = base + e.path
		for k, v := range vars {
			urls[i] = strings.ReplaceAll(urls[i], k, v)
		}
	}
	return urls
}

// timeDashboard times every endpoint n times, one request after another,
// after a warm-up of 10, and logs the Redis commands and reads per second
// of the idle scheduler's own duties first (INFO deltas over 5 s).
func timeDashboard(ctx context.Context, b *testing.B, rdb *redis.Client, urls []string, n int) []endpointRun {
	c := &http.Client{}
	for _, u := range urls {
		for range 10 {
			get(b, c, u)
		}
	}
	bgCmds, bgReads, bgFor := redisDelta(ctx, b, rdb, func() { time.Sleep(5 * time.Second) })
	logf("background (the idle leader's own duties, no requests): %.0f Redis commands/s, %.0f reads/s", bgCmds/bgFor.Seconds(), bgReads/bgFor.Seconds())
	runs := make([]endpointRun, len(urls))
	for i, u := range urls {
		took := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			get(b, c, u)
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		runs[i] = endpointRun{p50: took[n/2], p99: took[n*99/100]}
	}
	return runs
}

// countDashboard counts each endpoint's Redis commands and round trips
// exactly: an in-process scheduler (no duties running) on the same Redis,
// its client hooked (redistest.Trips), n requests each.
func countDashboard(b *testing.B, addr string, paths []string, runs []endpointRun, n int) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { rdb.Close() })
	trips := &redistest.Trips{}
	rdb.AddHook(trips)
	hs := httptest.NewServer(apitest.New(rdb, jobstore.New(rdb, jobstore.Config{}), scheduler.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, api.Config{}).API.Handler())
	b.Cleanup(hs.Close)
	c := &http.Client{}
	for i, p := range paths {
		get(b, c, hs.URL+p) // warm-up: e.g. script loads
		trips.Reset()
		for range n {
			get(b, c, hs.URL+p)
		}
		by := trips.All()
		total := 0
		for _, v := range by {
			total += v
		}
		runs[i].cmds, runs[i].trips, runs[i].by = float64(total)/float64(n), float64(trips.Cmds()+trips.Pipelines())/float64(n), by
	}
}

// logDashboard logs the table of runs and reports the p99s as metrics.
func logDashboard(b *testing.B, runs []endpointRun, n int) {
	floor := runs[0]
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-40s %8s %8s %8s %8s %9s %7s  %s\n", "endpoint", "p50 ms", "p99 ms", "p50 ÷fl", "p99 ÷fl", "cmds/req", "trips", "commands per request")
	for i, r := range runs {
		names := slices.Collect(maps.Keys(r.by))
		sort.Slice(names, func(x, y int) bool {
			return r.by[names[x]] > r.by[names[y]] || r.by[names[x]] == r.by[names[y]] && names[x] < names[y]
		})
		var by []string
		for _, k := range names {
			by = append(by, fmt.Sprintf("%s %.4g", k, float64(r.by[k])/float64(n)))
		}
		fmt.Fprintf(&sb, "%-40s %8.2f %8.2f %8.1f %8.1f %9.1f %7.1f  %s\n", dashboardEndpoints[i].name, ms(r.p50), ms(r.p99),
			ms(r.p50)/ms(floor.p50), ms(r.p99)/ms(floor.p99), r.cmds, r.trips, strings.Join(by, ", "))
		b.ReportMetric(ms(r.p99), fmt.Sprintf("p99-ms-%d", i))
	}
	fmt.Print(sb.String())
}

// logf prints a line of the benchmark's report on stdout (b.Logf would cut
// a benchmark's log to 10 lines).
func logf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// get reads url to its end and fails on anything but 200.
func get(b *testing.B, c *http.Client, url string) {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %s", url, resp.Status)
	}
}

// redisDelta runs f and returns the Redis commands (INFO commandstats;
// INFO itself left out) and the read events (INFO stats
// total_reads_processed, less the closing INFO's own) it took, and how long.
func redisDelta(ctx context.Context, b *testing.B, rdb *redis.Client, f func()) (cmds, reads float64, took time.Duration) {
	c0, r0 := redisCounts(ctx, b, rdb)
	start := time.Now()
	f()
	took = time.Since(start)
	c1, r1 := redisCounts(ctx, b, rdb)
	for k, v := range c1 {
		cmds += float64(v - c0[k])
	}
	return cmds, float64(r1 - r0 - 1), took
}

func redisCounts(ctx context.Context, b *testing.B, rdb *redis.Client) (map[string]int64, int64) {
	s, err := rdb.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	cmds := map[string]int64{}
	for _, line := range strings.Split(s, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "info" {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		cmds[name] = n
	}
	reads, _ := strconv.ParseInt(infoField(s, "total_reads_processed"), 10, 64)
	return cmds, reads
}

func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	return ""
}

// lastEventID is the id of the last event url lists.
func lastEventID(b *testing.B, url string) string {
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Events []struct{ ID string } }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || len(got.Events) == 0 {
		b.Fatalf("events of %s: %v (%d)", url, err, len(got.Events))
	}
	return got.Events[len(got.Events)-1].ID
}

func procMem(b *testing.B, pid int) string {
	return fmt.Sprintf("VmRSS %.1f MiB, VmHWM %.1f MiB", float64(procKB(b, pid, "VmRSS"))/1024, float64(procKB(b, pid, "VmHWM"))/1024)
}

// procKB reads a kB field of /proc/<pid>/status.
func procKB(b *testing.B, pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	b.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s %q: %v", name, v, err)
	}
	return n
}
