package sweepspec

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/fileuri"
)

// examples is the folder of the example configs.
var examples = filepath.Join("..", "..", "configs", "examples")

// readExample is a ReadJob as the CLI's: it reads a job file relative to
// configs/examples and makes its relative data paths file:// URIs, as
// `lathe submit` does (cmd/lathe-full/specpath.go).
func readExample(t *testing.T) func(string) ([]byte, error) {
	dir, err := filepath.Abs(examples)
	if err != nil {
		t.Fatal(err)
	}
	return func(p string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			return nil, err
		}
		var job map[string]any
		if err := yaml.Unmarshal(data, &job); err != nil {
			return nil, err
		}
		for _, k := range []string{"dataset", "eval_dataset"} {
			if v, ok := job[k].(string); ok && !strings.Contains(v, "://") {
				job[k] = fileuri.FromPath(filepath.Join(dir, v))
			}
		}
		return json.Marshal(job)
	}
}

// parseExample parses configs/examples/<name>.
func parseExample(t *testing.T, name string) *Sweep {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examples, name))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(data, Options{ReadJob: readExample(t)})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

// TestExampleGrid: configs/examples/sweep-grid.yaml is 3 learning rates ×
// 2 ranks of the demo job, two at a time.
func TestExampleGrid(t *testing.T) {
	s := parseExample(t, "sweep-grid.yaml")
	trials := mustExpand(t, s)
	if len(trials) != 6 || s.MaxParallel != 2 || s.Objective != (Objective{"eval_loss", "minimize"}) || s.Search.Kind != SearchGrid {
		t.Fatalf("%d trials, max_parallel %d, objective %+v, search %+v", len(trials), s.MaxParallel, s.Objective, s.Search)
	}
	seen := map[string]bool{}
	for _, tr := range trials {
		sp := tr.Spec
		seen[fmt.Sprint(sp.LoRA.Rank, sp.Training.LearningRate)] = true
		if sp.Name != TrialName("tiny-grid", tr.Index) || sp.BaseModel != "tiny-char" || !strings.HasPrefix(sp.Dataset, "file:///") ||
			sp.Training.Epochs != 2 || sp.MaxRuntime.D() != 10*time.Minute {
			t.Errorf("trial %d: %+v", tr.Index, sp)
		}
	}
	if len(seen) != 6 {
		t.Errorf("%d distinct (rank, learning rate) pairs, want 6", len(seen))
	}
}

// TestExampleASHA: configs/examples/sweep-asha.yaml is 27 trials, η = 3,
// each job running to 90 steps at most.
func TestExampleASHA(t *testing.T) {
	s := parseExample(t, "sweep-asha.yaml")
	if s.Search.Kind != SearchASHA || s.Search.Trials != 27 || *s.Search.ASHA != (ASHA{MinSteps: 10, MaxSteps: 90, ReductionFactor: 3}) {
		t.Fatalf("search %+v", s.Search)
	}
	trials := mustExpand(t, s)
	seen := map[string]bool{}
	for _, tr := range trials {
		seen[fmt.Sprint(tr.Params)] = true
		if tr.Spec.Training.MaxSteps != 90 {
			t.Errorf("trial %d: max_steps %d, want 90", tr.Index, tr.Spec.Training.MaxSteps)
		}
	}
	if len(trials) != 27 || len(seen) != 27 {
		t.Errorf("%d trials, %d distinct, want 27", len(trials), len(seen))
	}
}
