package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// Defaults of Config.
const (
	DefaultKillGrace          = 90 * time.Second
	DefaultIMDSPollInterval   = 5 * time.Second
	DefaultEventBatchLines    = 500
	DefaultEventFlushInterval = time.Second
	DefaultShutdownMargin     = 15 * time.Minute
)

// getTimeout bounds reading job.json.
const getTimeout = time.Minute

// errSpot is the cancel cause when a spot interruption notice arrived.
var errSpot = errors.New("agent: spot interruption notice")

// Config says what the agent runs and how. Only cmd fills it; Run applies
// the defaults.
type Config struct {
	// JobURI is s3://BUCKET/PREFIX/JOB_ID/ATTEMPT/job.json. Required.
	JobURI string
	// S3 is the client for every S3 call. Required.
	S3 *s3.Client
	// WorkDir is where the attempt's files go (WorkDir/JOB_ID/ATTEMPT/:
	// data, output, checkpoints). Empty means os.TempDir()/lathe-agent.
	WorkDir string
	// TrainerArgv, when set, is the trainer's command line instead of
	// Job.TrainerArgv. It is never run through a shell.
	TrainerArgv []string
	// Env holds extra KEY=VALUE entries for the trainer, after the LATHE_*
	// ones (e.g. LATHE_SIMULATED_GPUS=1 to play an instance on a CPU).
	// CUDA_VISIBLE_DEVICES is left unset unless given here: the trainer
	// sees every GPU of the instance it rented. The trainer's environment
	// is runner's base one (PATH, HOME, LANG, …), Job.TrainerPassEnv, the
	// LATHE_* contract and these: never the agent's own AWS credentials or
	// LATHE_TOKEN*.
	Env []string
	// KillGrace is how long the trainer has after SIGTERM before SIGKILL.
	// Zero means DefaultKillGrace (90s, within a spot notice's two
	// minutes, leaving time to upload the checkpoint).
	KillGrace time.Duration
	// IMDSEndpoint is the metadata service's base URL. Empty means
	// DefaultIMDSEndpoint. Without an answering IMDS the attempt runs on,
	// blind to spot notices (logged).
	IMDSEndpoint string
	// IMDSPollInterval is how often the spot notice is polled. Zero means
	// DefaultIMDSPollInterval.
	IMDSPollInterval time.Duration
	// EventBatchLines cuts an events batch at this many lines. Zero means
	// DefaultEventBatchLines.
	EventBatchLines int
	// EventFlushInterval cuts an events batch at least this often when
	// there are lines. Zero means DefaultEventFlushInterval.
	EventFlushInterval time.Duration
	// ShutdownMargin: the guard calls Shutdown by itself this long after
	// max_runtime_s has passed since the trainer started (since Run started,
	// while the trainer has not: stuck downloads), when the attempt has not
	// ended by then (a trainer that survives SIGKILL, a stuck upload). It
	// must cover KillGrace plus the final uploads. Zero means
	// DefaultShutdownMargin.
	ShutdownMargin time.Duration
	// Shutdown powers the instance off (the instance is launched with
	// InstanceInitiatedShutdownBehavior=terminate). Run calls it at most
	// once: at the end, after status.json, or from the guard. Nil means
	// running `shutdown -h now`; in a test binary (testing.Testing) nil is
	// refused, so that no test can power off the machine it runs on.
	Shutdown func(ctx context.Context) error
	// Logger receives the agent's records; nil discards them.
	Logger *slog.Logger

	// CgroupRoot is the cgroup v2 directory under which the trainer's
	// cgroup (CgroupRoot/JOB_ID-ATTEMPT) goes, so that every process it
	// starts, one that left its process group included, dies with the
	// attempt: "" or CgroupAuto finds one (trainer.AutoCgroupRoot),
	// CgroupNone runs the trainer in a process group only. Where auto finds
	// none, the attempt runs in a process group and the log says so.
	CgroupRoot string
	// store replaces the S3 adapter (tests).
	store ObjectStore
}

