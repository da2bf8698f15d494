package scheduler_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
)

// The tests below read GPUs, nodes, places in line and GPU series through
// the API from a real redis-server; node heartbeats and reservations are
// written through the store the way a worker and the placer would.

// submit creates a job through the API and returns its id.
func submit(t *testing.T, b bundle) string {
	t.Helper()
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	return jobOf(t, body).ID
}

// getJSON GETs path and decodes a 200 answer into out.
func getJSON(t *testing.T, b bundle, path string, out any) {
	t.Helper()
	code, body := do(t, "GET", b.url+path, "", nil)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

// TestGPUsAndNodes: every GPU of every live node, sorted by node then index,
// each with the job holding it; per node, its free and unhealthy GPU counts
// and the jobs holding reservations, sorted.
func TestGPUsAndNodes(t *testing.T) {
	b := setup(t, scheduler.Config{})
	for _, path := range []string{"/api/v1/gpus", "/api/v1/nodes"} {
		code, body := do(t, "GET", b.url+path, "", nil)
		if code != 200 || (string(body) != "{\"gpus\":[]}\n" && string(body) != "{\"nodes\":[]}\n") {
			t.Fatalf("GET %s with no nodes: %d %s, want an empty list", path, code, body)
		}
	}

	// n2 beats first, and n1 lists its GPUs out of order: the answer sorts.
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n2", Incarnation: "i2", Backend: "local", Slots: 1,
		Simulated: true, GPUs: []jobtype.GPU{{Index: 0, UUID: "GPU-sim-0", Name: "NVIDIA H100 80GB HBM3", Healthy: true, Simulated: true}},
	}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 2,
		Host: "host1", Driver: "550.54.15", CUDA: "12.4", CheckpointRoot: "/ckpt",
		GPUs: []jobtype.GPU{
			{Index: 2, UUID: "GPU-c", Healthy: false, Unhealthy: "XID 79: GPU fell off the bus"},
			{Index: 0, UUID: "GPU-a", Healthy: true, MemoryTotalMB: 81559, MemoryUsedMB: 4000, UtilizationPct: 97},
			{Index: 1, UUID: "GPU-b", Healthy: true},
		},
	}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	gpuJob, cpuJob := submit(t, b), submit(t, b)
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: gpuJob, Attempt: 1, Node: "n1", Backend: "local", Capacity: 2, GPUs: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: cpuJob, Attempt: 1, Node: "n1", Backend: "local", Capacity: 2}); err != nil {
		t.Fatal(err)
	}

	var g struct {
		GPUs []jobtype.GPU `json:"gpus"`
	}
	getJSON(t, b, "/api/v1/gpus", &g)
	type row struct {
		node, uuid, job string
		idx             int
		healthy, sim    bool
	}
	want := []row{
		{"n1", "GPU-a", gpuJob, 0, true, false},
		{"n1", "GPU-b", gpuJob, 1, true, false},
		{"n1", "GPU-c", "", 2, false, false},
		{"n2", "GPU-sim-0", "", 0, true, true},
	}
	if len(g.GPUs) != len(want) {
		t.Fatalf("gpus = %+v, want %d rows", g.GPUs, len(want))
	}
	for i, w := range want {
		x := g.GPUs[i]
		if got := (row{x.Node, x.UUID, x.JobID, x.Index, x.Healthy, x.Simulated}); got != w {
			t.Errorf("gpus[%d] = %+v, want %+v", i, got, w)
		}
	}
	if g.GPUs[0].MemoryUsedMB != 4000 || g.GPUs[0].UtilizationPct != 97 || g.GPUs[2].Unhealthy != "XID 79: GPU fell off the bus" {
		t.Errorf("readings lost: %+v / %+v", g.GPUs[0], g.GPUs[2])
	}

	var n struct {
		Nodes []wire.NodeInfo `json:"nodes"`
	}
	getJSON(t, b, "/api/v1/nodes", &n)
	if len(n.Nodes) != 2 || n.Nodes[0].Name != "n1" || n.Nodes[1].Name != "n2" {
		t.Fatalf("nodes = %+v, want n1 then n2", n.Nodes)
	}
	n1, n2 := n.Nodes[0], n.Nodes[1]
	wantJobs := []string{gpuJob, cpuJob}
	if cpuJob < gpuJob {
		wantJobs = []string{cpuJob, gpuJob}
	}
	if n1.GPUs != 3 || n1.GPUsFree != 0 || n1.GPUsUnhealthy != 1 || n1.Slots != 2 || n1.CPUReserved != 1 ||
		!reflect.DeepEqual(n1.Jobs, wantJobs) || n1.Host != "host1" || n1.Driver != "550.54.15" || n1.CUDA != "12.4" ||
		n1.CheckpointRoot != "/ckpt" || n1.Incarnation != "i1" || n1.Backend != "local" || n1.Simulated || n1.SeenAt.IsZero() {
		t.Errorf("n1 = %+v", n1)
	}
	if n2.GPUs != 1 || n2.GPUsFree != 1 || n2.GPUsUnhealthy != 0 || !n2.Simulated || n2.Jobs == nil || len(n2.Jobs) != 0 {
		t.Errorf("n2 = %+v (jobs must be [], not null)", n2)
	}

	// The GPU job ends: its GPUs are free again.
	if err := b.store.Finish(b.ctx, gpuJob, 1, jobstore.Ending{State: jobtype.StateFailed, Reason: jobtype.ReasonPermanent, Error: "x"}); err != nil {
		t.Fatal(err)
	}
	getJSON(t, b, "/api/v1/gpus", &g)
	if g.GPUs[0].JobID != "" || g.GPUs[1].JobID != "" {
		t.Errorf("after the job ended: %+v", g.GPUs[:2])
	}
	getJSON(t, b, "/api/v1/nodes", &n)
	if n.Nodes[0].GPUsFree != 2 || !reflect.DeepEqual(n.Nodes[0].Jobs, []string{cpuJob}) {
		t.Errorf("n1 after the job ended = %+v", n.Nodes[0])
	}
}

