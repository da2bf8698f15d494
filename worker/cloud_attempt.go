package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/internal/cloud"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trainer"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// EventCloud is the job event type of the AWS worker's notes: launch tries,
// capacity refusals, the instance found or launched, terminations, staging.
const EventCloud = "cloud"

// cloudAttempt is one attempt watched by the AWS worker.
type cloudAttempt struct {
	c       *Cloud
	job     *jobtype.Job
	n       int
	log     *slog.Logger
	work    agent.S3URI // the attempt's prefix in the work bucket (ends in /)
	jobURI  string      // s3://…/job.json
	ckpt    string      // the job's checkpoint prefix (s3://…/JOB/checkpoints/)
	inst    *jobtype.Instance
	seq     int             // next events batch to mirror
	rec     *trainer.Record // the agent's events folded (metrics, last log lines)
	logs    bool            // raw log lines may go into Redis (redis_site carries the job's tags)
	started bool
	gone    time.Time // when the instance was first seen gone without a status
}

func newCloudAttempt(c *Cloud, job *jobtype.Job) *cloudAttempt {
	work, _ := agent.ParseS3URI(c.b.WorkURI)
	ck, _ := agent.ParseS3URI(c.b.CheckpointURI)
	a := &cloudAttempt{c: c, job: job, n: job.Attempt,
		log: c.log.With(slog.String("job_id", job.ID), slog.Int("attempt", job.Attempt)),
		rec: trainer.NewRecord(job.Metrics), started: job.State == jobtype.StateRunning}
	a.work = agent.S3URI{Bucket: work.Bucket, Key: joinKey(work.Key, job.ID, strconv.Itoa(job.Attempt)) + "/"}
	a.jobURI = "s3://" + a.work.Bucket + "/" + a.work.Key + agent.JobObject
	a.ckpt = "s3://" + ck.Bucket + "/" + joinKey(ck.Key, job.ID, strings.TrimSuffix(agent.CheckpointsFolder, "/")) + "/"
	if job.Instance != nil && job.Instance.Attempt == job.Attempt {
		inst := *job.Instance
		a.inst = &inst
	}
	return a
}

// joinKey joins S3 key parts with "/", dropping empty parts and slashes at
// their ends.
func joinKey(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p = strings.Trim(p, "/"); p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "/")
}

// run carries the attempt to its end and returns the store write that
// records it, or nil when there is nothing to write (detached, or the
// attempt was lost to the store).
func (a *cloudAttempt) run(ctx context.Context) endFunc {
	if end := a.checkResidency(); end != nil {
		return end
	}
	if end := a.checkTrainer(); end != nil {
		return end
	}
	if a.inst == nil {
		if seq, err := a.c.store.CloudEventsSeq(ctx, a.job.ID); err == nil && seq != 0 {
			a.seq = seq
		}
		end, ok := a.launch(ctx)
		if !ok {
			return end
		}
	} else {
		a.note(ctx, fmt.Sprintf("re-attached to instance %s (%s, %s)", a.inst.ID, a.inst.Type, a.inst.Market))
		if seq, err := a.c.store.CloudEventsSeq(ctx, a.job.ID); err == nil && seq != 0 {
			a.seq = seq
		}
	}
	if a.seq < 1 {
		a.seq = 1
	}
	return a.watchLoop(ctx)
}

// ending is how the attempt's end is written (attemptEnd, shared with the
// local worker).
func (a *cloudAttempt) ending() attemptEnd {
	return attemptEnd{store: a.c.store, job: a.job, n: a.n, maxAttempts: a.c.cfg.MaxAttempts, log: a.log}
}

// fail ends the attempt failed, for good.
func (a *cloudAttempt) fail(reason, msg string) endFunc { return a.ending().fail(reason, msg) }

// retryOrFail requeues a retryable failure as a new attempt, or fails the
// job when its attempts are used up.
func (a *cloudAttempt) retryOrFail(reason, msg string) endFunc {
	return a.ending().retryOrFail(reason, msg)
}

