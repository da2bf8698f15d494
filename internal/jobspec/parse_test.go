package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// designExample is the job spec of docs/design.md ("Job spec"), verbatim.
const designExample = `name: support-bot-lora
base_model: tiny-char            # built-in demo model, or a Hugging Face id
dataset: file:///data/support/train.jsonl   # file:// (under an allowed root) or s3://
eval_dataset: file:///data/support/eval.jsonl
lora: {rank: 16, alpha: 32, dropout: 0.05, target_modules: [q_proj, v_proj]}
training: {epochs: 3, learning_rate: 2.0e-4, batch_size: 8, max_steps: 0, seed: 42}
resources: {gpus: 1, gpu_memory_gb: 24, gpu_models: [A100, H100]}
residency: [onprem, eu]          # every tag must be carried by every site the job touches
priority: normal                 # urgent | normal | batch (sweeps default to batch)
max_wait: 2h                     # then burst, if residency allows
max_runtime: 8h
budget_usd: 50
trainer: reference               # a named trainer from the daemon's config
output: {uri: file:///models/support-bot, formats: [safetensors]}   # a per-job subfolder is made
`

// minimal holds the required fields only.
const minimal = `name: tiny
base_model: tiny-char
dataset: file:///data/train.jsonl
`

// mustParse parses src and fails the test on error.
func mustParse(t *testing.T, src string) *Spec {
	t.Helper()
	s, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return s
}

// fieldErrors parses src, which must fail with a *ValidationError, and
// returns its errors.
func fieldErrors(t *testing.T, src string) []FieldError {
	t.Helper()
	s, err := Parse([]byte(src))
	if err == nil {
		t.Fatalf("Parse(%q) = %+v, want an error", src, s)
	}
	if s != nil {
		t.Errorf("Parse returned a spec with its error")
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse(%q) error %T %v, want *ValidationError", src, err, err)
	}
	if len(ve.Errors) == 0 {
		t.Fatalf("ValidationError with no errors")
	}
	return ve.Errors
}

func TestParseDesignExample(t *testing.T) {
	got := mustParse(t, designExample)
	want := validSpec()
	want.EvalDataset = "file:///data/support/eval.jsonl"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(design example)\n got %+v\nwant %+v", got, want)
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	src := minimal + "lora: {rank: -4}\nfoo: 1\npriority: sometimes\n"
	got := fieldErrors(t, src)
	want := []FieldError{
		{Field: "foo", Value: "1", Message: "unknown field"},
		{Field: "lora.rank", Value: "-4", Message: "must be between 1 and 1024"},
		{Field: "priority", Value: "sometimes", Message: "must be urgent, normal or batch"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors\n got %+v\nwant %+v", got, want)
	}
	// The API returns these as JSON.
	b, _ := json.Marshal(&ValidationError{Errors: got[:1]})
	if string(b) != `{"fields":[{"field":"foo","value":"1","message":"unknown field"}]}` {
		t.Errorf("JSON = %s", b)
	}
}

func TestParseJSON(t *testing.T) {
	want := mustParse(t, designExample)
	if got := mustParse(t, designJSON); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(JSON)\n got %+v\nwant %+v", got, want)
	}

	// JSON errors carry the same paths and values as YAML ones.
	got := fieldErrors(t, `{"name": "x", "base_model": "m", "dataset": "file:///d", "lora": {"rank": "abc"}, "residency": ["eu", 3], "name": "y"}`)
	want2 := []FieldError{
		{Field: "lora.rank", Value: "abc", Message: "must be an integer, not a string"},
		{Field: "residency[1]", Value: "3", Message: "must be a string, not an integer (put it in quotes)"},
		{Field: "name", Value: "y", Message: "duplicate key"},
	}
	if !reflect.DeepEqual(got, want2) {
		t.Errorf("errors\n got %+v\nwant %+v", got, want2)
	}
}

