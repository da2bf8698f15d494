package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// EventSlurm is the job event type of the slurm worker's notes: the
// submission, the Slurm job's state changes, its cancel and its end.
const EventSlurm = "slurm"

// slurmAttempt is one attempt watched by the slurm worker.
type slurmAttempt struct {
	s       *Slurm
	job     *jobtype.Job
	n       int
	gpus    int
	log     *slog.Logger
	dir     string // WORK_DIR/JOB/ATTEMPT
	ckpt    string // its checkpoint folder (prepare)
	inst    *jobtype.Instance
	off     int             // bytes of events.jsonl mirrored
	rec     *trainer.Record // the step's events folded
	logs    bool            // raw log lines may go into Redis
	started bool
	state   string    // Slurm's state when last seen
	missing time.Time // when Slurm first did not know the job
}

func newSlurmAttempt(s *Slurm, job *jobtype.Job) *slurmAttempt {
	a := &slurmAttempt{s: s, job: job, n: job.Attempt, gpus: job.Spec.Resources.GPUs,
		log: s.log.With(slog.String("job_id", job.ID), slog.Int("attempt", job.Attempt)),
		dir: filepath.Join(s.b.WorkDir, job.ID, strconv.Itoa(job.Attempt)),
		rec: trainer.NewRecord(job.Metrics), started: job.State == jobtype.StateRunning}
	if job.Instance != nil && job.Instance.Attempt == job.Attempt && job.Instance.Backend == s.b.Name {
		inst := *job.Instance
		a.inst = &inst
	}
	return a
}

func (a *slurmAttempt) ending() attemptEnd {
	return attemptEnd{store: a.s.store, job: a.job, n: a.n, maxAttempts: a.s.cfg.MaxAttempts, log: a.log}
}

// run carries the attempt to its end and returns the store write that
// records it, or nil when there is nothing to write (detached, or lost to
// the store).
func (a *slurmAttempt) run(ctx context.Context) endFunc {
	if n := a.job.Spec.Resources.Nodes; n > 1 {
		// Only the local pool's lathed workers run a gang's ranks.
		return a.ending().fail(jobtype.ReasonPermanent, fmt.Sprintf("resources.nodes %d: backend %s (%s) does not run jobs that span nodes: refused before anything was submitted to %s",
			n, a.s.b.Name, a.s.b.Kind, a.s.w.System))
	}
	problem, logs := residencyProblem(a.s.cfg.Routing, a.s.b, a.job, [][2]string{{"checkpoints", a.s.b.CheckpointURI}})
	if problem != "" {
		return a.ending().fail(jobtype.ReasonResidency, problem+": refused before anything was submitted to "+a.s.w.System)
	}
	a.logs = logs
	if a.inst != nil {
		a.note(ctx, fmt.Sprintf("re-attached to %s %s", a.s.w.Job, a.inst.ID))
		if off, err := a.s.store.CloudEventsSeq(ctx, a.job.ID); err == nil {
			a.off = off
			a.refold()
		}
	} else if end, ok := a.submit(ctx); !ok {
		return end
	}
	defer a.s.forget(a.inst.ID)
	return a.watchLoop(ctx)
}

// note appends a slurm event to the job (control-plane metadata).
func (a *slurmAttempt) note(ctx context.Context, msg string) {
	a.s.note(ctx, a.log, a.job.ID, a.n, msg)
}

// maxRuntime is the job's max_runtime, or DefaultMaxRuntime.
func (a *slurmAttempt) maxRuntime() time.Duration {
	if d := a.job.Spec.MaxRuntime.D(); d > 0 {
		return d
	}
	return a.s.cfg.DefaultMaxRuntime
}

