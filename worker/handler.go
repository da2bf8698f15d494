package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
	"github.com/lathe-ml/lathe/internal/trainer"
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
	rank := taskRank(t)
	base := w.log
	if rank != nil {
		base = base.With(slog.Int("rank", *rank))
		defer w.lockRank(t)()
	}
	job, log, err := claimTask(ctx, t, base, w.store, func() bool { return w.stopCtx.Err() != nil },
		func(ctx context.Context, id string, attempt int) (jobstore.ClaimOutcome, error) {
			if rank != nil {
				return w.claimRank(ctx, id, attempt, *rank)
			}
			return w.store.Claim(ctx, jobstore.ClaimParams{ID: id, Attempt: attempt, Node: w.cfg.Node, Incarnation: w.incarnation, Lease: w.cfg.LeaseTTL})
		})
	if job == nil {
		return err
	}
	end := w.runAttempt(ctx, log, job, job.Attempt, rank)
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

// localAttempt is one claimed attempt on this node, carried through its
// steps: prepare (checks, folders, data copies, environment), execute (the
// trainer, with its lease, watchdog and event sink) and result (the store
// write that ends it, built by attemptEnd).
type localAttempt struct {
	attemptEnd
	w *Worker

	argv                                          []string
	workDir, outDir, ckptDir, inputsDir, specFile string
	outFD                                         *os.File // the output folder, pinned before the trainer runs
	env                                           []string
	maxRuntime                                    time.Duration
	// runAs and home are the user the trainer runs as (nil: lathed's)
	// and its HOME ("" : lathed's).
	runAs *trainer.Credential
	home  string
	// rank is the gang rank this attempt runs (gang.go); nil: not a gang's.
	rank *int

	cleanup []func() // run last first when the attempt is over, like defers
	// gpuRelease lets go of the attempt's GPUs on this node (gpuHolds);
	// nil until they are held.
	gpuRelease func()
}

func (a *localAttempt) releaseGPUs() {
	if a.gpuRelease != nil {
		a.gpuRelease()
	}
}

// runAttempt runs the trainer for a claimed attempt and returns the store
// write that records how it ended.
func (w *Worker) runAttempt(taskCtx context.Context, log *slog.Logger, job *jobtype.Job, attempt int, rank *int) func(context.Context) error {
	a := &localAttempt{w: w, maxRuntime: job.Spec.MaxRuntime.D(), rank: rank,
		attemptEnd: attemptEnd{store: w.store, job: job, n: attempt, maxAttempts: w.cfg.MaxAttempts, log: log}}
	defer a.releaseGPUs() // after close: the trainer and whatever it left behind are gone
	defer a.close()
	if end := a.prepare(); end != nil {
		return end
	}
	if end := a.pin(taskCtx); end != nil {
		return end
	}
	return a.result(a.execute(taskCtx))
}

// onClose runs f when the attempt is over (after its result was built).
func (a *localAttempt) onClose(f func()) { a.cleanup = append(a.cleanup, f) }

func (a *localAttempt) close() {
	for i := len(a.cleanup) - 1; i >= 0; i-- {
		a.cleanup[i]()
	}
}

