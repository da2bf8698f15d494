package scripts

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// These tests run the embedded trainer as real /usr/bin/python3 child
// processes on the CPU. They fail (never skip) when that interpreter or its
// torch is missing: the reference trainer is part of Lathe.

const python = "/usr/bin/python3"

// tiny-char's fixed shapes (TINY_D_MODEL, TINY_D_FF, TINY_LAYERS in train_lora.py).
const (
	tinyDModel = 48
	tinyDFF    = 96
	tinyLayers = 2
)

var allTargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"}

// tinyInOut is the [in, out] size of each tiny-char target module.
var tinyInOut = map[string][2]int{
	"q_proj":    {tinyDModel, tinyDModel},
	"k_proj":    {tinyDModel, tinyDModel},
	"v_proj":    {tinyDModel, tinyDModel},
	"o_proj":    {tinyDModel, tinyDModel},
	"up_proj":   {tinyDModel, tinyDFF},
	"down_proj": {tinyDFF, tinyDModel},
}

// scriptDir writes the embedded scripts into a fresh directory, as the daemon does.
func scriptDir(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("the reference trainer needs %s with PyTorch (Debian: apt-get install python3-torch): %v", python, err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{TrainLoRAFile: TrainLoRA, EvalAdapterFile: EvalAdapter} {
		if len(data) == 0 {
			t.Fatalf("embedded %s is empty", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func dataPath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "configs", "examples", "data", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("shipped dataset missing: %v", err)
	}
	return p
}

// jobSpec is a small, fast tiny-char job; edit it before writeJob.
func jobSpec(t *testing.T) map[string]any {
	return map[string]any{
		"name":         "trainer-test",
		"base_model":   "tiny-char",
		"dataset":      "file://" + dataPath(t, "tiny-train.jsonl"),
		"eval_dataset": dataPath(t, "tiny-eval.jsonl"), // a plain path works too
		"lora": map[string]any{
			"rank": 8, "alpha": 16, "dropout": 0.05, "target_modules": allTargets,
		},
		"training": map[string]any{
			"epochs": 1, "learning_rate": 0.02, "batch_size": 8, "max_steps": 50,
			"seed": 7, "checkpoint_every": 20, "eval_every": 25,
		},
		"resources": map[string]any{"gpus": 1},
		"priority":  "normal",
		"trainer":   "reference",
	}
}

func writeJob(t *testing.T, dir string, spec map[string]any) string {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "job.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

type run struct {
	events []map[string]any // JSON lines, in order
	logs   []string         // every other stdout line
	stderr string
	code   int
}

func (r *run) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit %d\nstdout log lines:\n  %s\nstderr:\n%s", r.code, strings.Join(r.logs, "\n  "), r.stderr)
	return b.String()
}

func (r *run) ofKind(kind string) []map[string]any {
	var out []map[string]any
	for _, e := range r.events {
		if e["event"] == kind {
			out = append(out, e)
		}
	}
	return out
}

func (r *run) hasLog(sub string) bool {
	for _, l := range r.logs {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// trainer is a started train_lora.py process.
type trainer struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  *bufio.Scanner
	stderr *bytes.Buffer
	run    run
}

// startTrainer starts the trainer with the contract's environment, on
// simulated GPUs (so on the CPU); env entries given override those.
func startTrainer(t *testing.T, scripts, jobFile, outDir, ckptDir string, env ...string) *trainer {
	t.Helper()
	return startArgv(t, []string{python, filepath.Join(scripts, TrainLoRAFile)}, jobFile, outDir, ckptDir, env...)
}

// startArgv is startTrainer for any trainer command (argv).
func startArgv(t *testing.T, argv []string, jobFile, outDir, ckptDir string, env ...string) *trainer {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(),
		"LATHE_JOB_ID=job-test",
		"LATHE_ATTEMPT=1",
		"LATHE_JOB_FILE="+jobFile,
		"LATHE_OUTPUT_DIR="+outDir,
		"LATHE_CHECKPOINT_DIR="+ckptDir,
		"CUDA_VISIBLE_DEVICES=",
		"LATHE_SIMULATED_GPUS=1",
		"PYTHONDONTWRITEBYTECODE=1",
	)
	cmd.Env = append(cmd.Env, env...) // os/exec keeps the last value of a repeated key
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	tr := &trainer{t: t, cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = tr.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", python, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	tr.lines = bufio.NewScanner(stdout)
	tr.lines.Buffer(make([]byte, 1<<20), 1<<20)
	return tr
}

// next reads one stdout line; it returns the event (nil for a log line) and
// false at the end of output.
func (tr *trainer) next() (map[string]any, bool) {
	tr.t.Helper()
	if !tr.lines.Scan() {
		return nil, false
	}
	line := tr.lines.Text()
	if strings.HasPrefix(line, "{") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			tr.t.Fatalf("stdout line looks like JSON but does not parse: %q: %v", line, err)
		}
		if _, ok := ev["event"].(string); !ok {
			tr.t.Fatalf("JSON line without an \"event\": %q", line)
		}
		tr.run.events = append(tr.run.events, ev)
		return ev, true
	}
	tr.run.logs = append(tr.run.logs, line)
	return nil, true
}

// wait reads the rest of stdout and waits for the exit.
func (tr *trainer) wait() *run {
	tr.t.Helper()
	for {
		if _, ok := tr.next(); !ok {
			break
		}
	}
	err := tr.cmd.Wait()
	tr.run.stderr = tr.stderr.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
		tr.run.code = 0
	case errors.As(err, &ee):
		tr.run.code = ee.ExitCode() // -1 when killed by a signal
	default:
		tr.t.Fatalf("wait: %v", err)
	}
	if tr.run.code == 3 && strings.Contains(tr.run.stderr+strings.Join(tr.run.logs, "\n"), "PyTorch is not importable") {
		tr.t.Fatalf("%s cannot import torch (Debian: apt-get install python3-torch):\n%s", python, &tr.run)
	}
	return &tr.run
}

func runTrainer(t *testing.T, scripts, jobFile, outDir, ckptDir string, env ...string) *run {
	t.Helper()
	return startTrainer(t, scripts, jobFile, outDir, ckptDir, env...).wait()
}

func num(t *testing.T, ev map[string]any, key string) float64 {
	t.Helper()
	v, ok := ev[key].(float64)
	if !ok {
		t.Fatalf("event %v: %q is not a number", ev, key)
	}
	return v
}

type stTensor struct {
	DType       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// readSafetensorsHeader parses a safetensors file's header and checks its framing.
func readSafetensorsHeader(t *testing.T, path string) (map[string]stTensor, map[string]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 8 {
		t.Fatalf("%s: %d bytes, too short", path, len(data))
	}
	n := binary.LittleEndian.Uint64(data[:8])
	if n%8 != 0 {
		t.Errorf("%s: header length %d is not a multiple of 8", path, n)
	}
	if 8+n > uint64(len(data)) {
		t.Fatalf("%s: header length %d past the end (%d bytes)", path, n, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+n], &raw); err != nil {
		t.Fatalf("%s: header is not JSON: %v", path, err)
	}
	var meta map[string]string
	tensors := map[string]stTensor{}
	end := 0
	for k, v := range raw {
		if k == "__metadata__" {
			if err := json.Unmarshal(v, &meta); err != nil {
				t.Fatalf("%s: __metadata__: %v", path, err)
			}
			continue
		}
		var ti stTensor
		if err := json.Unmarshal(v, &ti); err != nil {
			t.Fatalf("%s: tensor %s: %v", path, k, err)
		}
		elems := 1
		for _, d := range ti.Shape {
			elems *= d
		}
		if ti.DType != "F32" {
			t.Errorf("%s: %s has dtype %s, want F32", path, k, ti.DType)
		}
		if got := ti.DataOffsets[1] - ti.DataOffsets[0]; got != 4*elems {
			t.Errorf("%s: %s spans %d bytes, want %d for shape %v", path, k, got, 4*elems, ti.Shape)
		}
		if ti.DataOffsets[1] > end {
			end = ti.DataOffsets[1]
		}
		tensors[k] = ti
	}
	if uint64(end) != uint64(len(data))-8-n {
		t.Errorf("%s: data is %d bytes, tensors end at %d", path, uint64(len(data))-8-n, end)
	}
	return tensors, meta
}

// TestTrainerRuns runs a full 50-step job and the same job stopped by SIGTERM
// and resumed, side by side; both must end with the identical adapter
// (checkpoints carry the RNG state, the batch order follows from the step).
func TestTrainerRuns(t *testing.T) {
	t.Parallel()
	var fullSHA, resumedSHA, pausedSHA string
	t.Run("group", func(t *testing.T) {
		t.Run("full run and eval_adapter", func(t *testing.T) {
			t.Parallel()
			fullSHA = testFullRunAndEvalAdapter(t)
		})
		t.Run("SIGTERM and resume", func(t *testing.T) {
			t.Parallel()
			resumedSHA = testSIGTERMAndResume(t)
		})
		t.Run("stop_at_step pause and resume", func(t *testing.T) {
			t.Parallel()
			pausedSHA = testPauseAndResume(t)
		})
	})
	if fullSHA != "" && resumedSHA != "" && fullSHA != resumedSHA {
		t.Errorf("the stopped and resumed run's adapter (sha256 %s) differs from the uninterrupted run's (%s)", resumedSHA, fullSHA)
	}
	if fullSHA != "" && pausedSHA != "" && fullSHA != pausedSHA {
		t.Errorf("the paused (stop_at_step) and resumed run's adapter (sha256 %s) differs from the uninterrupted run's (%s): "+
			"the pause changed the schedule or the state", pausedSHA, fullSHA)
	}
}

// testFullRunAndEvalAdapter checks a complete run and returns its adapter's sha256.
func testFullRunAndEvalAdapter(t *testing.T) string {
	scripts := scriptDir(t)
	work := t.TempDir()
	spec := jobSpec(t)
	jobFile := writeJob(t, work, spec)
	out, ckpt := filepath.Join(work, "out"), filepath.Join(work, "ckpt")
	r := runTrainer(t, scripts, jobFile, out, ckpt)
	if r.code != 0 {
		t.Fatalf("trainer failed:\n%s", r)
	}
	if !r.hasLog("LATHE_SIMULATED_GPUS=1") {
		t.Errorf("no log line saying the GPUs are simulated:\n%s", r)
	}

	// Progress: every field, steps increasing up to total_steps, loss falling.
	prog := r.ofKind("progress")
	if len(prog) < 3 {
		t.Fatalf("%d progress events, want several", len(prog))
	}
	lastStep := 0.0
	for _, p := range prog {
		for _, k := range []string{"step", "total_steps", "epoch", "loss", "learning_rate", "samples_per_s"} {
			num(t, p, k)
		}
		if s := num(t, p, "step"); s <= lastStep {
			t.Errorf("progress steps not increasing: %v after %v", s, lastStep)
		} else {
			lastStep = s
		}
		if num(t, p, "total_steps") != 50 {
			t.Errorf("total_steps = %v, want 50 (max_steps)", p["total_steps"])
		}
	}
	if lastStep != 50 {
		t.Errorf("last progress step %v, want 50", lastStep)
	}
	first, last := num(t, prog[0], "loss"), num(t, prog[len(prog)-1], "loss")
	t.Logf("loss %.3f -> %.3f over %v steps", first, last, lastStep)
	if !(last < first-1.0) {
		t.Errorf("loss did not fall clearly: first %.4f, last %.4f", first, last)
	}

	// Checkpoints every 20 steps, each a complete directory.
	cks := r.ofKind("checkpoint")
	var ckSteps []float64
	for _, c := range cks {
		ckSteps = append(ckSteps, num(t, c, "step"))
		name, _ := c["path"].(string)
		if want := fmt.Sprintf("ckpt-%d", int(num(t, c, "step"))); name != want {
			t.Errorf("checkpoint path %q, want %q", name, want)
		}
		for _, f := range []string{"adapter_model.safetensors", "optimizer.pt", "trainer_state.json"} {
			if _, err := os.Stat(filepath.Join(ckpt, name, f)); err != nil {
				t.Errorf("checkpoint file missing: %v", err)
			}
		}
	}
	if fmt.Sprint(ckSteps) != "[20 40]" {
		t.Errorf("checkpoint steps %v, want [20 40]", ckSteps)
	}

	// Evals at 25 and at the end.
	evals := r.ofKind("eval")
	if len(evals) != 2 || num(t, evals[0], "step") != 25 || num(t, evals[1], "step") != 50 {
		t.Errorf("eval events %v, want steps 25 and 50", evals)
	}

	// Artifacts: bytes and sha256 match the files.
	arts := r.ofKind("artifact")
	formats := map[string]string{}
	for _, a := range arts {
		name, _ := a["path"].(string)
		formats[name], _ = a["format"].(string)
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("artifact %q: %v", name, err)
		}
		sum := sha256.Sum256(data)
		if got := a["sha256"]; got != hex.EncodeToString(sum[:]) {
			t.Errorf("artifact %s: sha256 %v, file has %x", name, got, sum)
		}
		if got := num(t, a, "bytes"); int(got) != len(data) {
			t.Errorf("artifact %s: bytes %v, file has %d", name, got, len(data))
		}
	}
	if formats["adapter_model.safetensors"] != "safetensors" || formats["adapter_config.json"] != "json" || len(arts) != 2 {
		t.Errorf("artifact events %v", arts)
	}

	// done comes last, with both metrics; its eval_loss is the final eval's.
	done := r.events[len(r.events)-1]
	if done["event"] != "done" {
		t.Fatalf("last event is %v, want done", done)
	}
	metrics, _ := done["metrics"].(map[string]any)
	trainLoss, _ := metrics["train_loss"].(float64)
	evalLoss, ok := metrics["eval_loss"].(float64)
	if !ok || trainLoss <= 0 || evalLoss != num(t, evals[len(evals)-1], "eval_loss") {
		t.Errorf("done metrics %v (last eval %v)", metrics, evals[len(evals)-1])
	}

	// adapter_config.json is PEFT-style.
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(out, "adapter_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("adapter_config.json: %v", err)
	}
	if cfg["peft_type"] != "LORA" || cfg["r"] != 8.0 || cfg["lora_alpha"] != 16.0 || cfg["task_type"] != "CAUSAL_LM" ||
		cfg["base_model_name_or_path"] != "tiny-char" || cfg["inference_mode"] != true || len(cfg["target_modules"].([]any)) != 6 {
		t.Errorf("adapter_config.json: %s", b)
	}

	// The safetensors file, parsed here: an A and a B for every target in every layer.
	tensors, meta := readSafetensorsHeader(t, filepath.Join(out, "adapter_model.safetensors"))
	if meta["format"] != "pt" {
		t.Errorf("__metadata__ %v, want format pt", meta)
	}
	const r8 = 8
	want := 0
	for layer := 0; layer < tinyLayers; layer++ {
		for _, m := range allTargets {
			part := "self_attn"
			if m == "up_proj" || m == "down_proj" {
				part = "mlp"
			}
			prefix := fmt.Sprintf("base_model.model.layers.%d.%s.%s.", layer, part, m)
			dims := tinyInOut[m]
			for key, shape := range map[string][]int{
				prefix + "lora_A.weight": {r8, dims[0]},
				prefix + "lora_B.weight": {dims[1], r8},
			} {
				want++
				ti, ok := tensors[key]
				if !ok {
					t.Errorf("safetensors has no %s", key)
				} else if fmt.Sprint(ti.Shape) != fmt.Sprint(shape) {
					t.Errorf("%s shape %v, want %v", key, ti.Shape, shape)
				}
			}
		}
	}
	if len(tensors) != want {
		t.Errorf("safetensors holds %d tensors, want %d", len(tensors), want)
	}

	// eval_adapter.py reproduces the final eval loss and beats the base.
	cmd := exec.Command(python, filepath.Join(scripts, EvalAdapterFile),
		"--adapter", out, "--eval-dataset", "file://"+dataPath(t, "tiny-eval.jsonl"), "-o", "json")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("eval_adapter.py: %v\n%s", err, stderr.String())
	}
	var res struct {
		Base    *float64 `json:"base_eval_loss"`
		Adapter *float64 `json:"adapter_eval_loss"`
	}
	if err := json.Unmarshal(got, &res); err != nil || res.Base == nil || res.Adapter == nil {
		t.Fatalf("eval_adapter.py output %q: %v", got, err)
	}
	t.Logf("eval_adapter: base %.4f, adapter %.6f; trainer's final eval_loss %.6f", *res.Base, *res.Adapter, evalLoss)
	if d := math.Abs(*res.Adapter - evalLoss); d > 1e-3 {
		t.Errorf("eval_adapter adapter_eval_loss %.6f differs from the trainer's %.6f by %.2g", *res.Adapter, evalLoss, d)
	}
	if !(*res.Adapter < *res.Base) {
		t.Errorf("adapter eval loss %.4f is not below the base's %.4f", *res.Adapter, *res.Base)
	}
	return fileSHA(t, filepath.Join(out, "adapter_model.safetensors"))
}

