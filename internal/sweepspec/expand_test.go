package sweepspec

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// configs returns each trial's parameters as one string.
func configs(trials []Trial) []string {
	out := make([]string, len(trials))
	for i, tr := range trials {
		out[i] = fmt.Sprint(tr.Params)
	}
	return out
}

// TestExpandGrid: a 3×2 grid gives 6 distinct trials, the parameters
// sorted by path and the last varying fastest; each trial's spec has its
// values, its name, the sweep's priority, and the defaults that follow a
// swept field (lora.alpha = 2 × rank when the job leaves it out).
func TestExpandGrid(t *testing.T) {
	s := mustParse(t, `parameters:
  training.learning_rate: {grid: [0.01, 0.02, 0.05]}
  lora.rank: {grid: [8, 16]}
`)
	trials := mustExpand(t, s)
	want := []struct {
		rank int
		lr   float64
	}{{8, 0.01}, {8, 0.02}, {8, 0.05}, {16, 0.01}, {16, 0.02}, {16, 0.05}}
	if len(trials) != len(want) {
		t.Fatalf("%d trials, want %d", len(trials), len(want))
	}
	for i, w := range want {
		tr := trials[i]
		wantParams := []jobtype.Param{{Path: "lora.rank", Value: int64(w.rank)}, {Path: "training.learning_rate", Value: w.lr}}
		if tr.Index != i || !reflect.DeepEqual(tr.Params, wantParams) {
			t.Errorf("trial %d: index %d params %v, want %v", i, tr.Index, tr.Params, wantParams)
		}
		sp := tr.Spec
		if sp.LoRA.Rank != w.rank || sp.Training.LearningRate != w.lr || sp.LoRA.Alpha != float64(2*w.rank) {
			t.Errorf("trial %d: rank %d lr %g alpha %g, want %d %g %d", i, sp.LoRA.Rank, sp.Training.LearningRate, sp.LoRA.Alpha, w.rank, w.lr, 2*w.rank)
		}
		if sp.Name != fmt.Sprintf("tiny-%d", i) || sp.Priority != jobspec.PriorityBatch || sp.Training.MaxSteps != 10 || sp.Dataset != "s3://bucket/train.jsonl" {
			t.Errorf("trial %d: name %q priority %q max_steps %d dataset %q", i, sp.Name, sp.Priority, sp.Training.MaxSteps, sp.Dataset)
		}
	}
	if again := mustExpand(t, s); !reflect.DeepEqual(again, trials) {
		t.Error("a second Expand differs")
	}
	if s.base["training"].(map[string]any)["learning_rate"] != nil {
		t.Error("Expand wrote a parameter into the base job")
	}
}

// TestExpandRandomSeeds: the same seed gives the same trials, another seed
// others.
func TestExpandRandomSeeds(t *testing.T) {
	spec := func(seed int) string {
		return fmt.Sprintf(`parameters:
  training.learning_rate: {log_uniform: [1e-4, 1e-2]}
  lora.rank: {choice: [4, 8, 16, 32]}
  lora.dropout: {uniform: [0, 0.3]}
search: {kind: random, trials: 20, seed: %d}
`, seed)
	}
	a := configs(mustExpand(t, mustParse(t, spec(7))))
	b := configs(mustExpand(t, mustParse(t, spec(7))))
	c := configs(mustExpand(t, mustParse(t, spec(8))))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("seed 7 twice:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Error("seeds 7 and 8 give the same trials")
	}
	if len(a) != 20 {
		t.Errorf("%d trials, want 20", len(a))
	}
}

// TestExpandDiscreteWithoutReplacement: 1,000 draws from a space of
// exactly 1,000 points give 1,000 distinct configurations (every point),
// from grid, choice and int_uniform spaces alike; 1,001 are refused.
func TestExpandDiscreteWithoutReplacement(t *testing.T) {
	space := `parameters:
  lora.rank: {choice: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}
  training.batch_size: {grid: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}
  training.seed: {int_uniform: [0, 9]}
`
	for _, kind := range []string{"random", "asha"} {
		search := fmt.Sprintf("search: {kind: %s, trials: 1000, seed: 3, min_steps: 1, max_steps: 9}\n", kind)
		if kind == "random" {
			search = "search: {kind: random, trials: 1000, seed: 3}\n"
		}
		trials := mustExpand(t, mustParse(t, space+search))
		seen := make(map[string]bool, len(trials))
		for _, c := range configs(trials) {
			seen[c] = true
		}
		if len(trials) != 1000 || len(seen) != 1000 {
			t.Errorf("%s: %d trials, %d distinct, want 1000 and 1000", kind, len(trials), len(seen))
		}
		if v, ok := trials[0].Params[2].Value.(int64); !ok || v < 0 || v > 9 {
			t.Errorf("%s: int_uniform value %#v, want an int64 in [0, 9]", kind, trials[0].Params[2].Value)
		}
	}
	_, err := Parse([]byte(baseJob+space+"search: {kind: random, trials: 1001}\n"), Options{})
	wantField(t, err, "search.trials", "more than the 1000 distinct points", "1001")
}

