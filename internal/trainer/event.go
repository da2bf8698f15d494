package trainer

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// Event kinds defined by the trainer contract.
const (
	EventProgress   = "progress"
	EventEval       = "eval"
	EventCheckpoint = "checkpoint"
	EventArtifact   = "artifact"
	EventDone       = "done"
)

// TrainerEvent is one JSON line of the trainer contract read from stdout.
//
// Kind is the line's "event" field as given, which may be a kind the contract
// does not define (see Known). The typed fields are filled from the contract's
// field names where present and of the right JSON type; a field of the wrong
// type is left zero. Raw holds the whole line, so fields the contract does not
// name are kept.
type TrainerEvent struct {
	// Kind is the "event" field: one of the Event* constants, or any other
	// non-empty string a trainer printed.
	Kind string
	// Raw is the complete JSON object as printed (valid UTF-8).
	Raw json.RawMessage
	// Step is "step".
	Step int
	// TotalSteps is "total_steps".
	TotalSteps int
	// Epoch is "epoch" (fractional).
	Epoch float64
	// Loss is "loss".
	Loss float64
	// LearningRate is "learning_rate".
	LearningRate float64
	// SamplesPerS is "samples_per_s".
	SamplesPerS float64
	// EvalLoss is "eval_loss".
	EvalLoss float64
	// Path is "path" (checkpoint or artifact), relative to the directory the
	// trainer was told to write to.
	Path string
	// Format is "format" of an artifact, e.g. "safetensors".
	Format string
	// SHA256 is "sha256" of an artifact, as printed.
	SHA256 string
	// Bytes is "bytes", an artifact's size.
	Bytes int64
	// Metrics is "metrics" of a done event; entries that are not numbers are
	// left out.
	Metrics map[string]float64
	// PausedAt is "paused_at" of a done event: the step at which the
	// trainer paused (its job file's training.stop_at_step, an ASHA rung;
	// checkpointed, no adapter); 0 for a run that went to its end.
	PausedAt int
}

// Known reports whether Kind is one of the kinds the trainer contract defines.
func (e TrainerEvent) Known() bool {
	switch e.Kind {
	case EventProgress, EventEval, EventCheckpoint, EventArtifact, EventDone:
		return true
	}
	return false
}

// parseEvent reads line as a contract event. ok is false when line is not a
// JSON object with a non-empty string "event" field; the line is then a log
// line. bad names the fields that were present but of the wrong type.
func parseEvent(line string) (ev TrainerEvent, bad []string, ok bool) {
	b := bytes.TrimSpace([]byte(line))
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return ev, nil, false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return ev, nil, false
	}
	kind, present := fields["event"]
	if !present || json.Unmarshal(kind, &ev.Kind) != nil || ev.Kind == "" {
		return TrainerEvent{}, nil, false
	}
	ev.Raw = json.RawMessage(b)

	for name, raw := range fields {
		if bytes.Equal(raw, []byte("null")) {
			continue
		}
		if !ev.setField(name, raw) {
			bad = append(bad, name)
		}
	}
	return ev, bad, true
}

// setField sets the contract field name from raw (not null); false when
// raw is of the wrong type. A field the contract does not define is left
// alone (true).
func (ev *TrainerEvent) setField(name string, raw json.RawMessage) bool {
	switch name {
	case "step":
		return parseInt(raw, &ev.Step)
	case "total_steps":
		return parseInt(raw, &ev.TotalSteps)
	case "bytes":
		return parseInt(raw, &ev.Bytes)
	case "paused_at":
		return parseInt(raw, &ev.PausedAt)
	case "epoch":
		return json.Unmarshal(raw, &ev.Epoch) == nil
	case "loss":
		return json.Unmarshal(raw, &ev.Loss) == nil
	case "learning_rate":
		return json.Unmarshal(raw, &ev.LearningRate) == nil
	case "samples_per_s":
		return json.Unmarshal(raw, &ev.SamplesPerS) == nil
	case "eval_loss":
		return json.Unmarshal(raw, &ev.EvalLoss) == nil
	case "path":
		return json.Unmarshal(raw, &ev.Path) == nil
	case "format":
		return json.Unmarshal(raw, &ev.Format) == nil
	case "sha256":
		return json.Unmarshal(raw, &ev.SHA256) == nil
	case "metrics":
		return parseMetrics(raw, &ev.Metrics)
	}
	return true
}

// parseInt reads a JSON number that holds an integer (10, 1e3, 100.0) into
// dst. It reports false, leaving dst alone, for anything else or a value out
// of range.
func parseInt[T int | int64](raw json.RawMessage, dst *T) bool {
	s := string(raw)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if int64(T(n)) != n {
			return false
		}
		*dst = T(n)
		return true
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return false
	}
	if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return false
	}
	n := int64(f)
	if int64(T(n)) != n {
		return false
	}
	*dst = T(n)
	return true
}

// parseMetrics reads a JSON object into dst, keeping the entries whose value
// is a number. It reports false when raw is not an object or any entry was not
// a number.
func parseMetrics(raw json.RawMessage, dst *map[string]float64) bool {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return false
	}
	out := make(map[string]float64, len(m))
	ok := true
	for k, v := range m {
		var f float64
		if bytes.Equal(v, []byte("null")) || json.Unmarshal(v, &f) != nil {
			ok = false
			continue
		}
		out[k] = f
	}
	*dst = out
	return ok
}
