package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// gpuSpec writes a spec for the real reference trainer asking for gpus
// GPUs at priority prio.
func gpuSpec(t *testing.T, name string, gpus int, prio string, steps int) string {
	root := repoRoot(t)
	p := filepath.Join(t.TempDir(), name+".yaml")
	spec := fmt.Sprintf(`name: %s
base_model: tiny-char
dataset: file://%s/configs/examples/data/tiny-train.jsonl
eval_dataset: file://%s/configs/examples/data/tiny-eval.jsonl
lora: {rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}
training: {max_steps: %d, batch_size: 4, learning_rate: 0.01, checkpoint_every: 10, eval_every: 100000}
resources: {gpus: %d}
priority: %s
`, name, root, root, steps, gpus, prio)
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func submitID(t *testing.T, lathe, base, spec string) string {
	t.Helper()
	out, errOut, code := cli(t, lathe, base, "submit", spec, "-o", "json")
	if code != 0 {
		t.Fatalf("submit %s: exit %d\n%s\n%s", spec, code, out, errOut)
	}
	return decodeJob(t, out).ID
}

// TestUpSimulatedGPUs: `lathed up --gpus simulated:dgxh100` (go-nvml's mock
// server, a fake) lists 8 simulated H100s; three 4-GPU jobs of the real
// reference trainer: two run at once on disjoint GPUs, the third waits
// with a reason until one ends; then an urgent 8-GPU job preempts two batch
// 4-GPU jobs, which resume from their checkpoints and succeed.
func TestUpSimulatedGPUs(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", t.TempDir(),
		"--gpus", "simulated:dgxh100", "--node", "sim1")
	waitHTTP(t, base, d)

	out, errOut, code := cli(t, lathe, base, "gpus", "-o", "json")
	var gpus []jobtype.GPU
	if code != 0 || json.Unmarshal([]byte(out), &gpus) != nil {
		t.Fatalf("lathe gpus: exit %d\n%s\n%s", code, out, errOut)
	}
	if len(gpus) != 8 {
		t.Fatalf("lathe gpus lists %d GPUs, want 8:\n%s", len(gpus), out)
	}
	for _, g := range gpus {
		if g.Name != "NVIDIA H100 80GB HBM3" || g.MemoryTotalMB != 81920 || !g.Simulated || !g.Healthy || g.Node != "sim1" || g.UUID == "" {
			t.Fatalf("GPU %+v", g)
		}
	}

	// Three 4-GPU jobs on 8 GPUs.
	var ids []string
	for _, n := range []string{"four-a", "four-b", "four-c"} {
		ids = append(ids, submitID(t, lathe, base, gpuSpec(t, n, 4, "normal", 150)))
	}
	bothRan, thirdWaited := false, false
	var reason string
	// Each poll also looks for the first two running together while the third waits.
	observe := func() []jobtype.Job {
		js := []jobtype.Job{getJob(t, base, ids[0]), getJob(t, base, ids[1]), getJob(t, base, ids[2])}
		if js[0].State == jobtype.StateRunning && js[1].State == jobtype.StateRunning && js[0].CUDAVisibleDevices != "" && js[1].CUDAVisibleDevices != "" {
			bothRan = true
			if js[2].State == jobtype.StateQueued && js[2].Wait != nil {
				thirdWaited, reason = true, js[2].Wait.Reason
			}
			seen := map[string]bool{}
			for _, j := range js[:2] {
				for _, u := range strings.Split(j.CUDAVisibleDevices, ",") {
					if seen[u] {
						t.Fatalf("GPU %s given to both running jobs", u)
					}
					seen[u] = true
				}
			}
		}
		return js
	}
	js := waitfor.Value(t, 3*time.Minute, "three 4-GPU jobs all ended", observe, func(js []jobtype.Job) bool {
		return js[0].State.Terminal() && js[1].State.Terminal() && js[2].State.Terminal()
	})
	for _, j := range js {
		if j.State != jobtype.StateSucceeded || len(j.GPUs) != 4 || !j.SimulatedGPUs {
			t.Fatalf("job %s ended %s (%s) on GPUs %v", j.ID, j.State, j.Error, j.GPUs)
		}
	}
	if !bothRan || !thirdWaited {
		t.Fatalf("never saw the first two running together (%v) while the third waited with a reason (%v)", bothRan, thirdWaited)
	}
	t.Logf("third job waited: %s", reason)
	out, _, _ = cli(t, lathe, base, "status", ids[2])
	if !strings.Contains(out, "CUDA_VISIBLE_DEVICES") {
		t.Errorf("lathe status does not show what the trainer got:\n%s", out)
	}

	// Urgent 8-GPU job against two batch 4-GPU jobs.
	x := submitID(t, lathe, base, gpuSpec(t, "batch-x", 4, "batch", 400))
	y := submitID(t, lathe, base, gpuSpec(t, "batch-y", 4, "batch", 400))
	for _, id := range []string{x, y} {
		waitJob(t, base, id, 2*time.Minute, "checkpointed", func(j jobtype.Job) bool {
			return j.State == jobtype.StateRunning && countEvents(t, base, id, "checkpoint") > 0
		})
	}
	u := submitID(t, lathe, base, gpuSpec(t, "urgent", 8, "urgent", 40))
	ju := waitJob(t, base, u, 2*time.Minute, "urgent job ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if ju.State != jobtype.StateSucceeded || len(ju.GPUs) != 8 {
		t.Fatalf("urgent job: %s (%s) on %v", ju.State, ju.Error, ju.GPUs)
	}
	for _, id := range []string{x, y} {
		j := waitJob(t, base, id, 3*time.Minute, "batch job ended", func(j jobtype.Job) bool { return j.State.Terminal() })
		if j.State != jobtype.StateSucceeded || j.Preemptions != 1 || j.Attempt != 2 {
			t.Fatalf("batch job %s: %s (%s), preemptions %d, attempt %d", id, j.State, j.Error, j.Preemptions, j.Attempt)
		}
		resumed := false
		for _, e := range events(t, base, id) {
			if e.Type == jobtype.EventLog && e.Attempt == 2 && strings.Contains(string(e.Data), "resuming from step") &&
				!strings.Contains(string(e.Data), "resuming from step 0 ") {
				resumed = true
			}
		}
		if !resumed {
			t.Fatalf("batch job %s's second attempt did not resume from a checkpoint", id)
		}
	}
}
