package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/worker/runner"
)

// testHookBeforeTrainer, when set (by tests only, see export_test.go),
// runs after the attempt's files were checked and just before the trainer
// starts: the window a dataset swap would use.
var testHookBeforeTrainer atomic.Pointer[func(job *jobtype.Job)]

// errLost is the cause when the store says the attempt is no longer ours.
var errLost = errors.New("attempt lost: the job store moved on")

// errFenced is the cause when the worker could not renew the attempt's
// lease for half its length: it stops the trainer before the scheduler may
// place the job again.
var errFenced = errors.New("lease not renewed for half its length: self-fencing")

// handle is the asynq handler of one attempt. It returns nil whenever the
// attempt's end was recorded in the store (or there was nothing to do), so
// asynq never retries on its own.
func (w *Worker) handle(ctx context.Context, t *asynq.Task) error {
	w.inflight.Add(1)
	defer w.inflight.Done()
	job, log, err := claimTask(ctx, t, w.log, w.store, func() bool { return w.stopCtx.Err() != nil },
		func(ctx context.Context, id string, attempt int) (jobstore.ClaimOutcome, error) {
			return w.store.Claim(ctx, jobstore.ClaimParams{ID: id, Attempt: attempt, Node: w.cfg.Node, Incarnation: w.incarnation, Lease: w.cfg.LeaseTTL})
		})
	if job == nil {
		return err
	}
	end := w.runAttempt(ctx, log, job, job.Attempt)
	return w.record(log, end)
}

// claimTask is the start of the local and the cloud handler: it parses the
// attempt task, claims the attempt with claim, and returns the claimed job
// and its logger. A nil job means there is nothing more to do, and err is
// what the handler returns (nil when the store has the outcome; an error
// only for asynq to put the task back or drop it, never to retry it).
func claimTask(ctx context.Context, t *asynq.Task, base *slog.Logger, store *jobstore.Store, stopping func() bool,
	claim func(ctx context.Context, id string, attempt int) (jobstore.ClaimOutcome, error)) (*jobtype.Job, *slog.Logger, error) {
	var p jobtype.TaskPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || !jobstore.ValidID(p.JobID) || p.Attempt < 1 {
		base.Error("dropping malformed task", slog.String("payload", string(t.Payload())), slog.Any("err", err))
		return nil, base, fmt.Errorf("worker: malformed task payload: %w", asynq.SkipRetry)
	}
	log := base.With(slog.String("job_id", p.JobID), slog.Int("attempt", p.Attempt))
	if stopping() {
		// Stopping: leave the task alone (asynq puts it back) without claiming.
		return nil, log, fmt.Errorf("worker: stopping, not claiming %s", jobtype.TaskID(p.JobID, p.Attempt))
	}
	out, err := claim(ctx, p.JobID, p.Attempt)
	if err != nil {
		if errors.Is(err, jobstore.ErrNotFound) {
			log.Warn("task for a job the store does not know; dropping")
			return nil, log, nil
		}
		return nil, log, fmt.Errorf("worker: claim: %w", err)
	}
	switch out {
	case jobstore.ClaimStale:
		log.Info("stale attempt; nothing to do")
		return nil, log, nil
	case jobstore.ClaimCancelled:
		log.Info("cancelled before it started")
		return nil, log, nil
	}
	job, err := store.Get(ctx, p.JobID)
	if err != nil {
		return nil, log, recordEnd(log, func(ctx context.Context) error {
			return store.Finish(ctx, p.JobID, p.Attempt, jobstore.Ending{State: jobtype.StateFailed, Reason: jobtype.ReasonInternal, Error: err.Error()})
		})
	}
	return job, log, nil
}

// record writes an attempt's end, retrying for a while if Redis is away:
// the store must hear it, whatever happened to the task's context.
func (w *Worker) record(log *slog.Logger, write func(ctx context.Context) error) error {
	return recordEnd(log, write)
}

// recordEnd is record for the local and the cloud worker.
func recordEnd(log *slog.Logger, write func(ctx context.Context) error) error {
	var err error
	for i, delay := 0, 100*time.Millisecond; i < 20; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = write(ctx)
		cancel()
		if err == nil || errors.Is(err, jobstore.ErrConflict) || errors.Is(err, jobstore.ErrNotFound) {
			if err != nil {
				log.Warn("attempt end not recorded: the store moved on", slog.Any("err", err))
			}
			return nil
		}
		log.Warn("recording attempt end failed; retrying", slog.Any("err", err))
		time.Sleep(delay)
		if delay < 5*time.Second {
			delay *= 2
		}
	}
	return fmt.Errorf("worker: record attempt end: %w", err)
}