// prepare checks the job's files and writes the attempt folder: job.json
// (the spec), step.json and the batch script. A non-nil end means the
// attempt ended.
func (a *slurmAttempt) prepare() endFunc {
	for _, u := range []struct{ what, uri string }{{"dataset", a.job.Spec.Dataset}, {"eval_dataset", a.job.Spec.EvalDataset}, {"output", a.job.OutputURI}} {
		if u.uri == "" {
			continue
		}
		p, err := fileuri.Path(u.uri)
		if err != nil {
			return a.ending().fail(jobtype.ReasonPermanent, fmt.Sprintf("%s %s: a %s pool reads and writes file:// only: %v", u.what, u.uri, a.s.w.System, err))
		}
		if a.s.cfg.AllowedRoots != nil && !a.s.cfg.AllowedRoots.Allows(p) {
			return a.ending().fail(jobtype.ReasonPermanent, fmt.Sprintf("%s %s is outside the allowed roots", u.what, u.uri))
		}
	}
	argv, err := trainerArgvOf(a.s.cfg.trainerConfig(), a.job, a.gpus, a.s.b.Kind+" backend "+a.s.b.Name)
	if err != nil {
		return a.ending().fail(jobtype.ReasonPermanent, err.Error())
	}
	ckpt := filepath.Join(a.s.b.WorkDir, a.job.ID, "checkpoints")
	if p, err := fileuri.Path(a.s.b.CheckpointURI); err == nil && a.s.b.CheckpointURI != "" {
		ckpt = filepath.Join(p, a.job.ID)
	}
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		return a.ending().retryOrFail(jobtype.ReasonInternal, fmt.Sprintf("make %s: %v", ckpt, err))
	}
	a.ckpt = ckpt
	step := SlurmStep{JobID: a.job.ID, Attempt: a.n, Argv: argv, MaxRuntimeS: int64(a.maxRuntime() / time.Second),
		KillGraceS: int64(a.s.cfg.KillGrace / time.Second), PassEnv: a.s.cfg.TrainerPassEnv[trainerName(a.job.Spec.Trainer)],
		Env: []string{"LATHE_JOB_ID=" + a.job.ID, "LATHE_ATTEMPT=" + strconv.Itoa(a.n),
			"LATHE_JOB_FILE=" + filepath.Join(a.dir, slurmJobFile), "LATHE_OUTPUT_DIR=" + filepath.Join(a.dir, slurmOutputDir),
			"LATHE_CHECKPOINT_DIR=" + ckpt}}
	files := map[string][]byte{slurmJobFile: mustJSON(attemptSpec(a.job)), SlurmStepFile: mustJSON(step),
		slurmScriptFile: []byte(slurmScript(a.s.b.AgentPath, a.dir))}
	if err := a.writeFolder(files); err != nil {
		return a.ending().retryOrFail(jobtype.ReasonInternal, err.Error())
	}
	return nil
}

// writeFolder makes the attempt's folder and its output folder beneath
// work_dir and writes files into it, following no link at any component
// (pathpolicy.MakeDir, CreateIn): an earlier attempt's trainer, which
// runs as the worker's Slurm user and can write under work_dir/JOB, may
// have put a link where this attempt's folder goes, to make the worker
// write elsewhere on its host.
func (a *slurmAttempt) writeFolder(files map[string][]byte) error {
	wd, err := filepath.EvalSymlinks(a.s.b.WorkDir) // the operator's path: links in it are theirs
	if err != nil {
		return fmt.Errorf("work_dir %s: %w", a.s.b.WorkDir, err)
	}
	roots := pathpolicy.Roots{wd}
	dir, err := roots.MakeDir(filepath.Join(wd, a.job.ID, strconv.Itoa(a.n)), nil)
	if err != nil {
		return fmt.Errorf("make the attempt's folder: %w", err)
	}
	defer dir.Close()
	out, err := roots.MakeDir(filepath.Join(dir.Name(), slurmOutputDir), nil)
	if err != nil {
		return fmt.Errorf("make the attempt's output folder: %w", err)
	}
	out.Close()
	for name, b := range files {
		if _, err := pathpolicy.CreateIn(dir, name, bytes.NewReader(b)); err != nil {
			return err
		}
	}
	f, err := pathpolicy.OpenBeneath(dir, slurmScriptFile)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Chmod(0o750)
}

// request is the attempt's sbatch request.
func (a *slurmAttempt) request() slurm.SubmitRequest {
	return slurm.SubmitRequest{Name: slurmJobName(a.job.ID, a.n), Partition: a.s.b.Partition, Account: a.s.b.Account,
		GPUs: a.gpus, GRESType: a.s.b.GRESType, Script: filepath.Join(a.dir, slurmScriptFile), Dir: a.dir, Output: filepath.Join(a.dir, slurmOutFile),
		TimeLimit: a.maxRuntime() + a.s.cfg.KillGrace + time.Minute, Comment: slurmComment(a.s.cfg.Cluster),
		Checkpoints: a.ckpt, Data: a.dataPaths()}
}

