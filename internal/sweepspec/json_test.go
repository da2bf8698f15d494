package sweepspec

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestInlineRoundTrip: Inline replaces a `job:` path with the job it
// names; what it returns parses without ReadJob, expands to the same
// trials, and is its own canonical form.
func TestInlineRoundTrip(t *testing.T) {
	read := func(p string) ([]byte, error) {
		if p != "jobs/tiny.yaml" {
			return nil, os.ErrNotExist
		}
		return []byte("name: tiny\nbase_model: tiny-char\ndataset: s3://bucket/train.jsonl\ntraining: {max_steps: 10, learning_rate: 1e-2}\n"), nil
	}
	spec := []byte(`name: round
job: jobs/tiny.yaml
parameters:
  lora.rank: {grid: [4, 8]}
  training.learning_rate: {choice: [1.0, 0.5, 1e-3]}
search: {kind: grid, median: {grace_steps: 20}}
budget_usd: 12.5
`)
	out, err := Inline(spec, read)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("Inline's output is not JSON: %v\n%s", err, out)
	}
	job, ok := doc["job"].(map[string]any)
	if !ok || job["base_model"] != "tiny-char" || job["training"].(map[string]any)["learning_rate"] != 1e-2 {
		t.Errorf("job is not inline: %s", out)
	}
	again, err := Parse(out, Options{})
	if err != nil {
		t.Fatalf("Parse(Inline): %v\n%s", err, out)
	}
	orig, err := Parse(spec, Options{ReadJob: read})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mustExpand(t, again), mustExpand(t, orig)) {
		t.Error("the inlined sweep expands differently")
	}
	if !bytes.Equal(again.JSON(), out) {
		t.Errorf("JSON is not canonical:\n%s\n%s", out, again.JSON())
	}
	if _, err := Inline([]byte("job: nowhere.yaml\n"+lrGrid), read); err == nil {
		t.Error("Inline of a sweep whose job cannot be read succeeded")
	} else {
		wantField(t, err, "job", "cannot read", "nowhere.yaml")
	}
}

// TestJSONRoundTrip: for every search and space kind, Parse(s.JSON())
// gives the same sweep.
func TestJSONRoundTrip(t *testing.T) {
	for _, spec := range []string{
		"parameters: {lora.rank: {grid: [4, 8]}, base_model: {choice: [a, b]}, resources.gpu_memory_gb: {grid: [0, 40.5]}}\nsearch: grid\nmax_parallel: 1\npriority: urgent\n",
		"parameters: {training.learning_rate: {log_uniform: [1e-4, 0.1]}, lora.dropout: {uniform: [0, 0.5]}, training.seed: {int_uniform: [-5, 5]}, max_runtime: {choice: [1h, 90m]}}\nsearch: {kind: random, trials: 9, seed: -3, median: {min_trials: 2}}\nbudget_gpu_hours: 3\nobjective: {metric: train_loss, goal: maximize}\n",
		"parameters: {lora.rank: {int_uniform: [1, 64]}}\nsearch: {kind: asha, trials: 30, seed: 5, min_steps: 3, max_steps: 81, reduction_factor: 4}\n",
	} {
		s := mustParse(t, spec)
		again, err := Parse(s.JSON(), Options{})
		if err != nil {
			t.Fatalf("%s\nParse(JSON): %v\n%s", spec, err, s.JSON())
		}
		if !reflect.DeepEqual(again, s) {
			t.Errorf("%s\nround trip:\n got %+v\nwant %+v", spec, again, s)
		}
		if !strings.HasPrefix(string(s.JSON()), `{"name":"tiny","job":{`) {
			t.Errorf("JSON: %s", s.JSON())
		}
	}
}
