package agent

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/redact"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// Object names under an attempt prefix (see the package doc).
const (
	JobObject       = "job.json"
	StatusObject    = "status.json"
	EventsFolder    = "events/"
	ArtifactsFolder = "artifacts/"
	// CheckpointsFolder is the folder under s3://BUCKET/PREFIX/JOB_ID/ that
	// holds a job's checkpoints (the usual Job.CheckpointPrefix).
	CheckpointsFolder = "checkpoints/"
)

// Job is job.json: what the worker tells the agent about one attempt.
type Job struct {
	// JobID is the job's id; it must match the JOB_ID of job.json's key.
	JobID string `json:"job_id"`
	// Attempt is the attempt number (1, 2, …); it must match ATTEMPT.
	Attempt int `json:"attempt"`
	// Spec is the normalised job spec. The trainer gets it as
	// LATHE_JOB_FILE, with dataset and eval_dataset replaced by the local
	// copies of Dataset and EvalDataset.
	Spec jobspec.Spec `json:"spec"`
	// Dataset is the s3:// URI of the training data the agent downloads
	// (the staged copy in the backend's bucket, which may differ from
	// Spec.Dataset). Required.
	Dataset string `json:"dataset"`
	// EvalDataset is the s3:// URI of the eval data; empty means none.
	EvalDataset string `json:"eval_dataset,omitempty"`
	// CheckpointPrefix is s3://BUCKET/PREFIX/JOB_ID/checkpoints/, shared by
	// all attempts of the job. Required; it must end in "/".
	CheckpointPrefix string `json:"checkpoint_prefix"`
	// MaxRuntimeS bounds the trainer's run, in seconds; > 0 (the worker
	// fills in the daemon's default when the spec has none). The agent stops
	// the trainer then (status timeout).
	MaxRuntimeS int64 `json:"max_runtime_s"`
	// TrainerArgv is the trainer's command line on the instance (the worker
	// resolves the spec's named trainer from the backend's config); used
	// unless Config.TrainerArgv is set.
	TrainerArgv []string `json:"trainer_argv,omitempty"`
	// TrainerPassEnv names variables of the agent's own environment the
	// trainer also gets (where set): the job's trainer's pass_env in the
	// daemon config, as a local worker gives them. Every other variable of
	// the agent's environment (its AWS credentials, any LATHE_TOKEN*) stays
	// out: the trainer gets runner's base environment, the contract's
	// LATHE_* and these. A name trainer.CheckPassEnvName refuses (a token, a
	// contract variable) is an error.
	TrainerPassEnv []string `json:"trainer_pass_env,omitempty"`
}

// MaxRuntime is MaxRuntimeS as a duration.
func (j *Job) MaxRuntime() time.Duration { return time.Duration(j.MaxRuntimeS) * time.Second }

// validate checks what the agent relies on.
func (j *Job) validate(want JobURI) error {
	var errs []error
	if j.JobID != want.JobID {
		errs = append(errs, fmt.Errorf("job_id %q does not match the job.json key's %q", j.JobID, want.JobID))
	}
	if j.Attempt != want.Attempt {
		errs = append(errs, fmt.Errorf("attempt %d does not match the job.json key's %d", j.Attempt, want.Attempt))
	}
	if _, err := ParseS3URI(j.Dataset); err != nil {
		errs = append(errs, fmt.Errorf("dataset: %w", err))
	}
	if j.EvalDataset != "" {
		if _, err := ParseS3URI(j.EvalDataset); err != nil {
			errs = append(errs, fmt.Errorf("eval_dataset: %w", err))
		}
	}
	if u, err := ParseS3URI(j.CheckpointPrefix); err != nil || !strings.HasSuffix(u.Key, "/") {
		errs = append(errs, fmt.Errorf("checkpoint_prefix %q: want s3://BUCKET/PREFIX/ ending in '/'", j.CheckpointPrefix))
	}
	if j.MaxRuntimeS <= 0 {
		errs = append(errs, fmt.Errorf("max_runtime_s %d: must be > 0", j.MaxRuntimeS))
	}
	for i, k := range j.TrainerPassEnv {
		if err := trainer.CheckPassEnvName(k); err != nil {
			errs = append(errs, fmt.Errorf("trainer_pass_env[%d] = %q: %w", i, k, err))
		}
	}
	return errors.Join(errs...)
}

// S3URI is a parsed s3://BUCKET/KEY.
type S3URI struct {
	Bucket string
	Key    string
}