// prepare checks the attempt may run here, makes its folders, copies its
// data for the trainer and writes its job.json. A non-nil end means it
// ended before anything ran.
func (a *localAttempt) prepare() endFunc {
	w, job := a.w, a.job
	if missing := missingTags(job.Spec.Residency, w.cfg.SiteTags); len(missing) > 0 {
		return a.fail(jobtype.ReasonResidency, fmt.Sprintf("node %s is in site %s (tags %s), which lacks residency tag(s) %s of the job: refused before anything ran",
			w.cfg.Node, w.cfg.Site, strings.Join(w.cfg.SiteTags, ","), strings.Join(missing, ",")))
	}
	if n := job.Spec.Resources.Nodes; n > 1 && (a.rank == nil || job.Gang == nil || job.Gang.Attempt != a.n) {
		// A gang runs from its per-rank tasks (gang.go); a task without a
		// rank (put on a queue by hand, or dispatched to one node) must not
		// run a gang's work on one node.
		return a.fail(jobtype.ReasonPermanent, fmt.Sprintf("resources.nodes %d: this task runs no rank of a gang dispatched to %d nodes (a job spanning nodes runs one task per rank): refused before anything ran", n, n))
	}
	if a.rank != nil {
		if err := rankOnNode(job, *a.rank, w.cfg.Node); err != nil {
			return a.fail(jobtype.ReasonInternal, err.Error())
		}
	}
	var err error
	if a.argv, err = w.trainerArgv(job); err != nil {
		return a.fail(jobtype.ReasonPermanent, err.Error())
	}
	inputs, err := w.checkPaths(job)
	if err != nil {
		return a.fail(jobtype.ReasonPermanent, err.Error())
	}
	a.onClose(inputs.close)
	a.workDir = filepath.Join(w.cfg.DataDir, "work", job.ID, strconv.Itoa(a.n))
	a.outDir = filepath.Join(a.workDir, "output")
	a.ckptDir = filepath.Join(w.cfg.CheckpointRoot, job.ID)
	for _, d := range []string{a.outDir, a.ckptDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return a.fail(jobtype.ReasonInternal, fmt.Sprintf("make %s: %v", d, err))
		}
	}
	// The output folder is pinned now, before the trainer can touch it:
	// its artifacts are read through this descriptor, whatever the trainer
	// does to the folder's name.
	if a.outFD, err = pathpolicy.OpenDir(a.outDir); err != nil {
		return a.fail(jobtype.ReasonInternal, fmt.Sprintf("open %s: %v", a.outDir, err))
	}
	a.onClose(func() { a.outFD.Close() })
	return a.writeInputs(inputs)
}

// writeInputs gives the trainer private copies of the data, made from the
// files checkPaths opened and checked (a name swapped since leads
// nowhere), and the job.json that points at them; then hands the folders
// over to worker.run_as.
func (a *localAttempt) writeInputs(inputs openedInputs) endFunc {
	spec := attemptSpec(a.job) // the stored spec, with the attempt's step limit (ASHA)
	a.inputsDir = filepath.Join(a.workDir, "inputs")
	a.onClose(func() { os.RemoveAll(a.inputsDir) })
	if err := inputs.copyTo(a.inputsDir, &spec, a.w.dataDeny()); err != nil {
		reason := jobtype.ReasonInternal
		if errors.Is(err, pathpolicy.ErrSymlink) || errors.Is(err, pathpolicy.ErrDenied) || errors.Is(err, pathpolicy.ErrNotData) {
			reason = jobtype.ReasonPermanent // what the dataset folder holds: a retry would do the same
		}
		return a.fail(reason, err.Error())
	}
	a.specFile = filepath.Join(a.workDir, "job.json")
	specJSON, _ := json.MarshalIndent(spec, "", "  ")
	if err := os.WriteFile(a.specFile, specJSON, 0o644); err != nil {
		return a.fail(jobtype.ReasonInternal, fmt.Sprintf("write %s: %v", a.specFile, err))
	}
	if err := a.takeUser(); err != nil {
		return a.fail(jobtype.ReasonInternal, err.Error())
	}
	return nil
}