// testSIGTERMAndResume stops the full run's job with SIGTERM, resumes it and
// returns the final adapter's sha256. Checkpoint and eval intervals differ
// from the full run's: neither changes what is trained.
func testSIGTERMAndResume(t *testing.T) string {
	scripts := scriptDir(t)
	work := t.TempDir()
	spec := jobSpec(t)
	tr := spec["training"].(map[string]any)
	tr["checkpoint_every"], tr["eval_every"] = 10, 40
	jobFile := writeJob(t, work, spec)
	out, ckpt := filepath.Join(work, "out"), filepath.Join(work, "ckpt")

	// Wait for a progress line past the first checkpoint, then SIGTERM: from
	// then on the trainer must write a checkpoint (or have just written one
	// at this step) and exit with 143.
	p := startTrainer(t, scripts, jobFile, out, ckpt)
	sawCheckpoint, signalled := false, false
	for !signalled {
		ev, ok := p.next()
		if !ok {
			t.Fatalf("trainer ended before it could be signalled:\n%s", p.wait())
		}
		switch {
		case ev == nil:
		case ev["event"] == "checkpoint":
			sawCheckpoint = true
		case ev["event"] == "progress" && sawCheckpoint:
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			signalled = true
		}
	}
	nBefore := len(p.run.events)
	r := p.wait()
	if r.code != 143 {
		t.Fatalf("after SIGTERM: exit %d, want 143:\n%s", r.code, r)
	}
	after := (&run{events: r.events[nBefore:]}).ofKind("checkpoint")
	if len(after) == 0 {
		t.Fatalf("no checkpoint event after SIGTERM; events after it: %v\n%s", r.events[nBefore:], r)
	}
	ckStep := int(num(t, after[len(after)-1], "step"))
	if ckStep >= 50 {
		t.Fatalf("trainer reached step %d before the signal took effect", ckStep)
	}
	if _, err := os.Stat(filepath.Join(ckpt, fmt.Sprintf("ckpt-%d", ckStep), "trainer_state.json")); err != nil {
		t.Fatalf("checkpoint of step %d not on disk: %v", ckStep, err)
	}
	if _, err := os.Stat(filepath.Join(out, "adapter_model.safetensors")); err == nil {
		t.Errorf("a stopped run wrote the adapter")
	}
	t.Logf("SIGTERM: checkpoint at step %d, exit 143", ckStep)

	// Second attempt, same checkpoint dir: resumes after that step.
	r2 := runTrainer(t, scripts, jobFile, out, ckpt)
	if r2.code != 0 {
		t.Fatalf("resumed run failed:\n%s", r2)
	}
	if !r2.hasLog(fmt.Sprintf("resuming from step %d", ckStep)) {
		t.Errorf("resumed run does not log \"resuming from step %d\":\n%s", ckStep, r2)
	}
	prog := r2.ofKind("progress")
	if len(prog) == 0 {
		t.Fatalf("resumed run printed no progress:\n%s", r2)
	}
	if s := int(num(t, prog[0], "step")); s != ckStep+1 {
		t.Errorf("resumed run's first progress step %d, want %d", s, ckStep+1)
	}
	if s := int(num(t, prog[len(prog)-1], "step")); s != 50 {
		t.Errorf("resumed run's last progress step %d, want 50", s)
	}
	if len(r2.ofKind("done")) != 1 {
		t.Errorf("resumed run has no done event:\n%s", r2)
	}
	return fileSHA(t, filepath.Join(out, "adapter_model.safetensors"))
}

