package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// The files of a Slurm attempt's folder (WORK_DIR/JOB/ATTEMPT).
const (
	// SlurmStepFile is the step: what RunSlurmStep runs.
	SlurmStepFile = "step.json"
	// SlurmEventsFile holds the trainer's events and log lines, one
	// agent.EventLine a line, appended as they come.
	SlurmEventsFile = "events.jsonl"
	// SlurmStatusFile is the step's last word: an agent.Status.
	SlurmStatusFile = "status.json"
	slurmJobFile    = "job.json"
	slurmScriptFile = "run.sh"
	slurmOutFile    = "slurm.out"
	slurmOutputDir  = "output"
)

// SlurmStep is the step file the slurm worker writes and `lathed
// slurm-step` runs: the trainer's command line and contract environment
// (LATHE_*), the variables of the node's environment it may have, and its
// limits.
type SlurmStep struct {
	JobID       string   `json:"job_id"`
	Attempt     int      `json:"attempt"`
	Argv        []string `json:"argv"`
	Env         []string `json:"env"`
	PassEnv     []string `json:"pass_env,omitempty"`
	MaxRuntimeS int64    `json:"max_runtime_s"`
	KillGraceS  int64    `json:"kill_grace_s"`
}

// RunSlurmStep runs the trainer of the attempt folder dir on a Slurm node
// (the batch script's `lathed slurm-step DIR`): the trainer contract as a
// local worker gives it (its own process group, LATHE_*, the GPUs Slurm
// allocated in CUDA_VISIBLE_DEVICES), its lines appended to events.jsonl,
// and status.json written at the end. ctx ending (SIGTERM from scancel, a
// preemption or Slurm's time limit) stops the trainer: SIGTERM, then
// SIGKILL after the grace. The exit code is the trainer's (0 on success,
// 1 when it had none), so Slurm's state agrees with the status.
func RunSlurmStep(ctx context.Context, dir string, log *slog.Logger) (int, error) {
	var step SlurmStep
	b, err := os.ReadFile(filepath.Join(dir, SlurmStepFile))
	if err == nil {
		err = json.Unmarshal(b, &step)
	}
	if err != nil {
		return 1, fmt.Errorf("slurm-step: read %s: %w", SlurmStepFile, err)
	}
	ev, err := os.OpenFile(filepath.Join(dir, SlurmEventsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 1, fmt.Errorf("slurm-step: %w", err)
	}
	defer ev.Close()
	sink := &stepSink{f: ev, rec: trainer.NewRecord(nil)}
	env := append([]string{}, step.Env...)
	for _, k := range []string{"CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	maxRuntime := time.Duration(step.MaxRuntimeS) * time.Second
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(maxRuntime, func() { cancel(trainer.ErrTimeout) })
	defer timer.Stop()
	sink.note(fmt.Sprintf("slurm step of %s attempt %d on %s (job %s), CUDA_VISIBLE_DEVICES=%q",
		step.JobID, step.Attempt, hostname(), os.Getenv("SLURM_JOB_ID"), os.Getenv("CUDA_VISIBLE_DEVICES")))
	res := trainer.Run(runCtx, trainer.Config{Argv: step.Argv, Env: env, PassEnv: step.PassEnv, Dir: dir,
		KillGrace: time.Duration(step.KillGraceS) * time.Second, Logger: log}, sink)
	st := stepStatus(res, maxRuntime, sink, context.Cause(runCtx))
	if err := writeFileAtomic(filepath.Join(dir, SlurmStatusFile), mustJSON(st)); err != nil {
		return 1, fmt.Errorf("slurm-step: %w", err)
	}
	switch {
	case res.Outcome == trainer.Succeeded:
		return 0, nil
	case res.ExitCode > 0:
		return res.ExitCode, nil
	}
	return 1, nil
}

// stepStatus is the status of a step whose trainer ended as res.
func stepStatus(res trainer.Result, maxRuntime time.Duration, sink *stepSink, cause error) agent.Status {
	sink.mu.Lock()
	defer sink.mu.Unlock()
	st := agent.Status{ExitCode: res.ExitCode, Metrics: sink.rec.Metrics(), FinishedAt: time.Now().UTC()}
	v := trainer.Judge(res, maxRuntime, sink.rec.LastLogs())
	switch res.Outcome {
	case trainer.Succeeded:
		st.State = agent.StateSucceeded
		if p := sink.rec.PausedAt(); p != 0 {
			st.State, st.PausedAt = agent.StatePaused, p
		}
	case trainer.TimedOut:
		st.State, st.Error = agent.StateTimeout, v.Message
	case trainer.Cancelled:
		// Slurm stopped the step (scancel, a preemption, its time limit):
		// the worker reads which from Slurm's state.
		st.State, st.Error = agent.StatePreempted, fmt.Sprintf("the step was stopped: %v", cause)
	case trainer.StartFailed:
		st.State, st.Error = agent.StateFailed, v.Message
	default:
		st.State, st.Error = agent.StateFailed, trainer.FailureMessage(res, sink.rec.LastLogs())
	}
	return st
}

// stepSink appends the trainer's events and lines to events.jsonl.
type stepSink struct {
	mu  sync.Mutex
	f   *os.File
	rec *trainer.Record
}

func (s *stepSink) line(typ string, data json.RawMessage) {
	b, _ := json.Marshal(agent.EventLine{T: time.Now().UnixMilli(), Type: typ, Data: data})
	_, _ = s.f.Write(append(b, '\n'))
}

func (s *stepSink) note(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.line(agent.TypeLog, mustRaw(jobtype.LogLine{Stream: agent.StreamAgent, Line: line}))
}

// Started implements trainer.Sink.
func (s *stepSink) Started(pid int) {}

// Event implements trainer.Sink.
func (s *stepSink) Event(ev trainer.TrainerEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec.Apply(ev)
	s.line(ev.Kind, ev.Raw)
}

// Log implements trainer.Sink.
func (s *stepSink) Log(stream, line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec.Log(line)
	s.line(agent.TypeLog, mustRaw(jobtype.LogLine{Stream: stream, Line: line}))
}

// writeFileAtomic writes b to a temporary name beside p, then renames it.
func writeFileAtomic(p string, b []byte) error {
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func mustJSON(v any) []byte {
	b, _ := json.MarshalIndent(v, "", "  ")
	return b
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// readStepStatus reads an attempt folder's status.json; found is false
// while the step has not written it.
func readStepStatus(dir string) (st agent.Status, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, SlurmStatusFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	return parseStepStatus(b, err)
}

// parseStepStatus decodes status.json as read (b, err of the read).
func parseStepStatus(b []byte, err error) (st agent.Status, found bool, _ error) {
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		return st, false, fmt.Errorf("%s: %w", SlurmStatusFile, err)
	}
	return st, true, nil
}

// slurmScript is the batch script of an attempt: lathed on the node runs
// the step of the attempt folder. Every value is one single-quoted shell
// word (routing's validation also allows only the documented forms).
func slurmScript(lathedPath, dir string) string {
	return "#!/bin/sh\n# Lathe: run one job attempt (lathed worker --backend slurm wrote this)\nexec " +
		shellQuote(lathedPath) + " slurm-step " + shellQuote(dir) + "\n"
}

// slurmJobName is the Slurm job name of an attempt: lathe-JOB-ATTEMPT.
func slurmJobName(id string, attempt int) string {
	return "lathe-" + strings.ReplaceAll(id, " ", "") + "-" + fmt.Sprint(attempt)
}