// checkResidency refuses, before anything is copied or launched, an
// attempt whose job has a residency tag that the backend's site, or the
// site of any place its data comes from or goes to, lacks (a task put on
// the queue by hand, a stale decision).
func (a *cloudAttempt) checkResidency() endFunc {
	if n := a.job.Spec.Resources.Nodes; n > 1 {
		// Only the local pool's lathed workers run a gang's ranks.
		return a.fail(jobtype.ReasonPermanent, fmt.Sprintf("resources.nodes %d: backend %s (%s) does not run jobs that span nodes: refused before anything was copied or launched",
			n, a.c.b.Name, a.c.b.Kind))
	}
	problem, logs := residencyProblem(a.c.cfg.Routing, a.c.b, a.job, [][2]string{{"checkpoints", a.c.b.CheckpointURI}, {"work_uri", a.c.b.WorkURI}})
	if problem != "" {
		return a.fail(jobtype.ReasonResidency, problem+": refused before anything was copied or launched")
	}
	a.logs = logs
	return nil
}

// residencyProblem says why job may not run on backend b: a residency tag
// of the job (or the config's default residency) that b's site, or the
// site of its dataset, eval dataset, output or of an extra place (what,
// uri), lacks, or a place whose site the config does not know; "" when it
// may. logs reports whether its raw log lines may go into Redis (the Redis
// site carries its tags).
func residencyProblem(rc routecfg.Config, b routecfg.Backend, job *jobtype.Job, extra [][2]string) (problem string, logs bool) {
	want := job.Spec.Residency
	if len(want) == 0 {
		want = rc.DefaultResidency
		if len(want) == 0 {
			want = []string{"onprem"}
		}
	}
	places := append([][2]string{{"compute", ""}, {"dataset", job.Spec.Dataset}, {"eval_dataset", job.Spec.EvalDataset},
		{"output", job.OutputURI}}, extra...)
	for _, p := range places {
		what, uri := p[0], p[1]
		if what != "compute" && uri == "" {
			continue
		}
		site := b.Site
		if uri != "" {
			site = siteOfURI(rc, uri)
		}
		s, ok := rc.Site(site)
		if site == "" || !ok {
			return fmt.Sprintf("%s %s: its site is not known to the config", what, uri), false
		}
		if miss := missingTags(want, s.Tags); len(miss) > 0 {
			where := "backend " + b.Name
			if uri != "" {
				where = what + " " + uri
			}
			return fmt.Sprintf("%s is in site %s (tags %s), which lacks residency tag(s) %s of the job",
				where, site, strings.Join(s.Tags, ","), strings.Join(miss, ",")), false
		}
	}
	rs, ok := rc.Site(rc.RedisSite)
	return "", ok && len(missingTags(want, rs.Tags)) == 0
}

// checkTrainer refuses, before anything is copied or launched, a job that
// names a trainer other than the reference one: the agent runs only the
// reference trainer (named trainers on instances are not built yet), and
// routing never sends such a job here, so this is a task put on the queue
// by hand or a stale decision. Running the reference trainer in its place
// would be a silent lie.
func (a *cloudAttempt) checkTrainer() endFunc {
	if t := a.job.Spec.Trainer; t != "" && t != "reference" {
		return a.fail(jobtype.ReasonPermanent, fmt.Sprintf("trainer %q: cloud instances run only the reference trainer (named trainers on instances are not built yet): refused before anything was copied or launched", t))
	}
	return nil
}

// siteOfURI is the site of a data URI under routing config rc: file://
// in the file site, s3:// in its bucket's site; "" when unknown.
func siteOfURI(rc routecfg.Config, uri string) string {
	switch {
	case strings.HasPrefix(uri, "file:"):
		if rc.Datasets.FileSite != "" {
			return rc.Datasets.FileSite
		}
		for _, b := range rc.Backends {
			if b.Kind == routecfg.KindLocal {
				return b.Site
			}
		}
		return ""
	case strings.HasPrefix(uri, "s3://"):
		u, err := agent.ParseS3URI(uri)
		if err != nil {
			return ""
		}
		return rc.Datasets.Buckets[u.Bucket]
	}
	return ""
}

