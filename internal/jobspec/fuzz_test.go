package jobspec

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error it returns is
// one a caller can branch on, and that every spec it accepts is valid and
// survives JSON() → Parse unchanged. The seed corpus is in
// testdata/fuzz/FuzzParse plus the f.Add calls below.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		designExample,
		minimal,
		minimal + "lora: {rank: -4}\nfoo: 1\npriority: sometimes\n",
		minimal + "max_wait: 1d12h\nmax_runtime: 0\nresidency: []\n",
		`{"name":"j","base_model":"m","dataset":"s3://bucket/key","training":{"max_steps":10}}`,
		`{"name":"j","name":"k"}`,
		"a: &a [1]\nb: *a\n",
		"- 1\n- 2\n",
		"",
		"---\n---\n",
		minimal + "lora: {alpha: .nan, rank: 0x10, dropout: 1e-1}\n",
		minimal + "resources: {gpu_models: [\"RTX 4090\"], gpus: 8.0}\n",
		"{\"name\":\"a\xffb\",\"base_model\":\"m\",\"dataset\":\"s3://bucket/key\"}",
		`{"name":"j","base_model":"m\ud800","dataset":"s3://bucket/key","training":{"learning_rate":1e400}}`,
		minimal + "training: {learning_rate: -1e400}\nlora: {rank: 1e400}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Parse error %T %v is neither *ValidationError nor ErrTooLarge", err, err)
			}
			if ve != nil && len(ve.Errors) == 0 {
				t.Fatalf("empty ValidationError")
			}
			if s != nil {
				t.Fatalf("Parse returned a spec with its error")
			}
			return
		}
		if errs := s.Validate(); len(errs) != 0 {
			t.Fatalf("Parse accepted a spec that Validate refuses: %v", errs)
		}
		j := s.JSON()
		s2, err := Parse(j)
		if err != nil {
			t.Fatalf("Parse(JSON()) failed: %v\nJSON: %s", err, j)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip changed the spec\n first %+v\nsecond %+v\n  JSON %s", s, s2, j)
		}
		if j2 := s2.JSON(); string(j2) != string(j) {
			t.Fatalf("JSON not canonical\n%s\n%s", j, j2)
		}
		c := s.Clone()
		c.Normalize(Defaults{Residency: []string{"onprem"}})
		n := c.Clone()
		n.Normalize(Defaults{Residency: []string{"other"}})
		if !reflect.DeepEqual(c, n) {
			t.Fatalf("Normalize not idempotent")
		}
	})
}
