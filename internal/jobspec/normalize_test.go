package jobspec

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNormalize(t *testing.T) {
	d := Defaults{
		Priority:   PriorityBatch,
		Trainer:    "axolotl",
		MaxRuntime: 12 * time.Hour,
		Residency:  []string{"onprem"},
		OutputURI:  "file:///srv/lathe/artifacts",
	}
	s := mustParse(t, minimal)
	s.Normalize(d)
	if !reflect.DeepEqual(s.Residency, []string{"onprem"}) || s.MaxRuntime.D() != 12*time.Hour ||
		s.Output.URI != "file:///srv/lathe/artifacts" {
		t.Errorf("Normalize filled %+v", s)
	}
	// Parse already chose priority and trainer; Normalize keeps them.
	if s.Priority != PriorityNormal || s.Trainer != "reference" {
		t.Errorf("Normalize replaced priority/trainer: %q %q", s.Priority, s.Trainer)
	}
	if errs := s.Validate(); len(errs) != 0 {
		t.Errorf("normalised spec invalid: %v", errs)
	}

	// Normalize copies the default residency.
	d.Residency[0] = "changed"
	if s.Residency[0] != "onprem" {
		t.Errorf("Normalize kept a reference to Defaults.Residency")
	}

	// Idempotent.
	before := s.Clone()
	s.Normalize(Defaults{Residency: []string{"other"}, MaxRuntime: time.Hour, OutputURI: "s3://other-bucket"})
	if !reflect.DeepEqual(s, before) {
		t.Errorf("second Normalize changed the spec:\n%+v\n%+v", before, s)
	}

	// What the user set wins.
	s = mustParse(t, minimal+"residency: [eu]\nmax_runtime: 1h\noutput: {uri: \"s3://mine\"}\n")
	s.Normalize(d)
	if !reflect.DeepEqual(s.Residency, []string{"eu"}) || s.MaxRuntime.D() != time.Hour || s.Output.URI != "s3://mine" {
		t.Errorf("Normalize overrode the user: %+v", s)
	}

	// Empty priority and trainer take d's, or the built-in defaults.
	s = &Spec{}
	s.Normalize(Defaults{Priority: PriorityBatch, Trainer: "trl"})
	if s.Priority != PriorityBatch || s.Trainer != "trl" || s.Residency != nil {
		t.Errorf("Normalize(empty spec) = %+v", s)
	}
	s = &Spec{}
	s.Normalize(Defaults{Residency: []string{}})
	if s.Priority != PriorityNormal || s.Trainer != "reference" || s.Residency != nil {
		t.Errorf("Normalize(zero Defaults) = %+v", s)
	}
}

func TestClone(t *testing.T) {
	s := validSpec()
	c := s.Clone()
	if !reflect.DeepEqual(s, c) {
		t.Fatalf("Clone differs")
	}
	c.LoRA.TargetModules[0] = "x"
	c.Resources.GPUModels[0] = "x"
	c.Residency[0] = "x"
	c.Output.Formats[0] = "x"
	if !reflect.DeepEqual(s, validSpec()) {
		t.Errorf("Clone shares slices with the original")
	}
}

func TestJSON(t *testing.T) {
	s := mustParse(t, minimal)
	got := string(s.JSON())
	want := `{"name":"tiny","base_model":"tiny-char","dataset":"file:///data/train.jsonl",` +
		`"lora":{"rank":8,"alpha":16,"dropout":0.05,"target_modules":["q_proj","v_proj"]},` +
		`"training":{"epochs":1,"learning_rate":0.0002,"batch_size":8,"max_steps":0,"seed":42},` +
		`"resources":{"gpus":0},"residency":[],"priority":"normal","trainer":"reference",` +
		`"output":{"formats":["safetensors"]}}`
	if got != want {
		t.Errorf("JSON()\n got %s\nwant %s", got, want)
	}
	// stop_at_step 0 (no stop: the only value a spec may give) leaves
	// the canonical JSON as it was.
	if got := string(mustParse(t, minimal+"training: {stop_at_step: 0}").JSON()); got != want {
		t.Errorf("JSON() with stop_at_step 0\n got %s\nwant %s", got, want)
	}

	// No HTML escaping; no trailing newline.
	s.BaseModel = "org/a<b>&c"
	if j := string(s.JSON()); !strings.Contains(j, `"org/a<b>&c"`) || strings.HasSuffix(j, "\n") {
		t.Errorf("JSON() = %s", j)
	}

	// Non-finite floats (invalid anyway) don't make JSON panic.
	bad := validSpec()
	bad.LoRA.Alpha = 1 / zero()
	if j := string(bad.JSON()); !strings.Contains(j, `"alpha":0`) {
		t.Errorf("JSON() = %s", j)
	}
}

func zero() float64 { return 0 }
