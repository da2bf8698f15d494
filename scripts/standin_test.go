package scripts

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The ASHA stand-in (standin/asha_standin.py: not a trainer, for tests of
// sweeps) run as real /usr/bin/python3 processes, as a worker runs it:
// what the sweep tests rely on (docs/sweeps.md, "The ASHA stand-in
// trainer").

// standinArgv is the stand-in's command, with extra arguments.
func standinArgv(t *testing.T, extra ...string) []string {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("the stand-in runs with %s: %v", python, err)
	}
	p, err := filepath.Abs(filepath.Join("standin", "asha_standin.py"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{python, p}, extra...)
}

// standinJob writes a job file with training tr into a new folder and
// returns the folder and the file.
func standinJob(t *testing.T, tr map[string]any) (string, string) {
	t.Helper()
	dir := t.TempDir()
	return dir, writeJob(t, dir, map[string]any{"name": "standin", "base_model": "none", "dataset": "file:///none", "training": tr})
}

// standinLoss is the stand-in's objective at step for learning rate lr.
func standinLoss(lr float64, step int) float64 {
	return math.Pow(math.Log10(lr)+2.5, 2) + 1 + 5/math.Sqrt(float64(step))
}

func steps(t *testing.T, evs []map[string]any) []int {
	t.Helper()
	var out []int
	for _, e := range evs {
		out = append(out, int(num(t, e, "step")))
	}
	return out
}

func ckptStep(t *testing.T, ckpt string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ckpt, "ckpt.json"))
	if err != nil {
		t.Fatalf("ckpt.json: %v", err)
	}
	var c struct{ Step int }
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("ckpt.json %q: %v", b, err)
	}
	return c.Step
}

// TestStandinFullRun: progress every step, evals every eval_every steps
// and at the end with the objective's values, checkpoints every
// checkpoint_every steps, two artifacts whose bytes and sha256 match the
// files, and done with both metrics and no paused_at.
func TestStandinFullRun(t *testing.T) {
	t.Parallel()
	const lr = 0.01
	dir, job := standinJob(t, map[string]any{"max_steps": 6, "learning_rate": lr, "eval_every": 2, "checkpoint_every": 3})
	out, ckpt := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	r := startArgv(t, standinArgv(t), job, out, ckpt).wait()
	if r.code != 0 {
		t.Fatalf("stand-in failed:\n%s", r)
	}
	if got := fmt.Sprint(steps(t, r.ofKind("progress"))); got != "[1 2 3 4 5 6]" {
		t.Errorf("progress steps %s, want every step", got)
	}
	evals := r.ofKind("eval")
	if got := fmt.Sprint(steps(t, evals)); got != "[2 4 6]" {
		t.Errorf("eval steps %s, want [2 4 6]", got)
	}
	for _, e := range evals {
		if got, want := num(t, e, "eval_loss"), standinLoss(lr, int(num(t, e, "step"))); math.Abs(got-want) > 1e-6 {
			t.Errorf("eval %v: eval_loss %g, want %g", e, got, want)
		}
	}
	if got := fmt.Sprint(steps(t, r.ofKind("checkpoint"))); got != "[3]" || ckptStep(t, ckpt) != 3 {
		t.Errorf("checkpoint steps %s (ckpt.json step %d), want [3]", got, ckptStep(t, ckpt))
	}
	arts := r.ofKind("artifact")
	for _, a := range arts {
		name, _ := a["path"].(string)
		if sha := fileSHA(t, filepath.Join(out, name)); a["sha256"] != sha {
			t.Errorf("artifact %s: sha256 %v, file has %s", name, a["sha256"], sha)
		}
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || int64(num(t, a, "bytes")) != fi.Size() {
			t.Errorf("artifact %s: bytes %v, file: %v %v", name, a["bytes"], fi, err)
		}
	}
	if len(arts) != 2 {
		t.Errorf("artifact events %v, want adapter_model.safetensors and adapter_config.json", arts)
	}
	done := r.events[len(r.events)-1]
	m, _ := done["metrics"].(map[string]any)
	if _, paused := done["paused_at"]; done["event"] != "done" || paused || m["eval_loss"] != evals[2]["eval_loss"] || m["train_loss"] == nil {
		t.Errorf("last event %v, want done with the last eval's eval_loss, a train_loss, no paused_at", done)
	}
}

