package sweepspec

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

const lrGrid = "parameters: {training.learning_rate: {grid: [0.01, 0.02]}}\n"

// TestParseErrors: every bad field is named, by its path, with what is
// wrong and (where there is one) the value as written.
func TestParseErrors(t *testing.T) {
	rank := func(space string) string { return "parameters: {lora.rank: " + space + "}\n" }
	for _, tc := range []struct {
		name, spec        string
		noBase            bool // spec replaces baseJob
		field, msg, value string
	}{
		{name: "unknown top-level field", spec: lrGrid + "foo: 1\n", field: "foo", msg: "unknown field", value: "1"},
		{name: "bad name", spec: lrGrid + "name: Bad_Name\n", field: "name", msg: "lower-case", value: "Bad_Name"},
		{name: "name too long", spec: lrGrid + "name: " + strings.Repeat("a", 64) + "\n", field: "name", msg: "1 to 63"},
		{name: "duplicate key", spec: lrGrid + "name: a\nname: b\n", field: "name", msg: "duplicate key", value: "b"},
		{name: "no job", noBase: true, spec: lrGrid, field: "job", msg: "is required"},
		{name: "job a number", noBase: true, spec: "job: 5\n" + lrGrid, field: "job", msg: "path of a job spec file, or a job spec mapping", value: "5"},
		{name: "job path without ReadJob", noBase: true, spec: "job: ./tiny.yaml\n" + lrGrid, field: "job", msg: "give the job inline", value: "./tiny.yaml"},
		{name: "job field bad", noBase: true, spec: `job: {name: t, base_model: m, dataset: "s3://bucket/k", lora: {rank: -4}}` + "\n" + lrGrid, field: "job.lora.rank", msg: "between 1 and 1024", value: "-4"},
		{name: "job field unknown", noBase: true, spec: `job: {name: t, base_model: m, dataset: "s3://bucket/k", lora: {rnak: 4}}` + "\n" + lrGrid, field: "job.lora.rnak", msg: "unknown field"},
		{name: "job timestamp", noBase: true, spec: `job: {name: t, base_model: m, dataset: "s3://bucket/k", trainer: 2024-01-01}` + "\n" + lrGrid, field: "job.trainer", msg: "a timestamp"},
		{name: "no name anywhere", noBase: true, spec: `job: {base_model: m, dataset: "s3://bucket/k"}` + "\n" + lrGrid, field: "name", msg: "give the sweep a name"},
		{name: "no parameters", spec: "search: grid\n", field: "parameters", msg: "is required"},
		{name: "parameters a list", spec: "parameters: [lora.rank]\n", field: "parameters", msg: "must be a mapping"},
		{name: "unknown path", spec: "parameters: {lora.rnk: {grid: [4]}}\n", field: "parameters.lora.rnk", msg: "not a field of the job spec"},
		{name: "path under a field", spec: "parameters: {lora.rank.x: {grid: [4]}}\n", field: "parameters.lora.rank.x", msg: "lora.rank is not a section"},
		{name: "section path", spec: "parameters: {lora: {grid: [4]}}\n", field: "parameters.lora", msg: "section"},
		{name: "list path", spec: "parameters: {lora.target_modules: {grid: [q_proj]}}\n", field: "parameters.lora.target_modules", msg: "is a list"},
		{name: "dataset fixed", spec: "parameters: {dataset: {grid: [\"s3://b/a\"]}}\n", field: "parameters.dataset", msg: "same data"},
		{name: "eval_dataset fixed", spec: "parameters: {eval_dataset: {grid: [\"s3://b/a\"]}}\n", field: "parameters.eval_dataset", msg: "same data"},
		{name: "residency fixed", spec: "parameters: {residency: {grid: [eu]}}\n", field: "parameters.residency", msg: "where the sweep's data may go"},
		{name: "output fixed", spec: "parameters: {output.uri: {grid: [\"s3://b/o\"]}}\n", field: "parameters.output.uri", msg: "cannot be swept"},
		{name: "trainer fixed", spec: "parameters: {trainer: {grid: [reference]}}\n", field: "parameters.trainer", msg: "same trainer"},
		{name: "priority fixed", spec: "parameters: {priority: {grid: [urgent]}}\n", field: "parameters.priority", msg: "sweep's priority"},
		{name: "name fixed", spec: "parameters: {name: {grid: [a]}}\n", field: "parameters.name", msg: "<sweep>-<index>"},
		{name: "space not a mapping", spec: rank("[4, 8]"), field: "parameters.lora.rank", msg: "must be a mapping", value: "[4, 8]"},
		{name: "two spaces", spec: rank("{grid: [4], choice: [8]}"), field: "parameters.lora.rank", msg: "exactly one space"},
		{name: "no space", spec: rank("{}"), field: "parameters.lora.rank", msg: "must give one space"},
		{name: "unknown space", spec: rank("{gird: [4]}"), field: "parameters.lora.rank.gird", msg: "unknown field"},
		{name: "empty grid", spec: rank("{grid: []}"), field: "parameters.lora.rank.grid", msg: "1 to 1000 values"},
		{name: "grid too long", spec: rank("{grid: [" + strings.Repeat("1, ", 1000) + "1]}"), field: "parameters.lora.rank.grid", msg: "not 1001"},
		{name: "grid item a list", spec: rank("{grid: [4, [8]]}"), field: "parameters.lora.rank.grid[1]", msg: "not a list", value: "[8]"},
		{name: "grid item null", spec: rank("{choice: [4, null]}"), field: "parameters.lora.rank.choice[1]", msg: "not null"},
		{name: "grid repeats", spec: rank("{grid: [4, 8, 4.0]}"), field: "parameters.lora.rank.grid[2]", msg: "repeats item 0", value: "4.0"},
		{name: "uniform backwards", spec: "parameters: {lora.dropout: {uniform: [0.2, 0.1]}}\n", field: "parameters.lora.dropout.uniform", msg: "low must be below high", value: "[0.2, 0.1]"},
		{name: "uniform one bound", spec: "parameters: {lora.dropout: {uniform: [0.2]}}\n", field: "parameters.lora.dropout.uniform", msg: "[low, high]"},
		{name: "uniform infinite", spec: "parameters: {lora.dropout: {uniform: [0, .inf]}}\n", field: "parameters.lora.dropout.uniform[1]", msg: "finite", value: ".inf"},
		{name: "uniform a string", spec: "parameters: {lora.dropout: {uniform: [0, high]}}\n", field: "parameters.lora.dropout.uniform[1]", msg: "must be a number", value: "high"},
		{name: "log_uniform from 0", spec: "parameters: {training.learning_rate: {log_uniform: [0, 0.1]}}\n", field: "parameters.training.learning_rate.log_uniform", msg: "above 0"},
		{name: "int_uniform fraction", spec: rank("{int_uniform: [4, 8.5]}"), field: "parameters.lora.rank.int_uniform[1]", msg: "whole number", value: "8.5"},
		{name: "int_uniform backwards", spec: rank("{int_uniform: [8, 4]}"), field: "parameters.lora.rank.int_uniform", msg: "not be above high"},
		{name: "uniform on an int field", spec: rank("{uniform: [4, 8]}"), field: "parameters.lora.rank.uniform", msg: "use grid, choice or int_uniform"},
		{name: "int_uniform on a string field", spec: "parameters: {base_model: {int_uniform: [1, 2]}}\n", field: "parameters.base_model.int_uniform", msg: "use grid or choice"},
		{name: "grid search of a range", spec: "parameters: {training.learning_rate: {log_uniform: [1e-4, 1e-2]}}\n", field: "parameters.training.learning_rate.log_uniform", msg: "grid and choice spaces only"},
		{name: "grid search of int_uniform", spec: "parameters: {lora.rank: {int_uniform: [1, 2]}, training.seed: {grid: [1]}}\nsearch: grid\n", field: "parameters.lora.rank.int_uniform", msg: "grid and choice"},
		{name: "grid over the limit", spec: "parameters: {training.batch_size: {grid: [" + nums(100) + "]}, training.learning_rate: {grid: [" + floats(101) + "]}}\n", field: "parameters", msg: "10100 points", value: "100 × 101"},
		{name: "random without trials", spec: lrGrid + "search: random\n", field: "search.trials", msg: "is required for a random search"},
		{name: "trials 0", spec: lrGrid + "search: {kind: random, trials: 0}\n", field: "search.trials", msg: "between 1 and 10000", value: "0"},
		{name: "trials over the limit", spec: lrGrid + "search: {kind: random, trials: 10001}\n", field: "search.trials", msg: "between 1 and 10000"},
		{name: "trials over the points", spec: lrGrid + "search: {kind: random, trials: 3}\n", field: "search.trials", msg: "more than the 2 distinct points", value: "3"},
		{name: "trials on a grid", spec: lrGrid + "search: {kind: grid, trials: 3}\n", field: "search.trials", msg: "not a setting of a grid search"},
		{name: "unknown search kind", spec: lrGrid + "search: sometimes\n", field: "search", msg: "grid, random or asha", value: "sometimes"},
		{name: "search without kind", spec: lrGrid + "search: {trials: 3}\n", field: "search.kind", msg: "is required"},
		{name: "search unknown key", spec: lrGrid + "search: {kind: grid, rounds: 3}\n", field: "search.rounds", msg: "unknown field"},
		{name: "asha min_steps 0", spec: lrGrid + "search: {kind: asha, trials: 2, min_steps: 0, max_steps: 9}\n", field: "search.min_steps", msg: "between 1 and"},
		{name: "asha max_steps not above min", spec: lrGrid + "search: {kind: asha, trials: 2, min_steps: 9, max_steps: 9}\n", field: "search.max_steps", msg: "above min_steps (9)", value: "9"},
		{name: "asha reduction_factor 1", spec: lrGrid + "search: {kind: asha, trials: 2, min_steps: 1, max_steps: 9, reduction_factor: 1}\n", field: "search.reduction_factor", msg: "between 2 and 100"},
		{name: "asha without steps", spec: lrGrid + "search: {kind: asha, trials: 2}\n", field: "search.min_steps", msg: "is required for an asha search"},
		{name: "asha sweeping max_steps", spec: "parameters: {training.max_steps: {grid: [5, 9]}}\nsearch: {kind: asha, trials: 2, min_steps: 1, max_steps: 9}\n", field: "parameters.training.max_steps", msg: "asha sets every trial's training.max_steps"},
		{name: "median with asha", spec: lrGrid + "search: {kind: asha, trials: 2, min_steps: 1, max_steps: 9, median: {}}\n", field: "search.median", msg: "only of grid and random"},
		{name: "median min_trials 0", spec: lrGrid + "search: {kind: grid, median: {min_trials: 0}}\n", field: "search.median.min_trials", msg: "between 1 and"},
		{name: "median negative grace", spec: lrGrid + "search: {kind: grid, median: {grace_steps: -1}}\n", field: "search.median.grace_steps", msg: "at least 0"},
		{name: "objective goal", spec: lrGrid + "objective: {metric: eval_loss, goal: lowest}\n", field: "objective.goal", msg: "minimize or maximize", value: "lowest"},
		{name: "objective metric", spec: lrGrid + "objective: {metric: Eval-Loss}\n", field: "objective.metric", msg: "lower-case letters, digits and '_'", value: "Eval-Loss"},
		{name: "max_parallel 0", spec: lrGrid + "max_parallel: 0\n", field: "max_parallel", msg: "between 1 and 10000", value: "0"},
		{name: "max_parallel a string", spec: lrGrid + "max_parallel: two\n", field: "max_parallel", msg: "must be an integer", value: "two"},
		{name: "budget negative", spec: lrGrid + "budget_usd: -1\n", field: "budget_usd", msg: "must not be negative", value: "-1"},
		{name: "gpu budget a string", spec: lrGrid + "budget_gpu_hours: lots\n", field: "budget_gpu_hours", msg: "must be a number", value: "lots"},
		{name: "priority", spec: lrGrid + "priority: sometimes\n", field: "priority", msg: "urgent, normal or batch", value: "sometimes"},
		{name: "alias", spec: lrGrid + "name: &n tiny\nfoo: *n\n", field: "name", msg: "anchors are not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			if !tc.noBase {
				spec = baseJob + spec
			}
			s, err := Parse([]byte(spec), Options{})
			if s != nil {
				t.Errorf("Parse returned a Sweep with its error")
			}
			wantField(t, err, tc.field, tc.msg, tc.value)
		})
	}
}