// takeUser picks the user the trainer runs as (worker.run_as's, or with
// lathed as root and no run_as a uid of worker.trainer_uids of its own)
// and hands the attempt's folders over to it; at the attempt's end they
// are taken back (lathed's again), and a pool uid's leftovers (processes,
// files in /tmp, /var/tmp, /dev/shm) are removed before the uid is given
// back.
func (a *localAttempt) takeUser() error {
	w := a.w
	var held *heldUID
	switch {
	case w.cfg.runAs != nil:
		a.runAs, a.home = w.cfg.runAs, w.cfg.runAsHome
	case w.cfg.uids != nil:
		var err error
		if held, err = w.cfg.uids.take(); err != nil {
			return err
		}
		a.runAs, a.home = &held.cred, a.workDir
		a.onClose(held.release) // last: the uid is free once nothing of it is left
	default:
		return nil
	}
	ckptDir := a.ckptDir
	if a.rank != nil && *a.rank > 0 {
		// A gang's checkpoint folder is rank 0's: the other ranks' workers
		// leave it alone (handing it to their own trainer user would take
		// it from rank 0's). Their trainers get the resume step from rank 0.
		ckptDir = ""
	}
	dirs := []string{a.workDir, a.outDir, a.inputsDir}
	if ckptDir != "" {
		dirs = append(dirs, ckptDir)
	}
	a.onClose(func() {
		for _, d := range dirs {
			if err := pathpolicy.ChownTree(d, os.Geteuid(), os.Getegid()); err != nil {
				a.log.Warn("take an attempt's folder back from the trainer's user", slog.String("dir", d), slog.Any("err", err))
			}
		}
	})
	if held != nil {
		uid := held.cred.UID
		a.onClose(func() { // first: nothing of the uid runs while its folders are taken back
			killUID(uid)
			if err := sweepScratch(uid); err != nil {
				a.log.Warn("remove what the trainer's uid left in the scratch folders", slog.Uint64("uid", uint64(uid)), slog.Any("err", err))
			}
		})
	}
	return w.handOver(a.runAs, a.workDir, a.outDir, a.inputsDir, ckptDir)
}

// pin pins the reserved GPUs and builds the trainer's environment (the
// trainer contract's LATHE_* variables, CUDA_VISIBLE_DEVICES). GPUs that
// cannot be pinned requeue the job.
func (a *localAttempt) pin(ctx context.Context) endFunc {
	w, job := a.w, a.job
	visible, simulated, err := w.pinGPUs(ctx, job.GPUs)
	if err != nil {
		a.log.Warn("cannot pin the reserved GPUs; requeueing", slog.Any("err", err))
		return a.requeue("gpu", err.Error())
	}
	a.env = []string{
		"LATHE_JOB_ID=" + job.ID,
		"LATHE_ATTEMPT=" + strconv.Itoa(a.n),
		"LATHE_JOB_FILE=" + a.specFile,
		"LATHE_OUTPUT_DIR=" + a.outDir,
		"LATHE_CHECKPOINT_DIR=" + a.ckptDir,
		"CUDA_VISIBLE_DEVICES=" + visible,
	}
	if simulated {
		a.env = append(a.env, "LATHE_SIMULATED_GPUS=1")
	}
	if a.home != "" {
		a.env = append(a.env, "HOME="+a.home)
	}
	if a.rank != nil {
		g, end := a.rendezvous(ctx)
		if g == nil {
			if end == nil {
				end = func(context.Context) error { return nil }
			}
			return end
		}
		a.env = append(a.env, rendezvousEnv(g, *a.rank, job.Spec.Resources.GPUs)...)
		a.env = append(a.env, socketEnv(w.cfg.AdvertiseAddr)...)
		a.log.Info("gang rendezvous", slog.String("master_addr", g.Addr), slog.Int("master_port", g.Port), slog.Int("nodes", len(g.Ranks)))
	}
	if w.cfg.uids != nil {
		a.env = append(a.env, "USER="+trainerUser, "LOGNAME="+trainerUser)
	}
	if len(job.GPUs) > 0 && (a.rank == nil || *a.rank == 0) { // a gang's record shows rank 0's, as its gpus
		if err := w.store.RecordGPUs(ctx, job.ID, a.n, visible, simulated); err != nil {
			a.log.Warn("record CUDA_VISIBLE_DEVICES on the job", slog.Any("err", err))
		}
	}
	return nil
}

// trainerRun is what execute leaves for result: how the trainer ended, why its
// context was cancelled, its events, and whether the watchdog fired.
type trainerRun struct {
	res   trainer.Result
	cause error
	sink  *eventSink
	wd    *trainer.Watchdog
}