// dataPaths are the files of the job's dataset and eval dataset (checked
// file:// by prepare).
func (a *slurmAttempt) dataPaths() []string {
	var out []string
	for _, u := range []string{a.job.Spec.Dataset, a.job.Spec.EvalDataset} {
		if p, err := fileuri.Path(u); u != "" && err == nil {
			out = append(out, p)
		}
	}
	return out
}

// submit finds the attempt's Slurm job by name (submitted before a
// restart) or writes the folder and submits it, trying again every
// SubmitRetry while the lease holds; then records the job id on the job.
// ok is false when the attempt ended (end, possibly nil).
func (a *slurmAttempt) submit(ctx context.Context) (endFunc, bool) {
	name := slurmJobName(a.job.ID, a.n)
	for {
		found, err := a.s.cfg.Slurm.FindByName(ctx, name)
		if err == nil && len(found) > 0 {
			a.submitted(ctx, found[len(found)-1].ID, "found (submitted before a restart)")
			return nil, true
		}
		if err == nil {
			if end := a.prepare(); end != nil {
				return end, false
			}
			var id string
			if id, err = a.s.cfg.Slurm.Submit(ctx, a.request()); err == nil {
				a.submitted(ctx, id, "submitted")
				return nil, true
			}
		}
		if end, ok := a.waitAndRetry(ctx, fmt.Sprintf("submitting to %s failed (%v); trying again in %s", a.s.w.System, err, a.s.cfg.SubmitRetry)); !ok {
			return end, false
		}
	}
}

// submitted records Slurm job id on the job and in its events.
func (a *slurmAttempt) submitted(ctx context.Context, id, verb string) {
	r := a.request()
	a.inst = &jobtype.Instance{ID: id, Attempt: a.n, Backend: a.s.b.Name, Type: a.s.w.Type + strconv.Itoa(a.gpus),
		Market: a.s.b.Kind, Region: a.s.w.Region, LaunchTime: time.Now().UTC(),
		USDPerHour: float64(a.gpus) * a.s.b.USDPerGPUHour(), State: slurm.StatePending}
	if err := a.s.store.RecordInstance(context.WithoutCancel(ctx), a.job.ID, a.n, a.inst); err != nil {
		a.log.Warn("record the "+a.s.w.Job+" on the job", slog.Any("err", err))
	}
	a.note(ctx, a.s.w.submitted(id, verb, r, a.dir))
}

// waitAndRetry notes why, then waits SubmitRetry keeping the lease and
// honouring a cancel. ok is false when the attempt ended.
func (a *slurmAttempt) waitAndRetry(ctx context.Context, why string) (endFunc, bool) {
	a.note(ctx, why)
	cancelled, stop := a.s.waitRenewing(ctx, a.log, a.job.ID, a.n, a.s.cfg.SubmitRetry)
	switch {
	case stop:
		return nil, false
	case cancelled:
		return a.ending().cancelled(), false
	}
	return nil, true
}

// renew extends the lease; cancelled when a cancel was asked, lost when
// the store moved on (a transient error is neither).
func (a *slurmAttempt) renew(ctx context.Context) (cancelled, lost bool) {
	return a.s.renewLease(ctx, a.log, a.job.ID, a.n)
}

// watchLoop follows the Slurm job to the attempt's end.
func (a *slurmAttempt) watchLoop(ctx context.Context) endFunc {
	t := time.NewTicker(a.s.cfg.PollInterval)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				a.log.Info("detached; the "+a.s.w.Job+" keeps running", slog.String("batch_job", a.inst.ID))
				return nil
			case <-t.C:
			}
		}
		if end, done := a.watchOnce(ctx); done {
			return end
		}
	}
}

// watchOnce is one look: the lease (and cancel), the step's events,
// Slurm's state. done is true when the attempt ended (end) or is no longer
// this worker's (nil).
func (a *slurmAttempt) watchOnce(ctx context.Context) (endFunc, bool) {
	cancelled, lost := a.renew(ctx)
	if lost {
		return nil, true
	}
	if cancelled {
		return a.cancel(ctx)
	}
	a.mirror(ctx)
	j, err := a.s.job(ctx, a.inst.ID)
	switch {
	case errors.Is(err, slurm.ErrNotFound):
		return a.unknownToSlurm(ctx)
	case err != nil:
		a.log.Warn("reading "+a.s.w.System+" failed; the "+a.s.w.Job+" is left alone", slog.Any("err", err))
		return nil, false
	}
	a.missing = time.Time{}
	a.seen(ctx, j)
	if !slurm.Ended(j.State) && j.State != slurm.StateRequeued {
		return nil, false
	}
	a.mirror(ctx)
	return a.ended(ctx, j), true
}