// note appends a cloud event to the job (control-plane metadata: it may
// cross sites).
func (a *cloudAttempt) note(ctx context.Context, msg string) {
	a.c.note(ctx, a.log, a.job.ID, a.n, msg)
}

// agentJob is the attempt's job.json: the spec (max_runtime moved to
// max_runtime_s; training.stop_at_step the attempt's step limit, ASHA's
// rung, as attemptSpec), the staged datasets, the checkpoint prefix, and the
// pass_env of the job's trainer, so the agent gives the instance's trainer
// the environment a local worker would.
func (a *cloudAttempt) agentJob(dataset, evalDataset string, maxRuntime time.Duration) agent.Job {
	spec := attemptSpec(a.job)
	spec.MaxRuntime = 0
	return agent.Job{JobID: a.job.ID, Attempt: a.n, Spec: spec, Dataset: dataset, EvalDataset: evalDataset,
		CheckpointPrefix: a.ckpt, MaxRuntimeS: int64(maxRuntime / time.Second),
		TrainerPassEnv: a.c.cfg.TrainerPassEnv[trainerName(a.job.Spec.Trainer)]}
}

// launch stages the data, writes job.json and makes sure the attempt has
// its instance. ok is false when the attempt ended (end, possibly nil).
func (a *cloudAttempt) launch(ctx context.Context) (end endFunc, ok bool) {
	maxRuntime := a.maxRuntime()
	dataset, evalDataset, end, ok := a.stageData(ctx)
	if !ok {
		return end, false
	}
	if end, ok := a.writeJob(ctx, a.agentJob(dataset, evalDataset, maxRuntime)); !ok {
		return end, false
	}
	req := cloud.LaunchRequest{JobID: a.job.ID, Attempt: a.n, GPUs: a.job.Spec.Resources.TotalGPUs(),
		GPUMemoryGB: a.job.Spec.Resources.GPUMemoryGB, GPUModels: a.job.Spec.Resources.GPUModels,
		UserData: UserData(a.c.b.AgentPath, a.c.b.Region, a.jobURI)}
	for {
		res, err := a.c.cfg.EC2.Launch(ctx, req)
		for _, t := range res.Attempts {
			if t.Code != "" {
				a.note(ctx, fmt.Sprintf("launch %s in %s refused: %s %s", t.Choice, t.Subnet, t.Code, t.Message))
			}
		}
		if err == nil {
			a.launched(ctx, res)
			return nil, true
		}
		if end, ok := a.launchFailed(ctx, err); !ok {
			return end, false
		}
	}
}

// maxRuntime is the job's max_runtime, or the worker's DefaultMaxRuntime
// for a job without one.
func (a *cloudAttempt) maxRuntime() time.Duration {
	if d := a.job.Spec.MaxRuntime.D(); d > 0 {
		return d
	}
	return a.c.cfg.DefaultMaxRuntime
}

// stageData stages the job's dataset and eval dataset (if it has one) for
// the agent. ok is false when the attempt ended (end, possibly nil).
func (a *cloudAttempt) stageData(ctx context.Context) (dataset, evalDataset string, end endFunc, ok bool) {
	dataset, err := a.stage(ctx, "dataset", a.job.Spec.Dataset)
	if err != nil {
		return "", "", a.stagingFailed(ctx, "dataset", err), false
	}
	if a.job.Spec.EvalDataset != "" {
		if evalDataset, err = a.stage(ctx, "eval_dataset", a.job.Spec.EvalDataset); err != nil {
			return "", "", a.stagingFailed(ctx, "eval_dataset", err), false
		}
	}
	return dataset, evalDataset, nil, true
}

