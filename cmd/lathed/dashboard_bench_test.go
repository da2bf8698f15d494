package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
)

// dashboardEndpoints are the reads BenchmarkDashboard100k times, in this
// order: the floor first (the HTTP round trip and one Redis PING), then
// what the dashboard page polls every 2 s (scheduler/ui/app.js) and a
// Prometheus scrape. In a path, {running} is a running job's id,
// {finished} a succeeded job's, {sweep} a sweep's and {last} the id of the
// running job's last event. Add a panel's endpoint with one line.
var dashboardEndpoints = []struct{ name, path string }{
	{"floor: GET /healthz (one PING)", "/healthz"},
	{"GET /api/v1/overview", "/api/v1/overview"},
	{"GET /api/v1/jobs?limit=200", "/api/v1/jobs?limit=200"},
	{"GET /api/v1/sweeps?limit=10", "/api/v1/sweeps?limit=10"},
	{"GET /api/v1/sweeps/{id}", "/api/v1/sweeps/{sweep}"},
	{"GET /api/v1/jobs/{id} (running)", "/api/v1/jobs/{running}"},
	{"GET /api/v1/jobs/{id}/events (first)", "/api/v1/jobs/{running}/events"},
	{"GET /api/v1/jobs/{id}/events?after=", "/api/v1/jobs/{running}/events?after={last}"},
	{"GET /api/v1/jobs/{id} (succeeded)", "/api/v1/jobs/{finished}"},
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
// heartbeating nodes of 8 GPUs (every GPU held) and 2,000 queued (1,940
// seeded, 60 trials of 10 sweeps). Each endpoint is asked
// LATHE_BENCH_REQUESTS times (default 200) one after another after a
// warm-up; it logs p50, p99, the ratio of each to the floor's, and the
// Redis commands and reads (round trips) per request from INFO deltas less
// the scheduler's own background rate; then the process's VmRSS and VmHWM.
// Run it with -benchtime 1x (scripts/bench/dashboard.sh).
func BenchmarkDashboard100k(b *testing.B) {
	finished, requests := envInt(b, "LATHE_BENCH_FINISHED", 97800), envInt(b, "LATHE_BENCH_REQUESTS", 200)
	lathed, lathe := binaries(b)
	srv := redistest.Start(b)
	rdb := srv.Client()
	ctx := context.Background()
	t0 := time.Now()
	seeded, err := seedtest.Seed(ctx, jobstore.New(rdb, jobstore.Config{}), seedtest.Cluster{Nodes: 25, GPUsPerNode: 8,
		Finished: finished, Running: 200, Queued: 2000 - 6*dashboardSweeps, Events: 20})
	if err != nil {
		b.Fatal(err)
	}
	mem, _ := rdb.Info(ctx, "memory").Result()
	b.Logf("seeded %d finished, %d running, %d queued jobs in %.1f s; redis %s", len(seeded.Finished), len(seeded.Running),
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
	b.Logf("scheduler pid %d after start: %s", d.cmd.Process.Pid, procMem(b, d.cmd.Process.Pid))
	for i := 0; i < b.N; i++ {
		measureDashboard(ctx, b, rdb, base, vars, requests)
	}
	b.Logf("scheduler after the requests: %s", procMem(b, d.cmd.Process.Pid))
	rss, hwm := procKB(b, d.cmd.Process.Pid, "VmRSS"), procKB(b, d.cmd.Process.Pid, "VmHWM")
	b.ReportMetric(float64(rss)/1024, "rss-MiB")
	b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
}

// endpointRun is one endpoint's figures.
type endpointRun struct {
	p50, p99 time.Duration
	cmds     map[string]float64 // per request, background subtracted
	reads    float64            // Redis read events (≈ round trips) per request
}

// measureDashboard measures the background Redis rate of the idle
// scheduler, then every endpoint, and logs the table.
func measureDashboard(ctx context.Context, b *testing.B, rdb *redis.Client, base string, vars map[string]string, n int) {
	c := &http.Client{}
	urls := make([]string, len(dashboardEndpoints))
	for i, e := range dashboardEndpoints {
		urls[i] = base + e.path
		for k, v := range vars {
			urls[i] = strings.ReplaceAll(urls[i], k, v)
		}
		for range 10 { // warm-up
			get(b, c, urls[i])
		}
	}
	bgCmds, bgReads, bgFor := redisDelta(ctx, b, rdb, func() { time.Sleep(5 * time.Second) })
	bg := 0.0
	for _, v := range bgCmds {
		bg += v
	}
	b.Logf("background (the idle scheduler's own duties): %.1f Redis commands/s, %.1f reads/s", bg/bgFor.Seconds(), bgReads/bgFor.Seconds())
	runs := make([]endpointRun, len(urls))
	for i, u := range urls {
		took := make([]time.Duration, 0, n)
		cmds, reads, d := redisDelta(ctx, b, rdb, func() {
			for range n {
				start := time.Now()
				get(b, c, u)
				took = append(took, time.Since(start))
			}
		})
		slices.Sort(took)
		r := endpointRun{p50: took[n/2], p99: took[n*99/100], cmds: map[string]float64{}}
		scale := d.Seconds() / bgFor.Seconds()
		for k, v := range cmds {
			if per := (v - bgCmds[k]*scale) / float64(n); per >= 0.05 {
				r.cmds[k] = per
			}
		}
		r.reads = max(0, (reads-bgReads*scale)/float64(n))
		runs[i] = r
	}
	logDashboard(b, runs)
}

// logDashboard logs the table of runs and reports the p99s as metrics.
func logDashboard(b *testing.B, runs []endpointRun) {
	floor := runs[0]
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-40s %8s %8s %8s %8s %9s %7s  %s\n", "endpoint", "p50 ms", "p99 ms", "p50 ÷fl", "p99 ÷fl", "cmds/req", "reads", "commands per request")
	for i, r := range runs {
		total, names := 0.0, make([]string, 0, len(r.cmds))
		for k, v := range r.cmds {
			total += v
			names = append(names, k)
		}
		sort.Slice(names, func(x, y int) bool { return r.cmds[names[x]] > r.cmds[names[y]] })
		var by []string
		for _, k := range names {
			by = append(by, fmt.Sprintf("%s %.1f", k, r.cmds[k]))
		}
		fmt.Fprintf(&sb, "%-40s %8.2f %8.2f %8.1f %8.1f %9.1f %7.1f  %s\n", dashboardEndpoints[i].name, ms(r.p50), ms(r.p99),
			ms(r.p50)/ms(floor.p50), ms(r.p99)/ms(floor.p99), total, r.reads, strings.Join(by, ", "))
		b.ReportMetric(ms(r.p99), fmt.Sprintf("p99-ms-%d", i))
	}
	b.Log("\n" + sb.String())
}

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

// redisDelta runs f and returns the Redis commands by name (INFO
// commandstats; INFO itself left out) and the read events (INFO stats
// total_reads_processed, less the closing INFO's own) it took, and how long.
func redisDelta(ctx context.Context, b *testing.B, rdb *redis.Client, f func()) (map[string]float64, float64, time.Duration) {
	c0, r0 := redisCounts(ctx, b, rdb)
	start := time.Now()
	f()
	d := time.Since(start)
	c1, r1 := redisCounts(ctx, b, rdb)
	out := map[string]float64{}
	for k, v := range c1 {
		if dv := v - c0[k]; dv > 0 {
			out[k] = float64(dv)
		}
	}
	return out, float64(r1 - r0 - 1), d
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
