package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/redis/go-redis/v9"
)

// Admission: every job enters the store through plan, whatever asked for
// it: a submit, a batch, a schedule's run (admitJobs), a sweep's trials
// (planSweep). plan routes the jobs over one snapshot and fills in what
// the store needs: the id, the output folder (jobspec.Spec.JobOutputURI), the route, the
// decision's ledger records and the budget reservation (budgetFor), which
// the script that stores the job makes in the same call. Admission returns
// typed errors (plane.RefusedError, jobspec.ValidationError, the store's) and
// writes no HTTP: the API answers them (scheduler/api).

// budgetFor is the reservation of a job of team routed by d: its estimated
// cost against its backend's and its team's monthly budgets (nil when the
// decision costs nothing). The one place a reservation is built; the store
// makes it with the job or its route (jobstore.BudgetReservation).
func budgetFor(rs *policy.RouteState, team string, d routing.Decision) *jobstore.BudgetReservation {
	if d.EstCostUSD <= 0 || d.Backend == "" {
		return nil
	}
	b, _ := rs.Config.Backend(d.Backend)
	scopes := []jobstore.BudgetScope{{Scope: "backend:" + d.Backend, Limit: b.BudgetUSDPerMonth}}
	if team != "" {
		scopes = append(scopes, jobstore.BudgetScope{Scope: "team:" + team, Limit: rs.Config.TeamBudgetsUSD[team]})
	}
	return &jobstore.BudgetReservation{Month: jobstore.Month(time.Now()), USD: d.EstCostUSD, Scopes: scopes}
}

// admission admits jobs: the one path every job takes into the store.
type admission struct {
	cfg     Config // Trainers, AllowedRoots, TeamRoots, DataDeny, Defaults, Ledger, TestHoldScheduledSweep
	store   *jobstore.Store
	log     *slog.Logger
	router  *router
	metrics *metrics
	wake    func() // the placer

	// Sweeps being stored in the background (sweeps.go, fillRest): their
	// ids, the context that ends with the scheduler, and the goroutines
	// Stop waits for.
	filling sync.Map
	bgCtx   context.Context
	bgStop  context.CancelFunc
	bg      sync.WaitGroup
}

// Admissible lists why spec cannot run on this deployment for p's team
// (plane.Plane's).
func (s *Scheduler) Admissible(p plane.Principal, spec *jobspec.Spec) []jobspec.FieldError {
	return s.admit.admissible(p.Team, spec)
}

// admitting is jobs to admit together, all or none, for one principal.
type admitting struct {
	p    plane.Principal
	path string // the decision's path in the ledger: "submit", "sweep"
	// label names job i in a refusal's reasons ("jobs[%d]", given
	// offset+i); "" for one job.
	label  string
	offset int
	// what names the jobs in a plane.RefusedError ("job", "jobs of the batch").
	what string
	// jobs are the jobs: Spec parsed, normalised and admissible; ID set or
	// "" (drawn here); IdempotencyKey scoped or "".
	jobs []jobstore.NewJob
	// recordRefusals appends each refusal to the ledger (a refused submit
	// is on record; a refused sweep is answered, not recorded).
	recordRefusals bool
	// waitForMoney decides over the month's spend alone, not what other
	// jobs hold reserved: a sweep's trials whose money is reserved now
	// (another sweep of the team runs) are admitted to wait for it (the
	// scripts that admit trials reserve, gating each that does not fit),
	// where a single submit is refused; only a budget spent is a refusal.
	waitForMoney bool
}

// withoutReservations is snap with every budget's reservations left out:
// the month's spend alone (admitting.waitForMoney).
func withoutReservations(snap routing.Snapshot) routing.Snapshot {
	spendOnly := func(m map[string]routing.Spend) map[string]routing.Spend {
		out := make(map[string]routing.Spend, len(m))
		for k, sp := range m {
			sp.ReservedUSD = 0
			out[k] = sp
		}
		return out
	}
	snap.BackendSpend, snap.TeamSpend = spendOnly(snap.BackendSpend), spendOnly(snap.TeamSpend)
	return snap
}