// runAttempt runs the trainer for a claimed attempt and returns the store
// write that records how it ended.
func (w *Worker) runAttempt(taskCtx context.Context, log *slog.Logger, job *jobtype.Job, attempt int) func(context.Context) error {
	fail := func(reason, msg string) func(context.Context) error {
		log.Error("attempt failed", slog.String("reason", reason), slog.String("error", msg))
		return func(ctx context.Context) error {
			return w.store.Finish(ctx, job.ID, attempt, jobstore.Ending{State: jobtype.StateFailed, Reason: reason, Error: msg})
		}
	}
	if missing := missingTags(job.Spec.Residency, w.cfg.SiteTags); len(missing) > 0 {
		return fail(jobtype.ReasonResidency, fmt.Sprintf("node %s is in site %s (tags %s), which lacks residency tag(s) %s of the job: refused before anything ran",
			w.cfg.Node, w.cfg.Site, strings.Join(w.cfg.SiteTags, ","), strings.Join(missing, ",")))
	}
	argv, err := w.trainerArgv(job.Spec.Trainer)
	if err != nil {
		return fail(jobtype.ReasonPermanent, err.Error())
	}
	inputs, err := w.checkPaths(job)
	if err != nil {
		return fail(jobtype.ReasonPermanent, err.Error())
	}
	defer inputs.close()
	workDir := filepath.Join(w.cfg.DataDir, "work", job.ID, strconv.Itoa(attempt))
	outDir := filepath.Join(workDir, "output")
	ckptDir := filepath.Join(w.cfg.CheckpointRoot, job.ID)
	for _, d := range []string{outDir, ckptDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(jobtype.ReasonInternal, fmt.Sprintf("make %s: %v", d, err))
		}
	}
	// The output folder is pinned now, before the trainer can touch it:
	// its artifacts are read through this descriptor, whatever the trainer
	// does to the folder's name.
	outFD, err := pathpolicy.OpenDir(outDir)
	if err != nil {
		return fail(jobtype.ReasonInternal, fmt.Sprintf("open %s: %v", outDir, err))
	}
	defer outFD.Close()
	// The trainer reads private copies of the data, made from the files
	// checkPaths opened and checked: a name swapped since leads nowhere.
	spec := job.Spec
	inputsDir := filepath.Join(workDir, "inputs")
	defer os.RemoveAll(inputsDir)
	if err := inputs.copyTo(inputsDir, &spec, w.dataDeny()); err != nil {
		reason := jobtype.ReasonInternal
		if errors.Is(err, pathpolicy.ErrSymlink) || errors.Is(err, pathpolicy.ErrDenied) || errors.Is(err, pathpolicy.ErrNotData) {
			reason = jobtype.ReasonPermanent // what the dataset folder holds: a retry would do the same
		}
		return fail(reason, err.Error())
	}
	specFile := filepath.Join(workDir, "job.json")
	specJSON, _ := json.MarshalIndent(spec, "", "  ")
	if err := os.WriteFile(specFile, specJSON, 0o644); err != nil {
		return fail(jobtype.ReasonInternal, fmt.Sprintf("write %s: %v", specFile, err))
	}

	if err := w.handOver(workDir, outDir, inputsDir, ckptDir); err != nil {
		return fail(jobtype.ReasonInternal, err.Error())
	}

	visible, simulated, err := w.pinGPUs(taskCtx, job.GPUs)
	if err != nil {
		log.Warn("cannot pin the reserved GPUs; requeueing", slog.Any("err", err))
		return func(ctx context.Context) error {
			return w.store.Requeue(ctx, job.ID, attempt, "gpu", err.Error())
		}
	}
	env := []string{
		"LATHE_JOB_ID=" + job.ID,
		"LATHE_ATTEMPT=" + strconv.Itoa(attempt),
		"LATHE_JOB_FILE=" + specFile,
		"LATHE_OUTPUT_DIR=" + outDir,
		"LATHE_CHECKPOINT_DIR=" + ckptDir,
		"CUDA_VISIBLE_DEVICES=" + visible,
	}
	if simulated {
		env = append(env, "LATHE_SIMULATED_GPUS=1")
	}
	if w.cfg.runAs != nil {
		env = append(env, "HOME="+w.cfg.runAsHome)
	}
	if len(job.GPUs) > 0 {
		sim := "0"
		if simulated {
			sim = "1"
		}
		if err := w.store.Annotate(taskCtx, job.ID, attempt, "cuda_visible_devices", visible, "simulated_gpus", sim); err != nil {
			log.Warn("record CUDA_VISIBLE_DEVICES on the job", slog.Any("err", err))
		}
	}

	runCtx, cancel := context.WithCancelCause(taskCtx)
	defer cancel(nil)
	maxRuntime := job.Spec.MaxRuntime.D()
	if maxRuntime > 0 {
		timer := time.AfterFunc(maxRuntime, func() { cancel(runner.ErrTimeout) })
		defer timer.Stop()
	}
	stopWatch := context.AfterFunc(w.stopCtx, func() { cancel(errShutdown) })
	defer stopWatch()
	// The watchdog stops the trainer even when this process cannot run
	// (SIGSTOP): fed on each lease renewal, it fires when keepLease would
	// fence, so the trainer is gone before the scheduler may reap.
	wd := runner.NewWatchdog(w.cfg.LeaseTTL / 2)
	go w.keepLease(runCtx, cancel, log, job.ID, attempt, wd)

	sink := newEventSink(w.store, job.ID, attempt, log, cancel)
	pids := filepath.Join(w.cfg.DataDir, "pids")
	trainerPID := 0
	sink.onStart = func(pid int) {
		trainerPID = pid
		w.writePidfile(pids, job.ID, attempt, pid, log)
		w.trackTrainer(pid, true)
		for _, g := range job.GPUs {
			w.cfg.GPUs.SetLoad(g, pid, true)
		}
	}
	defer func() {
		if trainerPID != 0 {
			w.trackTrainer(trainerPID, false)
			for _, g := range job.GPUs {
				w.cfg.GPUs.SetLoad(g, trainerPID, false)
			}
		}
	}()
	defer removePidfile(pids, job.ID, attempt)
	go sink.loop()
	go w.monitor(runCtx, cancel, log, job.ID, job.GPUs, sink)
	if h := testHookBeforeTrainer.Load(); h != nil {
		(*h)(job)
	}
	res := runner.Run(runCtx, runner.Config{
		Argv:      argv,
		Env:       env,
		PassEnv:   w.cfg.TrainerPassEnv[trainerName(job.Spec.Trainer)],
		RunAs:     w.cfg.runAs,
		Cgroup:    w.attemptCgroup(job.ID, attempt),
		Dir:       workDir,
		KillGrace: w.cfg.KillGrace,
		Watchdog:  wd,
		Logger:    log,
	}, sink)
	sink.close() // every trainer event is in the stream before the end is written
	cause := context.Cause(runCtx)
	log.Info("trainer exited", slog.String("outcome", res.Outcome.String()), slog.Int("exit_code", res.ExitCode),
		slog.String("signal", res.Signal), slog.Duration("ran", res.Ended.Sub(res.Started)))

	switch res.Outcome {
	case runner.Succeeded:
		dest, err := openOutput(w.cfg.AllowedRoots, w.outputDeny(), job.OutputURI)
		if err != nil {
			reason := jobtype.ReasonInternal
			if errors.Is(err, pathpolicy.ErrOutside) || errors.Is(err, pathpolicy.ErrDenied) || errors.Is(err, pathpolicy.ErrSymlink) {
				reason = jobtype.ReasonPermanent
			}
			return fail(reason, err.Error())
		}
		defer dest.Close()
		arts, err := publishArtifacts(outFD, dest, sink.artifacts())
		if err != nil {
			reason := jobtype.ReasonInternal
			if errors.Is(err, pathpolicy.ErrNotArtifact) {
				reason = jobtype.ReasonPermanent // the trainer's doing: a retry would do the same
			}
			return fail(reason, "artifacts: "+err.Error())
		}
		for i := range arts {
			arts[i].Residency, arts[i].Site = job.Spec.Residency, w.cfg.Site
		}
		metrics := sink.metrics()
		w.recordStepTime(job, res, sink, log)
		return func(ctx context.Context) error {
			return w.store.Finish(ctx, job.ID, attempt, jobstore.Ending{State: jobtype.StateSucceeded, Metrics: metrics, Artifacts: arts})
		}
	case runner.Permanent:
		return fail(jobtype.ReasonPermanent, fmt.Sprintf("trainer exited 3 (permanent): %s", sink.lastLogs()))
	case runner.TimedOut:
		return fail(jobtype.ReasonTimeout, fmt.Sprintf("max_runtime %s reached", maxRuntime))
	case runner.StartFailed:
		return fail(jobtype.ReasonInternal, fmt.Sprintf("trainer did not start: %v", res.Err))
	case runner.Cancelled:
		switch {
		case errors.Is(cause, errLost):
			log.Warn("attempt lost to the store; not recording")
			return func(context.Context) error { return nil }
		case errors.Is(cause, errFenced):
			return func(ctx context.Context) error {
				return w.store.Requeue(ctx, job.ID, attempt, "fenced", "the worker lost Redis for half the lease; resuming from the last checkpoint")
			}
		case errors.Is(cause, errPreempted):
			return func(ctx context.Context) error {
				cur, err := w.store.Get(ctx, job.ID)
				if err != nil {
					return err
				}
				log.Info("preempted; back to the queue, resuming from the checkpoint", slog.String("for", cur.PreemptRequested))
				return w.store.Preempted(ctx, job.ID, attempt, cur.PreemptRequested)
			}
		case errors.Is(cause, errHung):
			msg := fmt.Sprintf("GPUs idle and no progress line for %s", w.cfg.HangTimeout)
			if used := attempt - job.Preemptions; used >= w.cfg.MaxAttempts {
				return fail(jobtype.ReasonHung, fmt.Sprintf("%s; %d attempts used", msg, used))
			}
			return func(ctx context.Context) error { return w.store.Requeue(ctx, job.ID, attempt, jobtype.ReasonHung, msg) }
		case errors.Is(cause, errShutdown):
			return func(ctx context.Context) error {
				return w.store.Requeue(ctx, job.ID, attempt, "worker shutdown", "the worker stopped; resuming from the last checkpoint")
			}
		default:
			// The trainer was stopped because a cancel was asked (asynq's fast
			// path or our poll) — or because asynq cancelled the handler on
			// its own (CancelProcessing by hand, an expired lease). Only the
			// store's cancel_requested makes it a cancel; anything else is an
			// interrupted attempt, and the job gets a new one.
			return func(ctx context.Context) error {
				req, err := w.store.CancelRequested(ctx, job.ID)
				if err != nil {
					return err
				}
				if req {
					return w.store.Finish(ctx, job.ID, attempt, jobstore.Ending{State: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled})
				}
				log.Warn("asynq stopped the attempt without a cancel in the store; requeueing", slog.Any("cause", cause))
				return w.store.Requeue(ctx, job.ID, attempt, "interrupted", fmt.Sprintf("the attempt was interrupted (%v) without a cancel request; resuming from the last checkpoint", cause))
			}
		}
	default: // Failed: retryable
		if wd.Starved() {
			// The watchdog stopped it: this worker did not renew the lease
			// in time (it was frozen), the trainer did not fail.
			log.Warn("the watchdog stopped the trainer: the lease went unrenewed for half its length")
			return func(ctx context.Context) error {
				return w.store.Requeue(ctx, job.ID, attempt, "fenced", "the worker did not renew the lease for half its length; resuming from the last checkpoint")
			}
		}
		msg := fmt.Sprintf("trainer failed (%s): %s", exitDesc(res), sink.lastLogs())
		// Attempts ended by a preemption are not failures: they do not count.
		if used := attempt - job.Preemptions; used >= w.cfg.MaxAttempts {
			return fail(jobtype.ReasonExit, fmt.Sprintf("%s; %d attempts used", msg, used))
		}
		log.Warn("attempt failed; retrying as a new attempt", slog.String("error", msg))
		return func(ctx context.Context) error { return w.store.Requeue(ctx, job.ID, attempt, jobtype.ReasonExit, msg) }
	}
}

