package trainer

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

func TestParseEvent(t *testing.T) {
	tests := []struct {
		name string
		line string
		ok   bool
		want TrainerEvent // Raw not compared
		bad  []string
	}{
		{"progress", `{"event":"progress","step":10,"total_steps":200,"epoch":0.1,"loss":2.31,"learning_rate":0.0002,"samples_per_s":41.5}`, true,
			TrainerEvent{Kind: "progress", Step: 10, TotalSteps: 200, Epoch: 0.1, Loss: 2.31, LearningRate: 0.0002, SamplesPerS: 41.5}, nil},
		{"eval", `{"event":"eval","step":100,"eval_loss":1.92}`, true, TrainerEvent{Kind: "eval", Step: 100, EvalLoss: 1.92}, nil},
		{"checkpoint", ` {"event":"checkpoint","step":100,"path":"ckpt-100"} `, true, TrainerEvent{Kind: "checkpoint", Step: 100, Path: "ckpt-100"}, nil},
		{"artifact", `{"event":"artifact","path":"a.safetensors","format":"safetensors","bytes":123456789012,"sha256":"ff"}`, true,
			TrainerEvent{Kind: "artifact", Path: "a.safetensors", Format: "safetensors", Bytes: 123456789012, SHA256: "ff"}, nil},
		{"done", `{"event":"done","metrics":{"train_loss":1.71,"eval_loss":1.88}}`, true,
			TrainerEvent{Kind: "done", Metrics: map[string]float64{"train_loss": 1.71, "eval_loss": 1.88}}, nil},
		{"paused done", `{"event":"done","metrics":{"eval_loss":1.9},"paused_at":300}`, true,
			TrainerEvent{Kind: "done", Metrics: map[string]float64{"eval_loss": 1.9}, PausedAt: 300}, nil},
		{"paused_at not an integer", `{"event":"done","paused_at":"300"}`, true, TrainerEvent{Kind: "done"}, []string{"paused_at"}},
		{"unknown kind kept", `{"event":"gpu","step":3,"temp":71}`, true, TrainerEvent{Kind: "gpu", Step: 3}, nil},
		{"integral float step", `{"event":"progress","step":1e3,"total_steps":20.0}`, true, TrainerEvent{Kind: "progress", Step: 1000, TotalSteps: 20}, nil},
		{"null fields ignored", `{"event":"progress","loss":null,"step":null}`, true, TrainerEvent{Kind: "progress"}, nil},
		{"wrong types left zero", `{"event":"progress","step":"ten","loss":"x","total_steps":1.5,"path":3}`, true,
			TrainerEvent{Kind: "progress"}, []string{"loss", "path", "step", "total_steps"}},
		{"non-number metric dropped", `{"event":"done","metrics":{"a":1,"b":"x","c":null}}`, true,
			TrainerEvent{Kind: "done", Metrics: map[string]float64{"a": 1}}, []string{"metrics"}},
		{"no event field", `{"step":1}`, false, TrainerEvent{}, nil},
		{"empty event", `{"event":""}`, false, TrainerEvent{}, nil},
		{"event not a string", `{"event":1}`, false, TrainerEvent{}, nil},
		{"array", `[{"event":"done"}]`, false, TrainerEvent{}, nil},
		{"invalid JSON", `{"event":"progress",}`, false, TrainerEvent{}, nil},
		{"NaN is not JSON", `{"event":"progress","loss":NaN}`, false, TrainerEvent{}, nil},
		{"plain text", `step 10 loss 2.3`, false, TrainerEvent{}, nil},
		{"empty", ``, false, TrainerEvent{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, bad, ok := parseEvent(tt.line)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if !json.Valid(got.Raw) {
				t.Errorf("Raw %q is not valid JSON", got.Raw)
			}
			got.Raw = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("event = %+v, want %+v", got, tt.want)
			}
			slices.Sort(bad)
			if !slices.Equal(bad, tt.bad) {
				t.Errorf("bad = %v, want %v", bad, tt.bad)
			}
		})
	}
}

func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"event":"progress","step":10,"loss":2.3}`,
		`{"event":"done","metrics":{"a":1}}`,
		`{"event":"artifact","bytes":1e30}`,
		`{"event":"x","step":-9223372036854775808}`,
		`not json`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		ev, _, ok := parseEvent(line)
		if !ok {
			return
		}
		if ev.Kind == "" || !json.Valid(ev.Raw) {
			t.Fatalf("event %+v from %q", ev, line)
		}
	})
}

// TestRecordPausedAt checks that a Record keeps a done line's paused_at
// (ASHA's pause) beside its metrics, and that a done line without it
// leaves 0: a run that went to its end.
func TestRecordPausedAt(t *testing.T) {
	r := NewRecord(map[string]float64{"eval_loss": 3})
	if r.PausedAt() != 0 {
		t.Fatalf("new record PausedAt %d, want 0", r.PausedAt())
	}
	for _, line := range []string{`{"event":"progress","step":300,"total_steps":900}`,
		`{"event":"done","metrics":{"eval_loss":1.9,"train_loss":2.1},"paused_at":300}`} {
		ev, ok := ParseEvent(json.RawMessage(line))
		if !ok {
			t.Fatalf("ParseEvent(%s) not ok", line)
		}
		r.Apply(ev)
	}
	if got := r.PausedAt(); got != 300 {
		t.Errorf("PausedAt %d, want 300", got)
	}
	if m := r.Metrics(); m["eval_loss"] != 1.9 || m["train_loss"] != 2.1 {
		t.Errorf("metrics %v", m)
	}
	ev, _ := ParseEvent(json.RawMessage(`{"event":"done","metrics":{}}`))
	r.Apply(ev)
	if got := r.PausedAt(); got != 0 {
		t.Errorf("after a done line without paused_at: PausedAt %d, want 0", got)
	}
}