// planned is an admission decided: the jobs to store, with their ids,
// output URIs, submitter, routes, ledger records and reservations, and
// each one's decision.
type planned struct {
	jobs []jobstore.NewJob
	ds   []routing.Decision
}

// plan decides where each job of a goes, over one snapshot. A job no
// backend may run refuses the admission (a plane.RefusedError; its refusal
// recorded when a.recordRefusals). A dry run decides and records nothing.
func (ad *admission) plan(ctx context.Context, a admitting, dry bool) (planned, error) {
	rs := ad.router.Routing()
	snap, err := ad.router.snapshotFor(ctx, rs, Assumptions{})
	if err != nil {
		return planned{}, err
	}
	if a.waitForMoney {
		snap = withoutReservations(snap)
	}
	sj, err := encodeSnapshot(snap)
	if err != nil {
		return planned{}, err
	}
	pl := planned{jobs: append([]jobstore.NewJob(nil), a.jobs...), ds: make([]routing.Decision, len(a.jobs))}
	sizes := ad.sizer(a.p.Team)
	var refused []int
	for i := range pl.jobs {
		nj := &pl.jobs[i]
		rj := prepare(nj, a.p, snap.Now, sizes)
		d := refuseGangOffLocal(routing.Decide(rj, snap), nj.Spec.Resources.Nodes)
		pl.ds[i] = d
		if !dry {
			ad.metrics.observeDecision(a.path, d.Backend, d.Refused, d.Waiting)
			if d.Refused {
				refused = append(refused, i)
				continue
			}
		}
		nj.Route = policy.RouteInfo(d, rs, a.path, 1, 0, snap.Now)
		policy.KeepDataSizes(nj.Route, rj)
		if dry {
			continue // a dry run's jobs carry their route (refused or not), nothing more
		}
		nj.Budget = budgetFor(rs, a.p.Team, d)
		if ad.cfg.Ledger != nil {
			// Appended by the script that stores the job, so a decision
			// never names a job that was not stored.
			if nj.Records, err = decisionRecordsOn(rs, a.p, a.path, nj.Spec.Name, 1, rj, sj, d); err != nil {
				return planned{}, err
			}
		}
	}
	if len(refused) > 0 {
		return pl, ad.refuse(ctx, rs, a, pl, refused, sj)
	}
	return pl, nil
}

// refuseGangOffLocal refuses decision d of a job that spans nodes when it
// sends the job to a cloud backend: only the local pool's lathed workers
// run a gang's ranks (one task per rank, torchrun's rendezvous).
func refuseGangOffLocal(d routing.Decision, nodes int) routing.Decision {
	if nodes <= 1 || d.Refused || d.Backend == "" {
		return d
	}
	kind := "cloud"
	for _, c := range d.Candidates {
		if c.Backend == d.Backend {
			kind = c.Kind
		}
	}
	if kind == "local" {
		return d
	}
	d.Refused = true
	d.Reasons = append([]string{fmt.Sprintf("resources.nodes %d: routed to backend %s (%s), which does not run jobs that span nodes; only the local pool's lathed workers do", nodes, d.Backend, kind)}, d.Reasons...)
	return d
}

// prepare fills in new job nj's id (when it has none), output URI,
// submitter and team for principal p at now, and returns it as routing
// sees it, its datasets' sizes as sizes learns them.
func prepare(nj *jobstore.NewJob, p plane.Principal, now time.Time, sizes func(string) routing.DataSize) routing.Job {
	if nj.ID == "" {
		nj.ID = jobstore.NewID(now)
	}
	nj.OutputURI, nj.Submitter, nj.Team = nj.Spec.JobOutputURI(nj.ID), p.Name, p.Team
	rj := routingJob(nj.Spec, nj.ID, p.Team, nj.OutputURI)
	rj.DatasetSize, rj.EvalDatasetSize = sizes(nj.Spec.Dataset), sizes(nj.Spec.EvalDataset)
	return rj
}