// launchFailed decides what a failed launch means: a detached worker stops
// (ok false, no end), a job no instance type fits fails for good, and no
// capacity or any other error waits LaunchRetry for another try (ok true).
func (a *cloudAttempt) launchFailed(ctx context.Context, err error) (endFunc, bool) {
	switch {
	case ctx.Err() != nil:
		return nil, false // detached
	case errors.Is(err, cloud.ErrNoFit):
		return a.fail(jobtype.ReasonPermanent, "no instance type of backend "+a.c.b.Name+" fits the job's GPU request: "+err.Error()), false
	case errors.Is(err, cloud.ErrNoCapacity):
		return a.waitAndRelaunch(ctx, fmt.Sprintf("no capacity for any instance type in any subnet of %s (site %s); the job waits in its site and tries again in %s",
			a.c.b.Name, a.c.b.Site, a.c.cfg.LaunchRetry))
	default:
		return a.waitAndRelaunch(ctx, fmt.Sprintf("launch failed (%v); trying again in %s", err, a.c.cfg.LaunchRetry))
	}
}

// writeJob writes the agent's job.json, trying again every LaunchRetry
// while the lease holds. ok is false when the attempt ended.
func (a *cloudAttempt) writeJob(ctx context.Context, job agent.Job) (endFunc, bool) {
	body, _ := json.MarshalIndent(job, "", "  ")
	for {
		err := a.put(ctx, a.work.Bucket, a.work.Key+agent.JobObject, body)
		if err == nil {
			return nil, true
		}
		if end, ok := a.waitAndRelaunch(ctx, fmt.Sprintf("writing job.json to %s failed (%v); trying again in %s", a.jobURI, err, a.c.cfg.LaunchRetry)); !ok {
			return end, false
		}
	}
}

// launched records the instance the attempt got (launched now, or found
// launched before a restart) on the job and in its events.
func (a *cloudAttempt) launched(ctx context.Context, res cloud.LaunchResult) {
	inst := res.Instance
	price, spot := a.c.cfg.EC2.Price(inst), inst.Spot
	for _, t := range res.Attempts {
		if t.InstanceID == inst.ID { // launched now: the choice says what was bought
			price, spot = t.Choice.USDPerHour, t.Choice.Spot
		}
	}
	market := "on-demand"
	if spot {
		market = "spot"
	}
	a.inst = &jobtype.Instance{ID: inst.ID, Attempt: a.n, Backend: a.c.b.Name, Region: a.c.b.Region, Type: inst.Type,
		Market: market, Subnet: inst.SubnetID, LaunchTime: inst.LaunchTime.UTC(), USDPerHour: price, State: inst.State}
	if a.inst.LaunchTime.IsZero() {
		a.inst.LaunchTime = time.Now().UTC()
	}
	verb := "launched"
	if res.Found {
		verb = "found (launched before a restart)"
	}
	if err := a.c.store.RecordInstance(context.WithoutCancel(ctx), a.job.ID, a.n, a.inst); err != nil {
		a.log.Warn("record the instance on the job", slog.Any("err", err))
	}
	a.note(ctx, fmt.Sprintf("instance %s %s: %s %s in %s at $%.4f/h; agent job %s", inst.ID, verb, inst.Type, market,
		inst.SubnetID, price, a.jobURI))
}

// waitAndRelaunch notes why, then waits LaunchRetry while keeping the lease
// and honouring a cancel. ok is false when the attempt ended.
func (a *cloudAttempt) waitAndRelaunch(ctx context.Context, why string) (endFunc, bool) {
	a.note(ctx, why)
	cancelled, stop := a.c.waitRenewing(ctx, a.log, a.job.ID, a.n, a.c.cfg.LaunchRetry)
	switch {
	case stop:
		return nil, false
	case cancelled:
		return a.cancelled(ctx), false
	}
	return nil, true
}

// stagingFailed ends an attempt whose data could not be staged: a refusal
// (no ledger, a path outside the allowed roots) is permanent; an I/O error
// is retried as a new attempt.
func (a *cloudAttempt) stagingFailed(ctx context.Context, what string, err error) endFunc {
	var perm *permanentError
	if errors.As(err, &perm) {
		return a.fail(jobtype.ReasonPermanent, what+": "+err.Error())
	}
	if ctx.Err() != nil {
		return nil
	}
	return a.retryOrFail(jobtype.ReasonInternal, "staging "+what+": "+err.Error())
}