// testPauseAndResume runs the full run's job with training.stop_at_step 30
// (ASHA's pause: not a checkpoint or eval step of the job), checks it stops
// there (eval, checkpoint at 30, done with paused_at, exit 0, no adapter)
// on the 50-step schedule, that a second attempt with the same limit pauses
// at once from the checkpoint, then resumes it without the limit and
// returns the final adapter's sha256.
func testPauseAndResume(t *testing.T) string {
	const stopAt, total = 30, 50
	scripts := scriptDir(t)
	work := t.TempDir()
	spec := jobSpec(t)
	spec["training"].(map[string]any)["stop_at_step"] = stopAt
	jobFile := writeJob(t, work, spec)
	out, ckpt := filepath.Join(work, "out"), filepath.Join(work, "ckpt")

	r := runTrainer(t, scripts, jobFile, out, ckpt)
	if r.code != 0 {
		t.Fatalf("paused run: exit %d, want 0:\n%s", r.code, r)
	}
	checkPaused(t, r, stopAt, out, ckpt)
	prog := r.ofKind("progress")
	if len(prog) == 0 {
		t.Fatalf("paused run printed no progress:\n%s", r)
	}
	last := prog[len(prog)-1]
	if s, n := int(num(t, last, "step")), int(num(t, last, "total_steps")); s != stopAt || n != total {
		t.Errorf("paused run's last progress: step %d of %d, want %d of %d (the full run's total)", s, n, stopAt, total)
	}
	// The learning rate at the pause is the full run's schedule at that step.
	warm := 2.0 // max(1, total/20)
	frac := (stopAt - warm) / (total - warm)
	wantLR := 0.02 * (0.1 + 0.9*0.5*(1+math.Cos(math.Pi*frac)))
	if lr := num(t, last, "learning_rate"); math.Abs(lr-wantLR) > 1e-12 {
		t.Errorf("learning rate at step %d: %g, want %g (the schedule of %d steps)", stopAt, lr, wantLR, total)
	}
	var ckSteps []float64
	for _, c := range r.ofKind("checkpoint") {
		ckSteps = append(ckSteps, num(t, c, "step"))
	}
	if fmt.Sprint(ckSteps) != "[20 30]" {
		t.Errorf("paused run's checkpoint steps %v, want [20 30] (checkpoint_every 20, then the pause)", ckSteps)
	}

	// A second attempt with the same limit (its predecessor paused, but the
	// pause was not recorded): it pauses again at once, training nothing.
	r2 := runTrainer(t, scripts, jobFile, out, ckpt)
	if r2.code != 0 {
		t.Fatalf("second paused run: exit %d, want 0:\n%s", r2.code, r2)
	}
	checkPaused(t, r2, stopAt, out, ckpt)
	if n := len(r2.ofKind("progress")) + len(r2.ofKind("checkpoint")); n != 0 {
		t.Errorf("a run resumed at its stop_at_step trained or checkpointed again (%d events):\n%s", n, r2)
	}

	// Promoted: the next attempt runs without the limit and resumes at 31.
	delete(spec["training"].(map[string]any), "stop_at_step")
	jobFile = writeJob(t, work, spec)
	r3 := runTrainer(t, scripts, jobFile, out, ckpt)
	if r3.code != 0 {
		t.Fatalf("resumed run failed:\n%s", r3)
	}
	if !r3.hasLog(fmt.Sprintf("resuming from step %d", stopAt)) {
		t.Errorf("resumed run does not log \"resuming from step %d\":\n%s", stopAt, r3)
	}
	prog = r3.ofKind("progress")
	if len(prog) == 0 || int(num(t, prog[0], "step")) != stopAt+1 || int(num(t, prog[len(prog)-1], "step")) != total {
		t.Fatalf("resumed run's progress %v, want steps %d to %d", prog, stopAt+1, total)
	}
	done := r3.events[len(r3.events)-1]
	if _, paused := done["paused_at"]; done["event"] != "done" || paused {
		t.Errorf("resumed run's last event %v, want a done without paused_at", done)
	}
	if len(r3.ofKind("artifact")) != 2 {
		t.Errorf("resumed run's artifacts %v, want the adapter's two files", r3.ofKind("artifact"))
	}
	return fileSHA(t, filepath.Join(out, "adapter_model.safetensors"))
}