// execute runs the trainer under max_runtime, the worker's stop, the
// lease (keepLease and the watchdog) and the GPU monitor. The lease is
// kept until the attempt is over (its artifacts published).
func (a *localAttempt) execute(taskCtx context.Context) trainerRun {
	w, job := a.w, a.job
	runCtx, cancel := context.WithCancelCause(taskCtx)
	a.onClose(func() { cancel(nil) })
	if a.maxRuntime > 0 {
		timer := time.AfterFunc(a.maxRuntime, func() { cancel(trainer.ErrTimeout) })
		a.onClose(func() { timer.Stop() })
	}
	stopWatch := context.AfterFunc(w.stopCtx, func() { cancel(errShutdown) })
	a.onClose(func() { stopWatch() })
	// The watchdog stops the trainer even when this process cannot run
	// (SIGSTOP): fed on each lease renewal, it fires when keepLease would
	// fence, so the trainer is gone before the scheduler may reap.
	wd := trainer.NewWatchdog(w.cfg.LeaseTTL / 2)
	go w.keepLease(runCtx, cancel, a.log, a.renewer(), wd)

	sink := newEventSink(w.store, job.ID, a.n, a.log, cancel)
	a.track(sink)
	go sink.loop()
	watched := job.GPUs
	if a.rank != nil && *a.rank > 0 {
		// A gang's GPU series and hang check are rank 0's: the ranks'
		// collectives stall together, and ranks > 0 print no progress.
		watched = nil
	}
	go w.monitor(runCtx, cancel, a.log, job.ID, watched, sink)
	if release, err := w.gpuHeld.take(runCtx, a.log, job.ID, job.GPUs); err == nil {
		a.gpuRelease = release
	} // else runCtx ended: trainer.Run starts nothing and says why
	if h := testHookBeforeTrainer.Load(); h != nil {
		(*h)(job)
	}
	res := trainer.Run(runCtx, trainer.Config{
		Argv:      a.argv,
		Env:       a.env,
		PassEnv:   w.cfg.TrainerPassEnv[trainerName(job.Spec.Trainer)],
		RunAs:     a.runAs,
		Cgroup:    w.attemptCgroup(job.ID, a.n),
		Dir:       a.workDir,
		KillGrace: w.cfg.KillGrace,
		Watchdog:  wd,
		Logger:    a.log,
	}, sink)
	sink.close() // every trainer event is in the stream before the end is written
	a.log.Info("trainer exited", slog.String("outcome", res.Outcome.String()), slog.Int("exit_code", res.ExitCode),
		slog.String("signal", res.Signal), slog.Duration("ran", res.Ended.Sub(res.Started)))
	return trainerRun{res: res, cause: context.Cause(runCtx), sink: sink, wd: wd}
}

// track writes the trainer's pidfile and counts it on its GPUs once it
// started, and undoes both when the attempt is over.
func (a *localAttempt) track(sink *eventSink) {
	w, job := a.w, a.job
	pids := filepath.Join(w.cfg.DataDir, "pids")
	trainerPID := 0
	sink.onStart = func(pid int) {
		trainerPID = pid
		w.writePidfile(pids, job.ID, a.n, pid, a.log)
		w.trackTrainer(pid, true)
		for _, g := range job.GPUs {
			w.cfg.GPUs.SetLoad(g, pid, true)
		}
	}
	a.onClose(func() {
		if trainerPID != 0 {
			w.trackTrainer(trainerPID, false)
			for _, g := range job.GPUs {
				w.cfg.GPUs.SetLoad(g, trainerPID, false)
			}
		}
	})
	a.onClose(func() { removePidfile(pids, job.ID, a.n) })
}

// result turns how the trainer ended into the store write that ends the
// attempt. A trainer that exited 0 succeeded, or paused at its attempt's
// step limit (pauseEnd).
func (a *localAttempt) result(r trainerRun) endFunc {
	switch r.res.Outcome {
	case trainer.Succeeded:
		if a.rank != nil {
			return a.gangSucceeded(r)
		}
		if end := a.pauseEnd(r); end != nil {
			return end
		}
		return a.publish(r)
	case trainer.Cancelled:
		return a.stopped(r.cause)
	case trainer.Failed:
		if r.wd.Starved() {
			// The watchdog stopped it: this worker did not renew the lease
			// in time (it was frozen), the trainer did not fail.
			a.log.Warn("the watchdog stopped the trainer: the lease went unrenewed for half its length")
			return a.requeue("fenced", "the worker did not renew the lease for half its length; resuming from the last checkpoint")
		}
	}
	return a.verdict(trainer.Judge(r.res, a.maxRuntime, r.sink.lastLogs()))
}

