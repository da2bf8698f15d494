package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// The Hugging Face path end to end: a tiny Llama built locally (random
// weights from a config, a SentencePiece tokenizer trained on the shipped
// data; nothing from a model hub), trained with transformers + peft by the
// real reference trainer under the real lathed, in the pinned virtualenv
// that scripts/setup.sh --hf builds. No fake anywhere but the simulated
// GPUs of TestUpTwoRanks (go-nvml's mock dgxh100 server).

// hfPython is the Hugging Face virtualenv's interpreter
// ($LATHE_HF_VENV/bin/python, default /opt/lathe/hf-venv). It fails the
// test, never skips, when the virtualenv is missing.
func hfPython(t testing.TB) string {
	t.Helper()
	venv := os.Getenv("LATHE_HF_VENV")
	if venv == "" {
		venv = "/opt/lathe/hf-venv"
	}
	py := filepath.Join(venv, "bin", "python")
	if out, err := exec.Command(py, "-c", "import torch, transformers, peft").CombinedOutput(); err != nil {
		t.Fatalf("the Hugging Face virtualenv %s is required (scripts/setup.sh --hf builds it): %v\n%s", venv, err, out)
	}
	return py
}

var (
	llamaOnce sync.Once
	llamaDir  string
	llamaErr  error
)

// readableByOthers makes dir a model store others may read (o+rX), as a
// root lathed's trainers, each a user of its own, need it: MkdirTemp's
// folder is 0700 and safetensors writes its files 0600.
func readableByOthers(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		add := fs.FileMode(0o004)
		if d.IsDir() {
			add = 0o005
		}
		return os.Chmod(p, info.Mode().Perm()|add)
	})
}

// tinyLlama builds the tiny Llama model folder once per test binary
// (lathe_trainer.tiny_llama: hidden 64, 2 layers, 4 heads, 2 KV heads).
func tinyLlama(t testing.TB) string {
	t.Helper()
	py := hfPython(t)
	root := repoRoot(t)
	llamaOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lathe-tiny-llama-")
		if err != nil {
			llamaErr = err
			return
		}

		llamaDir = filepath.Join(dir, "tiny-llama")
		cmd := exec.Command(py, "-m", "lathe_trainer.tiny_llama", llamaDir, "--corpus",
			filepath.Join(root, "configs/examples/data/tiny-train.jsonl"))
		cmd.Dir = filepath.Join(root, "scripts", "python")
		cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			llamaErr = fmt.Errorf("build the tiny Llama: %v\n%s", err, out)
			return
		}
		llamaErr = readableByOthers(dir)
	})
	if llamaErr != nil {
		t.Fatal(llamaErr)
	}
	return llamaDir
}