func nums(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%d, ", i+1)
	}
	return strings.TrimSuffix(b.String(), ", ")
}

func floats(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%g, ", float64(i+1)/1000)
	}
	return strings.TrimSuffix(b.String(), ", ")
}

// TestParseReportsEveryProblem: problems in different parts are all
// reported at once.
func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse([]byte(`job: {name: t, base_model: m, dataset: "s3://bucket/k", lora: {rank: 0}}
parameters: {lora.rnk: {grid: [4]}, training.learning_rate: {uniform: [1, 0]}}
search: {kind: random, trials: 0}
max_parallel: -1
priority: later
`), Options{})
	errs := fieldErrors(t, err)
	for _, f := range []string{"job.lora.rank", "parameters.lora.rnk", "parameters.training.learning_rate.uniform", "search.trials", "max_parallel", "priority"} {
		if _, ok := findField(errs, f); !ok {
			t.Errorf("no problem names %s; got %v", f, err)
		}
	}
}

// TestParseDocumentErrors: what is not a mapping, or is too large.
func TestParseDocumentErrors(t *testing.T) {
	for _, in := range []string{"", "- 1\n- 2\n", "a: [\n", "a: 1\n---\nb: 2\n", "null"} {
		_, err := Parse([]byte(in), Options{})
		if fe := fieldErrors(t, err); fe[0].Field != "" {
			t.Errorf("%q: first problem names %q, want the document", in, fe[0].Field)
		}
	}
	big := make([]byte, MaxSpecBytes+1)
	if _, err := Parse(big, Options{}); !errors.Is(err, jobspec.ErrTooLarge) {
		t.Errorf("a %d-byte spec: %v, want ErrTooLarge", len(big), err)
	}
}