// checkPaused checks a run that paused at step stopAt: its last event is
// done with paused_at and both metrics, its eval_loss the eval at stopAt;
// no artifact event and nothing in out; ckpt-<stopAt> complete on disk.
func checkPaused(t *testing.T, r *run, stopAt int, out, ckpt string) {
	t.Helper()
	done := r.events[len(r.events)-1]
	if done["event"] != "done" {
		t.Fatalf("paused run's last event %v, want done:\n%s", done, r)
	}
	if p, ok := done["paused_at"].(float64); !ok || int(p) != stopAt {
		t.Errorf("done line %v: paused_at want %d", done, stopAt)
	}
	evals := r.ofKind("eval")
	metrics, _ := done["metrics"].(map[string]any)
	if len(evals) == 0 || num(t, evals[len(evals)-1], "step") != float64(stopAt) || metrics["eval_loss"] != evals[len(evals)-1]["eval_loss"] {
		t.Errorf("done metrics %v, evals %v: want the eval at step %d in the metrics", metrics, evals, stopAt)
	}
	if _, ok := metrics["train_loss"].(float64); !ok {
		t.Errorf("done metrics %v: no train_loss", metrics)
	}
	if a := r.ofKind("artifact"); len(a) != 0 {
		t.Errorf("a paused run reported artifacts: %v", a)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("a paused run wrote %d files to the output folder (%s...), want none", len(entries), entries[0].Name())
	}
	for _, f := range []string{"adapter_model.safetensors", "optimizer.pt", "trainer_state.json"} {
		if _, err := os.Stat(filepath.Join(ckpt, fmt.Sprintf("ckpt-%d", stopAt), f)); err != nil {
			t.Errorf("the pause's checkpoint: %v", err)
		}
	}
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// TestTrainerDevice runs 2-step jobs and checks the one "device:" log line.
// Simulated GPUs (LATHE_SIMULATED_GPUS=1, with the fake UUIDs a worker on
// --gpus simulated:… passes) must run on the CPU and succeed; so must a GPU
// job whose CUDA_VISIBLE_DEVICES is empty (CUDA then sees no GPU, even on a
// machine that has some). The cuda branch needs a GPU and is not run here.
func TestTrainerDevice(t *testing.T) {
	t.Parallel()
	scripts := scriptDir(t)
	cases := []struct {
		name string
		env  []string
		want string
	}{
		{"simulated GPUs", []string{"LATHE_SIMULATED_GPUS=1", "CUDA_VISIBLE_DEVICES=GPU-x"},
			"device: cpu (LATHE_SIMULATED_GPUS=1, CUDA_VISIBLE_DEVICES=GPU-x)"},
		{"no GPU visible", []string{"LATHE_SIMULATED_GPUS=", "CUDA_VISIBLE_DEVICES="},
			"device: cpu (resources.gpus=1 but CUDA sees no GPU, CUDA_VISIBLE_DEVICES=)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			spec := jobSpec(t)
			tr := spec["training"].(map[string]any)
			tr["max_steps"], tr["checkpoint_every"], tr["eval_every"] = 2, 2, 2
			delete(spec, "eval_dataset")
			jobFile := writeJob(t, work, spec)
			r := runTrainer(t, scripts, jobFile, filepath.Join(work, "out"), filepath.Join(work, "ckpt"), c.env...)
			if r.code != 0 || len(r.ofKind("done")) != 1 {
				t.Fatalf("trainer failed:\n%s", r)
			}
			var device []string
			for _, l := range r.logs {
				if strings.HasPrefix(l, "[train_lora] device: ") {
					device = append(device, l)
				}
			}
			if len(device) != 1 || !strings.HasPrefix(device[0], "[train_lora] "+c.want) {
				t.Fatalf("device log lines %q, want one starting %q:\n%s", device, c.want, r)
			}
		})
	}
}

