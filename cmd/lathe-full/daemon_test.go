package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// testDaemon is the real scheduler's HTTP API in process, for the CLI's
// tests: scheduler.New(…).Handler() under httptest, over a jobstore on a
// real redis-server (internal/redistest). Only the handler runs, no
// placement round, reconciler or worker: a submitted job stays queued
// unless the test drives it through the store as a worker would.
type testDaemon struct {
	url   string
	redis *redistest.Server
	store *jobstore.Store
	ctx   context.Context
}

// newTestDaemon starts the scheduler's API configured from the lathed
// config text config the way lathed's scheduler command does
// (cmd/lathed/root.go: the routing sections through routecfg.ParseConfig;
// Defaults of jobs.default_max_runtime, given here as maxRuntime,
// routing.default_residency and <data_dir>/artifacts).
func newTestDaemon(t *testing.T, config string, maxRuntime time.Duration) *testDaemon {
	t.Helper()
	cfg, err := routecfg.ParseConfig([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	defaults := jobspec.Defaults{MaxRuntime: maxRuntime, Residency: cfg.DefaultResidency, OutputURI: fileuri.FromPath(filepath.Join("/var/lib/lathe", "artifacts"))}
	return startTestDaemon(t, cfg, defaults)
}

// startTestDaemon starts the scheduler's API with routing config cfg and
// job defaults.
func startTestDaemon(t *testing.T, cfg routecfg.Config, defaults jobspec.Defaults) *testDaemon {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	r := apitest.Serve(t, rdb, store, scheduler.Config{Routing: cfg, Defaults: defaults, Logger: slog.New(slog.DiscardHandler)}, api.Config{})
	return &testDaemon{url: r.URL, redis: srv, store: store, ctx: context.Background()}
}

// heartbeat makes n a live node, as its worker's first heartbeat does.
func (d *testDaemon) heartbeat(t *testing.T, n jobstore.Node) {
	t.Helper()
	if err := d.store.Heartbeat(d.ctx, n, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
}

// h100s are n healthy H100 80GB GPUs, as NVML reports them.
func h100s(n int) []jobtype.GPU {
	gpus := make([]jobtype.GPU, n)
	for i := range gpus {
		gpus[i] = jobtype.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 80 * 1024, Healthy: true}
	}
	return gpus
}

// daemonFromConfig starts the scheduler's API wired from the lathed config
// file at path as lathed wires it (routecfg.ReadDaemon: the routing config
// and the job defaults; a relative data_dir, or none, against the file's
// folder, as a lathed started there resolves it), with one live local node
// of 8 H100s (gpu-1); it returns the API's URL.
func daemonFromConfig(t *testing.T, path string) string {
	t.Helper()
	dc, err := routecfg.ReadDaemon(path)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := dc.DataDir
	if dataDir == "" {
		dataDir = filepath.Join(filepath.Dir(path), routecfg.DefaultDataDir)
	}
	d := startTestDaemon(t, dc.Routing, dc.Defaults(dataDir))
	d.heartbeat(t, jobstore.Node{Name: "gpu-1", Incarnation: "i1", Backend: "local", Slots: 2, GPUs: h100s(8)})
	return d.url
}

// submit stores a job of the spec text through the CLI (lathe submit) and
// returns it.
func (d *testDaemon) submit(t *testing.T, spec string) *jobtype.Job {
	t.Helper()
	r := lathe(t, d.url, "submit", writeFile(t, t.TempDir(), "job.yaml", spec), "-o", "json")
	var job jobtype.Job
	if err := json.Unmarshal([]byte(r.stdout), &job); r.code != exitOK || err != nil || job.ID == "" {
		t.Fatalf("submit: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	return &job
}

// start runs job id's first attempt on node (a live node, of slots CPU
// slots) as its worker would: dispatched there, then claimed (running).
func (d *testDaemon) start(t *testing.T, id, node string, slots int) {
	t.Helper()
	if err := d.store.Dispatch(d.ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: node, Backend: "local", Capacity: slots}); err != nil {
		t.Fatal(err)
	}
	if out, err := d.store.Claim(d.ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: node, Incarnation: "i-" + node, Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim %s: %v %v", id, out, err)
	}
}

// TestNotFoundMessages: against the real scheduler, every command that
// names a job or a sweep that does not exist prints what is missing ("lathe:
// job j-nope not found"), not the store's wrapping ("jobstore: get …"), and
// exits 1.
func TestNotFoundMessages(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "j-nope"}, "job j-nope not found"},
		{[]string{"cancel", "j-nope"}, "job j-nope not found"},
		{[]string{"retry", "j-nope"}, "job j-nope not found"},
		{[]string{"logs", "j-nope"}, "job j-nope not found"},
		{[]string{"logs", "-f", "j-nope"}, "job j-nope not found"},
		{[]string{"pull", "j-nope", "--to", t.TempDir()}, "job j-nope not found"},
		{[]string{"status", "j-00000000000000zz"}, "job j-00000000000000zz not found"},
		{[]string{"sweep", "status", "s-nope"}, "sweep s-nope not found"},
		{[]string{"sweep", "cancel", "s-00000000000000zz"}, "sweep s-00000000000000zz not found"},
		{[]string{"sweep", "pull", "s-00000000000000zz", "--best", "--to", t.TempDir()}, "sweep s-00000000000000zz not found"},
	} {
		r := lathe(t, d.url, c.args...)
		if r.code != exitFailed || r.stderr != "lathe: "+c.want+"\n" || r.stdout != "" {
			t.Errorf("lathe %v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, r.code, r.stdout, r.stderr, exitFailed, "lathe: "+c.want+"\n")
		}
	}
}

// TestStatusCostSoFar: against the real scheduler, a running job on a
// priced local pool (issue.yaml's local backend: $1.10 a GPU-hour) shows
// its cost as it accrues, before anything is settled: lathe status prints
// it "so far", and -o json carries it as cost_now_usd.
func TestStatusCostSoFar(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	d.heartbeat(t, jobstore.Node{Name: "n1", Incarnation: "i-n1", Backend: "local", Slots: 2, GPUs: h100s(2)})
	job := d.submit(t, routableSpec+"resources: {gpus: 1}\n")
	d.start(t, job.ID, "n1", 2)
	r := lathe(t, d.url, "status", "-o", "json", job.ID)
	var got jobtype.Job
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.State != jobtype.StateRunning || got.StartedAt == nil {
		t.Fatalf("status -o json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if most := 1.10 * time.Since(*got.StartedAt).Hours(); got.CostNowUSD <= 0 || got.CostNowUSD > most || got.CostUSD != 0 {
		t.Errorf("cost_now_usd %g, cost_usd %g: want above 0 and at most %g (1 GPU × $1.10 an hour since it started), nothing settled",
			got.CostNowUSD, got.CostUSD, most)
	}
	r = lathe(t, d.url, "status", job.ID)
	if !regexp.MustCompile(`Cost: +\$0\.\d{4} so far`).MatchString(r.stdout) {
		t.Errorf("lathe status shows no cost so far:\n%s%s", r.stdout, r.stderr)
	}
}