// refuse records the refusals of a's jobs (indexes refused of pl) when a
// asks for it, and returns the plane.RefusedError.
func (ad *admission) refuse(ctx context.Context, rs *policy.RouteState, a admitting, pl planned, refused []int, sj snapshotJSON) error {
	re := &plane.RefusedError{What: a.what}
	for _, i := range refused {
		nj, d := pl.jobs[i], pl.ds[i]
		for _, why := range d.Reasons {
			if a.label != "" {
				why = fmt.Sprintf(a.label, a.offset+i) + ": " + why
			}
			re.Reasons = append(re.Reasons, why)
		}
		if len(pl.jobs) == 1 {
			re.Decision = &pl.ds[i]
		}
		if !a.recordRefusals || ad.cfg.Ledger == nil {
			continue
		}
		// The record names no job: none was stored.
		rj := routingJob(nj.Spec, "", a.p.Team, nj.OutputURI)
		sizes := ad.sizer(a.p.Team)
		rj.DatasetSize, rj.EvalDatasetSize = sizes(nj.Spec.Dataset), sizes(nj.Spec.EvalDataset)
		build, err := decisionRecordsOn(rs, a.p, a.path, nj.Spec.Name, 0, rj, sj, d)
		if err != nil {
			return err
		}
		if err := ad.appendRecords(ctx, build); err != nil {
			return err
		}
	}
	return re
}

// appendRecords appends a refused submit's decision and its stagings to
// the ledger on their own: the job is not stored. A decision about a
// stored job is appended by the script that stores it or its route
// (jobstore.CreateLogged, SetRouteLogged), never here.
func (ad *admission) appendRecords(ctx context.Context, build recordsFunc) error {
	rec, err := ad.cfg.Ledger.Append(ctx, build(0)[0])
	if err != nil {
		return fmt.Errorf("scheduler: ledger record: %w", err)
	}
	for _, st := range build(rec.Seq)[1:] {
		if _, err := ad.cfg.Ledger.Append(ctx, st); err != nil {
			return fmt.Errorf("scheduler: ledger staging record: %w", err)
		}
	}
	return nil
}

// admitJobs plans a's jobs and stores them, their decisions' records and
// their reservations in one store call (all or none), and wakes the
// placer. A job an idempotency key names already is returned as stored
// before (Existed), and nothing new is stored or reserved for it.
func (ad *admission) admitJobs(ctx context.Context, a admitting) ([]jobstore.Created, error) {
	// Idempotency first: the keys' outcome, whatever the budgets say now.
	stored, release, err := ad.claimJobKeys(ctx, a)
	if err != nil || stored != nil {
		return stored, err
	}
	defer release()
	pl, err := ad.plan(ctx, a, false)
	if err != nil {
		return nil, err
	}
	created, err := ad.store.CreateManyLogged(ctx, ad.cfg.Ledger, pl.jobs)
	if err != nil {
		return nil, unknownOutcome(err)
	}
	for _, c := range created {
		if c.Job.Held != "" && !c.Existed {
			ad.log.Warn("budget reservation refused after the decision (another admission won the race); the job waits",
				slog.String("job_id", c.Job.ID), slog.String("why", c.Job.Held))
		}
	}
	ad.wake()
	return created, nil
}

