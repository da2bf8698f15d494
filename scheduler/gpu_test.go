package scheduler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/backends/local/nvmlinventory"
	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/worker"
)

// GPU placement tests: a real redis-server, the real scheduler (placer,
// dispatch scripts, asynq) and a real worker, whose GPUs are go-nvml's
// dgxh100 mock server (a fake: nvmlinventory's simulated GPUs). The trainer
// is a /bin/sh stand-in for the reference trainer (cmd/lathed's end-to-end
// tests run the real one): it records the CUDA_VISIBLE_DEVICES it got,
// prints progress from the step its checkpoint holds, checkpoints on
// SIGTERM, and ends when the test creates its release file.
const gpuTrainer = `#!/bin/sh
step=0
[ -f "$LATHE_CHECKPOINT_DIR/step" ] && step=$(cat "$LATHE_CHECKPOINT_DIR/step")
echo "start step=$step cvd=$CUDA_VISIBLE_DEVICES sim=$LATHE_SIMULATED_GPUS"
trap 'echo $step > "$LATHE_CHECKPOINT_DIR/step"; echo "{\"event\":\"checkpoint\",\"step\":$step,\"path\":\"step\"}"; exit 143' TERM
while [ ! -f "$RELEASE_DIR/$LATHE_JOB_ID" ]; do
  step=$((step+1))
  echo "{\"event\":\"progress\",\"step\":$step,\"total_steps\":100000,\"loss\":1.0}"
  sleep 0.05
done
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors","bytes":7}'
echo '{"event":"done","metrics":{"train_loss":1.0}}'
`

type gpuBundle struct {
	ctx     context.Context
	store   *jobstore.Store
	s       *scheduler.Scheduler
	url     string // the API
	sim     *nvmlinventory.Simulated
	release string
	dir     string
}

func gpuSetup(t *testing.T) gpuBundle {
	t.Helper()
	return gpuSetupWith(t, gpuTrainer, func(*worker.Config) {})
}

