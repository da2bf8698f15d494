package sweepspec

import (
	"bytes"
	"errors"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// FuzzParse checks that Parse never panics, that every error it returns
// is a *jobspec.ValidationError (or ErrTooLarge), that every sweep it
// accepts survives JSON → Parse with the same canonical JSON, and that
// Expand of an accepted sweep does not panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		baseJob + "parameters: {lora.rank: {grid: [4, 8]}, training.learning_rate: {choice: [0.01, 0.02]}}\n",
		baseJob + "parameters: {training.learning_rate: {log_uniform: [1e-4, 1e-2]}, lora.dropout: {uniform: [0, 0.2]}}\nsearch: {kind: random, trials: 5, seed: 7, median: {}}\n",
		baseJob + "parameters: {lora.rank: {int_uniform: [1, 9]}}\nsearch: {kind: asha, trials: 9, min_steps: 1, max_steps: 9}\nmax_parallel: 2\nbudget_usd: 3\n",
		baseJob + "parameters: {lora.rank: {grid: [4, 4.0, .nan]}}\nsearch: sometimes\n",
		`{"job": {"name": "t", "base_model": "m", "dataset": "s3://bucket/k"}, "parameters": {"lora.rank": {"grid": [1, 2]}}}`,
		"job: &a {}\nparameters: *a\n",
		"job: ./x.yaml\n",
		"",
		"- 1\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, Options{})
		if err != nil {
			var ve *jobspec.ValidationError
			if !errors.As(err, &ve) && !errors.Is(err, jobspec.ErrTooLarge) {
				t.Fatalf("Parse error %T %v is neither *ValidationError nor ErrTooLarge", err, err)
			}
			if ve != nil && len(ve.Errors) == 0 {
				t.Fatal("ValidationError without problems")
			}
			return
		}
		again, err := Parse(s.JSON(), Options{})
		if err != nil {
			t.Fatalf("Parse(JSON()) of an accepted sweep: %v\n%s", err, s.JSON())
		}
		if !bytes.Equal(again.JSON(), s.JSON()) {
			t.Fatalf("JSON changed in a round trip:\n%s\n%s", s.JSON(), again.JSON())
		}
		if s.Search.Trials <= 100 {
			_, _ = s.Expand() // must not panic; invalid combinations are errors
		}
	})
}