// seen records a change of the Slurm job's state, and the attempt's
// start when Slurm started it.
func (a *slurmAttempt) seen(ctx context.Context, j slurm.Job) {
	if j.State != a.state {
		a.state = j.State
		a.inst.State = j.State
		_ = a.s.store.RecordInstance(context.WithoutCancel(ctx), a.job.ID, a.n, a.inst)
		a.note(ctx, fmt.Sprintf("%s %s is %s (%s) on %q", a.s.w.Job, j.ID, j.State, j.Reason, j.Nodes))
	}
	if !a.started && !j.StartTime.IsZero() {
		err := a.s.store.Started(ctx, a.job.ID, a.n, j.StartTime)
		if err == nil || errors.Is(err, jobstore.ErrConflict) {
			a.started = true
		}
	}
}

// unknownToSlurm handles a Slurm job the controller does not know: the
// step's status decides when it wrote one; otherwise, after LostGrace, the
// attempt is lost and retried.
func (a *slurmAttempt) unknownToSlurm(ctx context.Context) (endFunc, bool) {
	if a.missing.IsZero() {
		a.missing = time.Now()
		return nil, false
	}
	if time.Since(a.missing) < a.s.cfg.LostGrace {
		return nil, false
	}
	a.mirror(ctx)
	if st, found, _ := a.stepStatus(); found {
		return a.fromStatus(ctx, st, slurm.Job{ID: a.inst.ID}), true
	}
	a.addCost(ctx, slurm.Job{})
	return a.ending().retryOrFail(jobtype.ReasonExit, fmt.Sprintf("%s %s is unknown to %s and left no status", a.s.w.Job, a.inst.ID, a.s.w.System)), true
}

// cancel scancels the Slurm job, waits until Slurm ended it, and ends the
// attempt cancelled.
func (a *slurmAttempt) cancel(ctx context.Context) (endFunc, bool) {
	a.note(ctx, "cancel asked; "+a.s.w.Cancel+" "+a.inst.ID)
	t := time.NewTicker(a.s.cfg.PollInterval)
	defer t.Stop()
	for {
		if err := a.s.cfg.Slurm.Cancel(ctx, a.inst.ID); err != nil {
			a.log.Warn(a.s.w.Cancel+" failed; trying again", slog.Any("err", err))
		}
		j, err := a.s.cfg.Slurm.Job(ctx, a.inst.ID)
		if errors.Is(err, slurm.ErrNotFound) || err == nil && slurm.Ended(j.State) {
			a.mirror(ctx)
			a.addCost(ctx, j)
			a.note(ctx, fmt.Sprintf("%s %s ended %s after the cancel", a.s.w.Job, a.inst.ID, j.State))
			return a.ending().cancelled(), true
		}
		select {
		case <-ctx.Done():
			return nil, true // detached: the next worker cancels again
		case <-t.C:
		}
	}
}

// addCost adds GPUs × price × the Slurm job's run time to the job's cost,
// once per attempt.
func (a *slurmAttempt) addCost(ctx context.Context, j slurm.Job) {
	if j.StartTime.IsZero() || a.inst.USDPerHour == 0 {
		return
	}
	end := j.EndTime
	if end.IsZero() {
		end = time.Now()
	}
	usd := a.inst.USDPerHour * end.Sub(j.StartTime).Hours()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if added, err := a.s.store.AddAttemptCost(wctx, a.job.ID, a.n, usd); err != nil {
		a.log.Warn("record the attempt's cost", slog.Any("err", err))
	} else if added {
		a.note(ctx, fmt.Sprintf("cost $%.4f (%s × $%.4f/h)", usd, end.Sub(j.StartTime).Round(time.Second), a.inst.USDPerHour))
	}
}