func gpuSetupWith(t *testing.T, trainerBody string, tweak func(*worker.Config)) gpuBundle {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	if err := os.MkdirAll(release, 0o755); err != nil {
		t.Fatal(err)
	}
	trainer := filepath.Join(dir, "trainer.sh")
	if err := os.WriteFile(trainer, []byte(strings.ReplaceAll(trainerBody, "$RELEASE_DIR", release)), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sim, err := nvmlinventory.NewSimulated("dgxh100", "gpu1")
	if err != nil {
		t.Fatal(err)
	}
	src, err := nvmlinventory.New(sim, nvmlinventory.Options{Logger: quiet, Simulated: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	wcfg := worker.Config{Node: "gpu1", Slots: 1, DataDir: filepath.Join(dir, "w"), Logger: quiet,
		GPUs: src, KillGrace: 5 * time.Second, Trainers: map[string][]string{"reference": {trainer}}}
	tweak(&wcfg)
	w, err := worker.New(rdb, store, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	r := apitest.Start(t, rdb, store, scheduler.Config{Logger: quiet, PlaceInterval: 50 * time.Millisecond, Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(filepath.Join(dir, "out"))}}, api.Config{})
	return gpuBundle{ctx: ctx, store: store, s: r.S, url: r.URL, sim: sim, release: release, dir: dir}
}

func (b gpuBundle) submit(t *testing.T, name string, gpus int, prio string) string {
	t.Helper()
	body := fmt.Sprintf(`{"name":%q,"base_model":"tiny-char","dataset":"file:///d.jsonl","priority":%q,"resources":{"gpus":%d}}`, name, prio, gpus)
	code, out := do(t, "POST", b.url+"/api/v1/jobs", body, nil)
	if code != 201 {
		t.Fatalf("submit %s: %d %s", name, code, out)
	}
	return jobOf(t, out).ID
}

func (b gpuBundle) waitFor(t *testing.T, id, what string, cond func(*jobtype.Job) bool) *jobtype.Job {
	t.Helper()
	return waitfor.Value(t, 60*time.Second, "job "+id+" "+what, storedJob(b.ctx, b.store, id), func(j *jobtype.Job) bool {
		if j == nil {
			return false
		}
		if cond(j) {
			return true
		}
		if j.State.Terminal() {
			t.Fatalf("job %s ended %s (%s: %s) before %s", id, j.State, j.Reason, j.Error, what)
		}
		return false
	})
}

// nodes reads the node list; an error reads as no nodes.
func (b gpuBundle) nodes() []jobstore.NodeStatus {
	nodes, _ := b.store.Nodes(b.ctx)
	return nodes
}

func running(j *jobtype.Job) bool   { return j.State == jobtype.StateRunning && j.Progress.Step > 0 }
func succeeded(j *jobtype.Job) bool { return j.State == jobtype.StateSucceeded }

// TestThreeFourGPUJobsOnEight: on one 8-GPU node, two 4-GPU jobs run at once
// on disjoint GPUs (the CUDA_VISIBLE_DEVICES each trainer got is on its
// job), the third waits with a reason and a place in line, and runs when
// one of the first two ends.
func TestThreeFourGPUJobsOnEight(t *testing.T) {
	b := gpuSetup(t)
	a := b.submit(t, "a", 4, "normal")
	c := b.submit(t, "b", 4, "normal")
	d := b.submit(t, "c", 4, "normal")
	ja := b.waitFor(t, a, "running", running)
	jc := b.waitFor(t, c, "running", running)
	if ja.Node != "gpu1" || len(ja.GPUs) != 4 || len(jc.GPUs) != 4 {
		t.Fatalf("placed: a on %s %v, b %v", ja.Node, ja.GPUs, jc.GPUs)
	}
	seen := map[string]bool{}
	for _, j := range []*jobtype.Job{ja, jc} {
		if !j.SimulatedGPUs {
			t.Errorf("job %s not marked as on simulated GPUs", j.ID)
		}
		uu := strings.Split(j.CUDAVisibleDevices, ",")
		if len(uu) != 4 {
			t.Fatalf("job %s CUDA_VISIBLE_DEVICES %q", j.ID, j.CUDAVisibleDevices)
		}
		for i, u := range uu {
			if u != nvmlinventory.SimulatedUUID("gpu1", j.GPUs[i]) || seen[u] {
				t.Fatalf("job %s got %s for GPU %d (or a GPU twice)", j.ID, u, j.GPUs[i])
			}
			seen[u] = true
		}
	}
	// The third waits, with a reason; its place in line is written.
	w := waitfor.Value(t, 30*time.Second, "wait info for the third job",
		func() *jobtype.WaitInfo { w, _ := b.store.WaitOf(b.ctx, d); return w },
		func(w *jobtype.WaitInfo) bool { return w != nil })
	if jd, _ := b.store.Get(b.ctx, d); jd.State != jobtype.StateQueued || w.Position != 1 || !strings.Contains(w.Reason, "4") {
		t.Fatalf("third job: state %s wait %+v", jd.State, w)
	}
	// a ends; the third takes its GPUs.
	if err := os.WriteFile(filepath.Join(b.release, a), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, a, "succeeded", succeeded)
	jd := b.waitFor(t, d, "running", running)
	if fmt.Sprint(jd.GPUs) != fmt.Sprint(ja.GPUs) {
		t.Fatalf("third job got %v, the freed GPUs were %v", jd.GPUs, ja.GPUs)
	}
	for _, id := range []string{c, d} {
		_ = os.WriteFile(filepath.Join(b.release, id), nil, 0o644)
		b.waitFor(t, id, "succeeded", succeeded)
	}
}

// TestUrgentPreemptsBatch: an urgent 8-GPU job submitted while two batch
// 4-GPU jobs run preempts both (SIGTERM → checkpoint → queued); the urgent
// job runs; then both resume from their checkpoints (step > 0 at start)
// and succeed.
func TestUrgentPreemptsBatch(t *testing.T) {
	b := gpuSetup(t)
	x := b.submit(t, "x", 4, "batch")
	y := b.submit(t, "y", 4, "batch")
	b.waitFor(t, x, "running", func(j *jobtype.Job) bool { return running(j) && j.Progress.Step >= 3 })
	b.waitFor(t, y, "running", func(j *jobtype.Job) bool { return running(j) && j.Progress.Step >= 3 })
	u := b.submit(t, "u", 8, "urgent")
	ju := b.waitFor(t, u, "running", running)
	if len(ju.GPUs) != 8 {
		t.Fatalf("urgent job on %v", ju.GPUs)
	}
	for _, id := range []string{x, y} {
		j, _ := b.store.Get(b.ctx, id)
		if j.State != jobtype.StateQueued || j.Preemptions != 1 || j.Attempt != 2 {
			t.Fatalf("batch job %s while the urgent one runs: state %s, preemptions %d, attempt %d", id, j.State, j.Preemptions, j.Attempt)
		}
	}
	_ = os.WriteFile(filepath.Join(b.release, u), nil, 0o644)
	b.waitFor(t, u, "succeeded", succeeded)
	for _, id := range []string{x, y} {
		// The second attempt's trainer says which step it started from.
		startLine := waitfor.Value(t, 60*time.Second, "job "+id+": a second attempt started", func() string {
			evs, err := b.store.Events(b.ctx, id, "", 5000)
			if err != nil {
				t.Fatal(err)
			}
			line := ""
			for _, e := range evs {
				if e.Type == jobtype.EventLog && e.Attempt == 2 && strings.Contains(string(e.Data), "start step=") {
					line = string(e.Data)
				}
			}
			return line
		}, func(line string) bool { return line != "" })
		if strings.Contains(startLine, "start step=0 ") {
			t.Fatalf("job %s's second attempt did not resume from its checkpoint: %s", id, startLine)
		}
		_ = os.WriteFile(filepath.Join(b.release, id), nil, 0o644)
		b.waitFor(t, id, "succeeded", succeeded)
	}
}

// TestDispatchedToDeadNode: a job dispatched to a node whose heartbeat then
// expires, before any worker claimed it, goes back to the queue as the next
// attempt (it would otherwise wait for ever on a queue nobody reads).
func TestDispatchedToDeadNode(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	ctx := context.Background()
	if err := store.Heartbeat(ctx, jobstore.Node{Name: "ghost", Incarnation: "i", Backend: "local", Slots: 1}, jobstore.HeartbeatOptions{TTL: time.Second, First: true}); err != nil {
		t.Fatal(err)
	}
	r := apitest.Start(t, rdb, store, scheduler.Config{Logger: quiet, PlaceInterval: 50 * time.Millisecond, RepairAfter: 200 * time.Millisecond, Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}}, api.Config{})
	code, out := do(t, "POST", r.URL+"/api/v1/jobs", goodSpec, nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, out)
	}
	id := jobOf(t, out).ID
	sawDispatched := false
	waitfor.Value(t, 30*time.Second, "the job queued again for attempt 2", func() *jobtype.Job {
		j, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		sawDispatched = sawDispatched || (j.State == jobtype.StateDispatched && j.Node == "ghost")
		return j
	}, func(j *jobtype.Job) bool { return j.State == jobtype.StateQueued && j.Attempt == 2 })
	if !sawDispatched {
		t.Fatal("the job was never dispatched to the ghost node (the test did not test anything)")
	}
	nodes, _ := store.Nodes(ctx)
	if len(nodes) != 0 {
		t.Fatalf("the ghost node is still listed: %+v", nodes)
	}
}

// TestHungJobRetried: a job whose GPUs sit at 0% (the fake's Stall hook)
// with no progress line for hang_timeout is stopped and retried; when its
// attempts are used up it fails with reason "hung".
func TestHungJobRetried(t *testing.T) {
	const hung = `#!/bin/sh
echo '{"event":"progress","step":1,"total_steps":10,"loss":2.0}'
trap 'exit 143' TERM
while :; do sleep 0.05; done
`
	b := gpuSetupWith(t, hung, func(c *worker.Config) {
		c.MonitorInterval, c.HangTimeout, c.MaxAttempts = 20*time.Millisecond, 300*time.Millisecond, 2
	})
	for i := range 8 {
		if err := b.sim.Stall(i); err != nil {
			t.Fatal(err)
		}
	}
	id := b.submit(t, "hung", 2, "normal")
	j := b.waitFor(t, id, "failed", func(j *jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonHung || j.Attempt != 2 {
		t.Fatalf("hung job ended %s (%s: %s) at attempt %d; want failed, hung, attempt 2", j.State, j.Reason, j.Error, j.Attempt)
	}
	evs, _ := b.store.Events(b.ctx, id, "", 1000)
	retried := false
	for _, e := range evs {
		retried = retried || (e.Type == jobtype.EventState && strings.Contains(string(e.Data), `"reason":"hung"`) && e.Attempt == 2)
	}
	if !retried {
		t.Fatal("the first hung attempt was not retried with reason hung")
	}
	series, err := b.store.GPUSeriesOf(b.ctx, id)
	if err != nil || len(series.Points) == 0 || len(series.Points[0].GPUs) != 2 {
		t.Fatalf("GPU series of the hung job: %+v %v", series, err)
	}
}

// TestUnhealthyGPUsGetNoWork: a GPU that NVML reports lost and one with a
// new uncorrected ECC error (the fake's hooks) are marked unhealthy with
// the reason, and placement gives them to nobody: a 4-GPU job runs on
// healthy ones, an 8-GPU job waits saying it cannot fit.
func TestUnhealthyGPUsGetNoWork(t *testing.T) {
	b := gpuSetupWith(t, gpuTrainer, func(c *worker.Config) { c.HeartbeatTTL = 900 * time.Millisecond })
	if err := b.sim.LoseGPU(7); err != nil {
		t.Fatal(err)
	}
	if err := b.sim.AddECCErrors(3, 1); err != nil {
		t.Fatal(err)
	}
	nodes := waitfor.Value(t, 30*time.Second, "the heartbeat showing GPUs 3 and 7 unhealthy", b.nodes, func(nodes []jobstore.NodeStatus) bool {
		return len(nodes) == 1 && len(nodes[0].GPUs) == 8 && !nodes[0].GPUs[7].Healthy && !nodes[0].GPUs[3].Healthy
	})
	if !strings.Contains(nodes[0].GPUs[7].Unhealthy, "lost") || !strings.Contains(strings.ToLower(nodes[0].GPUs[3].Unhealthy), "ecc") {
		t.Fatalf("unhealthy reasons: %q, %q", nodes[0].GPUs[7].Unhealthy, nodes[0].GPUs[3].Unhealthy)
	}
	big := b.submit(t, "big", 8, "urgent")
	small := b.submit(t, "small", 4, "normal")
	js := b.waitFor(t, small, "running", running)
	for _, g := range js.GPUs {
		if g == 3 || g == 7 {
			t.Fatalf("the 4-GPU job got unhealthy GPU %d (%v)", g, js.GPUs)
		}
	}
	w := waitfor.Value(t, 30*time.Second, "wait info for the 8-GPU job",
		func() *jobtype.WaitInfo { w, _ := b.store.WaitOf(b.ctx, big); return w },
		func(w *jobtype.WaitInfo) bool { return w != nil })
	if w.Code != "cannot fit anywhere" {
		t.Fatalf("8-GPU job with 6 healthy GPUs waits with %+v", w)
	}
	_ = os.WriteFile(filepath.Join(b.release, small), nil, 0o644)
	b.waitFor(t, small, "succeeded", succeeded)
}

// TestForeignMemoryCounts: memory a process that is not Lathe's holds on a
// GPU (the fake's AddForeignProcess) is reported as foreign and counts
// against free memory: a job asking for 40 GB per GPU is not given a GPU
// with 60 GB of its 80 taken.
func TestForeignMemoryCounts(t *testing.T) {
	b := gpuSetupWith(t, gpuTrainer, func(c *worker.Config) { c.HeartbeatTTL = 900 * time.Millisecond })
	for _, g := range []int{0, 1, 2, 3, 4, 5, 6} {
		if err := b.sim.AddForeignProcess(g, 999000+g, 60000); err != nil {
			t.Fatal(err)
		}
	}
	nodes := waitfor.Value(t, 30*time.Second, "the heartbeat showing the foreign process", b.nodes, func(nodes []jobstore.NodeStatus) bool {
		return len(nodes) == 1 && len(nodes[0].GPUs) == 8 && nodes[0].GPUs[0].ForeignUsedMB == 60000
	})
	if nodes[0].GPUs[7].ForeignUsedMB != 0 || nodes[0].GPUs[0].MemoryUsedMB < 60000 {
		t.Fatalf("GPU readings: %+v", nodes[0].GPUs)
	}
	body := `{"name":"mem","base_model":"tiny-char","dataset":"file:///d.jsonl","resources":{"gpus":1,"gpu_memory_gb":40}}`
	code, out := do(t, "POST", b.url+"/api/v1/jobs", body, nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, out)
	}
	id := jobOf(t, out).ID
	j := b.waitFor(t, id, "running", running)
	if len(j.GPUs) != 1 || j.GPUs[0] != 7 {
		t.Fatalf("a 40 GB job got GPUs %v; only GPU 7 has 40 GB free", j.GPUs)
	}
	_ = os.WriteFile(filepath.Join(b.release, id), nil, 0o644)
	b.waitFor(t, id, "succeeded", succeeded)
}