// claimJobKeys claims the idempotency keys of a's jobs (claimKey, in the
// jobs' order; a batch's keys are its request's key and each job's index,
// so two requests with one key claim in the same order). When every job
// has a key that names a job stored before, those jobs are the answer
// (stored, each Existed), and nothing is routed: a batch resent with its
// key gets its first outcome even when a budget has filled up since.
// Otherwise release drops the claims this admission holds (storing
// overwrites them).
func (ad *admission) claimJobKeys(ctx context.Context, a admitting) (stored []jobstore.Created, release func(), err error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	var ids []string
	for i, nj := range a.jobs {
		if nj.IdempotencyKey == "" {
			continue
		}
		existing, rel, err := ad.claimKey(ctx, jobstore.IdemJob, nj.IdempotencyKey, jobstore.JobFingerprint(nj.Spec, a.p.Team))
		if err != nil {
			var ce *jobstore.IdempotencyConflictError
			if errors.As(err, &ce) {
				ce.Index = i // the batch's job it names
			}
			release()
			return nil, nil, err
		}
		if existing != "" {
			ids = append(ids, existing)
		} else {
			releases = append(releases, rel)
		}
	}
	if len(ids) == 0 || len(ids) < len(a.jobs) {
		return nil, release, nil
	}
	jobs, err := ad.store.GetMany(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	stored = make([]jobstore.Created, len(jobs))
	for i, j := range jobs {
		if j == nil {
			return nil, nil, fmt.Errorf("idempotency key %q names job %s, which is gone: %w", a.jobs[i].IdempotencyKey, ids[i], jobstore.ErrNotFound)
		}
		stored[i] = jobstore.Created{Job: j, Existed: true}
	}
	return stored, func() {}, nil
}

// admissionOf is the admitting of a plane.Admission (a submit or a batch).
func admissionOf(a plane.Admission) admitting {
	out := admitting{p: a.Who, path: "submit", what: "this job", recordRefusals: true, jobs: a.Jobs}
	if a.Batch {
		out.label, out.what = "jobs[%d]", "jobs of the batch"
	}
	return out
}

// Submit admits a's jobs (admitJobs): plane.Plane's.
func (s *Scheduler) Submit(ctx context.Context, a plane.Admission) ([]jobstore.Created, error) {
	return s.admit.admitJobs(ctx, admissionOf(a))
}

// Plan decides where a's jobs would go and stores nothing: plane.Plane's
// dry run.
func (s *Scheduler) Plan(ctx context.Context, a plane.Admission) ([]jobstore.NewJob, error) {
	pl, err := s.admit.plan(ctx, admissionOf(a), true)
	return pl.jobs, err
}

// SubmitSweep admits the sweep req asks for: plane.Plane's.
func (s *Scheduler) SubmitSweep(ctx context.Context, req plane.SweepRequest) (*jobtype.Sweep, bool, error) {
	return s.admit.admitSweep(ctx, req)
}

// PlanSweep expands and routes req's trials and stores nothing:
// plane.Plane's dry run.
func (s *Scheduler) PlanSweep(ctx context.Context, req plane.SweepRequest) (jobstore.NewSweep, error) {
	ns, _, err := s.admit.planSweep(ctx, req, true)
	return ns, err
}

// unknownOutcome is err of a write that stores an admission: one Redis
// did not answer (jobstore.Unreachable) may or may not have happened
// (plane.ErrOutcomeUnknown).
func unknownOutcome(err error) error {
	if jobstore.Unreachable(err) {
		return fmt.Errorf("%w: %w", plane.ErrOutcomeUnknown, err)
	}
	return err
}

// claimTTL bounds an idempotency key's claim (jobstore.ClaimIdem): longer
// than any admission takes (a sweep of 10,000 trials: ~20 s), so a second
// request with the key waits for the first's outcome, and short enough
// that a crashed scheduler's claim lapses.
const claimTTL = time.Minute

// claimKey claims idempotency key of kind for this admission, waiting
// while another request holds it. existing is the job or sweep the key
// names already, stored from the same spec and team (then nothing is
// claimed); a key naming another spec's is a conflict
// (jobstore.IdempotencyConflictError). release drops the claim when this
// admission stored nothing; storing overwrites it.
func (ad *admission) claimKey(ctx context.Context, kind jobstore.IdemKind, key, fp string) (existing string, release func(), err error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	for {
		out, id, err := ad.store.ClaimIdem(ctx, kind, key, fp, token, claimTTL)
		switch {
		case err != nil && jobstore.Unreachable(err):
			// The claim may have been stored with its answer lost (a
			// primary killed after it replicated the claim): dropped
			// now, or once Redis answers, a resend with the key is not
			// held up until the claim lapses. Safe either way: only
			// token's placeholder is dropped.
			ad.releaseKey(ctx, kind, key, token, time.Now().Add(claimTTL))
			return "", nil, err
		case err != nil:
			return "", nil, err
		case out == jobstore.IdemExisting:
			return id, nil, nil
		case out == jobstore.IdemConflict:
			return "", nil, &jobstore.IdempotencyConflictError{Key: key, JobID: id}
		case out == jobstore.IdemClaimed:
			lapses := time.Now().Add(claimTTL)
			return "", func() { ad.releaseKey(ctx, kind, key, token, lapses) }, nil
		}
		// Another request admits under this key: its outcome is ours.
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", nil, ctx.Err()
		case <-t.C:
		}
	}
}

