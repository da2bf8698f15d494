package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

// TestGPUs runs the CLI against the real scheduler (newTestDaemon); the
// others against fakeScheduler (fake_test.go), for what the real one cannot
// serve without a worker or on a stopped clock.

// latheAt is lathe with the CLI's clock stopped at now.
func latheAt(t *testing.T, server string, now time.Time, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	a := newApp(&out, &errOut, func(k string) string {
		if k == "LATHE_SERVER" {
			return server
		}
		return ""
	})
	a.now = func() time.Time { return now }
	root := a.rootCmd()
	root.SetArgs(args)
	code := report(&errOut, server, root.ExecuteContext(context.Background()))
	return result{code, out.String(), errOut.String()}
}

func requireLines(t *testing.T, what, out string, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
}

// TestGPUs: against the real scheduler, `lathe gpus` lists every GPU of
// every live node with its health and the job holding it; -o json is the
// rows; Redis down is exit 3.
func TestGPUs(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	r := lathe(t, d.url, "gpus")
	if r.code != exitOK || !strings.Contains(r.stdout, "No GPUs") {
		t.Fatalf("no GPUs: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = lathe(t, d.url, "gpus", "-o", "json")
	if r.code != exitOK || strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("no GPUs, -o json: exit %d, stdout %q, want []", r.code, r.stdout)
	}

	d.heartbeat(t, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 1, GPUs: []jobtype.GPU{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559, MemoryUsedMB: 4000,
			UtilizationPct: 97, TemperatureC: 61, Healthy: true},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559, Healthy: false,
			Unhealthy: "XID 79: GPU fell off the bus"},
	}})
	d.heartbeat(t, jobstore.Node{Name: "n2", Incarnation: "i2", Backend: "local", Slots: 1, Simulated: true, GPUs: []jobtype.GPU{
		{Index: 0, UUID: "GPU-sim", Name: "NVIDIA H100 80GB HBM3", MemoryTotalMB: 81559, Healthy: true}}})
	sub := lathe(t, d.url, "submit", writeFile(t, t.TempDir(), "job.yaml", "name: holder\nbase_model: tiny-char\ndataset: file:///data/support/train.jsonl\nresources: {gpus: 1}\n"), "-o", "json")
	var job jobtype.Job
	if err := json.Unmarshal([]byte(sub.stdout), &job); sub.code != exitOK || err != nil {
		t.Fatalf("submit: exit %d, %v\n%s%s", sub.code, err, sub.stdout, sub.stderr)
	}
	if err := d.store.Dispatch(d.ctx, jobstore.DispatchParams{JobID: job.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1, GPUs: []int{0}}); err != nil {
		t.Fatal(err)
	}
	r = lathe(t, d.url, "gpus")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("want a header, 3 rows and 1 health line:\n%s", r.stdout)
	}
	for i, want := range [][]string{
		{"NODE", "IDX", "NAME", "MEM (MB)", "UTIL", "TEMP", "HEALTH", "JOB"},
		{"n1", "0", "NVIDIA H100 80GB HBM3", "4000/81559", "97%", "61C", "ok", job.ID},
		{"n1", "1", "0/81559", "UNHEALTHY", "-"},
		{"n2", "0", "NVIDIA H100 80GB HBM3 (simulated)", "ok", "-"},
		{"n1 GPU 1 unhealthy: XID 79: GPU fell off the bus"},
	} {
		requireLines(t, "line "+lines[i], lines[i], want)
	}
	if strings.Contains(lines[1], "simulated") {
		t.Errorf("a real GPU marked simulated: %s", lines[1])
	}

	r = lathe(t, d.url, "gpus", "-o", "json")
	var got []jobtype.GPU
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 3 || got[0].JobID != job.ID ||
		got[1].Unhealthy == "" || !got[2].Simulated {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}

	d.redis.Kill()
	if r := lathe(t, d.url, "gpus"); r.code != exitUnreachable {
		t.Errorf("Redis down: exit %d, want %d; stderr:\n%s", r.code, exitUnreachable, r.stderr)
	}
}