// TestGetShowsWait: a queued job's place in line from the last placement
// round is in GET /api/v1/jobs/{id}; an unreadable one is left out; a job
// that left the queue shows none, even while the round's list still names it.
func TestGetShowsWait(t *testing.T) {
	b := setup(t, scheduler.Config{})
	id, other := submit(t, b), submit(t, b)
	if j := jobOf(t, mustGet(t, b, id)); j.Wait != nil {
		t.Fatalf("wait before any round: %+v", j.Wait)
	}
	at := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	start := at.Add(12 * time.Minute)
	if err := b.store.SetWaits(b.ctx, map[string]jobtype.WaitInfo{
		id:    {Position: 3, EstimatedStart: &start, Code: "no_free_gpus", Reason: "needs 2 GPUs; 0 free on 1 node", At: at},
		other: {Position: 4, Code: "no_free_gpus", Reason: "behind " + id, At: at},
	}); err != nil {
		t.Fatal(err)
	}
	j := jobOf(t, mustGet(t, b, id))
	if j.Wait == nil || j.Wait.Position != 3 || j.Wait.Code != "no_free_gpus" || j.Wait.EstimatedStart == nil ||
		!j.Wait.EstimatedStart.Equal(start) || !j.Wait.At.Equal(at) || j.Wait.Reason != "needs 2 GPUs; 0 free on 1 node" {
		t.Fatalf("wait = %+v", j.Wait)
	}
	// A wait that cannot be read leaves the job without one; the request
	// does not fail.
	if err := b.rdb.HSet(b.ctx, "lathe:waits", id, "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	if j := jobOf(t, mustGet(t, b, id)); j.Wait != nil || j.ID != id {
		t.Fatalf("unreadable wait: %+v", j.Wait)
	}
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 1}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: other, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	if j := jobOf(t, mustGet(t, b, other)); j.State != jobtype.StateDispatched || j.Wait != nil {
		t.Fatalf("dispatched job: state %s wait %+v, want no wait", j.State, j.Wait)
	}
}

func mustGet(t *testing.T, b bundle, id string) []byte {
	t.Helper()
	code, body := do(t, "GET", b.url+"/api/v1/jobs/"+id, "", nil)
	if code != 200 {
		t.Fatalf("get %s: %d %s", id, code, body)
	}
	return body
}

// TestGPUSeriesEndpoint: a job's GPU series as the store holds it, decoded
// by the CLI's copy of the type (jobtype.GPUSeries) without loss; 404 for
// an unknown job.
func TestGPUSeriesEndpoint(t *testing.T) {
	b := setup(t, scheduler.Config{})
	if code, body := do(t, "GET", b.url+"/api/v1/jobs/j-00000000000000zz/gpu", "", nil); code != 404 {
		t.Fatalf("unknown job: %d %s", code, body)
	}
	id := submit(t, b)
	var s jobtype.GPUSeries
	getJSON(t, b, "/api/v1/jobs/"+id+"/gpu", &s)
	if s.Points == nil || len(s.Points) != 0 {
		t.Fatalf("never on GPUs: %+v, want no points ([])", s)
	}
	for i := range 3 {
		p := jobstore.GPUSample{T: int64(1000 * i), GPUs: []jobstore.GPUReading{
			{Index: 0, Util: 90 + float64(i), MemMB: 4000, PowerW: 300.5, TempC: 61},
			{Index: 1, Util: 80, MemMB: 3900, PowerW: 290, TempC: 59.5}}}
		if err := b.store.AppendGPUSample(b.ctx, id, p, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	getJSON(t, b, "/api/v1/jobs/"+id+"/gpu", &s)
	stored, err := b.store.GPUSeriesOf(b.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// jobtype.GPUSeries must mirror jobstore.GPUSeries field for field.
	sb, _ := json.Marshal(stored)
	gb, _ := json.Marshal(s)
	if string(sb) != string(gb) || s.Step != 5*time.Second || len(s.Points) != 3 || s.Points[2].GPUs[0].Util != 92 {
		t.Fatalf("series through the API:\n%s\nstored:\n%s", gb, sb)
	}
}