// releaseRetryMax bounds the wait between tries of a claim's release that
// Redis did not answer (releaseKey).
const releaseRetryMax = time.Second

// releaseKey drops this admission's claim (token) on idempotency key of
// kind: its admission stored nothing, or does not know whether it did.
// Releasing is safe either way: the release script drops only token's
// placeholder, and a create script that stored the job or sweep replaced
// it.
//
// Redis not answering is often why the admission failed, and then the
// release fails too; the claim would stay until it lapses (lapses, claimTTL
// after it was made), and every request sent again with the key would wait
// for it and be answered 503 all that while (a kill -9 of redis-server
// during sweep admissions: up to a minute; TestRedisKillDuringSweepAdmissions).
// So a release Redis did not answer is tried again in the background until
// Redis answers, the client is closed (the process stops), or the claim
// lapses by itself.
func (ad *admission) releaseKey(ctx context.Context, kind jobstore.IdemKind, key, token string, lapses time.Time) {
	ctx = context.WithoutCancel(ctx)
	err := ad.store.ReleaseIdem(ctx, kind, key, token)
	if !retryRelease(err) {
		return
	}
	go func() {
		wait := 50 * time.Millisecond
		for tries := 2; time.Now().Add(wait).Before(lapses); tries++ {
			time.Sleep(wait)
			err := ad.store.ReleaseIdem(ctx, kind, key, token)
			if !retryRelease(err) {
				if err == nil {
					ad.log.Info("released an idempotency key's claim once Redis answered again", slog.String("kind", string(kind)), slog.Int("tries", tries))
				}
				return
			}
			wait = min(2*wait, releaseRetryMax)
		}
	}()
}

// retryRelease reports whether a release that ended with err is tried
// again: Redis did not answer, and the client is not closed.
func retryRelease(err error) bool {
	return err != nil && jobstore.Unreachable(err) && !errors.Is(err, redis.ErrClosed)
}

// admitRun admits spec (parsed and normalised) for plane.Principal p under job
// id, as a submit does: what a schedule's tick does to start a job
// (schedules.go), with the id derived from the tick. A job stored under id
// already (a second scheduler, a pass resumed after a crash) is returned
// with existed=true and nothing is stored or reserved.
func (ad *admission) admitRun(ctx context.Context, p plane.Principal, id string, spec *jobspec.Spec) (*jobtype.Job, bool, error) {
	if j, err := ad.store.Get(ctx, id); err == nil {
		return j, true, nil
	} else if !errors.Is(err, jobstore.ErrNotFound) {
		return nil, false, err
	}
	if fe := ad.admissible(p.Team, spec); len(fe) > 0 {
		return nil, false, &jobspec.ValidationError{Errors: fe}
	}
	created, err := ad.admitJobs(ctx, admitting{p: p, path: "submit", what: "this job", recordRefusals: true,
		jobs: []jobstore.NewJob{{ID: id, Spec: spec}}})
	if err != nil {
		var re *plane.RefusedError
		if !errors.As(err, &re) {
			// Stored meanwhile by another scheduler: the id is taken.
			if j, gerr := ad.store.Get(ctx, id); gerr == nil {
				return j, true, nil
			}
		}
		return nil, false, err
	}
	return created[0].Job, created[0].Existed, nil
}