func TestTrainerPermanentErrorsExit3(t *testing.T) {
	t.Parallel()
	scripts := scriptDir(t)
	cases := []struct {
		name, want string
		edit       func(t *testing.T, dir string, spec map[string]any)
	}{
		{"bad JSONL line", "bad.jsonl:3", func(t *testing.T, dir string, spec map[string]any) {
			p := filepath.Join(dir, "bad.jsonl")
			data := "{\"text\": \"fine\"}\n{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"text\": \"broken\n"
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
			spec["dataset"] = "file://" + p
		}},
		{"unknown target module", "gate_proj", func(t *testing.T, dir string, spec map[string]any) {
			spec["lora"].(map[string]any)["target_modules"] = []string{"q_proj", "gate_proj"}
		}},
		{"s3 dataset", "s3 datasets are staged by the daemon", func(t *testing.T, dir string, spec map[string]any) {
			spec["dataset"] = "s3://bucket/train.jsonl"
		}},
	}
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			spec := jobSpec(t)
			c.edit(t, work, spec)
			jobFile := writeJob(t, work, spec)
			r := runTrainer(t, scripts, jobFile, filepath.Join(work, "out"), filepath.Join(work, "ckpt"))
			if r.code != 3 {
				t.Fatalf("exit %d, want 3:\n%s", r.code, r)
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("error message does not mention %q:\n%s", c.want, r)
			}
			if len(r.ofKind("progress")) != 0 {
				t.Errorf("a failed run printed progress")
			}
		})
	}
}