// renew extends the lease; cancelled is true when a cancel was asked, lost
// when the store says the attempt is no longer this worker's. A transient
// error is neither: the instance is left alone.
func (a *cloudAttempt) renew(ctx context.Context) (cancelled, lost bool) {
	return a.c.renewLease(ctx, a.log, a.job.ID, a.n)
}

// watchLoop follows the launched instance to the attempt's end.
func (a *cloudAttempt) watchLoop(ctx context.Context) endFunc {
	maxRuntime := a.maxRuntime()
	deadline := a.inst.LaunchTime.Add(maxRuntime + a.c.cfg.ShutdownMargin + a.c.cfg.StatusGrace)
	t := time.NewTicker(a.c.cfg.PollInterval)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				a.log.Info("detached; the instance keeps running", slog.String("instance_id", a.inst.ID))
				return nil
			case <-t.C:
			}
		}
		if end, done := a.watchOnce(ctx); done {
			return end
		}
		if time.Now().After(deadline) {
			a.note(ctx, fmt.Sprintf("no status from the agent by launch + max_runtime %s + margin; terminating %s", maxRuntime, a.inst.ID))
			if end := a.terminate(ctx); end != nil {
				return end
			}
			return a.fail(jobtype.ReasonTimeout, fmt.Sprintf("max_runtime %s reached (no status from the agent on %s)", maxRuntime, a.inst.ID))
		}
	}
}

// watchOnce is one look at the attempt: it renews the lease, mirrors the
// agent's events, reads status.json and else the instance's state. done is
// true when the attempt ended (end) or is no longer this worker's (nil).
func (a *cloudAttempt) watchOnce(ctx context.Context) (end endFunc, done bool) {
	cancelled, lost := a.renew(ctx)
	if lost {
		return nil, true
	}
	if cancelled {
		return a.cancelled(ctx), true
	}
	a.mirror(ctx)
	st, found, err := a.status(ctx)
	if err != nil {
		a.log.Warn("read status.json failed; trying again", slog.Any("err", err))
	}
	if found {
		a.mirror(ctx) // the events written before the status
		return a.ended(ctx, st), true
	}
	return a.checkInstance(ctx)
}

// checkInstance follows the state of an instance with no status.json yet:
// a running one's state is recorded on change; one gone (or unknown to
// EC2) for longer than StatusGrace is lost, and the attempt ends (done).
func (a *cloudAttempt) checkInstance(ctx context.Context) (end endFunc, done bool) {
	inst, err := a.c.instance(ctx, a.inst.ID)
	switch {
	case err == nil && !inst.Gone():
		a.gone = time.Time{}
		if inst.State != a.inst.State {
			a.inst.State = inst.State
			_ = a.c.store.RecordInstance(context.WithoutCancel(ctx), a.job.ID, a.n, a.inst)
		}
	case err == nil || errors.Is(err, cloud.ErrNotFound):
		state := "unknown to EC2"
		if err == nil {
			state = inst.State
		}
		if a.gone.IsZero() {
			a.gone = time.Now()
			a.note(ctx, fmt.Sprintf("instance %s is %s with no status.json yet; waiting %s for it", a.inst.ID, state, a.c.cfg.StatusGrace))
		} else if time.Since(a.gone) > a.c.cfg.StatusGrace {
			return a.lost(ctx, state), true
		}
	case ctx.Err() != nil:
	default:
		// A failing DescribeInstances says nothing about the instance:
		// never terminate or relaunch on it.
		a.log.Warn("describe instance failed; leaving it alone", slog.String("instance_id", a.inst.ID), slog.Any("err", err))
	}
	return nil, false
}