// hfConfig writes a daemon config whose allowed roots hold the data dir
// (the default output), the repository (the shipped data) and the tiny
// Llama's folder; extra is appended.
func hfConfig(t *testing.T, data, model, extra string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lathe.yaml")
	body := fmt.Sprintf("jobs:\n  allowed_roots: [%q, %q, %q]\n%s", data, repoRoot(t), filepath.Dir(model), extra)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// hfSpec writes a job spec for the tiny Llama.
func hfSpec(t *testing.T, name, model string, gpus, steps int, dropout float64, extra string) string {
	t.Helper()
	root := repoRoot(t)
	p := filepath.Join(t.TempDir(), name+".yaml")
	body := fmt.Sprintf(`name: %s
base_model: file://%s
dataset: file://%s/configs/examples/data/tiny-train.jsonl
eval_dataset: file://%s/configs/examples/data/tiny-eval.jsonl
lora: {rank: 8, alpha: 16, dropout: %g, target_modules: [q_proj, k_proj, v_proj, o_proj]}
training: {max_steps: %d, batch_size: 4, learning_rate: 0.02, seed: 7, checkpoint_every: 5, eval_every: 100000}
resources: {gpus: %d}
%s`, name, model, root, root, dropout, steps, gpus, extra)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readF32Safetensors reads every tensor of an F32 safetensors file.
func readF32Safetensors(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	var h map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatalf("%s: header: %v", path, err)
	}
	out := map[string][]float32{}
	for k, raw := range h {
		if k == "__metadata__" {
			continue
		}
		var info struct {
			Dtype   string   `json:"dtype"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &info); err != nil || info.Dtype != "F32" {
			t.Fatalf("%s: tensor %s: %s (%v)", path, k, raw, err)
		}
		data := b[8+int64(n)+info.Offsets[0] : 8+int64(n)+info.Offsets[1]]
		v := make([]float32, len(data)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		out[k] = v
	}
	return out
}

// maxAbsDiff is the largest |a-b| over tensors of the same names and
// shapes; it fails the test when the names differ.
func maxAbsDiff(t *testing.T, a, b map[string][]float32) float64 {
	t.Helper()
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("adapters hold %d and %d tensors", len(a), len(b))
	}
	worst := 0.0
	for k, va := range a {
		vb, ok := b[k]
		if !ok || len(vb) != len(va) {
			t.Fatalf("tensor %s: missing or of another size in the second adapter", k)
		}
		for i := range va {
			worst = math.Max(worst, math.Abs(float64(va[i])-float64(vb[i])))
		}
	}
	return worst
}

// pullAdapter pulls job id's artifacts into a fresh folder.
func pullAdapter(t *testing.T, lathe, base, id string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pulled-"+id)
	if out, e, code := cli(t, lathe, base, "pull", id, "--to", dir); code != 0 {
		t.Fatalf("pull %s: exit %d\n%s\n%s", id, code, out, e)
	}
	return dir
}

// progressSteps lists attempt's progress events as step → loss.
func progressSteps(t *testing.T, base, id string, attempt int) map[int]float64 {
	t.Helper()
	out := map[int]float64{}
	for _, e := range events(t, base, id) {
		if e.Type != "progress" || e.Attempt != attempt {
			continue
		}
		var d struct {
			Step int     `json:"step"`
			Loss float64 `json:"loss"`
		}
		json.Unmarshal(e.Data, &d)
		out[d.Step] = d.Loss
	}
	return out
}

func firstStep(m map[int]float64) int {
	first := 0
	for s := range m {
		if first == 0 || s < first {
			first = s
		}
	}
	return first
}

// TestUpHFTinyLlama: a tiny Llama submitted through lathed up ends
// succeeded; its adapter is a standard PEFT folder that
// PeftModel.from_pretrained loads (eval_adapter.py) and that reproduces
// the reported eval loss within 1e-4; a model id absent from the local
// cache fails permanently, naming the id and how to provide it offline.
func TestUpHFTinyLlama(t *testing.T) {
	py := hfPython(t)
	model := tinyLlama(t)
	lathed, lathe := binaries(t)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data,
		"--config", hfConfig(t, data, model, ""))
	waitHTTP(t, base, d)

	id := submitID(t, lathe, base, hfSpec(t, "tiny-llama", model, 0, 20, 0.05, "output: {formats: [safetensors, gguf, gguf-merged]}\n"))
	j := waitJob(t, base, id, 3*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("job ended %s (%s): %s", j.State, j.Reason, j.Error)
	}
	reported, ok := j.Metrics["eval_loss"]
	if !ok {
		t.Fatalf("no eval_loss in the job's metrics %v", j.Metrics)
	}
	dir := pullAdapter(t, lathe, base, id)
	var cfg struct {
		PeftType  string   `json:"peft_type"`
		R         int      `json:"r"`
		Alpha     float64  `json:"lora_alpha"`
		Targets   []string `json:"target_modules"`
		BaseModel string   `json:"base_model_name_or_path"`
		TaskType  string   `json:"task_type"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	sort.Strings(cfg.Targets)
	if cfg.PeftType != "LORA" || cfg.R != 8 || cfg.Alpha != 16 || cfg.TaskType != "CAUSAL_LM" ||
		strings.Join(cfg.Targets, ",") != "k_proj,o_proj,q_proj,v_proj" || cfg.BaseModel != "file://"+model {
		t.Fatalf("adapter_config.json: %s", b)
	}
	cmd := exec.Command(py, filepath.Join(repoRoot(t), "scripts", "eval_adapter.py"), "--adapter", dir,
		"--eval-dataset", filepath.Join(repoRoot(t), "configs/examples/data/tiny-eval.jsonl"), "-o", "json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("eval_adapter.py: %v\n%s", err, out)
	}
	var ev struct {
		Base    float64 `json:"base_eval_loss"`
		Adapter float64 `json:"adapter_eval_loss"`
	}
	if err := json.Unmarshal(lastLine(out), &ev); err != nil {
		t.Fatalf("eval_adapter.py output: %v\n%s", err, out)
	}
	if math.Abs(ev.Adapter-reported) > 1e-4 || ev.Adapter >= ev.Base {
		t.Fatalf("PeftModel.from_pretrained gives eval loss %.6f (base %.6f), the trainer reported %.6f", ev.Adapter, ev.Base, reported)
	}
	t.Logf("eval loss: base %.6f, adapter %.6f, reported %.6f (|diff| %.2g)", ev.Base, ev.Adapter, reported, math.Abs(ev.Adapter-reported))

	// GGUF: lathe pull --format gguf brings the adapter and the merged
	// model with an Ollama Modelfile; real llama.cpp (llama-cpp-python)
	// loads both, and their next-token logits match transformers + peft
	// on the pulled PEFT adapter.
	gg := filepath.Join(t.TempDir(), "gguf")
	if out, e, code := cli(t, lathe, base, "pull", id, "--to", gg, "--format", "gguf"); code != 0 {
		t.Fatalf("pull --format gguf: exit %d\n%s\n%s", code, out, e)
	}
	mf, err := os.ReadFile(filepath.Join(gg, "Modelfile"))
	if err != nil || !strings.Contains(string(mf), "\nFROM ./base_model.gguf\n") || !strings.Contains(string(mf), "\nADAPTER ./adapter_model.gguf") {
		t.Fatalf("Modelfile (%v):\n%s", err, mf)
	}
	for _, name := range []string{"adapter_model.safetensors", "adapter_config.json"} {
		if _, err := os.Stat(filepath.Join(gg, name)); err == nil {
			t.Fatalf("pull --format gguf also wrote %s", name)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(gg, name), b, 0o644) // the PEFT side of the comparison
	}
	check := exec.Command(py, filepath.Join(repoRoot(t), "scripts", "python", "tests", "gguf_logits.py"), model, gg,
		"The support bot answers the question about the order")
	check.Env = append(os.Environ(), "HF_HUB_OFFLINE=1")
	gout, err := check.Output()
	if err != nil {
		t.Fatalf("gguf_logits.py: %v\n%s", err, gout)
	}
	var gl struct {
		Tokens        int     `json:"tokens"`
		AdapterEffect float64 `json:"adapter_effect"`
		AdapterDiff   float64 `json:"adapter_diff"`
		MergedDiff    float64 `json:"merged_diff"`
	}
	if err := json.Unmarshal(lastLine(gout), &gl); err != nil {
		t.Fatalf("gguf_logits.py output: %v\n%s", err, gout)
	}
	// float32 weights through two libraries' kernels: measured ~1e-5 (docs/gguf.md).
	if gl.Tokens < 5 || gl.AdapterDiff > 1e-3 || gl.MergedDiff > 1e-3 || gl.AdapterEffect < 1e-2 {
		t.Fatalf("llama.cpp vs transformers+peft logits: %+v (tolerance 1e-3; the adapter must move them by > 1e-2)", gl)
	}
	t.Logf("llama.cpp vs transformers+peft over %d tokens: base+adapter %.2g, merged %.2g (the adapter moves logits by %.3g)",
		gl.Tokens, gl.AdapterDiff, gl.MergedDiff, gl.AdapterEffect)

	// A model id that is not in the cache: permanent, with the id and the way out.
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	os.WriteFile(missing, []byte(fmt.Sprintf("name: missing\nbase_model: lathe-test/not-cached\ndataset: file://%s/configs/examples/data/tiny-train.jsonl\nresources: {gpus: 0}\n", repoRoot(t))), 0o644)
	mid := submitID(t, lathe, base, missing)
	mj := waitJob(t, base, mid, 2*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if mj.State != jobtype.StateFailed || mj.Reason != jobtype.ReasonPermanent || mj.Attempt != 1 {
		t.Fatalf("uncached model: %s (%s) after %d attempts: %s", mj.State, mj.Reason, mj.Attempt, mj.Error)
	}
	logs, _, _ := cli(t, lathe, base, "logs", mid)
	if !strings.Contains(logs+mj.Error, "lathe-test/not-cached") || !strings.Contains(logs+mj.Error, "offline") {
		t.Fatalf("the failure does not name the id and how to provide it offline:\n%s\n%s", mj.Error, logs)
	}

	// GGUF for a base llama.cpp's llama architecture cannot hold (a GPT-2,
	// built here with random weights and the tiny Llama's tokenizer): the
	// trainer refuses it before its first step, permanently, naming the
	// format and why.
	gpt2, err := os.MkdirTemp(filepath.Dir(model), "gpt2-")
	if err != nil {
		t.Fatal(err)
	}

	build := exec.Command(py, "-c", `import sys, shutil, glob
from transformers import GPT2Config, GPT2LMHeadModel
GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=512, n_positions=128)).save_pretrained(sys.argv[2])
for f in glob.glob(sys.argv[1] + "/tokenizer*"):
    shutil.copy(f, sys.argv[2])`, model, gpt2)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a GPT-2: %v\n%s", err, out)
	}
	if err := readableByOthers(gpt2); err != nil {
		t.Fatal(err)
	}
	gid := submitID(t, lathe, base, hfSpec(t, "gpt2-gguf", gpt2, 0, 20, 0, "output: {formats: [safetensors, gguf]}\n"))
	gj := waitJob(t, base, gid, 2*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	glogs, _, _ := cli(t, lathe, base, "logs", gid)
	if gj.State != jobtype.StateFailed || gj.Reason != jobtype.ReasonPermanent || gj.Attempt != 1 ||
		!strings.Contains(glogs+gj.Error, "output.formats gguf") || !strings.Contains(glogs+gj.Error, "GPT2LMHeadModel") {
		t.Fatalf("GGUF of a GPT-2: %s (%s) after %d attempts: %s\n%s", gj.State, gj.Reason, gj.Attempt, gj.Error, glogs)
	}
	if n := countEvents(t, base, gid, "progress"); n != 0 {
		t.Fatalf("GGUF of a GPT-2 was refused after %d progress events, not before the first step", n)
	}
}

// TestHFKillWorkerResumesExactly: kill -9 of the worker while the tiny
// Llama trains; the next attempt resumes from a checkpoint's step, not step
// 0, and with a fixed seed (dropout on: its RNG state is in the
// checkpoint) the final adapter equals an uninterrupted run's within 1e-5.
func TestHFKillWorkerResumesExactly(t *testing.T) {
	model := tinyLlama(t)
	lathed, lathe := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	cfg := hfConfig(t, data, model, "worker:\n  lease_ttl: 3s\n  heartbeat_ttl: 3s\n  kill_grace: 5s\nscheduler:\n  reap_grace: 1s\n  place_interval: 100ms\n")
	sd := startDaemon(t, lathed, "scheduler", "--config", cfg, "--redis-url", rs.URL(), "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
	waitHTTP(t, base, sd)
	worker := func() *daemon {
		return startDaemon(t, lathed, "worker", "--config", cfg, "--backend", "local", "--redis-url", rs.URL(), "--data-dir", data, "--node", "hf-node")
	}
	wd := worker()
	const steps = 30
	spec := hfSpec(t, "resume", model, 0, steps, 0.1, "")

	ref := submitID(t, lathe, base, spec)
	rj := waitJob(t, base, ref, 3*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if rj.State != jobtype.StateSucceeded || rj.Attempt != 1 {
		t.Fatalf("uninterrupted run: %s after %d attempts (%s)", rj.State, rj.Attempt, rj.Error)
	}

	id := submitID(t, lathe, base, spec)
	waitJob(t, base, id, 2*time.Minute, "a checkpoint", func(j jobtype.Job) bool {
		return j.State == jobtype.StateRunning && countEvents(t, base, id, "checkpoint") > 0 && j.Progress.Step < steps-5
	})
	_ = wd.cmd.Process.Kill() // SIGKILL: no cleanup of any kind
	<-wd.done
	wd = worker()
	j := waitJob(t, base, id, 3*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt < 2 {
		t.Fatalf("killed run: %s after %d attempts (%s)", j.State, j.Attempt, j.Error)
	}
	ckpts := map[int]bool{}
	for _, e := range events(t, base, id) {
		var d struct{ Step int }
		json.Unmarshal(e.Data, &d)
		if e.Type == "checkpoint" && e.Attempt < j.Attempt {
			ckpts[d.Step] = true
		}
	}
	// The attempt resumes from the newest checkpoint on disk: one whose
	// event the store has, or a later one the orphaned trainer wrote when
	// the worker's watchdog SIGTERMed it after the kill (its event had no
	// worker left to record it). Never from before the newest recorded one.
	first, newest := firstStep(progressSteps(t, base, id, j.Attempt)), 0
	for s := range ckpts {
		newest = max(newest, s)
	}
	if newest == 0 || first <= 1 || first-1 < newest {
		t.Fatalf("attempt %d started at step %d; the earlier attempts checkpointed steps %v", j.Attempt, first, ckpts)
	}
	diff := maxAbsDiff(t, readF32Safetensors(t, filepath.Join(pullAdapter(t, lathe, base, ref), "adapter_model.safetensors")),
		readF32Safetensors(t, filepath.Join(pullAdapter(t, lathe, base, id), "adapter_model.safetensors")))
	if diff > 1e-5 {
		t.Fatalf("the resumed adapter differs from the uninterrupted one by up to %g (tolerance 1e-5)", diff)
	}
	t.Logf("resumed at step %d (attempt %d); final adapters differ by at most %g", first, j.Attempt, diff)
}

// TestUpTwoRanks: gpus: 2 on simulated GPUs (go-nvml's mock dgxh100, a
// fake) runs the reference trainer as two ranks under torchrun (gloo on
// the CPU), both in the attempt's cgroup; the 2-rank run's loss, step by
// step, matches a 1-process run of the same batch (4 windows, 2 a rank)
// within 1e-3; killing one rank fails the attempt as retryable, and the
// retry resumes from the last checkpoint.
func TestUpTwoRanks(t *testing.T) {
	model := tinyLlama(t)
	lathed, lathe := binaries(t)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data,
		"--gpus", "simulated:dgxh100", "--node", "sim2", "--config", hfConfig(t, data, model, "worker:\n  kill_grace: 5s\n"))
	waitHTTP(t, base, d)

	one := submitID(t, lathe, base, hfSpec(t, "one-rank", model, 1, 20, 0, ""))
	oj := waitJob(t, base, one, 3*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if oj.State != jobtype.StateSucceeded {
		t.Fatalf("1-process run: %s (%s)", oj.State, oj.Error)
	}
	two := submitID(t, lathe, base, hfSpec(t, "two-ranks", model, 2, 20, 0, ""))
	tj := waitJob(t, base, two, 3*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if tj.State != jobtype.StateSucceeded || len(tj.GPUs) != 2 {
		t.Fatalf("2-rank run: %s on GPUs %v (%s)", tj.State, tj.GPUs, tj.Error)
	}
	a, b := progressSteps(t, base, one, 1), progressSteps(t, base, two, 1)
	if len(a) < 3 || len(a) != len(b) {
		t.Fatalf("progress steps: 1 process %v, 2 ranks %v", a, b)
	}
	worst := 0.0
	for s, la := range a {
		lb, ok := b[s]
		if !ok {
			t.Fatalf("step %d: no progress of the 2-rank run", s)
		}
		worst = math.Max(worst, math.Abs(la-lb))
	}
	// The same arithmetic in another order: gloo sums the two ranks'
	// gradients, one process sums the batch's. The first steps agree to
	// 1e-6; AdamW at this learning rate amplifies the rounding of tiny
	// gradient components, to about 4e-4 of a loss near 5.8 by step 20.
	if worst > 1e-3 {
		t.Fatalf("losses differ by up to %g (tolerance 1e-3): 1 process %v, 2 ranks %v", worst, a, b)
	}
	t.Logf("2 ranks vs 1 process: losses differ by at most %g over %d progress lines", worst, len(a))

	// Kill one rank of a longer run: the attempt fails retryable, the
	// retry resumes from the last checkpoint.
	id := submitID(t, lathe, base, hfSpec(t, "kill-rank", model, 2, 60, 0, ""))
	waitJob(t, base, id, 2*time.Minute, "a checkpoint", func(j jobtype.Job) bool {
		return j.State == jobtype.StateRunning && countEvents(t, base, id, "checkpoint") > 0
	})
	ranks := waitfor.Value(t, time.Minute, "two ranks of "+id, func() map[string]int { return rankPIDs(id) },
		func(m map[string]int) bool { return len(m) == 2 })
	cg0, cg1 := procCgroup(ranks["0"]), procCgroup(ranks["1"])
	if cg0 == "" || cg0 != cg1 || cg0 == procCgroup(os.Getpid()) {
		t.Fatalf("ranks' cgroups %q and %q (this test's %q): not one cgroup of the attempt", cg0, cg1, procCgroup(os.Getpid()))
	}
	procs, err := os.ReadFile(filepath.Join(cgroup2Mount(t), cg0, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	for r, pid := range ranks {
		if !strings.Contains("\n"+string(procs), "\n"+strconv.Itoa(pid)+"\n") {
			t.Fatalf("rank %s (pid %d) is not in %s/cgroup.procs:\n%s", r, pid, cg0, procs)
		}
	}
	t.Logf("ranks %v in cgroup %s", ranks, cg0)
	if err := syscall.Kill(ranks["1"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, base, id, 3*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt < 2 {
		t.Fatalf("after killing rank 1: %s after %d attempts (%s)", j.State, j.Attempt, j.Error)
	}
	var ended *jobtype.StateChange
	for _, e := range events(t, base, id) {
		var sc jobtype.StateChange
		json.Unmarshal(e.Data, &sc)
		if e.Type == "state" && sc.From == jobtype.StateRunning && ended == nil {
			ended = &sc
		}
	}
	if ended == nil || ended.To != jobtype.StateQueued {
		t.Fatalf("attempt 1 did not end in a retry: %+v", ended)
	}
	first := firstStep(progressSteps(t, base, id, 2))
	if first <= 1 {
		t.Fatalf("the retry started at step %d, not from a checkpoint (attempt 1 ended %+v)", first, *ended)
	}
	t.Logf("attempt 1 ended %s (%s: %s); attempt 2 resumed at step %d", ended.To, ended.Reason, ended.Error, first)
}

// rankPIDs finds the processes of job id that torchrun started: their
// environment holds LATHE_JOB_ID=<id> and RANK=<r>.
func rankPIDs(id string) map[string]int {
	out := map[string]int{}
	ents, _ := os.ReadDir("/proc")
	needle := "LATHE_JOB_ID=" + id
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		rank, mine := "", false
		for _, kv := range strings.Split(string(b), "\x00") {
			if kv == needle {
				mine = true
			}
			if strings.HasPrefix(kv, "RANK=") {
				rank = strings.TrimPrefix(kv, "RANK=")
			}
		}
		if mine && rank != "" {
			out[rank] = pid
		}
	}
	return out
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted
// (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host).
func cgroup2Mount(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "cgroup2" {
			return f[1]
		}
	}
	t.Fatal("no cgroup2 mount in /proc/self/mounts")
	return ""
}

// procCgroup is pid's cgroup v2 path ("" when unknown).
func procCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}