// TestStandinPausesAndResumes runs the rungs of an ASHA trial on one
// checkpoint folder: stop_at_step 3, then 6, then none. Each rung pauses
// at its limit (eval, checkpoint, done with paused_at, no artifact, exit
// 0) and the next resumes one step after it; the last ends with the
// artifacts.
func TestStandinPausesAndResumes(t *testing.T) {
	t.Parallel()
	tr := map[string]any{"max_steps": 9, "learning_rate": 0.001, "checkpoint_every": 100, "eval_every": 100}
	dir, _ := standinJob(t, tr)
	out, ckpt := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	first := 1
	for _, stop := range []int{3, 6} {
		tr["stop_at_step"] = stop
		r := startArgv(t, standinArgv(t), writeJob(t, dir, map[string]any{"name": "s", "training": tr}), out, ckpt).wait()
		if r.code != 0 {
			t.Fatalf("rung to %d: exit %d:\n%s", stop, r.code, r)
		}
		prog := steps(t, r.ofKind("progress"))
		if len(prog) == 0 || prog[0] != first || prog[len(prog)-1] != stop {
			t.Errorf("rung to %d: progress steps %v, want %d to %d", stop, prog, first, stop)
		}
		done := r.events[len(r.events)-1]
		if p, _ := done["paused_at"].(float64); done["event"] != "done" || int(p) != stop {
			t.Errorf("rung to %d: last event %v, want done with paused_at %d", stop, done, stop)
		}
		if ev := r.ofKind("eval"); len(ev) != 1 || int(num(t, ev[0], "step")) != stop {
			t.Errorf("rung to %d: evals %v, want one at the pause", stop, ev)
		}
		if ckptStep(t, ckpt) != stop || len(r.ofKind("artifact")) != 0 {
			t.Errorf("rung to %d: ckpt.json at %d, artifacts %v: want the checkpoint at the pause and no artifact", stop, ckptStep(t, ckpt), r.ofKind("artifact"))
		}
		if entries, _ := os.ReadDir(out); len(entries) != 0 {
			t.Errorf("rung to %d: %d files in the output folder, want none", stop, len(entries))
		}
		first = stop + 1
	}
	delete(tr, "stop_at_step")
	r := startArgv(t, standinArgv(t), writeJob(t, dir, map[string]any{"name": "s", "training": tr}), out, ckpt).wait()
	if prog := steps(t, r.ofKind("progress")); r.code != 0 || len(prog) != 3 || prog[0] != 7 || !r.hasLog("resuming from step 6") {
		t.Fatalf("last rung: exit %d, progress %v, want steps 7 to 9 after \"resuming from step 6\":\n%s", r.code, prog, r)
	}
	if len(r.ofKind("artifact")) != 2 {
		t.Errorf("last rung: artifacts %v, want two", r.ofKind("artifact"))
	}
}

// TestStandinSIGTERM: a slow stand-in (--step-seconds) stopped with
// SIGTERM checkpoints the step it reached and exits 143; run again (no
// sleep) it resumes after that step and finishes.
func TestStandinSIGTERM(t *testing.T) {
	t.Parallel()
	dir, job := standinJob(t, map[string]any{"max_steps": 1000, "learning_rate": 0.01, "checkpoint_every": 1000})
	out, ckpt := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	p := startArgv(t, standinArgv(t, "--step-seconds", "0.05"), job, out, ckpt)
	for {
		ev, ok := p.next()
		if !ok {
			t.Fatalf("the stand-in ended before it was signalled:\n%s", p.wait())
		}
		if ev != nil && ev["event"] == "progress" && num(t, ev, "step") >= 2 {
			break
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := p.wait()
	cks := r.ofKind("checkpoint")
	if r.code != 143 || len(cks) != 1 {
		t.Fatalf("after SIGTERM: exit %d, checkpoints %v; want 143 and one checkpoint:\n%s", r.code, cks, r)
	}
	at := int(num(t, cks[0], "step"))
	if at < 2 || at >= 1000 || ckptStep(t, ckpt) != at {
		t.Fatalf("checkpoint at %d, ckpt.json at %d", at, ckptStep(t, ckpt))
	}
	r2 := startArgv(t, standinArgv(t), job, out, ckpt).wait()
	if prog := steps(t, r2.ofKind("progress")); r2.code != 0 || len(prog) == 0 || prog[0] != at+1 || len(r2.ofKind("artifact")) != 2 {
		t.Fatalf("resumed: exit %d, progress from %v, want from %d to the end with artifacts:\n%s", r2.code, prog[:min(len(prog), 3)], at+1, r2)
	}
}

// TestStandinDivergesWithSeed666: seed 666 is the divergence knob: the
// loss grows with the step (10 + step), whatever the learning rate.
func TestStandinDivergesWithSeed666(t *testing.T) {
	t.Parallel()
	dir, job := standinJob(t, map[string]any{"max_steps": 4, "learning_rate": 0.00316, "seed": 666})
	r := startArgv(t, standinArgv(t), job, filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")).wait()
	if r.code != 0 {
		t.Fatalf("stand-in failed:\n%s", r)
	}
	for _, e := range r.ofKind("eval") {
		if got, want := num(t, e, "eval_loss"), 10+num(t, e, "step"); got != want {
			t.Errorf("eval %v: eval_loss %g, want %g", e, got, want)
		}
	}
	if n := len(r.ofKind("eval")); n != 4 {
		t.Errorf("%d evals, want 4 (eval_every defaults to 1)", n)
	}
}

// TestStandinRefusesBadJobs: a job file it cannot use exits 3 with a
// message naming the field.
func TestStandinRefusesBadJobs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		tr   map[string]any
		env  []string
		want string
	}{
		{"learning rate 0", map[string]any{"max_steps": 3, "learning_rate": 0}, nil, "training.learning_rate"},
		{"stop_at_step negative", map[string]any{"max_steps": 3, "stop_at_step": -1}, nil, "training.stop_at_step"},
		{"stop_at_step without checkpoints", map[string]any{"max_steps": 3, "stop_at_step": 2}, []string{"LATHE_CHECKPOINT_DIR="}, "LATHE_CHECKPOINT_DIR"},
		{"max_steps not an integer", map[string]any{"max_steps": "ten"}, nil, "training.max_steps"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir, job := standinJob(t, c.tr)
			r := startArgv(t, standinArgv(t), job, filepath.Join(dir, "out"), filepath.Join(dir, "ckpt"), c.env...).wait()
			if r.code != 3 || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("exit %d, stderr %q: want 3 and a message naming %s", r.code, r.stderr, c.want)
			}
		})
	}
}
