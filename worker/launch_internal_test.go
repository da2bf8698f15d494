package worker

import (
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestLaunchArgv: {python} is the demo interpreter for tiny-char and the
// Hugging Face one otherwise; several GPUs run under torchrun (or the
// launcher's own command, with {gpus}); one GPU or none never does.
func TestLaunchArgv(t *testing.T) {
	cfg := Config{ScriptsDir: "/d/scripts", DemoPython: "/usr/bin/python3", HFPython: "/venv/bin/python"}
	ref := []string{"{python}", "{scripts}/train_lora.py"}
	for _, tc := range []struct {
		name  string
		tmpl  []string
		l     Launcher
		gpus  int
		model string
		want  string
	}{
		{"tiny-char, cpu", ref, Launcher{Torchrun: true}, 0, "tiny-char", "/usr/bin/python3 /d/scripts/train_lora.py"},
		{"hf, one gpu", ref, Launcher{Torchrun: true}, 1, "org/m", "/venv/bin/python /d/scripts/train_lora.py"},
		{"hf, two gpus", ref, Launcher{Torchrun: true}, 2, "file:///m", "/venv/bin/python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=2 /d/scripts/train_lora.py"},
		{"hf, 4 gpus", ref, Launcher{Torchrun: true}, 4, "org/m", "/venv/bin/python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=4 /d/scripts/train_lora.py"},
		{"launcher none", ref, Launcher{}, 8, "org/m", "/venv/bin/python /d/scripts/train_lora.py"},
		{"own launcher", []string{"{hf_python}", "/t.py"}, Launcher{Argv: []string{"{hf_python}", "-m", "accelerate.commands.launch", "--num_processes", "{gpus}", "/t.py"}}, 2, "tiny-char",
			"/venv/bin/python -m accelerate.commands.launch --num_processes 2 /t.py"},
		{"own launcher, one gpu", []string{"{hf_python}", "/t.py"}, Launcher{Argv: []string{"x", "{gpus}"}}, 1, "org/m", "/venv/bin/python /t.py"},
	} {
		got, err := launchArgv(tc.tmpl, tc.l, tc.gpus, placeholders(cfg, tc.model))
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%s: %q (%v), want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := launchArgv([]string{"/bin/trainer"}, Launcher{Torchrun: true}, 2, placeholders(cfg, "m")); err == nil {
		t.Error("torchrun over a one-word command: no error")
	}
	// trainerArgv: tiny-char, the CPU demo under Debian's torch, runs one
	// process whatever its GPU count; a Hugging Face model runs ranks.
	w := &Worker{cfg: cfg}
	w.cfg.Trainers = map[string][]string{"reference": ref}
	w.cfg.Launchers = map[string]Launcher{"reference": {Torchrun: true}}
	for model, want := range map[string]string{
		"tiny-char": "/usr/bin/python3 /d/scripts/train_lora.py",
		"org/m":     "/venv/bin/python -m torch.distributed.run --standalone --nnodes=1 --nproc_per_node=2 /d/scripts/train_lora.py",
	} {
		job := &jobtype.Job{GPUs: []int{0, 1}, Spec: jobspec.Spec{BaseModel: model}}
		got, err := w.trainerArgv(job)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("trainerArgv(%s on 2 GPUs) = %q (%v), want %q", model, got, err, want)
		}
	}
}