// terminate terminates the attempt's instance (retrying while the worker
// runs) and records its cost once. It returns a non-nil end only when the
// worker detached meanwhile (nothing to write then: the next worker does
// it).
func (a *cloudAttempt) terminate(ctx context.Context) endFunc {
	if a.inst == nil {
		return nil
	}
	for i := 0; ; i++ {
		err := a.c.cfg.EC2.Terminate(ctx, a.inst.ID)
		if err == nil {
			break
		}
		if errors.Is(err, cloud.ErrNotManaged) {
			a.log.Error("instance is not managed by this cluster; not terminating it", slog.Any("err", err))
			break
		}
		a.log.Warn("terminate failed; retrying", slog.String("instance_id", a.inst.ID), slog.Any("err", err))
		select {
		case <-ctx.Done():
			return func(context.Context) error { return nil }
		case <-time.After(a.c.cfg.PollInterval):
		}
	}
	now := time.Now().UTC()
	a.inst.State, a.inst.TerminatedAt = "terminated", &now
	cost := a.c.cfg.EC2.Cost(a.inst.LaunchTime, now, a.inst.USDPerHour)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if added, err := a.c.store.AddAttemptCost(wctx, a.job.ID, a.n, cost); err != nil {
		a.log.Warn("record the instance's cost", slog.Any("err", err))
	} else if added {
		a.note(ctx, fmt.Sprintf("instance %s terminated; cost $%.4f (%s at $%.4f/h, per second, 60 s minimum)",
			a.inst.ID, cost, now.Sub(a.inst.LaunchTime).Round(time.Second), a.inst.USDPerHour))
	}
	if err := a.c.store.RecordInstance(wctx, a.job.ID, a.n, a.inst); err != nil {
		a.log.Debug("record the terminated instance", slog.Any("err", err))
	}
	return nil
}

// cancelled terminates the instance and ends the attempt cancelled.
func (a *cloudAttempt) cancelled(ctx context.Context) endFunc {
	a.note(ctx, "cancel asked; terminating the instance")
	if end := a.terminate(ctx); end != nil {
		return nil
	}
	return a.ending().cancelled()
}

// lost ends an attempt whose instance went away without a status.
func (a *cloudAttempt) lost(ctx context.Context, state string) endFunc {
	if end := a.terminate(ctx); end != nil {
		return nil
	}
	msg := fmt.Sprintf("instance %s ended (%s) without a status from its agent", a.inst.ID, state)
	if a.inst.Market == "spot" {
		msg += ": a spot reclaim; resuming from the last checkpoint"
		return func(ctx context.Context) error { return a.c.store.CloudPreempted(ctx, a.job.ID, a.n, msg) }
	}
	return a.retryOrFail(jobtype.ReasonExit, msg)
}

// ended handles the agent's status.json.
func (a *cloudAttempt) ended(ctx context.Context, st agent.Status) endFunc {
	a.note(ctx, fmt.Sprintf("agent status %s (exit %d) %s", st.State, st.ExitCode, st.Error))
	switch st.State {
	case agent.StatePaused:
		return a.pausedEnd(ctx, st)
	case agent.StateSucceeded:
		arts, err := a.collect(ctx, st.Artifacts)
		if end := a.terminate(ctx); end != nil {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return a.fail(jobtype.ReasonInternal, "artifacts: "+err.Error())
		}
		return a.ending().succeeded(a.metricsWith(st.Metrics), arts)
	case agent.StatePreempted:
		if end := a.terminate(ctx); end != nil {
			return nil
		}
		msg := "spot interruption on " + a.inst.ID + "; resuming from checkpoint " + st.Checkpoint
		if st.Error != "" {
			msg = st.Error + "; resuming from checkpoint " + st.Checkpoint
		}
		return func(ctx context.Context) error { return a.c.store.CloudPreempted(ctx, a.job.ID, a.n, msg) }
	case agent.StateTimeout:
		if end := a.terminate(ctx); end != nil {
			return nil
		}
		return a.fail(jobtype.ReasonTimeout, "max_runtime reached on "+a.inst.ID+": "+st.Error)
	default:
		if end := a.terminate(ctx); end != nil {
			return nil
		}
		if st.Reason == jobtype.ReasonTrainerFault {
			return a.fail(jobtype.ReasonTrainerFault, st.Error)
		}
		if trainer.ExitOutcome(st.ExitCode) == trainer.Permanent {
			return a.fail(jobtype.ReasonPermanent, "trainer exited 3 (permanent): "+st.Error)
		}
		return a.retryOrFail(jobtype.ReasonExit, fmt.Sprintf("attempt failed on %s (exit %d): %s", a.inst.ID, st.ExitCode, st.Error))
	}
}