func TestNodes(t *testing.T) {
	f := newFakeScheduler(t)
	now := time.Date(2026, 12, 2, 15, 4, 0, 0, time.UTC)
	r := latheAt(t, f.srv.URL, now, "nodes")
	if r.code != exitOK || !strings.Contains(r.stdout, "No live nodes") {
		t.Fatalf("no nodes: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	f.nodes = []wire.NodeInfo{
		{Name: "n1", Backend: "local", Incarnation: "i1", SeenAt: now.Add(-3 * time.Second), Slots: 2, CPUReserved: 1,
			GPUs: 8, GPUsFree: 5, GPUsUnhealthy: 1, Driver: "550.54.15", CUDA: "12.4", Jobs: []string{"j-1", "j-2"}},
		{Name: "n2", Backend: "local", Incarnation: "i2", SeenAt: now.Add(-1 * time.Second), Slots: 1,
			GPUs: 4, GPUsFree: 4, Simulated: true, Jobs: []string{}},
	}
	r = latheAt(t, f.srv.URL, now, "nodes")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", r.stdout)
	}
	requireLines(t, "header", lines[0], []string{"NODE", "BACKEND", "GPUS", "FREE", "UNHEALTHY", "CPU SLOTS", "DRIVER", "CUDA", "SEEN", "JOBS"})
	requireLines(t, "n1", lines[1], []string{"n1", "local", "8", "5", "1/2", "550.54.15", "12.4", "3s ago", "j-1,j-2"})
	requireLines(t, "n2", lines[2], []string{"n2", "4 (simulated)", "0/1", "1s ago"})

	r = latheAt(t, f.srv.URL, now, "nodes", "-o", "json")
	var got []wire.NodeInfo
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 2 || got[0].GPUsFree != 5 || !got[1].Simulated {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
}

// TestStatusWaitingJob: a queued job's place in line, estimated start and
// reason; and for a placed job its CUDA_VISIBLE_DEVICES, simulated GPUs and
// preemptions.
func TestStatusWaitingJob(t *testing.T) {
	f := newFakeScheduler(t)
	now := time.Date(2026, 12, 2, 14, 52, 0, 0, time.UTC)
	start := now.Add(12 * time.Minute)
	f.addJob(&jobtype.Job{ID: "j-1", Name: "big", State: jobtype.StateQueued, Attempt: 1, Preemptions: 2,
		Wait: &jobtype.WaitInfo{Position: 3, EstimatedStart: &start, Code: "no_free_gpus", Reason: "needs 4 GPUs; 2 free on 1 node", At: now}}, nil, nil)
	f.addJob(&jobtype.Job{ID: "j-2", Name: "blocked", State: jobtype.StateQueued, Attempt: 1,
		Wait: &jobtype.WaitInfo{Position: 1, Code: "no_node_fits", At: now}}, nil, nil)
	f.addJob(&jobtype.Job{ID: "j-3", Name: "placed", State: jobtype.StateRunning, Attempt: 1, Backend: "local", Node: "n2",
		GPUs: []int{0, 1}, CUDAVisibleDevices: "GPU-aaa,GPU-bbb", SimulatedGPUs: true, Preemptions: 1, PreemptRequested: "j-9"}, nil, nil)

	r := latheAt(t, f.srv.URL, now, "status", "j-1")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	requireLines(t, "status j-1", r.stdout, []string{
		"Position:",
		"3 in line",
		"2026-12-02 15:04 (in 12m)",
		"needs 4 GPUs; 2 free on 1 node (no_free_gpus)",
		"Preempted:",
		"2 times",
	})
	if strings.Contains(r.stdout, "CUDA_VISIBLE_DEVICES") {
		t.Errorf("CUDA_VISIBLE_DEVICES shown unset:\n%s", r.stdout)
	}

	r = latheAt(t, f.srv.URL, now, "status", "j-2")
	requireLines(t, "status j-2", r.stdout, []string{"1 in line", "Estimated start:", "unknown", "no_node_fits"})

	r = latheAt(t, f.srv.URL, now, "status", "j-3")
	requireLines(t, "status j-3", r.stdout, []string{
		"n2 (local)",
		"0,1 (simulated GPUs)",
		"CUDA_VISIBLE_DEVICES:",
		"GPU-aaa,GPU-bbb",
		"1 time\n",
		"being preempted for j-9",
	})
	if strings.Contains(r.stdout, "in line") {
		t.Errorf("a running job shows a place in line:\n%s", r.stdout)
	}

	r = latheAt(t, f.srv.URL, now, "status", "-o", "json", "j-1")
	var j jobtype.Job
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.Wait == nil || j.Wait.Position != 3 || !j.Wait.EstimatedStart.Equal(start) {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
}
