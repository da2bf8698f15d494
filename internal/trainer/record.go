package trainer

import (
	"encoding/json"
	"strings"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// LastLogLines is how many trailing log lines a Record keeps for a
// failure's message.
const LastLogLines = 8

// Update is what one trainer event changes on the job's record: its latest
// progress, or its metrics (all of them, as folded so far), or nothing.
type Update struct {
	Progress *jobtype.Progress
	Metrics  map[string]float64
}

// Record folds an attempt's trainer events into what the job's record shows:
// the latest progress, the metrics so far (eval_loss from eval events, then
// a done event's metrics), the artifacts reported and the last log lines.
// It is the one mapping from trainer events to record updates: the local
// worker folds what Run reports, the AWS worker what the agent uploaded
// (docs/trainer.md). A Record is not safe for concurrent use.
type Record struct {
	metrics   map[string]float64
	artifacts []TrainerEvent
	logs      []string
	pausedAt  int
}

// NewRecord returns a Record whose metrics start from metrics (those an
// earlier watcher of the attempt mirrored; nil for none).
func NewRecord(metrics map[string]float64) *Record {
	r := &Record{metrics: make(map[string]float64, len(metrics))}
	for k, v := range metrics {
		r.metrics[k] = v
	}
	return r
}

// Apply folds ev into the record and returns the update it makes. A
// checkpoint or an artifact event updates nothing on the record (artifacts
// are kept for Artifacts).
func (r *Record) Apply(ev TrainerEvent) Update {
	switch ev.Kind {
	case EventProgress:
		return Update{Progress: &jobtype.Progress{Step: ev.Step, TotalSteps: ev.TotalSteps, Epoch: ev.Epoch, Loss: ev.Loss,
			LearningRate: ev.LearningRate, SamplesPerS: ev.SamplesPerS}}
	case EventEval:
		r.metrics["eval_loss"] = ev.EvalLoss
		return Update{Metrics: r.Metrics()}
	case EventDone:
		for k, v := range ev.Metrics {
			r.metrics[k] = v
		}
		r.pausedAt = ev.PausedAt
		return Update{Metrics: r.Metrics()}
	case EventArtifact:
		r.artifacts = append(r.artifacts, ev)
	}
	return Update{}
}

// Log keeps line among the last LastLogLines log lines.
func (r *Record) Log(line string) {
	r.logs = append(r.logs, line)
	if len(r.logs) > LastLogLines {
		r.logs = r.logs[len(r.logs)-LastLogLines:]
	}
}

// Metrics returns a copy of the metrics folded so far.
func (r *Record) Metrics() map[string]float64 {
	out := make(map[string]float64, len(r.metrics))
	for k, v := range r.metrics {
		out[k] = v
	}
	return out
}

// PausedAt is the last done event's paused_at: the step at which the
// trainer paused (training.stop_at_step), 0 when it did not say it paused.
func (r *Record) PausedAt() int { return r.pausedAt }

// Artifacts returns the artifact events reported so far.
func (r *Record) Artifacts() []TrainerEvent {
	return append([]TrainerEvent(nil), r.artifacts...)
}

// LastLogs returns the last log lines joined with " | ", "(no output)"
// when there was none: what a failure's message quotes.
func (r *Record) LastLogs() string {
	if len(r.logs) == 0 {
		return "(no output)"
	}
	return strings.Join(r.logs, " | ")
}

// ParseEvent reads one contract event line as Run does (an agent's uploaded
// event, for instance). ok is false when raw is not a JSON object with a
// non-empty string "event" field.
func ParseEvent(raw json.RawMessage) (ev TrainerEvent, ok bool) {
	ev, _, ok = parseEvent(string(raw))
	return ev, ok
}