// pausedEnd ends an attempt whose agent says its trainer paused (exit 0,
// paused_at; checkpoints in S3, no artifact): paused at that step, as the
// local worker's pauseEnd, once the instance is terminated; a pause the
// attempt's step limit does not allow fails it for good.
func (a *cloudAttempt) pausedEnd(ctx context.Context, st agent.Status) endFunc {
	if end := a.terminate(ctx); end != nil {
		return nil
	}
	v := judgePause(stopAtStep(a.job), trainerEnd{pausedAt: st.PausedAt})
	switch {
	case v.problem != "":
		return a.fail(jobtype.ReasonPermanent, v.problem)
	case !v.paused:
		return a.fail(jobtype.ReasonInternal, "the agent's status is paused without a paused_at step")
	}
	a.note(ctx, fmt.Sprintf("paused at step %d; checkpoint %s kept for the next rung", v.step, st.Checkpoint))
	return a.ending().paused(v.step, a.metricsWith(st.Metrics))
}

func (a *cloudAttempt) metricsWith(m map[string]float64) map[string]float64 {
	out := a.rec.Metrics()
	for k, v := range m {
		out[k] = v
	}
	return out
}

// status reads status.json; found is false while the attempt runs.
func (a *cloudAttempt) status(ctx context.Context) (agent.Status, bool, error) {
	var st agent.Status
	b, err := a.get(ctx, a.work.Bucket, a.work.Key+agent.StatusObject)
	if errors.Is(err, agent.ErrNotFound) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("status.json: %w", err)
	}
	return st, true, nil
}

// mirror copies the agent's new event batches into the job: progress,
// metrics, checkpoints, artifacts; raw log lines only when Redis's site
// carries the job's tags (otherwise they stay in the backend's bucket).
// The batch counter is stored with them, so an adopting worker goes on
// where this one stopped.
func (a *cloudAttempt) mirror(ctx context.Context) {
	keys, err := a.c.cfg.S3.List(ctx, a.work.Bucket, a.work.Key+agent.EventsFolder)
	if err != nil {
		a.log.Warn("list events failed; trying again", slog.Any("err", err))
		return
	}
	seqs := map[int]string{}
	for _, k := range keys {
		name := strings.TrimSuffix(path.Base(k), ".jsonl")
		if n, err := strconv.Atoi(name); err == nil && n >= a.seq {
			seqs[n] = k
		}
	}
	for {
		key, ok := seqs[a.seq]
		if !ok {
			return
		}
		b, err := a.get(ctx, a.work.Bucket, key)
		if err != nil {
			a.log.Warn("read events batch failed; trying again", slog.String("key", key), slog.Any("err", err))
			return
		}
		evs, first := a.convert(b)
		if !a.started {
			at := first
			if at.IsZero() {
				at = time.Now()
			}
			err := a.c.store.Started(ctx, a.job.ID, a.n, at)
			if err != nil && !errors.Is(err, jobstore.ErrConflict) {
				a.log.Warn("mark the attempt running", slog.Any("err", err))
				return
			}
			a.started = true
			if !a.logs {
				evs = append([]jobstore.EventIn{{Type: EventCloud, Time: at, Data: mustRaw(map[string]string{"backend": a.c.b.Name,
					"message": fmt.Sprintf("raw log lines of this attempt stay in s3://%s/%s%s (site %s): the Redis site lacks a residency tag of the job",
						a.work.Bucket, a.work.Key, agent.EventsFolder, a.c.b.Site)})}}, evs...)
			}
		}
		evs = append(evs, jobstore.CloudEventsSeqUpdate(a.seq+1))
		if _, err := a.c.store.Append(ctx, a.job.ID, a.n, evs); err != nil {
			a.log.Warn("mirror events failed; trying again", slog.Any("err", err))
			return
		}
		a.seq++
	}
}