func exitDesc(r runner.Result) string {
	if r.Signal != "" {
		return "signal " + r.Signal
	}
	return "exit " + strconv.Itoa(r.ExitCode)
}

// keepLease renews the attempt's lease every CancelPoll while it runs. The
// renewal also reads cancel_requested, so a cancel asked while asynq's fast
// path was missed still lands within a CancelPoll. When the store says the
// attempt is no longer ours, the trainer is stopped (errLost); when Redis
// cannot be reached for half the lease, too (errFenced).
func (w *Worker) keepLease(ctx context.Context, cancel context.CancelCauseFunc, log *slog.Logger, id string, attempt int, wd *runner.Watchdog) {
	t := time.NewTicker(w.cfg.CancelPoll)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, rc := context.WithTimeout(ctx, w.cfg.CancelPoll)
		req, err := w.store.Renew(rctx, id, attempt, w.incarnation, w.cfg.LeaseTTL)
		rc()
		switch {
		case err == nil:
			lastOK = time.Now()
			wd.Feed()
			if req {
				cancel(runner.ErrCancelled)
				return
			}
		case errors.Is(err, jobstore.ErrPreemptRequested):
			log.Info("preemption asked; stopping the trainer (it checkpoints on SIGTERM)")
			cancel(errPreempted)
			return
		case errors.Is(err, jobstore.ErrConflict) || errors.Is(err, jobstore.ErrNotFound):
			log.Warn("lease lost: the store moved on; stopping the trainer", slog.Any("err", err))
			cancel(errLost)
			return
		case time.Since(lastOK) > w.cfg.LeaseTTL/2:
			log.Error("lease not renewed for half its length; stopping the trainer (self-fencing)", slog.Any("err", err))
			cancel(errFenced)
			return
		default:
			log.Warn("lease renewal failed; retrying", slog.Any("err", err))
		}
	}
}