// mirror copies the step's new complete lines of events.jsonl into the
// job, and the offset with them, so an adopting worker goes on from there.
func (a *slurmAttempt) mirror(ctx context.Context) {
	f, err := a.openStep(SlurmEventsFile, false)
	if err != nil {
		return // not written yet (or not a file of its own: never read)
	}
	defer f.Close()
	if _, err := f.Seek(int64(a.off), io.SeekStart); err != nil {
		return
	}
	b, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if i := bytes.LastIndexByte(b, '\n'); err != nil || i < 0 {
		return
	} else {
		b = b[:i+1]
	}
	evs, _ := convertEvents(a.rec, a.logs, b)
	evs = append(evs, jobstore.CloudEventsSeqUpdate(a.off+len(b)))
	if _, err := a.s.store.Append(ctx, a.job.ID, a.n, evs); err != nil {
		a.log.Warn("mirror events failed; trying again", slog.Any("err", err))
		return
	}
	a.off += len(b)
}

// refold folds the events already mirrored (before a restart) into the
// record, for the artifacts the trainer reported.
func (a *slurmAttempt) refold() {
	b, err := a.readStep(SlurmEventsFile)
	if err != nil || a.off > len(b) {
		return
	}
	_, _ = convertEvents(a.rec, false, b[:a.off])
}

// publish copies the artifacts of a step that succeeded into the job's
// output and ends the attempt succeeded.
func (a *slurmAttempt) publish(metrics map[string]float64) endFunc {
	out, err := a.openStep(slurmOutputDir, true)
	if err != nil {
		return a.ending().fail(jobtype.ReasonInternal, "artifacts: "+err.Error())
	}
	defer out.Close()
	dest, err := openOutput(a.s.cfg.AllowedRoots, "", a.s.cfg.Deny, a.job.OutputURI)
	if err != nil {
		return a.ending().fail(outputReason(a.s.cfg.AllowedRoots, a.job.OutputURI, err), err.Error())
	}
	defer dest.Close()
	arts, err := publishArtifacts(out, dest, a.rec.Artifacts())
	if err != nil {
		return a.ending().fail(artifactsReason(err), "artifacts: "+err.Error())
	}
	for i := range arts {
		arts[i].Residency, arts[i].Site = a.job.Spec.Residency, a.s.b.Site
	}
	return a.ending().succeeded(metrics, arts)
}

// lastOutput is the tail of the batch job's output, for messages: the
// Slurm job's output file, or the pod's log read from the API server.
func (a *slurmAttempt) lastOutput(ctx context.Context) string {
	var b []byte
	if a.s.logTail != nil {
		b = []byte(a.s.logTail(ctx, a.inst.ID))
	} else {
		b, _ = a.readStep(slurmOutFile)
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
	if len(s) > 400 {
		s = "…" + s[len(s)-400:]
	}
	return s
}

// openStep opens name in the attempt's folder, WORK_DIR/JOB/ATTEMPT,
// following no symbolic link below work_dir (pathpolicy.OpenBeneath), and
// only when it is what it must be: a directory (dir), else a regular file
// with one link. The folder is written by the Slurm job, whose trainer runs
// as the worker's Slurm user and may swap any name in it for a link or a
// hard link: to a file of the worker's host, which would be read back into
// the job's events and logs.
func (a *slurmAttempt) openStep(name string, dir bool) (*os.File, error) {
	wd, err := filepath.EvalSymlinks(a.s.b.WorkDir) // the operator's path: links in it are theirs
	if err != nil {
		return nil, err
	}
	root, err := pathpolicy.OpenDir(wd)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := pathpolicy.OpenBeneath(root, filepath.Join(a.job.ID, strconv.Itoa(a.n), name))
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	switch {
	case err != nil:
	case dir && !st.IsDir():
		err = fmt.Errorf("%s: not a directory (%s)", f.Name(), st.Mode().Type())
	case !dir && !st.Mode().IsRegular():
		err = fmt.Errorf("%s: not a regular file (%s)", f.Name(), st.Mode().Type())
	case !dir && nlink(st) != 1:
		err = fmt.Errorf("%s: has %d hard links; the step's files are files of their own", f.Name(), nlink(st))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// readStep reads up to 16 MiB of the attempt folder's file name (openStep).
func (a *slurmAttempt) readStep(name string) ([]byte, error) {
	f, err := a.openStep(name, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 16<<20))
}

// stepStatus reads the attempt folder's status.json (openStep); found is
// false while the step has not written it.
func (a *slurmAttempt) stepStatus() (st agent.Status, found bool, err error) {
	b, err := a.readStep(SlurmStatusFile)
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	return parseStepStatus(b, err)
}

// nlink is a file's link count (1 where the platform does not say).
func nlink(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