// convert turns one events batch into job events.
func (a *cloudAttempt) convert(b []byte) (evs []jobstore.EventIn, first time.Time) {
	return convertEvents(a.rec, a.logs, b)
}

// convertEvents turns lines of agent.EventLine (an events batch of the
// agent, an events file of a Slurm step) into job events, folding them
// into rec; raw log lines only when logs (the Redis site carries the job's
// tags). first is the time of the first line.
func convertEvents(rec *trainer.Record, logs bool, b []byte) (evs []jobstore.EventIn, first time.Time) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var l agent.EventLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue
		}
		t := time.UnixMilli(l.T)
		if first.IsZero() {
			first = t
		}
		in := jobstore.EventIn{Type: l.Type, Time: t, Data: l.Data}
		switch l.Type {
		case jobtype.EventProgress, jobtype.EventEval, jobtype.EventDone, jobtype.EventCheckpoint, jobtype.EventArtifact:
			var u trainer.Update
			if ev, ok := trainer.ParseEvent(l.Data); ok {
				ev.Kind = l.Type
				u = rec.Apply(ev)
			}
			in = recordEvent(in, u)
		case agent.TypeLog:
			var ll jobtype.LogLine
			_ = json.Unmarshal(l.Data, &ll)
			rec.Log(ll.Line)
			if !logs {
				continue // raw lines stay in the backend's site
			}
			in = recordEvent(jobstore.EventIn{Type: jobtype.EventLog, Time: t, Data: l.Data}, trainer.Update{})
		default:
			continue
		}
		evs = append(evs, in)
	}
	return evs, first
}

func (a *cloudAttempt) get(ctx context.Context, bucket, key string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	body, err := a.c.cfg.S3.Get(rctx, bucket, key)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return io.ReadAll(io.LimitReader(body, 64<<20))
}

func (a *cloudAttempt) put(ctx context.Context, bucket, key string, b []byte) error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return a.c.cfg.S3.Put(rctx, bucket, key, bytes.NewReader(b), int64(len(b)))
}

// UserData is the instance's user data: a shell script, using only what
// the AMI has, that runs the agent on the attempt's job.json. It holds no
// credential (the instance profile gives the instance its S3 access).
// The region is given to the agent's AWS SDK (which does not ask the
// instance metadata for it): the backend's buckets are in its region.
// Every value is one single-quoted shell word, so none is expanded or run
// whatever it holds (config validation also allows only their documented
// forms: routing's validRegion, validS3Key, validAgentPath).
func UserData(agentPath, region, jobURI string) string {
	return userData(agentPath, region, jobURI, agentLog)
}

// agentLog is where the instance's agent writes its output.
const agentLog = "/var/log/lathe-agent.log"

func userData(agentPath, region, jobURI, logPath string) string {
	return "#!/bin/sh\n" +
		"# Lathe: run one job attempt (lathed worker --backend aws wrote this)\n" +
		"AWS_REGION=" + shellQuote(region) + " exec " + shellQuote(agentPath) + " agent --job " + shellQuote(jobURI) +
		" >>" + shellQuote(logPath) + " 2>&1\n"
}

// shellQuote is s as one POSIX shell word: in single quotes, where each
// single quote of s ends the quoted run, is written escaped (\') and opens a
// new run. Nothing in it is expanded.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// JobURIFromUserData returns the --job argument of user data written by
// UserData, unquoted ("" when there is none): what a test playing the
// instance runs.
func JobURIFromUserData(userData string) string {
	i := strings.Index(userData, " --job ")
	if i < 0 {
		return ""
	}
	return shellWord(userData[i+len(" --job "):])
}

// shellWord reads the first shell word of s, as shellQuote writes words
// (single-quoted runs and backslash-escaped characters).
func shellWord(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return b.String() + s[i+1:]
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '\\' && i+1 < len(s):
			b.WriteByte(s[i+1])
			i++
		case c == ' ' || c == '\t' || c == '\n':
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