// handOver gives the worker.run_as user what its trainer writes and
// reads: the work folder (its working directory), the output folder, the
// data copies and the job's checkpoint folder, all of it (a checkpoint an
// earlier attempt left as another user included), through descriptors
// (pathpolicy.ChownTree: no link is followed, even one swapped in by a
// process of that user meanwhile). Without run_as it does nothing. The worker reads nothing back
// through these names: artifacts come through the output folder's
// descriptor opened before the trainer started.
func (w *Worker) handOver(workDir, outDir, inputsDir, ckptDir string) error {
	c := w.cfg.runAs
	if c == nil {
		return nil
	}
	// The work folder itself only (the trainer's working directory):
	// job.json stays lathed's.
	if err := os.Lchown(workDir, int(c.UID), int(c.GID)); err != nil {
		return fmt.Errorf("worker.run_as %s: hand %s over: %w", w.cfg.RunAs, workDir, err)
	}
	for _, d := range []string{outDir, inputsDir, ckptDir} {
		if err := pathpolicy.ChownTree(d, int(c.UID), int(c.GID)); err != nil {
			return fmt.Errorf("worker.run_as %s: hand %s over: %w", w.cfg.RunAs, d, err)
		}
	}
	return nil
}

// trainerName is the trainer a job names, "reference" when none.
func trainerName(name string) string {
	if name == "" {
		return "reference"
	}
	return name
}