// TestParseGGUF: the GGUF formats pass for a base model other than
// tiny-char (the trainer checks, before training, that llama.cpp can
// represent it).
func TestParseGGUF(t *testing.T) {
	s := mustParse(t, strings.Replace(minimal, "base_model: tiny-char", "base_model: meta-llama/Llama-3.2-1B", 1)+
		"output: {formats: [gguf, safetensors, gguf-merged]}\n")
	if want := []string{FormatGGUF, FormatSafetensors, FormatGGUFMerged}; !reflect.DeepEqual(s.Output.Formats, want) {
		t.Errorf("output.formats = %q, want %q", s.Output.Formats, want)
	}
}

func TestParseDefaults(t *testing.T) {
	got := mustParse(t, minimal)
	want := &Spec{
		Name: "tiny", BaseModel: "tiny-char", Dataset: "file:///data/train.jsonl",
		LoRA:     LoRA{Rank: 8, Alpha: 16, Dropout: 0.05, TargetModules: []string{"q_proj", "v_proj"}},
		Training: Training{Epochs: 1, LearningRate: 2e-4, BatchSize: 8, Seed: 42},
		Priority: PriorityNormal, Trainer: "reference",
		Output: Output{Formats: []string{"safetensors"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(minimal)\n got %+v\nwant %+v", got, want)
	}

	cases := []struct {
		name, extra string
		check       func(*Spec) bool
	}{
		{"alpha follows rank", "lora: {rank: 32}", func(s *Spec) bool { return s.LoRA.Alpha == 64 }},
		{"alpha given", "lora: {rank: 32, alpha: 8}", func(s *Spec) bool { return s.LoRA.Alpha == 8 }},
		{"dropout 0 kept", "lora: {dropout: 0}", func(s *Spec) bool { return s.LoRA.Dropout == 0 }},
		{"max_steps without epochs", "training: {max_steps: 100}", func(s *Spec) bool { return s.Training.Epochs == 0 && s.Training.MaxSteps == 100 }},
		{"max_steps 0 without epochs", "training: {max_steps: 0}", func(s *Spec) bool { return s.Training.Epochs == 1 }},
		{"seed 0 kept", "training: {seed: 0}", func(s *Spec) bool { return s.Training.Seed == 0 }},
		{"null is absent", "lora: {rank: null, alpha: ~}\ntraining:\ntrainer: null", func(s *Spec) bool {
			return s.LoRA.Rank == 8 && s.LoRA.Alpha == 16 && s.Training.BatchSize == 8 && s.Trainer == "reference"
		}},
		{"empty residency", "residency: []", func(s *Spec) bool { return s.Residency == nil }},
		{"empty gpu_models", "resources: {gpu_models: []}", func(s *Spec) bool { return s.Resources.GPUModels == nil }},
		{"priority batch", "priority: batch", func(s *Spec) bool { return s.Priority == PriorityBatch }},
		{"day durations", "max_wait: 2d\nmax_runtime: 1d12h", func(s *Spec) bool {
			return s.MaxWait.D() == 48*time.Hour && s.MaxRuntime.D() == 36*time.Hour
		}},
		{"zero duration", "max_wait: 0", func(s *Spec) bool { return s.MaxWait == 0 }},
		{"yaml integer forms", "lora: {rank: 0x10}\ntraining: {batch_size: 1_024, epochs: 2.0}", func(s *Spec) bool {
			return s.LoRA.Rank == 16 && s.Training.BatchSize == 1024 && s.Training.Epochs == 2
		}},
		{"float from integer", "lora: {alpha: 7}\nbudget_usd: 1e3", func(s *Spec) bool { return s.LoRA.Alpha == 7 && s.BudgetUSD == 1000 }},
		{"quoted keys", `"name": tiny2`, func(s *Spec) bool { return s.Name == "tiny2" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.extra + "\n" + minimal
			if strings.HasPrefix(tc.extra, `"name"`) {
				src = strings.Replace(minimal, "name: tiny", tc.extra, 1)
			}
			s := mustParse(t, src)
			if !tc.check(s) {
				t.Errorf("Parse(%q) = %+v", src, s)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		src  string // minimal is prepended unless it starts with "!"
		want []FieldError
	}{
		{"wrong type int", "lora: {rank: \"abc\"}", []FieldError{{"lora.rank", "abc", "must be an integer, not a string"}}},
		{"fraction for int", "lora: {rank: 1.5}", []FieldError{{"lora.rank", "1.5", "must be a whole number"}}},
		{"huge int", "training: {seed: 99999999999999999999}", []FieldError{{"training.seed", "99999999999999999999", "must be an integer in the int64 range"}}},
		{"list for int", "lora: {rank: [1, 2]}", []FieldError{{"lora.rank", "[1, 2]", "must be an integer, not a list"}}},
		{"bool for int", "resources: {gpus: yes}", []FieldError{{"resources.gpus", "yes", "must be an integer, not a string"}}},
		{"string for float", "lora: {alpha: high}", []FieldError{{"lora.alpha", "high", "must be a number, not a string"}}},
		{"number for string", "trainer: 123", []FieldError{{"trainer", "123", "must be a string, not an integer (put it in quotes)"}}},
		{"bool for string", "trainer: true", []FieldError{{"trainer", "true", "must be a string, not a boolean (put it in quotes)"}}},
		{"unquoted gpu model", "resources: {gpu_models: [A100, 4090]}", []FieldError{{"resources.gpu_models[1]", "4090", "must be a string, not an integer (put it in quotes)"}}},
		{"scalar for list", "residency: eu", []FieldError{{"residency", "eu", "must be a list of strings, not a string"}}},
		{"mapping for list", "residency: {eu: 1}", []FieldError{{"residency", "{eu: 1}", "must be a list of strings, not a mapping"}}},
		{"null in list", "residency: [eu, null]", []FieldError{{"residency[1]", "null", "must be a string, not null"}}},
		{"scalar for struct", "lora: 5", []FieldError{{"lora", "5", "must be a mapping, not an integer"}}},
		{"timestamp for duration", "max_wait: 2001-12-14", []FieldError{{"max_wait", "2001-12-14", `must be a duration such as "90m", "2h" or "1d12h", not a timestamp`}}},
		{"negative duration", "max_wait: -2h", []FieldError{{"max_wait", "-2h", "must not be negative"}}},
		{"unit-less duration", "max_runtime: 3600", []FieldError{{"max_runtime", "3600", `must be a duration such as "90m", "2h" or "1d12h"`}}},
		{"bad duration", "max_runtime: soon", []FieldError{{"max_runtime", "soon", `must be a duration such as "90m", "2h" or "1d12h"`}}},
		{"nan", "lora: {alpha: .nan}", []FieldError{{"lora.alpha", ".nan", "must be a finite number"}}},
		{"inf", "budget_usd: -.inf", []FieldError{{"budget_usd", "-.inf", "must be a finite number"}}},
		{"value as written", "lora: {dropout: 1e0}", []FieldError{{"lora.dropout", "1e0", "must be at least 0 and less than 1"}}},
		{"unknown nested", "training: {epochs: 1, foo: bar}", []FieldError{{"training.foo", "bar", "unknown field"}}},
		{"unknown top", "Name: x", []FieldError{{"Name", "x", "unknown field"}}},
		{"unknown with mapping value", "extra: {a: [1, 2], b: c}", []FieldError{{"extra", "{a: [1, 2], b: c}", "unknown field"}}},
		{"non-string key", "1: x", []FieldError{{"1", "x", "unknown field"}}},
		{"complex key", "? [a, b]\n: x", []FieldError{{"[a, b]", "x", "keys must be strings, not a list"}}},
		{"duplicate key", "trainer: a\ntrainer: b", []FieldError{{"trainer", "b", "duplicate key"}}},
		{"duplicate nested key", "lora: {rank: 4, rank: 5}", []FieldError{{"lora.rank", "5", "duplicate key"}}},
		{"custom tag", "trainer: !foo bar", []FieldError{{"trainer", "bar", "must be a string, not a value tagged !foo (put it in quotes)"}}},
		{"zero rank given is not defaulted", "lora: {rank: 0}", []FieldError{{"lora.rank", "0", "must be between 1 and 1024"}}},
		{"empty target_modules given is not defaulted", "lora: {target_modules: []}", []FieldError{{"lora.target_modules", "", "must list at least one module"}}},
		{"zero epochs given", "training: {epochs: 0}", []FieldError{{"training.epochs", "0", "must be at least 1 when training.max_steps is 0"}}},
		{"bad rank leaves alpha alone", "lora: {rank: 2000}", []FieldError{{"lora.rank", "2000", "must be between 1 and 1024"}}},
		{"stop_at_step is Lathe's", "training: {max_steps: 100, stop_at_step: 5e1}", []FieldError{{"training.stop_at_step", "5e1",
			"is set by Lathe for a sweep's ASHA rungs and must not be given in a job spec"}}},
		{"unknown format", "output: {formats: [safetensors, onnx]}", []FieldError{{"output.formats[1]", "onnx", `unknown format "onnx" (known: safetensors, gguf, gguf-merged)`}}},
		{"gguf of tiny-char", "output: {formats: [safetensors, gguf-merged, gguf]}", []FieldError{
			{"output.formats[1]", "gguf-merged", "gguf-merged needs a llama-family base model; tiny-char is Lathe's built-in demo model, which llama.cpp cannot represent"},
			{"output.formats[2]", "gguf", "gguf needs a llama-family base model; tiny-char is Lathe's built-in demo model, which llama.cpp cannot represent"}}},
		{"name missing", "!base_model: m\ndataset: file:///d", []FieldError{{"name", "", "is required"}}},
		{"everything missing", "!{}", []FieldError{
			{"name", "", "is required"}, {"base_model", "", "is required"}, {"dataset", "", "is required"}}},
		{"empty", "!", []FieldError{{"", "", "empty document: a job spec is a mapping of fields (name, base_model, dataset, …)"}}},
		{"comment only", "!# nothing\n", []FieldError{{"", "", "empty document: a job spec is a mapping of fields (name, base_model, dataset, …)"}}},
		{"null document", "!---\n~\n", []FieldError{{"", "", "empty document: a job spec is a mapping of fields (name, base_model, dataset, …)"}}},
		{"top-level list", "!- a\n- b\n", []FieldError{{"", "[a, b]", "a job spec must be a mapping of fields, not a list"}}},
		{"top-level scalar", "!hello", []FieldError{{"", "hello", "a job spec must be a mapping of fields, not a string"}}},
		{"JSON top-level list", `![{"name": "x"}]`, []FieldError{{"", "[{name: x}]", "a job spec must be a mapping of fields, not a list"}}},
		{"two documents", "!name: a\n---\nname: b\n", []FieldError{{"", "", "more than one YAML document: a job spec is one document"}}},
		{"bad YAML", "!name: [a\n", []FieldError{{"", "", "invalid YAML: line 1: did not find expected ',' or ']'"}}},
		{"bad JSON is read as YAML", `!{"name": "a",, }`, []FieldError{{"", "", "invalid YAML: did not find expected node content"}}},
		{"anchor and alias", "lora: &l {rank: 4}\ntraining: *l", []FieldError{
			{"lora", "&l", "YAML anchors are not allowed"}, {"training", "*l", "YAML aliases are not allowed"}}},
		{"alias in unknown field", "x: &a [1]\ny: [*a, *a]", []FieldError{
			{"x", "&a", "YAML anchors are not allowed"}, {"y[0]", "*a", "YAML aliases are not allowed"}, {"y[1]", "*a", "YAML aliases are not allowed"}}},
		{"merge key", "base: &b {rank: 4}\nlora:\n  <<: *b", []FieldError{
			{"base", "&b", "YAML anchors are not allowed"}, {"lora.<<", "*b", "YAML aliases are not allowed"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := minimal + tc.src
			if strings.HasPrefix(tc.src, "!") {
				src = tc.src[1:]
			}
			got := fieldErrors(t, src)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%q) errors\n got %+v\nwant %+v", src, got, tc.want)
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	src := minimal + "#" + strings.Repeat("x", MaxSpecBytes) + "\n"
	_, err := Parse([]byte(src))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Parse(%d bytes) = %v, want ErrTooLarge", len(src), err)
	}
	// Exactly the limit is fine.
	pad := MaxSpecBytes - len(minimal) - 2
	if _, err := Parse([]byte(minimal + "#" + strings.Repeat("x", pad) + "\n")); err != nil {
		t.Fatalf("Parse(MaxSpecBytes bytes): %v", err)
	}
}

func TestParseCapsErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString(minimal)
	for i := range 500 {
		fmt.Fprintf(&b, "k%d: %d\n", i, i)
	}
	got := fieldErrors(t, b.String())
	if len(got) != maxErrors+1 {
		t.Fatalf("got %d errors, want %d", len(got), maxErrors+1)
	}
	if last := got[maxErrors]; last.Field != "" || !strings.Contains(last.Message, "more problems") {
		t.Errorf("last error = %+v", last)
	}
}

func TestParseTruncatesValues(t *testing.T) {
	got := fieldErrors(t, minimal+"extra: "+strings.Repeat("é", 5000)+"\n")
	if v := got[0].Value; v != strings.Repeat("é", maxValueLen)+"…" {
		t.Errorf("Value = %q (%d bytes)", v, len(v))
	}
	got = fieldErrors(t, minimal+"extra: "+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)+"\n")
	if v := got[0].Value; len([]rune(v)) != maxValueLen+1 {
		t.Errorf("Value = %q", v)
	}
}

// TestParseHostileInputs checks that inputs made to be expensive stay cheap
// and fail cleanly.
func TestParseHostileInputs(t *testing.T) {
	bomb := "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" +
		"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n" +
		"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
	inputs := map[string]string{
		"alias bomb":   bomb,
		"deep lists":   strings.Repeat("[", 9000) + strings.Repeat("]", 9000),
		"too deep":     strings.Repeat("[", 20000),
		"deep maps":    "x: " + strings.Repeat("{a: ", 5000) + "1" + strings.Repeat("}", 5000),
		"deep JSON":    `{"x": ` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`,
		"long list":    minimal + "residency: [" + strings.Repeat("eu, ", 200000) + "]",
		"many anchors": "x: [" + strings.Repeat("&a 1, ", 100000) + "]",
	}
	for name, src := range inputs {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(src))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse error %v, want *ValidationError", err)
			}
			if len(ve.Errors) > maxErrors+1 {
				t.Errorf("%d errors", len(ve.Errors))
			}
		})
	}
}

func TestParseRoundTrip(t *testing.T) {
	srcs := []string{
		designExample,
		minimal,
		minimal + "lora: {rank: 1024, alpha: 0.5, dropout: 0, target_modules: [model.layers.0.q_proj]}\n" +
			"training: {epochs: 0, max_steps: 500, learning_rate: 1, batch_size: 65536, seed: -9223372036854775808, checkpoint_every: 50, eval_every: 25}\n" +
			"resources: {gpus: 64, gpu_memory_gb: 79.5, gpu_models: [\"RTX 4090\", \"ü-GPU\"]}\n" +
			"residency: [a, b-1]\npriority: urgent\nmax_wait: 1.5d\nmax_runtime: 1ns\nbudget_usd: 1e-9\n" +
			"trainer: x_y-z\noutput: {uri: \"s3://lathe-models\"}\n",
		`{"name":"j","base_model":"org/model<&>","dataset":"s3://b-b/k<>&","eval_dataset":"","residency":[]}`,
		minimal + "lora: {alpha: 1.7976931348623157e+308, dropout: 5e-324}\nbudget_usd: 12345678901234567890123\n" +
			"resources: {gpu_memory_gb: -0.0}\ntraining: {learning_rate: 0.1, epochs: 9223372036854775807}\n",
		minimal + "max_wait: 2562047h47m16.854775807s\nmax_runtime: 106751d\nresources: {gpu_models: [\"\\u00e9<&>\"]}\n",
	}
	for i, src := range srcs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s1 := mustParse(t, src)
			j1 := s1.JSON()
			s2 := mustParse(t, string(j1))
			if !reflect.DeepEqual(s1, s2) {
				t.Errorf("round trip changed the spec\n  first %+v\n second %+v\n   JSON %s", s1, s2, j1)
			}
			if j2 := s2.JSON(); !bytes.Equal(j1, j2) {
				t.Errorf("JSON not canonical:\n%s\n%s", j1, j2)
			}
		})
	}
}

// TestParseRoundTripRandom builds random valid specs, with values drawn
// across each field's whole range (extreme floats, non-ASCII strings), and
// checks that JSON → Parse gives each back unchanged.
func TestParseRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(alphabet []rune, n int) string {
		r := make([]rune, n)
		for i := range r {
			r[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(r)
	}
	lower := []rune("abcdefghijklmnopqrstuvwxyz0123456789")
	wide := []rune("aZ09_./-<>&\"'\\ü€😀")
	float := func(lo, hi float64) float64 {
		switch rng.IntN(4) {
		case 0:
			return lo + (hi-lo)*rng.Float64()
		case 1:
			return math.Nextafter(hi, lo)
		case 2:
			return math.Nextafter(lo, hi)
		}
		return math.Float64frombits(rng.Uint64()&0x000fffffffffffff | 0x3fe0000000000000) // in [0.5, 1)
	}
	for i := range 2000 {
		s := validSpec()
		s.Name = pick(lower, 1+rng.IntN(20))
		s.BaseModel = pick(wide[:len(wide)-1], 1+rng.IntN(30))
		if rng.IntN(2) == 0 {
			s.Dataset = "file:///" + pick(lower, 1+rng.IntN(10))
		}
		s.LoRA.Rank = 1 + rng.IntN(maxRank)
		s.LoRA.Alpha = float(math.SmallestNonzeroFloat64, math.MaxFloat64)
		s.LoRA.Dropout = float(0, 1) * 0.999
		s.Training.Seed = int64(rng.Uint64())
		s.Training.LearningRate = float(math.SmallestNonzeroFloat64, 1)
		s.Training.MaxSteps = rng.IntN(1 << 30)
		s.Resources.GPUMemoryGB = float(0, math.MaxFloat64)
		s.Resources.GPUModels = []string{pick(wide, 1+rng.IntN(10)) + "x"}
		s.BudgetUSD = float(0, 1e12)
		s.MaxWait = Duration(rng.Int64())
		s.MaxRuntime = Duration(rng.Int64N(int64(1000 * time.Hour)))
		if rng.IntN(3) == 0 {
			s.Residency = nil
		}
		if errs := s.Validate(); len(errs) != 0 {
			t.Fatalf("case %d: generated an invalid spec: %v", i, errs)
		}
		j := s.JSON()
		got, err := Parse(j)
		if err != nil {
			t.Fatalf("case %d: Parse(%s): %v", i, j, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("case %d: round trip changed the spec\n want %+v\n  got %+v\n JSON %s", i, s, got, j)
		}
	}
}

// TestParseJSONRefusesBadText: bytes that are not UTF-8, and \u escapes of
// lone UTF-16 surrogates, are refused with where they are, as the YAML path
// refuses them; encoding/json alone would turn either into U+FFFD.
func TestParseJSONRefusesBadText(t *testing.T) {
	const base = `{"base_model":"tiny-char","dataset":"file:///d/x.jsonl",`
	for _, tc := range []struct {
		name, src, want string
	}{
		{"bad byte in a value", base + "\"name\":\"a\xffb\"}", "invalid JSON: not UTF-8 at line 1, column 66 (byte 65): a job spec must be UTF-8 text"},
		{"bad byte in a key", base + "\n\"na\xc3me\":\"ab\"}", "invalid JSON: not UTF-8 at line 2, column 4 (byte 60): a job spec must be UTF-8 text"},
		{"truncated sequence at the end of a string", base + "\"name\":\"ab\xe2\x82\"}", "invalid JSON: not UTF-8 at line 1, column 67 (byte 66)"},
		{"lone high surrogate", base + `"name":"ab\ud800"}`, `invalid JSON: \ud800 at line 1, column 67 (byte 66) is half a UTF-16 surrogate pair, not a character`},
		{"lone low surrogate", base + `"name":"\udc00ab"}`, `invalid JSON: \udc00 at line 1, column 65 (byte 64) is half a UTF-16 surrogate pair`},
		{"high surrogate then a letter", base + `"name":"\ud83dx"}`, `invalid JSON: \ud83d at line 1, column 65 (byte 64) is half a UTF-16 surrogate pair`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fieldErrors(t, tc.src)
			if len(got) != 1 || got[0].Field != "" || !strings.HasPrefix(got[0].Message, tc.want) {
				t.Errorf("Parse(%q) errors %+v, want one document error %q", tc.src, got, tc.want)
			}
		})
	}
	// A real pair, and an escaped backslash before a u, are fine.
	s := mustParse(t, `{"name":"ab","dataset":"file:///d/x.jsonl","base_model":"x\ud83d\ude00\\ud800"}`)
	if s.BaseModel != "x\U0001F600\\ud800" {
		t.Errorf("base_model %q", s.BaseModel)
	}
}

// TestParseNumberOutOfRange: a number too large for a float64 is out of
// range, in JSON and YAML alike (not "must be a number, not a number").
func TestParseNumberOutOfRange(t *testing.T) {
	for _, src := range []string{
		minimal + "training: {learning_rate: 1e400}\n",
		`{"name":"tiny","base_model":"tiny-char","dataset":"file:///d/x.jsonl","training":{"learning_rate":1e400}}`,
	} {
		got := fieldErrors(t, src)
		want := []FieldError{{"training.learning_rate", "1e400", MsgOutOfRange}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) errors\n got %+v\nwant %+v", src, got, want)
		}
	}
	for _, src := range []string{
		minimal + "budget_usd: -1e400\n",
		`{"name":"tiny","base_model":"tiny-char","dataset":"file:///d/x.jsonl","budget_usd":-1e400}`,
	} {
		got := fieldErrors(t, src)
		want := []FieldError{{"budget_usd", "-1e400", MsgOutOfRange}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) errors\n got %+v\nwant %+v", src, got, want)
		}
	}
	// An integer field given 1e400 is out of range too.
	got := fieldErrors(t, minimal+"lora: {rank: 1e400}\n")
	if want := []FieldError{{"lora.rank", "1e400", MsgOutOfRange}}; !reflect.DeepEqual(got, want) {
		t.Errorf("rank 1e400: %+v", got)
	}
	// A quoted one is a string, as before.
	got = fieldErrors(t, minimal+"training: {learning_rate: \"1e400\"}\n")
	if want := []FieldError{{"training.learning_rate", "1e400", "must be a number, not a string"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("quoted 1e400: %+v", got)
	}
}