// String is s3://Bucket/Key.
func (u S3URI) String() string { return "s3://" + u.Bucket + "/" + u.Key }

// ParseS3URI reads s3://BUCKET/KEY; KEY must not be empty.
func ParseS3URI(s string) (S3URI, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return S3URI{}, fmt.Errorf("%q is not an s3:// URI", redact.URL(s))
	}
	bucket, key, _ := strings.Cut(rest, "/")
	if bucket == "" || key == "" {
		return S3URI{}, fmt.Errorf("%q: want s3://BUCKET/KEY", redact.URL(s))
	}
	return S3URI{Bucket: bucket, Key: key}, nil
}

// JobURI is the parsed --job argument, s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/job.json.
type JobURI struct {
	Bucket string
	// Prefix is the attempt prefix, PREFIX/JOB_ID/ATTEMPT/ (ending in "/").
	Prefix  string
	JobID   string
	Attempt int
}

// ParseJobURI reads s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/job.json. PREFIX may be
// empty or hold several segments; ATTEMPT is a positive decimal number.
func ParseJobURI(s string) (JobURI, error) {
	u, err := ParseS3URI(s)
	if err != nil {
		return JobURI{}, err
	}
	dir, file := path.Split(u.Key)
	if file != JobObject {
		return JobURI{}, fmt.Errorf("%q: want s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/%s", s, JobObject)
	}
	parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
	if len(parts) < 2 {
		return JobURI{}, fmt.Errorf("%q: want s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/%s", s, JobObject)
	}
	id, att := parts[len(parts)-2], parts[len(parts)-1]
	n, err := strconv.Atoi(att)
	if err != nil || n < 1 || strconv.Itoa(n) != att {
		return JobURI{}, fmt.Errorf("%q: attempt %q is not a positive number", s, att)
	}
	if id == "" || id == "." || id == ".." {
		return JobURI{}, fmt.Errorf("%q: bad job id %q", s, id)
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return JobURI{}, fmt.Errorf("%q: empty, '.' or '..' segment in the key", s)
		}
	}
	return JobURI{Bucket: u.Bucket, Prefix: dir, JobID: id, Attempt: n}, nil
}

// Key returns the key of name under the attempt prefix.
func (u JobURI) Key(name string) string { return u.Prefix + name }

// EventsKey is the key of the seq-th events batch (seq from 1).
func (u JobURI) EventsKey(seq int) string {
	return fmt.Sprintf("%s%s%06d.jsonl", u.Prefix, EventsFolder, seq)
}

// Status is status.json, the last object the agent writes for an attempt.
type Status struct {
	// State is one of StateSucceeded, StatePaused, StateFailed,
	// StatePreempted, StateTimeout.
	State string `json:"state"`
	// ExitCode is the trainer's exit code; -1 when it was killed by a signal
	// or never started. 3 means a permanent failure.
	ExitCode int `json:"exit_code"`
	// Error says why the attempt did not succeed; empty on success.
	Error string `json:"error,omitempty"`
	// Reason, when set, is the failure's jobtype reason as the agent knows
	// it: jobtype.ReasonTrainerFault for artifacts the trainer got wrong
	// (trainer.IsFault). Empty otherwise (and from agents before it), when
	// the worker judges by ExitCode.
	Reason string `json:"reason,omitempty"`
	// FinishedAt is when the agent wrote the status (UTC, RFC 3339).
	FinishedAt time.Time `json:"finished_at"`
	// Artifacts lists what was uploaded under artifacts/ (succeeded only).
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Metrics is the trainer's done event's metrics, if it printed one.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Checkpoint is the newest checkpoint folder uploaded (e.g. "ckpt-100"),
	// empty when none.
	Checkpoint string `json:"checkpoint,omitempty"`
	// PausedAt is the step at which the trainer paused (its done line's
	// paused_at: the job file's training.stop_at_step, an ASHA rung);
	// StatePaused only.
	PausedAt int `json:"paused_at,omitempty"`
}

// The states of Status.State.
const (
	StateSucceeded = "succeeded"
	// StatePaused: the trainer exited 0 with a done line saying paused_at
	// (ASHA's pause): no artifact was uploaded, its checkpoints were.
	StatePaused    = "paused"
	StateFailed    = "failed"
	StatePreempted = "preempted"
	StateTimeout   = "timeout"
)

// Artifact is one uploaded artifact.
type Artifact struct {
	// Name is the file name, also its key under artifacts/.
	Name   string `json:"name"`
	Format string `json:"format,omitempty"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}