// TestParseDefaults: what a spec leaves out.
func TestParseDefaults(t *testing.T) {
	s := mustParse(t, "parameters: {lora.rank: {grid: [4, 8, 16]}, training.learning_rate: {choice: [0.01, 0.02]}}\n")
	want := Sweep{
		Name: "tiny",
		Parameters: []Param{
			{Path: "lora.rank", Kind: KindGrid, Values: []any{int64(4), int64(8), int64(16)}},
			{Path: "training.learning_rate", Kind: KindChoice, Values: []any{0.01, 0.02}},
		},
		Search:      Search{Kind: SearchGrid, Trials: 6},
		Objective:   Objective{Metric: "eval_loss", Goal: "minimize"},
		MaxParallel: 6,
		Priority:    jobspec.PriorityBatch,
	}
	got := *s
	got.Job, got.base = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
	if s.Job == nil || s.Job.Name != "tiny" || s.Job.Priority != jobspec.PriorityBatch {
		t.Errorf("Job = %+v, want the base job named tiny at priority batch", s.Job)
	}
	a := mustParse(t, lrGrid+"search: {kind: asha, trials: 2, min_steps: 1, max_steps: 9}\n")
	if *a.Search.ASHA != (ASHA{MinSteps: 1, MaxSteps: 9, ReductionFactor: 3}) || a.Search.Seed != 0 || a.Search.Median != nil {
		t.Errorf("asha: %+v %+v", a.Search, *a.Search.ASHA)
	}
	if a.Job.Training.MaxSteps != 9 {
		t.Errorf("asha: the base job's max_steps is %d, want search.max_steps 9", a.Job.Training.MaxSteps)
	}
	m := mustParse(t, lrGrid+"search: {kind: grid, median: {}}\nmax_parallel: 1\nname: other\n")
	if *m.Search.Median != (Median{GraceSteps: 0, MinTrials: 3}) || m.MaxParallel != 1 || m.Name != "other" || m.Job.Name != "other" {
		t.Errorf("median: %+v %+v", m, *m.Search.Median)
	}
}