// Cancel cancels job id: the store's cancel (durable: cancel_requested),
// then the fast paths (cancelFastPath). It returns the job as it is now.
func (s *Scheduler) Cancel(ctx context.Context, id string) (*jobtype.Job, error) {
	st, err := s.store.Cancel(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("scheduler: cancel %s: %w", id, err)
	}
	job, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("scheduler: cancel %s: %w", id, err)
	}
	return s.cancelFastPath(ctx, job, st), nil
}

// Retry makes a new attempt of a failed or cancelled job and wakes the
// placer.
func (s *Scheduler) Retry(ctx context.Context, id string) (*jobtype.Job, error) {
	job, err := s.store.Retry(ctx, id)
	if err != nil {
		return nil, err
	}
	s.Wake()
	return job, nil
}

// Explain decides where spec would go for p under the what-ifs as, over
// a fresh snapshot, storing and recording nothing; it returns the
// decision and the hash of the routing config it was decided under.
func (s *Scheduler) Explain(ctx context.Context, p plane.Principal, spec *jobspec.Spec, as Assumptions) (routing.Decision, string, error) {
	rs := s.Routing()
	snap, err := s.router.snapshotFor(ctx, rs, as)
	if err != nil {
		return routing.Decision{}, "", err
	}
	rj := routingJob(spec, "", p.Team, spec.JobOutputURI("<id>"))
	sizes := s.admit.sizer(p.Team)
	rj.DatasetSize, rj.EvalDatasetSize = sizes(spec.Dataset), sizes(spec.EvalDataset)
	return routing.Decide(rj, snap), rs.Hash, nil
}