// publish copies the artifacts of a trainer that succeeded into the job's
// output folder and ends the attempt succeeded.
func (a *localAttempt) publish(r trainerRun) endFunc {
	arts, end := a.publishArtifacts(r)
	if end != nil {
		return end
	}
	metrics := r.sink.metrics()
	a.w.recordStepTime(a.job, r.res, r.sink, a.log)
	return a.succeeded(metrics, arts)
}

// publishArtifacts copies the artifacts the trainer reported into the
// job's output folder; a non-nil end fails the attempt.
func (a *localAttempt) publishArtifacts(r trainerRun) ([]jobtype.Artifact, endFunc) {
	w, job := a.w, a.job
	roots, key := w.rootsOf(job)
	dest, err := openOutput(roots, key, w.outputDeny(), job.OutputURI)
	if err != nil {
		return nil, a.fail(outputReason(w.cfg.AllowedRoots, job.OutputURI, err), err.Error())
	}
	defer dest.Close()
	arts, err := publishArtifacts(a.outFD, dest, r.sink.artifacts())
	if err != nil {
		return nil, a.fail(artifactsReason(err), "artifacts: "+err.Error())
	}
	for i := range arts {
		arts[i].Residency, arts[i].Site = job.Spec.Residency, w.cfg.Site
	}
	return arts, nil
}

// stopped ends an attempt whose trainer this worker stopped, as the cause
// of the stop says.
func (a *localAttempt) stopped(cause error) endFunc {
	w, job := a.w, a.job
	switch {
	case errors.Is(cause, errLost):
		a.log.Warn("attempt lost to the store; not recording")
		return func(context.Context) error { return nil }
	case errors.Is(cause, errFenced):
		return a.requeue("fenced", "the worker lost Redis for half the lease; resuming from the last checkpoint")
	case errors.Is(cause, errPreempted):
		return func(ctx context.Context) error {
			cur, err := w.store.Get(ctx, job.ID)
			if err != nil {
				return err
			}
			a.log.Info("preempted; back to the queue, resuming from the checkpoint", slog.String("for", cur.PreemptRequested))
			return w.store.Preempted(ctx, job.ID, a.n, cur.PreemptRequested)
		}
	case errors.Is(cause, errHung):
		return a.retryOrFail(jobtype.ReasonHung, fmt.Sprintf("GPUs idle and no progress line for %s", w.cfg.HangTimeout))
	case errors.Is(cause, errShutdown):
		return a.requeue("worker shutdown", "the worker stopped; resuming from the last checkpoint")
	}
	// The trainer was stopped because a cancel was asked (asynq's fast
	// path or our poll) — or because asynq cancelled the handler on its
	// own (CancelProcessing by hand, an expired lease). Only the store's
	// cancel_requested makes it a cancel; anything else is an interrupted
	// attempt, and the job gets a new one.
	return func(ctx context.Context) error {
		req, err := w.store.CancelRequested(ctx, job.ID)
		if err != nil {
			return err
		}
		if req {
			return a.cancelled()(ctx)
		}
		a.log.Warn("asynq stopped the attempt without a cancel in the store; requeueing", slog.Any("cause", cause))
		return a.requeue("interrupted", fmt.Sprintf("the attempt was interrupted (%v) without a cancel request; resuming from the last checkpoint", cause))(ctx)
	}
}