// TestExpandLargeDiscreteSpace: drawing without replacement from a space
// far larger than the trials costs only the trials.
func TestExpandLargeDiscreteSpace(t *testing.T) {
	s := mustParse(t, `parameters:
  training.seed: {int_uniform: [0, 9007199254740992]}
  training.batch_size: {int_uniform: [1, 65536]}
search: {kind: random, trials: 500, seed: 1}
`)
	seen := map[string]bool{}
	for _, c := range configs(mustExpand(t, s)) {
		seen[c] = true
	}
	if len(seen) != 500 {
		t.Errorf("%d distinct configurations, want 500", len(seen))
	}
}

// TestExpandContinuous: draws lie within their bounds, uniform evenly and
// log_uniform evenly in log(value): about half of a log_uniform draw over
// [1e-4, 1e-2] lies below 1e-3 (a uniform one would put 9% there).
func TestExpandContinuous(t *testing.T) {
	s := mustParse(t, `parameters:
  training.learning_rate: {log_uniform: [1e-4, 1e-2]}
  lora.dropout: {uniform: [0.1, 0.2]}
search: {kind: random, trials: 2000, seed: 11}
`)
	var lowLR, lowDropout int
	for _, tr := range mustExpand(t, s) {
		dropout, lr := tr.Params[0].Value.(float64), tr.Params[1].Value.(float64)
		if lr < 1e-4 || lr > 1e-2 || dropout < 0.1 || dropout > 0.2 {
			t.Fatalf("trial %d: lr %g dropout %g out of bounds", tr.Index, lr, dropout)
		}
		if tr.Spec.Training.LearningRate != lr || tr.Spec.LoRA.Dropout != dropout {
			t.Fatalf("trial %d: spec lr %g dropout %g, params %g %g", tr.Index, tr.Spec.Training.LearningRate, tr.Spec.LoRA.Dropout, lr, dropout)
		}
		if lr < 1e-3 {
			lowLR++
		}
		if dropout < 0.15 {
			lowDropout++
		}
	}
	if lowLR < 900 || lowLR > 1100 {
		t.Errorf("%d of 2000 log_uniform draws below 1e-3, want about 1000", lowLR)
	}
	if lowDropout < 900 || lowDropout > 1100 {
		t.Errorf("%d of 2000 uniform draws below the middle, want about 1000", lowDropout)
	}
}

// TestExpandRedrawsRepeats: a continuous space with few distinct float64
// values still gives distinct trials, and one with too few is refused.
func TestExpandRedrawsRepeats(t *testing.T) {
	next := math.Nextafter(1, 2)
	few := fmt.Sprintf("parameters:\n  lora.dropout: {uniform: [0.5, %v]}\n  lora.rank: {grid: [4, 8]}\nsearch: {kind: random, trials: %%d}\n", 0.5+4*(next-1)/2)
	trials := mustExpand(t, mustParse(t, fmt.Sprintf(few, 6)))
	seen := map[string]bool{}
	for _, c := range configs(trials) {
		seen[c] = true
	}
	if len(seen) != 6 {
		t.Errorf("%d distinct of 6: %v", len(seen), configs(trials))
	}
	_, err := mustParse(t, fmt.Sprintf(few, 100)).Expand()
	if err == nil || !strings.Contains(err.Error(), "too few distinct values") {
		t.Errorf("100 trials from a few points: %v", err)
	}
}

// TestExpandInvalidCombination: a value the job spec refuses fails Expand
// naming each bad trial and the field, the message giving its parameters.
func TestExpandInvalidCombination(t *testing.T) {
	s := mustParse(t, `parameters:
  lora.rank: {grid: [8, 0, 5000]}
  training.learning_rate: {grid: [0.01, 0.02]}
`)
	trials, err := s.Expand()
	if trials != nil {
		t.Error("Expand returned trials with its error")
	}
	errs := fieldErrors(t, err)
	if len(errs) != 4 {
		t.Errorf("%d problems, want 4 (trials 2 to 5): %v", len(errs), err)
	}
	for i, value := range map[int]string{2: "0", 3: "0", 4: "5000", 5: "5000"} {
		fe, ok := findField(errs, fmt.Sprintf("trials[%d].lora.rank", i))
		if !ok {
			t.Errorf("no problem names trials[%d].lora.rank: %v", i, err)
			continue
		}
		if fe.Value != value || !strings.Contains(fe.Message, "must be between 1 and 1024") ||
			!strings.Contains(fe.Message, fmt.Sprintf("trial %d sets lora.rank=%s, training.learning_rate=", i, value)) {
			t.Errorf("trials[%d]: %+v", i, fe)
		}
	}
}