// CancelSweep cancels sweep id and every trial of it that has not ended
// (jobstore.CancelSweep); running trials are told through the cancel fast
// path, as a job's cancel. It returns the sweep as it is now and how many
// trials the cancel reached.
func (s *Scheduler) CancelSweep(ctx context.Context, id string) (*jobtype.Sweep, int, error) {
	n, err := s.store.CancelSweep(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if sets, err := s.store.SweepSetsOf(ctx, id); err == nil {
		jobs, _ := s.store.GetMany(ctx, sets.ActiveIDs)
		for _, j := range jobs {
			if j != nil && (j.State == jobtype.StateDispatched || j.State == jobtype.StateRunning) {
				s.cancelFastPath(ctx, j, j.State)
			}
		}
	}
	s.Wake()
	sw, err := s.store.GetSweep(ctx, id)
	return sw, n, err
}

// cancelFastPath takes a cancel's fast paths for job, which the cancel
// found in state st (the durable cancel_requested is set already): a task
// still waiting in its queue is deleted and the attempt cancelled here; a
// running one is told through asynq's CancelProcessing. It returns the job
// as it is now.
func (s *Scheduler) cancelFastPath(ctx context.Context, job *jobtype.Job, st jobtype.State) *jobtype.Job {
	switch st {
	case jobtype.StateDispatched:
		tid := jobtype.TaskID(job.ID, job.Attempt)
		if err := s.insp.DeleteTask(jobtype.NodeQueue(job.Node), tid); err == nil {
			// The task left the queue before a worker took it: nobody else
			// owns the attempt, so the cancel is ours to write.
			if err := s.store.CancelDispatched(ctx, job.ID, job.Attempt); err == nil {
				if j, err := s.store.Get(ctx, job.ID); err == nil {
					return j
				}
			} else {
				s.log.Debug("cancel dispatched", slog.String("job_id", job.ID), slog.Any("err", err))
			}
		} else {
			_ = s.insp.CancelProcessing(tid)
		}
	case jobtype.StateRunning:
		_ = s.insp.CancelProcessing(jobtype.TaskID(job.ID, job.Attempt))
	}
	return job
}

// admissible checks what this deployment can run for team, beyond the
// spec's own validity: a known trainer, and file:// paths under the
// team's allowed roots (rootsFor) and outside lathed's own files. It reads
// the team, the trainer and the three URIs alone: buildTrials checks each
// distinct four once for a sweep's one team (a field read here must join
// its key there). Each message holds no value of the spec (the value is
// in Value): a schedule's message shows them (scheduleMessage).
func (ad *admission) admissible(team string, spec *jobspec.Spec) []jobspec.FieldError {
	var fe []jobspec.FieldError
	if !slices.Contains(ad.cfg.Trainers, spec.Trainer) {
		fe = append(fe, jobspec.FieldError{Field: "trainer", Value: spec.Trainer, Message: fmt.Sprintf("%s (have %s)", msgNoTrainer, strings.Join(ad.cfg.Trainers, ", "))})
	}
	roots, key := ad.rootsFor(team)
	for _, f := range []struct{ name, uri string }{{"dataset", spec.Dataset}, {"eval_dataset", spec.EvalDataset}, {"output.uri", spec.Output.URI}} {
		p, err := fileuri.Path(f.uri)
		if err != nil {
			continue
		}
		if roots != nil && !roots.Allows(p) {
			fe = append(fe, jobspec.FieldError{Field: f.name, Value: f.uri, Message: msgNotUnder + pathpolicy.Rule(roots, key)})
		}
		if f.name == "output.uri" {
			continue
		}
		if err := ad.cfg.DataDeny.Check(p); err != nil {
			msg := err.Error()
			var de *pathpolicy.DeniedError
			if errors.As(err, &de) {
				msg = fmt.Sprintf("%v (%s, %s)", pathpolicy.ErrDenied, de.Entry.Why, de.Entry.Path)
				if de.Resolved != filepath.Clean(p) {
					msg += " (a link leads there)"
				}
			}
			fe = append(fe, jobspec.FieldError{Field: f.name, Value: f.uri, Message: msg})
		}
	}
	return fe
}

// sizer returns the size of a dataset URI of team's jobs, as admission
// learns it (dataSize), each distinct URI read once: a batch or a sweep of
// many jobs on one dataset reads it once.
func (ad *admission) sizer(team string) func(uri string) routing.DataSize {
	seen := map[string]routing.DataSize{}
	return func(uri string) routing.DataSize {
		if s, ok := seen[uri]; ok {
			return s
		}
		s := ad.dataSize(team, uri)
		seen[uri] = s
		return s
	}
}

// dataSize is the size of the file:// dataset at uri for team's job, read
// as the worker reads it (pathpolicy.Roots.Size: under the team's allowed
// roots, or anywhere when the deployment sets none; lathed's own files
// denied; no link followed after the path's one resolution; a folder is the
// sum of its regular files). Unknown for s3:// or no data, and for a file
// this scheduler cannot read (it may be on another machine of the file
// site): routing then counts its staging 0 and says so; the submit never
// fails for it (admissible refuses what is not allowed).
func (ad *admission) dataSize(team, uri string) routing.DataSize {
	p, err := fileuri.Path(uri)
	if err != nil {
		return routing.DataSize{}
	}
	roots, _ := ad.rootsFor(team)
	if roots == nil {
		roots = pathpolicy.Roots{"/"}
	}
	n, err := roots.Size(p, ad.cfg.DataDeny)
	if err != nil {
		ad.log.Debug("dataset size not learned: its staging counts 0", slog.String("uri", uri), slog.Any("err", err))
		return routing.DataSize{}
	}
	return routing.KnownSize(n)
}

// The openings of admissible's messages: a schedule's message keeps a
// problem whose message starts with one of them (ruleMessage: they name
// the rule, never a value of the spec), and says "invalid" for any other.
const (
	msgNoTrainer = "not a trainer of this deployment"
	msgNotUnder  = "not under "
	// msgMultiNode refuses a sweep whose trials span nodes: a trial pauses
	// at its rung's step limit, which a gang's ranks do not do yet.
	msgMultiNode = "sweeps do not run trials that span nodes yet (a trial's pause at its step limit is not built for gangs); use nodes: 1, or submit the job on its own"
)

// rootsFor is the allowed roots of team's jobs and their config key:
// Config.TeamRoots' entry of team, else Config.AllowedRoots (nil: no
// restriction).
func (ad *admission) rootsFor(team string) (pathpolicy.Roots, string) {
	return ad.cfg.TeamRoots.For(team, ad.cfg.AllowedRoots)
}