// The special values of Config.CgroupRoot (as worker.cgroup_root).
const (
	CgroupAuto = "auto"
	CgroupNone = "none"
)

// normalise checks cfg, parses its job URI and fills the defaults of the
// fields left zero.
func (cfg Config) normalise() (Config, JobURI, error) {
	uri, err := ParseJobURI(cfg.JobURI)
	if err != nil {
		return cfg, uri, fmt.Errorf("agent: --job: %w", err)
	}
	if cfg.store == nil {
		if cfg.S3 == nil {
			return cfg, uri, errors.New("agent: no S3 client")
		}
		cfg.store = S3Store{cfg.S3}
	}
	if cfg.CgroupRoot, err = cgroupRoot(cfg.CgroupRoot); err != nil {
		return cfg, uri, err
	}
	cfg.defaults()
	if cfg.Shutdown == nil {
		if testing.Testing() {
			// A test that forgot the hook must not power off the machine
			// running it.
			return cfg, uri, errors.New("agent: Config.Shutdown must be set in tests")
		}
		cfg.Shutdown = shutdownNow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, uri, nil
}

// cgroupRoot checks a --cgroup-root: CgroupAuto (also for empty),
// CgroupNone, or a clean absolute path.
func cgroupRoot(r string) (string, error) {
	switch {
	case r == "":
		return CgroupAuto, nil
	case r == CgroupAuto, r == CgroupNone:
	case !filepath.IsAbs(r) || filepath.Clean(r) != r:
		return r, fmt.Errorf("agent: --cgroup-root %q: must be %q, %q or a clean absolute path to a cgroup v2 directory", r, CgroupAuto, CgroupNone)
	}
	return r, nil
}

// defaults fills the work folder, the IMDS endpoint and the durations and
// sizes left zero.
func (cfg *Config) defaults() {
	if cfg.WorkDir == "" {
		cfg.WorkDir = filepath.Join(os.TempDir(), "lathe-agent")
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.IMDSEndpoint == "" {
		cfg.IMDSEndpoint = DefaultIMDSEndpoint
	}
	if cfg.IMDSPollInterval <= 0 {
		cfg.IMDSPollInterval = DefaultIMDSPollInterval
	}
	if cfg.EventBatchLines <= 0 {
		cfg.EventBatchLines = DefaultEventBatchLines
	}
	if cfg.EventFlushInterval <= 0 {
		cfg.EventFlushInterval = DefaultEventFlushInterval
	}
	if cfg.ShutdownMargin <= 0 {
		cfg.ShutdownMargin = DefaultShutdownMargin
	}
}

// shutdownNow is the default Config.Shutdown.
func shutdownNow(ctx context.Context) error {
	out, err := shutdownCommand(ctx, "shutdown", "-h", "now").CombinedOutput()
	if err != nil {
		return fmt.Errorf("shutdown -h now: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// helperEnvKeys are the only variables of the agent's environment a
// helper command it runs (shutdown) gets.
var helperEnvKeys = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ"}

// shutdownCommand is the command shutdownNow runs (name and args), with a
// minimal environment (helperEnvKeys where set; never nil, which would
// inherit): the agent's AWS credentials and any LATHE_TOKEN* stay in the
// agent.
func shutdownCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{}
	for _, k := range helperEnvKeys {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	return cmd
}

// Run runs the attempt cfg.JobURI names, to the end: it reads job.json,
// stages the datasets and the job's checkpoints, runs the trainer, uploads
// events, checkpoints and artifacts, writes status.json and calls
// cfg.Shutdown (see the package doc).
//
// Run writes status.json on every path once cfg is usable, after
// everything else, retrying a few times; the returned Status is what it
// wrote. The error is non-nil when the configuration is unusable, when
// status.json could not be written, or when Shutdown failed. An unusable
// cfg (JobURI that does not parse, no S3 client) returns at once, writing
// nothing and not calling Shutdown. Cancelling ctx
// stops the trainer (SIGTERM, its checkpoint uploaded) and ends in
// StatePreempted.
func Run(ctx context.Context, cfg Config) (st Status, err error) {
	cfg, uri, err := cfg.normalise()
	if err != nil {
		// Nowhere to report to; cmd decides what to do (Shutdown is not
		// called, so a typo on a workstation does not power it off).
		return Status{State: StateFailed, ExitCode: -1, Error: err.Error(), FinishedAt: time.Now().UTC()}, err
	}
	log := cfg.Logger.With(slog.String("job_id", uri.JobID), slog.Int("attempt", uri.Attempt))
	a := &agent{cfg: cfg, uri: uri, log: log, st: cfg.store}
	// Uploads outlive ctx: a stopped agent still reports.
	bg := context.WithoutCancel(ctx)
	a.events = newEventUploader(a.st, uri, cfg.EventBatchLines, cfg.EventFlushInterval, log)
	go a.events.loop(bg)

	defer func() {
		if evErr := a.events.close(bg); evErr != nil {
			log.Error("events upload failed", slog.Any("error", evErr))
		}
		st.FinishedAt = time.Now().UTC()
		if werr := a.writeStatus(bg, st, true); werr != nil {
			err = errors.Join(err, werr)
		}
		err = errors.Join(err, a.shutdown(bg, "the attempt is over"))
		a.stopGuard()
	}()
	st = a.run(ctx, bg)
	if st.State == StateFailed && st.ExitCode == -1 && ctx.Err() != nil {
		// Stopped before the trainer could run (during the downloads):
		// nothing failed, the attempt was interrupted.
		st.State, st.Error = StatePreempted, fmt.Sprintf("the agent was stopped: %v (%s)", context.Cause(ctx), st.Error)
	}
	return st, nil
}

// agent is the state of one Run.
type agent struct {
	cfg    Config
	uri    JobURI
	log    *slog.Logger
	st     ObjectStore
	events *eventUploader
	ckpt   *checkpoints

	shutOnce sync.Once
	shutErr  error

	statusMu     sync.Mutex
	finalWritten bool

	guardMu sync.Mutex
	guard   *time.Timer
}

func (a *agent) setGuard(t *time.Timer) {
	a.guardMu.Lock()
	defer a.guardMu.Unlock()
	a.guard = t
}

func (a *agent) stopGuard() {
	a.guardMu.Lock()
	defer a.guardMu.Unlock()
	if a.guard != nil {
		a.guard.Stop()
	}
}

func (a *agent) failed(msg string, args ...any) Status {
	m := fmt.Sprintf(msg, args...)
	a.log.Error("attempt failed", slog.String("error", m))
	a.events.note("attempt failed: " + m)
	return Status{State: StateFailed, ExitCode: -1, Error: m}
}

// run does the attempt and returns its status (FinishedAt unset): read
// the job, arm the guard, prepare the files, execute the trainer, and make
// its result the status.
func (a *agent) run(ctx, bg context.Context) Status {
	started := time.Now()
	job, err := a.readJob(ctx)
	if err != nil {
		return a.failed("%v", err)
	}
	guard := a.armGuard(started, job)
	p, st, ok := a.prepare(ctx, job)
	if !ok {
		return st
	}
	defer p.outFD.Close()
	res, sink, cause := a.execute(ctx, bg, job, p, guard)
	return a.result(bg, job, p, res, sink, cause)
}

// armGuard arms the guard: shut down by itself when the attempt outlives
// its max_runtime by the margin, whatever is stuck. It counts from Run's
// start (stuck downloads) and again from the trainer's start
// (sink.Started), so it always comes after the max_runtime timer. It stays
// armed after run returns, until Run has shut down: the final uploads are
// covered too.
func (a *agent) armGuard(started time.Time, job *Job) *time.Timer {
	guard := time.AfterFunc(time.Until(started.Add(job.MaxRuntime()+a.cfg.ShutdownMargin)), func() {
		a.log.Error("max_runtime plus the margin passed: shutting the instance down",
			slog.Duration("max_runtime", job.MaxRuntime()), slog.Duration("margin", a.cfg.ShutdownMargin))
		// Bounded: the shutdown must not wait long on a broken S3.
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = a.writeStatus(sctx, Status{
			State: StateTimeout, ExitCode: -1, FinishedAt: time.Now().UTC(),
			Error: fmt.Sprintf("the attempt was still running %s after max_runtime %s: the agent's guard shut the instance down", a.cfg.ShutdownMargin, job.MaxRuntime()),
		}, false)
		_ = a.shutdown(context.Background(), "guard: max_runtime plus margin passed")
	})
	a.setGuard(guard)
	return guard
}

// prepared is what prepare leaves for the trainer.
type prepared struct {
	work, outDir string
	outFD        *os.File // the output folder, pinned before the trainer runs: artifacts are read through it
	argv, env    []string
}

// prepare makes the attempt's folders, downloads its datasets, writes its
// job.json, restores its checkpoints and builds the trainer's command and
// environment. ok is false when the attempt failed (st says how).
func (a *agent) prepare(ctx context.Context, job *Job) (p prepared, st Status, ok bool) {
	p.work = filepath.Join(a.cfg.WorkDir, a.uri.JobID, strconv.Itoa(a.uri.Attempt))
	dataDir, ckptDir := filepath.Join(p.work, "data"), filepath.Join(p.work, "checkpoints")
	p.outDir = filepath.Join(p.work, "output")
	for _, d := range []string{dataDir, p.outDir, ckptDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return p, a.failed("make %s: %v", d, err), false
		}
	}
	var err error
	if p.outFD, err = pathpolicy.OpenDir(p.outDir); err != nil {
		return p, a.failed("open %s: %v", p.outDir, err), false
	}
	specFile, st, ok := a.stage(ctx, job, p.work, dataDir, ckptDir)
	if ok {
		if p.argv = a.cfg.TrainerArgv; len(p.argv) == 0 {
			p.argv = job.TrainerArgv
		}
		if ok = len(p.argv) > 0; !ok {
			st = a.failed("no trainer command: job.json has no trainer_argv and the agent was given none")
		}
	}
	if !ok {
		p.outFD.Close()
		return p, st, false
	}
	p.env = append([]string{
		"LATHE_JOB_ID=" + job.JobID,
		"LATHE_ATTEMPT=" + strconv.Itoa(job.Attempt),
		"LATHE_JOB_FILE=" + specFile,
		"LATHE_OUTPUT_DIR=" + p.outDir,
		"LATHE_CHECKPOINT_DIR=" + ckptDir,
	}, a.cfg.Env...)
	return p, Status{}, true
}

// stage downloads the datasets into dataDir, writes the spec that points
// at them (job.json in work, returned) and restores the job's checkpoints
// into ckptDir. ok is false when the attempt failed (st says how).
func (a *agent) stage(ctx context.Context, job *Job, work, dataDir, ckptDir string) (specFile string, st Status, ok bool) {
	spec := job.Spec
	var err error
	if spec.Dataset, err = a.fetch(ctx, job.Dataset, filepath.Join(dataDir, "train")); err != nil {
		return "", a.failed("dataset: %v", err), false
	}
	if job.EvalDataset != "" {
		if spec.EvalDataset, err = a.fetch(ctx, job.EvalDataset, filepath.Join(dataDir, "eval")); err != nil {
			return "", a.failed("eval dataset: %v", err), false
		}
	}
	specFile = filepath.Join(work, JobObject)
	specJSON, _ := json.MarshalIndent(spec, "", "  ")
	if err := os.WriteFile(specFile, specJSON, 0o644); err != nil {
		return "", a.failed("write %s: %v", specFile, err), false
	}
	prefix, _ := ParseS3URI(job.CheckpointPrefix)
	a.ckpt = newCheckpoints(a.st, prefix, ckptDir, a.log, a.events.note)
	restored, err := a.ckpt.restore(ctx)
	if err != nil {
		return "", a.failed("restore checkpoints from %s: %v", job.CheckpointPrefix, err), false
	}
	if len(restored) > 0 {
		a.events.note(fmt.Sprintf("restored checkpoints %v from %s", restored, job.CheckpointPrefix))
	}
	return specFile, Status{}, true
}

// execute runs the trainer under max_runtime and the spot notice watch,
// uploading checkpoints as it reports them; it returns how the trainer
// ended, its sink, and why its context was cancelled.
func (a *agent) execute(ctx, bg context.Context, job *Job, p prepared, guard *time.Timer) (trainer.Result, *sink, error) {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(job.MaxRuntime(), func() { cancel(trainer.ErrTimeout) })
	defer timer.Stop()
	watchCtx, stopWatch := context.WithCancel(runCtx)
	defer stopWatch()
	go watchSpot(watchCtx, a.cfg.IMDSEndpoint, a.cfg.IMDSPollInterval, a.log, func(n SpotNotice) {
		a.log.Warn("spot interruption notice: stopping the trainer", slog.String("action", n.Action), slog.String("time", n.Time))
		a.events.note(fmt.Sprintf("spot interruption notice (%s at %s): SIGTERM to the trainer", n.Action, n.Time))
		cancel(errSpot)
	})
	go a.ckpt.loop(bg)

	sink := &sink{a: a, onStart: func() { guard.Reset(job.MaxRuntime() + a.cfg.ShutdownMargin) }}
	res := trainer.Run(runCtx, trainer.Config{
		Argv:      p.argv,
		Env:       p.env,
		PassEnv:   job.TrainerPassEnv,
		Dir:       p.work,
		KillGrace: a.cfg.KillGrace,
		Cgroup:    a.attemptCgroup(job),
		Logger:    a.log,
	}, sink)
	stopWatch()
	cause := context.Cause(runCtx)
	a.log.Info("trainer exited", slog.String("outcome", res.Outcome.String()), slog.Int("exit_code", res.ExitCode), slog.String("signal", res.Signal))
	a.events.note(fmt.Sprintf("trainer exited: %s, exit code %d %s", res.Outcome, res.ExitCode, res.Signal))
	return res, sink, cause
}

// result finishes the checkpoint uploads and turns how the trainer ended
// into the attempt's status (trainer.Judge), uploading the artifacts of a
// trainer that succeeded.
func (a *agent) result(bg context.Context, job *Job, p prepared, res trainer.Result, sink *sink, cause error) Status {
	ckptErr := a.ckpt.finish(bg)
	st := Status{ExitCode: res.ExitCode, Metrics: sink.metrics, Checkpoint: a.ckpt.newest()}
	switch v := trainer.Judge(res, job.MaxRuntime(), sink.lastLogs()); res.Outcome {
	case trainer.Succeeded:
		if sink.pausedAt != 0 {
			return a.paused(st, sink.pausedAt, ckptErr)
		}
		arts, err := uploadArtifacts(bg, a.st, a.uri, p.outFD, sink.artifacts)
		if err != nil {
			st.State, st.Error = StateFailed, "artifacts: "+err.Error()
			if trainer.IsFault(err) {
				st.Reason = jobtype.ReasonTrainerFault
			}
			a.events.note("attempt failed: " + st.Error)
			return st
		}
		st.State, st.Artifacts = StateSucceeded, arts
		a.events.note(fmt.Sprintf("%d artifact(s) uploaded", len(arts)))
	case trainer.TimedOut:
		st.State, st.Error = StateTimeout, v.Message
	case trainer.Cancelled:
		st.State = StatePreempted
		if errors.Is(cause, errSpot) {
			st.Error = "spot interruption notice"
		} else {
			st.Error = fmt.Sprintf("the agent was stopped: %v", cause)
		}
	case trainer.StartFailed:
		st.State, st.Error = StateFailed, v.Message
	default: // Failed, Permanent: the AWS worker tells them apart by the exit code
		st.State, st.Error = StateFailed, trainer.FailureMessage(res, sink.lastLogs())
	}
	if ckptErr != nil && st.State != StateSucceeded {
		st.Error += "; checkpoint upload failed: " + ckptErr.Error()
	}
	return st
}

// paused is the status of a trainer that exited 0 saying it paused at
// step: no artifact is uploaded; the pause holds only if its checkpoints
// reached S3 (the next attempt resumes from them), otherwise the attempt
// failed (retryable). Whether the attempt had a step limit is the AWS
// worker's to judge.
func (a *agent) paused(st Status, step int, ckptErr error) Status {
	if ckptErr != nil {
		st.State, st.Error = StateFailed, fmt.Sprintf("the trainer paused at step %d, but the checkpoint upload failed: %v", step, ckptErr)
		a.events.note("attempt failed: " + st.Error)
		return st
	}
	st.State, st.PausedAt = StatePaused, step
	a.events.note(fmt.Sprintf("the trainer paused at step %d (training.stop_at_step); checkpoint %s uploaded, no artifact", step, st.Checkpoint))
	return st
}

// readJob reads and checks job.json.
func (a *agent) readJob(ctx context.Context) (*Job, error) {
	var raw []byte
	err := retry(ctx, 3, func(ctx context.Context) error {
		gctx, cancel := context.WithTimeout(ctx, getTimeout)
		defer cancel()
		body, err := a.st.Get(gctx, a.uri.Bucket, a.uri.Key(JobObject))
		if err != nil {
			return err
		}
		defer body.Close()
		raw, err = io.ReadAll(io.LimitReader(body, 16<<20))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read job: %w", err)
	}
	var job Job
	if err := json.Unmarshal(raw, &job); err != nil {
		return nil, fmt.Errorf("read job s3://%s/%s: %w", a.uri.Bucket, a.uri.Key(JobObject), err)
	}
	if err := job.validate(a.uri); err != nil {
		return nil, fmt.Errorf("job s3://%s/%s: %w", a.uri.Bucket, a.uri.Key(JobObject), err)
	}
	return &job, nil
}

// fetch downloads an s3:// object to dst plus the key's extension and
// returns the local file's file:// URI.
func (a *agent) fetch(ctx context.Context, s3uri, dst string) (string, error) {
	u, err := ParseS3URI(s3uri)
	if err != nil {
		return "", err
	}
	dst += path.Ext(u.Key)
	var n int64
	err = retry(ctx, 3, func(ctx context.Context) error {
		var err error
		n, err = Download(ctx, a.st, u.Bucket, u.Key, dst)
		return err
	})
	if err != nil {
		return "", err
	}
	a.events.note(fmt.Sprintf("downloaded %s (%d bytes)", s3uri, n))
	abs, err := filepath.Abs(dst)
	if err != nil {
		return "", err
	}
	return "file://" + filepath.ToSlash(abs), nil
}

// writeStatus puts status.json, trying a few times. The guard's write
// (final false) never replaces Run's own (final true).
func (a *agent) writeStatus(ctx context.Context, st Status, final bool) error {
	if final {
		a.statusMu.Lock()
	} else if !a.statusMu.TryLock() {
		return nil // Run is writing its own: the guard does not wait on it
	}
	defer a.statusMu.Unlock()
	if a.finalWritten {
		return nil
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	err := retry(ctx, 5, func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return a.st.Put(pctx, a.uri.Bucket, a.uri.Key(StatusObject), bytes.NewReader(b), int64(len(b)))
	})
	if err != nil {
		a.log.Error("status.json not written", slog.Any("error", err), slog.String("state", st.State))
		return fmt.Errorf("agent: write status: %w", err)
	}
	a.finalWritten = final
	a.log.Info("status written", slog.String("state", st.State), slog.Int("exit_code", st.ExitCode))
	return nil
}

// shutdown calls cfg.Shutdown once.
func (a *agent) shutdown(ctx context.Context, why string) error {
	a.shutOnce.Do(func() {
		a.log.Info("shutting the instance down", slog.String("why", why))
		a.shutErr = a.cfg.Shutdown(ctx)
		if a.shutErr != nil {
			a.log.Error("shutdown failed", slog.Any("error", a.shutErr))
		}
	})
	return a.shutErr
}

// retry calls f up to tries times, waiting 1s, 2s, 4s… between tries, and
// returns the last error. A missing object is not retried.
func retry(ctx context.Context, tries int, f func(context.Context) error) error {
	var err error
	wait := time.Second
	for i := 0; i < tries; i++ {
		if err = f(ctx); err == nil || errors.Is(err, ErrNotFound) {
			return err
		}
		if i == tries-1 {
			break
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
	return err
}

func itoa(n int) string { return strconv.Itoa(n) }

// sink receives the trainer's output (trainer.Sink): every line goes to the
// events, checkpoints to the uploader, artifacts and metrics are kept.
// runner calls it one call at a time; the fields are read after Run.
type sink struct {
	a         *agent
	artifacts []trainer.TrainerEvent
	metrics   map[string]float64
	pausedAt  int // the done line's paused_at
	logs      []string
	onStart   func()
}

var _ trainer.Sink = (*sink)(nil)

func (s *sink) Started(pid int) {
	s.onStart()
	s.a.events.note(fmt.Sprintf("trainer started (pid %d)", pid))
}

func (s *sink) Event(ev trainer.TrainerEvent) {
	if !ev.Known() {
		s.Log(trainer.StreamStdout, string(ev.Raw))
		return
	}
	s.a.events.add(ev.Kind, ev.Raw)
	switch ev.Kind {
	case trainer.EventCheckpoint:
		s.a.ckpt.report(ev.Path)
	case trainer.EventArtifact:
		s.artifacts = append(s.artifacts, ev)
	case trainer.EventDone:
		s.metrics, s.pausedAt = ev.Metrics, ev.PausedAt
	}
}

func (s *sink) Log(stream, line string) {
	s.a.events.add(TypeLog, logData(stream, line))
	s.logs = append(s.logs, line)
	if len(s.logs) > trainer.LastLogLines {
		s.logs = s.logs[len(s.logs)-trainer.LastLogLines:]
	}
}

func (s *sink) lastLogs() string {
	b, _ := json.Marshal(s.logs)
	return string(b)
}

// attemptCgroup is the trainer's cgroup (Config.CgroupRoot/JOB_ID-ATTEMPT),
// made ready, or "" to run it in a process group only (CgroupNone, or no
// usable cgroup v2, which is logged).
func (a *agent) attemptCgroup(job *Job) string {
	root := a.cfg.CgroupRoot
	switch root {
	case CgroupNone:
		a.log.Warn("--cgroup-root none: the trainer runs in a process group only; a process it moves out of its group outlives the attempt until the instance ends")
		return ""
	case CgroupAuto:
		r, err := trainer.AutoCgroupRoot()
		if err != nil {
			a.log.Error("NO USABLE CGROUP V2: the trainer runs in a process group only; a process it moves out of its group outlives the attempt until the instance ends", slog.Any("err", err))
			return ""
		}
		root = r
	}
	dir := filepath.Join(root, job.JobID+"-"+strconv.Itoa(job.Attempt))
	if err := trainer.PrepareCgroup(root); err != nil {
		a.log.Error("NO USABLE CGROUP V2 at --cgroup-root: the trainer runs in a process group only", slog.String("cgroup_root", root), slog.Any("err", err))
		return ""
	}
	return dir
}
