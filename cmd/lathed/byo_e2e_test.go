package main

import (
	"crypto/sha256"
	"encoding/hex"
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
)

// TestUpRawTrainer: a trainer that prints none of the contract (a plain
// Python program configured under trainers:) still runs through lathed
// up; it ends succeeded on exit 0 and its artifacts are what it left at
// the top of LATHE_OUTPUT_DIR, with their sizes and sha256. It has no
// progress, no metrics and no checkpoints: what docs/trainer.md says it
// loses.
func TestUpRawTrainer(t *testing.T) {
	py := hfPython(t)
	lathed, lathe := binaries(t)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	script := filepath.Join(t.TempDir(), "raw.py")
	weights := []byte("not really weights, but bytes a trainer wrote\n")
	os.WriteFile(script, []byte(fmt.Sprintf(`import os, sys
print("loading data, training for a while (no contract lines)")
sys.stderr.write("a warning on stderr\n")
with open(os.path.join(os.environ["LATHE_OUTPUT_DIR"], "weights.bin"), "wb") as f:
    f.write(%q.encode())
`, weights)), 0o644)
	cfg := filepath.Join(t.TempDir(), "lathe.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("trainers:\n  raw: [%q, %q]\n", py, script)), 0o644)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data, "--config", cfg)
	waitHTTP(t, base, d)
	spec := filepath.Join(t.TempDir(), "raw.yaml")
	os.WriteFile(spec, []byte(fmt.Sprintf("name: raw\nbase_model: my-own-model\ndataset: file://%s/configs/examples/data/tiny-train.jsonl\ntrainer: raw\nresources: {gpus: 0}\n", repoRoot(t))), 0o644)
	id := submitID(t, lathe, base, spec)
	j := waitJob(t, base, id, 2*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("raw trainer: %s (%s): %s", j.State, j.Reason, j.Error)
	}
	sum := sha256.Sum256(weights)
	if len(j.Artifacts) != 1 || j.Artifacts[0].Path != "weights.bin" || j.Artifacts[0].Bytes != int64(len(weights)) ||
		j.Artifacts[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("artifacts %+v, want weights.bin of %d bytes", j.Artifacts, len(weights))
	}
	if j.Progress.Step != 0 || len(j.Metrics) != 0 || countEvents(t, base, id, "checkpoint") != 0 {
		t.Fatalf("a trainer without events has progress %+v, metrics %v", j.Progress, j.Metrics)
	}
	b, err := os.ReadFile(filepath.Join(pullAdapter(t, lathe, base, id), "weights.bin"))
	if err != nil || string(b) != string(weights) {
		t.Fatalf("pulled weights.bin: %q (%v)", b, err)
	}
}

// TestUpUserScript: a team's own Hugging Face Trainer script
// (configs/examples/trainers/hf_sft.py: transformers + peft as people
// write them, plus lathe_trainer's callback) configured under trainers:
// runs through lathed up on the tiny Llama. Its progress is live in
// `lathe status` and in the overview the dashboard draws; cancel stops it
// with a checkpoint of the step it was at (SIGTERM → save → exit 143), and
// `lathe retry` resumes after that same step and ends succeeded with a
// PEFT adapter.
func TestUpUserScript(t *testing.T) {
	py := hfPython(t)
	model := tinyLlama(t)
	lathed, lathe := binaries(t)
	root := repoRoot(t)
	// The checkout's lathe_trainer, not a copy installed earlier.
	t.Setenv("PYTHONPATH", filepath.Join(root, "scripts", "python"))
	t.Setenv("HF_HUB_OFFLINE", "1")
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	extra := fmt.Sprintf("worker:\n  hf_python: %q\n  kill_grace: 60s\ntrainers:\n  hf-sft:\n    command: [\"{hf_python}\", %q]\n    pass_env: [PYTHONPATH, HF_HUB_OFFLINE]\n",
		py, filepath.Join(root, "configs/examples/trainers/hf_sft.py"))
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data,
		"--config", hfConfig(t, data, model, extra))
	waitHTTP(t, base, d)

	const steps = 400
	id := submitID(t, lathe, base, hfSpec(t, "user-sft", model, 0, steps, 0, "trainer: hf-sft\n"))
	waitJob(t, base, id, 3*time.Minute, "progress past a checkpoint", func(j jobtype.Job) bool {
		return j.State == jobtype.StateRunning && j.Progress.Step > 5 && countEvents(t, base, id, "checkpoint") > 0
	})
	// Live progress, as `lathe status` prints it and as the dashboard's overview has it.
	out, _, code := cli(t, lathe, base, "status", id)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("/%d", steps)) {
		t.Fatalf("lathe status shows no progress of %d steps (exit %d):\n%s", steps, code, out)
	}
	var ov struct {
		Running []struct {
			ID         string `json:"id"`
			Step       int    `json:"step"`
			TotalSteps int    `json:"total_steps"`
		} `json:"running"`
	}
	getJSON(t, base, "/api/v1/overview", &ov)
	shown := false
	for _, r := range ov.Running {
		shown = shown || (r.ID == id && r.Step > 0 && r.TotalSteps == steps)
	}
	if !shown {
		t.Fatalf("the overview (the dashboard's queue panel) has no progress for %s: %+v", id, ov.Running)
	}

	if out, e, code := cli(t, lathe, base, "cancel", id); code != 0 {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, e)
	}
	j := waitJob(t, base, id, 2*time.Minute, "cancelled", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateCancelled {
		t.Fatalf("after cancel: %s (%s): %s", j.State, j.Reason, j.Error)
	}
	stopped, lastProgress := 0, 0
	for _, e := range events(t, base, id) {
		var d struct{ Step int }
		json.Unmarshal(e.Data, &d)
		switch e.Type {
		case "checkpoint":
			stopped = max(stopped, d.Step)
		case "progress":
			lastProgress = max(lastProgress, d.Step)
		}
	}
	if stopped == 0 || stopped < lastProgress || stopped >= steps {
		t.Fatalf("cancel: last checkpoint at step %d, last progress at %d: SIGTERM did not save the current step", stopped, lastProgress)
	}

	if out, e, code := cli(t, lathe, base, "retry", id); code != 0 {
		t.Fatalf("retry: exit %d\n%s\n%s", code, out, e)
	}
	j = waitJob(t, base, id, 4*time.Minute, "terminal after retry", func(j jobtype.Job) bool {
		return j.Attempt > 1 && j.State.Terminal()
	})
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("after retry: %s (%s): %s", j.State, j.Reason, j.Error)
	}
	if first := firstStep(progressSteps(t, base, id, j.Attempt)); first != stopped+1 {
		t.Fatalf("the retry's first step is %d; cancel checkpointed step %d", first, stopped)
	}
	names := map[string]bool{}
	for _, a := range j.Artifacts {
		names[a.Path] = true
	}
	if !names["adapter_model.safetensors"] || !names["adapter_config.json"] {
		t.Fatalf("artifacts %+v: no PEFT adapter", j.Artifacts)
	}
	if _, ok := j.Metrics["train_loss"]; !ok {
		t.Fatalf("metrics %v: no train_loss from the callback's done line", j.Metrics)
	}
	t.Logf("cancelled at step %d, retry resumed at %d, succeeded with %d artifacts", stopped, stopped+1, len(j.Artifacts))
}