// TestParseJSON: the JSON form of a spec parses as its YAML form does.
func TestParseJSON(t *testing.T) {
	y := mustParse(t, "parameters: {lora.rank: {grid: [4, 8]}, lora.dropout: {uniform: [0, 0.2]}}\nsearch: {kind: random, trials: 5, seed: 7}\n")
	j, err := Parse([]byte(`{"job": {"name": "tiny", "base_model": "tiny-char", "dataset": "s3:\/\/bucket/train.jsonl", "training": {"max_steps": 10}},
		"parameters": {"lora.rank": {"grid": [4, 8]}, "lora.dropout": {"uniform": [0, 0.2]}},
		"search": {"kind": "random", "trials": 5, "seed": 7}}`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mustExpand(t, y), mustExpand(t, j)) {
		t.Error("the JSON spec expands differently from the YAML one")
	}
	_, err = Parse([]byte(`{"job": {"name": "t"}, "name": "a", "name": "b"}`), Options{})
	wantField(t, err, "name", "duplicate key", "b")
}

// TestParseJobPath: a `job:` path is read with ReadJob, and its problems
// are named job.<field>, with the file.
func TestParseJobPath(t *testing.T) {
	files := map[string]string{
		"good.yaml":  "name: tiny\nbase_model: tiny-char\ndataset: s3://bucket/train.jsonl\n",
		"bad.yaml":   "name: tiny\nbase_model: tiny-char\ndataset: s3://bucket/train.jsonl\nlora: {rank: 0}\n",
		"list.yaml":  "- 1\n",
		"empty.yaml": "",
	}
	var asked []string
	read := func(p string) ([]byte, error) {
		asked = append(asked, p)
		if f, ok := files[p]; ok {
			return []byte(f), nil
		}
		return nil, os.ErrNotExist
	}
	s, err := Parse([]byte("job: good.yaml\n"+lrGrid), Options{ReadJob: read})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "tiny" || s.Job.BaseModel != "tiny-char" || !reflect.DeepEqual(asked, []string{"good.yaml"}) {
		t.Errorf("name %q, job %+v, read %v", s.Name, s.Job, asked)
	}
	_, err = Parse([]byte("job: bad.yaml\n"+lrGrid), Options{ReadJob: read})
	wantField(t, err, "job.lora.rank", "between 1 and 1024", "0")
	_, err = Parse([]byte("job: missing.yaml\n"+lrGrid), Options{ReadJob: read})
	wantField(t, err, "job", "cannot read the job spec: file does not exist", "missing.yaml")
	_, err = Parse([]byte("job: list.yaml\n"+lrGrid), Options{ReadJob: read})
	wantField(t, err, "job", "must be a mapping of fields, not a list (in list.yaml)", "")
	_, err = Parse([]byte("job: empty.yaml\n"+lrGrid), Options{ReadJob: read})
	wantField(t, err, "job", "empty document", "")
}

// TestParseReportsEachNonGridSpace: a grid search names every space it
// cannot run, and a bad priority is reported once, not again as the
// job's.
func TestParseReportsEachNonGridSpace(t *testing.T) {
	_, err := Parse([]byte(baseJob+"parameters: {lora.rank: {int_uniform: [1, 4]}, lora.dropout: {uniform: [0, 0.1]}}\npriority: later\n"), Options{})
	errs := fieldErrors(t, err)
	if len(errs) != 3 {
		t.Errorf("%d problems, want 3: %v", len(errs), err)
	}
	for _, f := range []string{"parameters.lora.rank.int_uniform", "parameters.lora.dropout.uniform", "priority"} {
		if _, ok := findField(errs, f); !ok {
			t.Errorf("no problem names %s: %v", f, err)
		}
	}
}

// TestParseNumberOutOfRange: a number too large for a float64 (1e400) is
// out of range, naming the field and the value, in YAML (where yaml.v3
// reads it as a string) and JSON (where it fails to decode) alike: not
// "must be a number, not a string", nor "not a number"; for every place a
// sweep spec takes a number, and in the inline job.
func TestParseNumberOutOfRange(t *testing.T) {
	for _, tc := range []struct{ name, spec, field, value string }{
		{"uniform bound", baseJob + "parameters: {lora.dropout: {uniform: [0, 1e400]}}\n", "parameters.lora.dropout.uniform[1]", "1e400"},
		{"log_uniform bound", baseJob + "parameters: {training.learning_rate: {log_uniform: [1e-4, 1e400]}}\n", "parameters.training.learning_rate.log_uniform[1]", "1e400"},
		{"int_uniform bound", baseJob + "parameters: {lora.rank: {int_uniform: [-1e400, 8]}}\n", "parameters.lora.rank.int_uniform[0]", "-1e400"},
		{"grid value", baseJob + "parameters: {training.learning_rate: {grid: [0.01, 1e400]}}\n", "parameters.training.learning_rate.grid[1]", "1e400"},
		{"choice value", baseJob + "parameters: {training.learning_rate: {choice: [1e400]}}\n", "parameters.training.learning_rate.choice[0]", "1e400"},
		{"budget", baseJob + lrGrid + "budget_usd: 1e400\n", "budget_usd", "1e400"},
		{"integer setting", baseJob + lrGrid + "max_parallel: 1e400\n", "max_parallel", "1e400"},
		{"trials", baseJob + lrGrid + "search: {kind: random, trials: 1e400}\n", "search.trials", "1e400"},
		{"inline job", "job: {name: t, base_model: m, dataset: \"s3://bucket/k\", training: {learning_rate: 1e400}}\n" + lrGrid, "job.training.learning_rate", "1e400"},
		{"JSON bound", `{"job":{"name":"t","base_model":"m","dataset":"s3://bucket/k"},"parameters":{"lora.dropout":{"uniform":[0,1e400]}}}`, "parameters.lora.dropout.uniform[1]", "1e400"},
		{"JSON budget", `{"job":{"name":"t","base_model":"m","dataset":"s3://bucket/k"},"parameters":{"lora.rank":{"grid":[4]}},"budget_gpu_hours":1e400}`, "budget_gpu_hours", "1e400"},
		{"JSON inline job", `{"job":{"name":"t","base_model":"m","dataset":"s3://bucket/k","training":{"learning_rate":1e400}},"parameters":{"lora.rank":{"grid":[4]}}}`, "job.training.learning_rate", "1e400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.spec), Options{})
			wantField(t, err, tc.field, jobspec.MsgOutOfRange, tc.value)
		})
	}
	// A whole number past int64 is out of the int64 range, not "not whole".
	_, err := Parse([]byte(baseJob+lrGrid+"max_parallel: 99999999999999999999\n"), Options{})
	wantField(t, err, "max_parallel", "must be an integer in the int64 range", "99999999999999999999")
	// Quoted, it is a string, as before.
	_, err = Parse([]byte(baseJob+lrGrid+"budget_usd: \"1e400\"\n"), Options{})
	wantField(t, err, "budget_usd", "must be a number, not a string", "1e400")
}