// keepLease renews the attempt's lease every CancelPoll while it runs. The
// renewal also reads cancel_requested, so a cancel asked while asynq's fast
// path was missed still lands within a CancelPoll. When the store says the
// attempt is no longer ours, the trainer is stopped (errLost); when Redis
// cannot be reached for half the lease, too (errFenced).
func (w *Worker) keepLease(ctx context.Context, cancel context.CancelCauseFunc, log *slog.Logger, renew func(context.Context) (bool, error), wd *trainer.Watchdog) {
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
		req, err := renew(rctx)
		rc()
		switch {
		case err == nil:
			lastOK = time.Now()
			wd.Feed()
			if req {
				cancel(trainer.ErrCancelled)
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

// handOver gives user c what its trainer writes and reads: the work
// folder (its working directory), the output folder, the data copies and
// the job's checkpoint folder, all of it (a checkpoint an earlier attempt
// left as another user included), through descriptors
// (pathpolicy.ChownTree: no link is followed, even one swapped in by a
// process of that user meanwhile), each folder mode 0700 (no other
// trainer lists or reads it). The worker reads nothing back through these
// names: artifacts come through the output folder's descriptor opened
// before the trainer started.
func (w *Worker) handOver(c *trainer.Credential, workDir, outDir, inputsDir, ckptDir string) error {
	// The work folder itself only (the trainer's working directory):
	// job.json stays lathed's.
	if err := os.Lchown(workDir, int(c.UID), int(c.GID)); err != nil {
		return fmt.Errorf("worker: hand %s over to uid %d: %w", workDir, c.UID, err)
	}
	for _, d := range []string{outDir, inputsDir, ckptDir} {
		if d == "" {
			continue
		}
		if err := pathpolicy.ChownTree(d, int(c.UID), int(c.GID)); err != nil {
			return fmt.Errorf("worker: hand %s over to uid %d: %w", d, c.UID, err)
		}
	}
	for _, d := range []string{workDir, outDir, inputsDir, ckptDir} {
		if d == "" {
			continue
		}
		if err := os.Chmod(d, 0o700); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("worker: hand %s over to uid %d: %w", d, c.UID, err)
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

// trainerArgv is the command line of the job's trainer on this node: its
// command with the placeholders filled in, under its launcher when the
// attempt holds several GPUs.
func (w *Worker) trainerArgv(job *jobtype.Job) ([]string, error) {
	return trainerArgvOf(w.cfg, job, len(job.GPUs), "node "+w.cfg.Node)
}

// trainerArgvOf is trainerArgv for an attempt of gpus GPUs under cfg's
// Trainers, Launchers and interpreters; where names the place in errors.
func trainerArgvOf(cfg Config, job *jobtype.Job, gpus int, where string) ([]string, error) {
	name := trainerName(job.Spec.Trainer)
	tmpl, ok := cfg.Trainers[name]
	if !ok || len(tmpl) == 0 {
		return nil, fmt.Errorf("trainer %q is not configured on %s", name, where)
	}
	l := cfg.Launchers[name]
	if job.Spec.BaseModel == tinyChar {
		// The CPU demo runs one process under Debian's torch 1.13, whose
		// torchrun cannot start on Python 3.11 (it loses Std.NONE, the
		// zero member of an IntFlag that 3.11 no longer iterates).
		l.Torchrun = false
	}
	argv, err := launchArgv(tmpl, l, gpus, placeholders(cfg, job.Spec.BaseModel))
	if err == nil && job.Spec.Resources.Nodes > 1 && l.Torchrun && len(l.Argv) == 0 {
		argv = gangArgv(argv)
	}
	return argv, err
}

// tinyChar is the built-in demo model, which runs under Config.DemoPython.
const tinyChar = "tiny-char"

// placeholders is the replacer of a trainer command's placeholders.
func placeholders(cfg Config, baseModel string) *strings.Replacer {
	python := cfg.HFPython
	if baseModel == tinyChar {
		python = cfg.DemoPython
	}
	return strings.NewReplacer("{scripts}", cfg.ScriptsDir, "{python}", python, "{hf_python}", cfg.HFPython)
}

// launchArgv fills in tmpl (and, for gpus > 1, the launcher's command)
// with r, and puts it under torchrun when the launcher says so.
func launchArgv(tmpl []string, l Launcher, gpus int, r *strings.Replacer) ([]string, error) {
	if gpus > 1 && len(l.Argv) > 0 {
		tmpl = l.Argv
	}
	n := strconv.Itoa(gpus)
	argv := make([]string, len(tmpl))
	for i, a := range tmpl {
		argv[i] = strings.ReplaceAll(r.Replace(a), "{gpus}", n)
	}
	if gpus > 1 && l.Torchrun && len(l.Argv) == 0 {
		if len(argv) < 2 {
			return nil, fmt.Errorf("launcher torchrun needs a command of an interpreter and a script, got %q", argv)
		}
		argv = append([]string{argv[0], "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=" + n}, argv[1:]...)
	}
	return argv, nil
}

// gangArgv is argv for a rank of a gang: torchrun meets the other nodes
// (its --nnodes, --node-rank, --master-addr and --master-port come from
// PET_* in rendezvousEnv) instead of running standalone.
func gangArgv(argv []string) []string {
	out := argv[:0:0]
	for _, a := range argv {
		if a != "--standalone" && a != "--nnodes=1" {
			out = append(out, a)
		}
	}
	return out
}

// checkPaths refuses a job whose file:// dataset, eval dataset or output
// folder lies outside the allowed roots of its team (rootsOf) once
// symbolic links are resolved
// (the scheduler checked the text; this is the check that holds on the
// machine where the files are), or in a folder no job may read (dataDeny,
// outputDeny). It opens the dataset and the eval dataset with
// pathpolicy.Roots.Open, so what it returns is the files it checked; the
// caller copies them for the trainer. Each error names the field.
func (w *Worker) checkPaths(job *jobtype.Job) (openedInputs, error) {
	roots, key := w.rootsOf(job)
	if roots == nil {
		return nil, nil
	}
	// A local base model folder is data too: under the roots, never
	// lathed's own files. It is checked, not copied (models are large);
	// the trainer opens it by name.
	if bm := job.Spec.BaseModel; strings.HasPrefix(bm, "file:") || filepath.IsAbs(bm) {
		p := bm
		if strings.HasPrefix(bm, "file:") {
			var err error
			if p, err = fileuri.Path(bm); err != nil {
				return nil, fmt.Errorf("base_model: %w", err)
			}
		}
		if err := roots.CheckResolvedDeny(p, w.dataDeny()); err != nil {
			return nil, fmt.Errorf("base_model: %w%s", err, rootsHint(err, key))
		}
		if w.cfg.uids != nil { // a user of its own reads what others may
			if err := othersMayRead(p); err != nil {
				return nil, fmt.Errorf("base_model: %w", err)
			}
		}
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
			if err := roots.CheckResolvedDeny(p, w.outputDeny()); err != nil {
				in.close()
				return nil, fmt.Errorf("%s: %w%s", f.name, err, rootsHint(err, key))
			}
			continue
		}
		file, err := roots.Open(p, w.dataDeny())
		if err != nil {
			in.close()
			return nil, fmt.Errorf("%s: %w%s", f.name, err, rootsHint(err, key))
		}
		in = append(in, openedInput{field: f.name, file: file, path: p})
	}
	return in, nil
}

// rootsHint names the config key (key: jobs.allowed_roots or
// teams.<team>.allowed_roots) of a path refused as outside the roots.
func rootsHint(err error, key string) string {
	if errors.Is(err, pathpolicy.ErrOutside) {
		return " (" + key + ")"
	}
	return ""
}

// rootsOf is the allowed roots of job's files and their config key: its
// team's own (Config.TeamRoots), else Config.AllowedRoots (nil: no
// restriction). The job record carries the team it was admitted for.
func (w *Worker) rootsOf(job *jobtype.Job) (pathpolicy.Roots, string) {
	return w.cfg.TeamRoots.For(job.Team, w.cfg.AllowedRoots)
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
func (w *Worker) recordStepTime(job *jobtype.Job, res trainer.Result, sink *eventSink, log *slog.Logger) {
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