func (w *Worker) trainerArgv(name string) ([]string, error) {
	name = trainerName(name)
	tmpl, ok := w.cfg.Trainers[name]
	if !ok || len(tmpl) == 0 {
		return nil, fmt.Errorf("trainer %q is not configured on node %s", name, w.cfg.Node)
	}
	argv := make([]string, len(tmpl))
	for i, a := range tmpl {
		argv[i] = strings.ReplaceAll(a, "{scripts}", w.cfg.ScriptsDir)
	}
	return argv, nil
}

// checkPaths refuses a job whose file:// dataset, eval dataset or output
// folder lies outside the allowed roots once symbolic links are resolved
// (the scheduler checked the text; this is the check that holds on the
// machine where the files are), or in a folder no job may read (dataDeny,
// outputDeny). It opens the dataset and the eval dataset with
// pathpolicy.Roots.Open, so what it returns is the files it checked; the
// caller copies them for the trainer. Each error names the field.
func (w *Worker) checkPaths(job *jobtype.Job) (openedInputs, error) {
	if w.cfg.AllowedRoots == nil {
		return nil, nil
	}
	var in openedInputs
	for _, f := range []struct{ name, uri string }{{"dataset", job.Spec.Dataset}, {"eval_dataset", job.Spec.EvalDataset}, {"output", job.OutputURI}} {
		if f.uri == "" || !strings.HasPrefix(f.uri, "file:") {
			continue
		}
		p, err := fileuri.Path(f.uri)
		if err != nil {
			in.close()
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		if f.name == "output" {
			if err := w.cfg.AllowedRoots.CheckResolvedDeny(p, w.outputDeny()); err != nil {
				in.close()
				return nil, fmt.Errorf("%s: %w%s", f.name, err, rootsHint(err))
			}
			continue
		}
		file, err := w.cfg.AllowedRoots.Open(p, w.dataDeny())
		if err != nil {
			in.close()
			return nil, fmt.Errorf("%s: %w%s", f.name, err, rootsHint(err))
		}
		in = append(in, openedInput{field: f.name, file: file, path: p})
	}
	return in, nil
}

// rootsHint names the config key of a path refused as outside the roots.
func rootsHint(err error) string {
	if errors.Is(err, pathpolicy.ErrOutside) {
		return " (jobs.allowed_roots)"
	}
	return ""
}

// dataDeny is what no job may read as data: outputDeny, the checkpoint
// root, and the data dir as a whole (other attempts' work folders and data
// copies, checkpoints, published artifacts of every team).
func (w *Worker) dataDeny() pathpolicy.Deny {
	return dataDenyOf(w.cfg.DataDir, w.cfg.CheckpointRoot, w.cfg.ScriptsDir, w.cfg.Deny)
}

// outputDeny is where no job's output may go: lathed's secrets and
// bookkeeping under the data dir, and Config.Deny.
func (w *Worker) outputDeny() pathpolicy.Deny {
	return outputDenyOf(w.cfg.DataDir, w.cfg.ScriptsDir, w.cfg.Deny)
}

// dataDenyOf is pathpolicy.DataDeny (the local and the AWS worker).
func dataDenyOf(dataDir, ckptRoot, scriptsDir string, extra pathpolicy.Deny) pathpolicy.Deny {
	return pathpolicy.DataDeny(dataDir, ckptRoot, scriptsDir, extra)
}

// outputDenyOf is pathpolicy.OutputDeny.
func outputDenyOf(dataDir, scriptsDir string, extra pathpolicy.Deny) pathpolicy.Deny {
	return pathpolicy.OutputDeny(dataDir, scriptsDir, extra)
}

// openedInput is a dataset file opened and checked by checkPaths.
type openedInput struct {
	field string // dataset | eval_dataset
	file  *os.File
	path  string // as the spec names it
}

type openedInputs []openedInput

func (in openedInputs) close() {
	for _, i := range in {
		i.file.Close()
	}
}

// copyTo copies each opened input (a file, or a folder for a trainer that
// reads one) into dir (made 0700; copies 0400) with
// pathpolicy.CopyOpened, and points spec's field at the copy, so the
// trainer reads exactly the bytes of what was checked. The copy is made in
// the kernel (copy_file_range, a reflink where the file system shares
// blocks), so a large dataset costs disk space for the attempt's length,
// not a pass through this process; the folder is removed when the attempt
// ends.
func (in openedInputs) copyTo(dir string, spec *jobspec.Spec, deny pathpolicy.Deny) error {
	if len(in) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	for _, i := range in {
		dst := filepath.Join(dir, i.field+"-"+filepath.Base(i.path))
		if _, err := pathpolicy.CopyOpened(i.file, dst, deny); err != nil {
			return fmt.Errorf("%s: copy %s for the trainer: %w", i.field, i.path, err)
		}
		switch i.field {
		case "dataset":
			spec.Dataset = fileuri.FromPath(dst)
		case "eval_dataset":
			spec.EvalDataset = fileuri.FromPath(dst)
		}
	}
	return nil
}

// missingTags returns the tags of want that have does not hold. An empty
// want is treated as [onprem] (fail closed: the scheduler always stores the
// effective residency, so this only matters for a record made by hand).
func missingTags(want, have []string) []string {
	if len(want) == 0 {
		want = []string{"onprem"}
	}
	var out []string
	for _, t := range want {
		found := false
		for _, h := range have {
			found = found || h == t
		}
		if !found {
			out = append(out, t)
		}
	}
	return out
}

// recordStepTime teaches routing how fast this base model trains on this
// node's GPU model (or "cpu"): seconds per step of the attempt's own steps
// (a resumed attempt counts from its first step).
func (w *Worker) recordStepTime(job *jobtype.Job, res runner.Result, sink *eventSink, log *slog.Logger) {
	steps := sink.steps.Load() - sink.first.Load() + 1
	ran := res.Ended.Sub(res.Started)
	if steps < 2 || ran <= 0 {
		return
	}
	model := "cpu"
	if len(job.GPUs) > 0 {
		for _, g := range w.lastInventory().GPUs {
			if g.Index == job.GPUs[0] {
				model = g.Name
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := w.store.RecordStepTime(ctx, job.Spec.BaseModel, model, ran.Seconds()/float64(steps)); err != nil {
		log.Warn("record step time", slog.Any("err", err))
	}
}