// TestExpandASHA: asha sets every trial's training.max_steps to its
// max_steps, whatever the base job says.
func TestExpandASHA(t *testing.T) {
	s := mustParse(t, `parameters: {training.learning_rate: {log_uniform: [1e-3, 1e-1]}}
search: {kind: asha, trials: 27, seed: 1, min_steps: 10, max_steps: 90}
`)
	trials := mustExpand(t, s)
	if len(trials) != 27 {
		t.Fatalf("%d trials, want 27", len(trials))
	}
	for _, tr := range trials {
		if tr.Spec.Training.MaxSteps != 90 {
			t.Errorf("trial %d: max_steps %d, want 90", tr.Index, tr.Spec.Training.MaxSteps)
		}
	}
}

// TestTrialName: "<sweep>-<index>", the sweep's name cut to fit 63
// characters, the index kept.
func TestTrialName(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		sweep string
		i     int
		want  string
	}{
		{"tiny", 0, "tiny-0"},
		{"tiny", 9999, "tiny-9999"},
		{long, 7, strings.Repeat("a", 61) + "-7"},
		{long, 1234, strings.Repeat("a", 58) + "-1234"},
	} {
		if got := TrialName(tc.sweep, tc.i); got != tc.want || len(got) > 63 {
			t.Errorf("TrialName(%q, %d) = %q, want %q", tc.sweep, tc.i, got, tc.want)
		}
	}
	s := mustParse(t, "name: "+long+"\nparameters: {training.seed: {grid: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}}\n")
	for _, tr := range mustExpand(t, s) {
		if tr.Spec.Name != TrialName(long, tr.Index) {
			t.Errorf("trial %d named %q", tr.Index, tr.Spec.Name)
		}
	}
}

// TestExpandGoSweep: a Sweep built in Go (no base job as written) expands
// over its Job.
func TestExpandGoSweep(t *testing.T) {
	job, err := jobspec.Parse([]byte("name: j\nbase_model: m\ndataset: s3://bucket/k\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Sweep{Name: "go", Job: job, Priority: jobspec.PriorityUrgent, Search: Search{Kind: SearchGrid},
		Parameters: []Param{{Path: "lora.rank", Kind: KindGrid, Values: []any{4, 8}}}}
	trials := mustExpand(t, s)
	if len(trials) != 2 || trials[1].Spec.LoRA.Rank != 8 || trials[1].Spec.Name != "go-1" || trials[1].Spec.Priority != jobspec.PriorityUrgent {
		t.Errorf("trials: %+v", trials)
	}
	if _, err := (&Sweep{Name: "go", Search: Search{Kind: SearchGrid}}).Expand(); err == nil {
		t.Error("a Sweep without a job expanded")
	}
}

// TestBuildRangesMatchExpand: building a sweep's trials in ranges gives
// the trials Expand gives, each at its index.
func TestBuildRangesMatchExpand(t *testing.T) {
	s, err := Parse([]byte(`{"job":{"name":"b","base_model":"tiny-char","dataset":"file:///data/t.jsonl"},"parameters":{"training.learning_rate":{"log_uniform":[0.0001,0.1]},"lora.rank":{"int_uniform":[1,64]}},"search":{"kind":"random","trials":130,"seed":3}}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Expand()
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Draw()
	if err != nil || e.Len() != len(all) {
		t.Fatalf("Draw: %v, %d trials; want %d", err, e.Len(), len(all))
	}
	for from := 0; from < e.Len(); from += 50 {
		part, err := e.Build(from, min(from+50, e.Len()))
		if err != nil {
			t.Fatal(err)
		}
		for k, tr := range part {
			want := all[from+k]
			if tr.Index != want.Index || fmt.Sprint(tr.Params) != fmt.Sprint(want.Params) || string(tr.Spec.JSON()) != string(want.Spec.JSON()) {
				t.Fatalf("trial %d built in a range: %+v, want %+v", from+k, tr, want)
			}
		}
	}
	if _, err := e.Build(100, 131); err == nil {
		t.Fatal("Build past the last trial: no error")
	}
}
