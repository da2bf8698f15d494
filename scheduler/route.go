package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Routing: every decision goes through routing.Decide (pure) over a
// snapshot read here, and every decision is a ledger record. Paths:
// submit (api.go), every later attempt before it is placed (retry, requeue,
// preemption: placer.go), spill-over (a local job waiting past its
// max_wait) and a config reload (SetRouting).

// routing is the routing config in force.
func (s *Scheduler) routing() *policy.RouteState { return s.route.Load() }

// SetRouting replaces the routing config (a config reload) and checks every
// job that has not ended against it: a job no longer feasible where it is
// routed is held with the reason (never moved); a held job feasible again
// is released. Each change is a ledger record.
func (s *Scheduler) SetRouting(ctx context.Context, cfg routecfg.Config) error {
	s.route.Store(policy.NewRouteState(cfg))
	s.log.Info("routing config loaded", slog.String("config_hash", cfg.Hash()), slog.Int("backends", len(cfg.Backends)))
	return s.recheckAll(ctx)
}

// Assumptions are what-ifs for an explain (policy.Assumptions).
type Assumptions = policy.Assumptions

// routingJob is the routing view of a job (routing.JobFromSpec).
func routingJob(spec *jobspec.Spec, id, team, outputURI string) routing.Job {
	return routing.JobFromSpec(spec, id, team, outputURI)
}

// snapshotFor reads what a routing decision looks at.
func (s *Scheduler) snapshotFor(ctx context.Context, rs *policy.RouteState, as Assumptions) (routing.Snapshot, error) {
	now := time.Now()
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		return routing.Snapshot{Now: now, Config: rs.Config}, err
	}
	in, err := s.readRouting(ctx, rs, now, nodes)
	if err != nil {
		return routing.Snapshot{Now: in.Now, Config: rs.Config}, err
	}
	return policy.Snapshot(rs, as, in), nil
}

// readRouting reads a routing decision's inputs at now besides the live
// nodes, read already.
func (s *Scheduler) readRouting(ctx context.Context, rs *policy.RouteState, now time.Time, nodes []jobstore.NodeStatus) (policy.RoutingInput, error) {
	in := policy.RoutingInput{Now: now, Nodes: nodes}
	var err error
	if in.Pressure, err = s.store.PoolPressureOf(ctx, "local"); err != nil {
		return in, err
	}
	var scopes []string
	for _, b := range rs.Config.Backends {
		scopes = append(scopes, "backend:"+b.Name)
	}
	for team := range rs.Config.TeamBudgetsUSD {
		scopes = append(scopes, "team:"+team)
	}
	if in.Spends, err = s.store.Spends(ctx, jobstore.Month(now), scopes); err != nil {
		return in, err
	}
	if in.StepTimes, err = s.store.StepTimes(ctx); err != nil {
		return in, err
	}
	return in, nil
}

// ledgerBody is what a decision record holds besides its header: the job
// as routing saw it, the inputs that vary, and the whole decision (every
// candidate with its reason and estimates, the choice).
type ledgerBody struct {
	Path    string      `json:"path"`
	Job     routing.Job `json:"job"`
	Name    string      `json:"name,omitempty"`
	Attempt int         `json:"attempt,omitempty"`
	snapshotJSON
	Decision routing.Decision `json:"decision"`
}

// snapshotJSON is the part of a decision record that the decisions over
// one snapshot share (the pools, the backends' and teams' spend), encoded
// once: a sweep's 10,000 decisions encode it once, not 10,000 times.
type snapshotJSON struct {
	Pools json.RawMessage `json:"pools"`
	Spend json.RawMessage `json:"backend_spend"`
	Teams json.RawMessage `json:"team_spend,omitempty"`
}

// encodeSnapshot encodes what decision records say of snap.
func encodeSnapshot(snap routing.Snapshot) (snapshotJSON, error) {
	var sj snapshotJSON
	var err error
	if sj.Pools, err = json.Marshal(snap.Pools); err != nil {
		return sj, fmt.Errorf("scheduler: ledger record: %w", err)
	}
	if sj.Spend, err = json.Marshal(snap.BackendSpend); err != nil {
		return sj, fmt.Errorf("scheduler: ledger record: %w", err)
	}
	if len(snap.TeamSpend) > 0 {
		if sj.Teams, err = json.Marshal(snap.TeamSpend); err != nil {
			return sj, fmt.Errorf("scheduler: ledger record: %w", err)
		}
	}
	return sj, nil
}

// record appends a refused submit's decision to the ledger on its own: the
// job is not stored, and the record names no job (the admission failed).
// A decision about a stored job is appended by the script that stores it
// or its route (jobstore.CreateLogged, SetRouteLogged), never here. It
// returns the record's sequence number (0 without a ledger).
func (s *Scheduler) record(ctx context.Context, rs *policy.RouteState, p principal, path, name string, attempt int, job routing.Job, snap routing.Snapshot, d routing.Decision) (int64, error) {
	if s.cfg.Ledger == nil {
		return 0, nil
	}
	build, err := decisionRecords(rs, p, path, name, attempt, job, snap, d)
	if err != nil {
		return 0, err
	}
	rec, err := s.cfg.Ledger.Append(ctx, build(0)[0])
	if err != nil {
		return 0, fmt.Errorf("scheduler: ledger record: %w", err)
	}
	for _, st := range build(rec.Seq)[1:] {
		if _, err := s.cfg.Ledger.Append(ctx, st); err != nil {
			return rec.Seq, fmt.Errorf("scheduler: ledger staging record: %w", err)
		}
	}
	return rec.Seq, nil
}

// decisionRecords builds a decision's ledger records: the decision, then
// one per staging, which names the decision's sequence number seq.
func decisionRecords(rs *policy.RouteState, p principal, path, name string, attempt int, job routing.Job, snap routing.Snapshot, d routing.Decision) (func(seq int64) []ledger.Record, error) {
	sj, err := encodeSnapshot(snap)
	if err != nil {
		return nil, err
	}
	return decisionRecordsOn(rs, p, path, name, attempt, job, sj, d)
}

// decisionRecordsOn is decisionRecords with the snapshot's part encoded
// already (encodeSnapshot).
func decisionRecordsOn(rs *policy.RouteState, p principal, path, name string, attempt int, job routing.Job, sj snapshotJSON, d routing.Decision) (func(seq int64) []ledger.Record, error) {
	body, err := json.Marshal(ledgerBody{Path: path, Job: job, Name: name, Attempt: attempt, snapshotJSON: sj, Decision: d})
	if err != nil {
		return nil, fmt.Errorf("scheduler: ledger record: %w", err)
	}
	kind := "decision"
	if d.Refused {
		kind = "refusal"
	}
	return func(seq int64) []ledger.Record {
		recs := []ledger.Record{{Kind: kind, JobID: job.ID, Team: p.Team, Token: p.Name, ConfigHash: rs.Hash, Body: body}}
		for _, st := range d.Staging {
			b, _ := json.Marshal(map[string]any{"staging": st, "decision_seq": seq, "residency": d.Residency, "backend": d.Backend})
			recs = append(recs, ledger.Record{Kind: "staging", JobID: job.ID, Team: p.Team, Token: p.Name, ConfigHash: rs.Hash, Body: b})
		}
		return recs
	}, nil
}

// reserveBudget reserves a routed job's estimated cost against its
// backend's and its team's monthly budgets. A race lost against another
// admission (ErrOverBudget) makes the route wait with the reason.
func (s *Scheduler) reserveBudget(ctx context.Context, rs *policy.RouteState, job *jobtype.Job, d routing.Decision) {
	if d.EstCostUSD <= 0 || d.Backend == "" {
		return
	}
	b, _ := rs.Config.Backend(d.Backend)
	scopes := []jobstore.BudgetScope{{Scope: "backend:" + d.Backend, Limit: b.BudgetUSDPerMonth}}
	if job.Team != "" {
		scopes = append(scopes, jobstore.BudgetScope{Scope: "team:" + job.Team, Limit: rs.Config.TeamBudgetsUSD[job.Team]})
	}
	err := s.store.Reserve(ctx, job.ID, jobstore.Month(time.Now()), d.EstCostUSD, scopes)
	if err == nil {
		return
	}
	s.log.Warn("budget reservation refused after the decision (another admission won the race); the job waits", slog.String("job_id", job.ID), slog.Any("err", err))
	if job.Route != nil {
		job.Route.Waiting = true
		job.Route.Reasons = append(job.Route.Reasons, "budget: "+err.Error())
		_ = s.store.SetRoute(ctx, job.ID, job.Route, "budget reservation refused: "+err.Error())
	}
}

// applyReroute stores a re-decided route (policy.DecideRoute) and the
// decision's ledger records in one script (jobstore.SetRouteLogged): both
// or neither, and a job that ended or was deleted meanwhile gets neither
// (the error is a jobstore.ConflictError or wraps jobstore.ErrNotFound). A
// held job's route then names the refusal's record. It returns the job's
// new route and why it is held.
func (s *Scheduler) applyReroute(ctx context.Context, rs *policy.RouteState, rp policy.Reroute) (*jobtype.RouteInfo, string, error) {
	j := rp.Job
	var records func(seq int64) []ledger.Record
	if s.cfg.Ledger != nil {
		var err error
		// rp.Snapshot is the snapshot as the decision saw it (its spends
		// before later reservations of the same round).
		records, err = decisionRecords(rs, principal{Name: j.Submitter, Team: j.Team}, rp.Path, j.Name, j.Attempt, rp.RoutingJob, rp.Snapshot, rp.Decision)
		if err != nil {
			return nil, "", err
		}
	}
	ri, err := s.store.SetRouteLogged(ctx, s.cfg.Ledger, jobstore.RouteUpdate{ID: j.ID, Route: rp.Route, Held: rp.Held, Records: records})
	if err != nil {
		return nil, "", fmt.Errorf("scheduler: reroute (%s): %w", rp.Path, err)
	}
	s.metrics.observeDecision(rp.Path, rp.Decision.Backend, rp.Decision.Refused, rp.Decision.Waiting)
	if rp.Held != "" {
		s.log.Warn("job held: no longer feasible", slog.String("job_id", j.ID), slog.String("path", rp.Path), slog.String("why", rp.Held))
		return ri, rp.Held, nil
	}
	if rp.Reserve {
		jc := *j
		jc.Route = ri
		s.reserveBudget(ctx, rs, &jc, rp.Decision)
	}
	return ri, "", nil
}

// reroute decides again for job j (policy.ReroutePath's paths) over a
// fresh read and stores the outcome (policy.DecideRoute, applyReroute).
func (s *Scheduler) reroute(ctx context.Context, j *jobtype.Job, path string) (*jobtype.RouteInfo, string, error) {
	rs := s.routing()
	snap, err := s.snapshotFor(ctx, rs, Assumptions{})
	if err != nil {
		return nil, "", err
	}
	return s.applyReroute(ctx, rs, policy.DecideRoute(j, path, rs, snap, snap.Now))
}

// leftQueue reports whether a reroute lost because its job left the queued
// attempt it was read at (dispatched, cancelled, deleted, retried): the
// decision is moot, not a failure.
func leftQueue(err error) bool {
	var ce *jobstore.ConflictError
	return errors.As(err, &ce) || errors.Is(err, jobstore.ErrNotFound)
}

// recheckAll re-decides every queued job (config reload); one that left the
// queue meanwhile is skipped. Running jobs
// keep running where they are (never moved); their next attempt is decided
// again before it is placed.
func (s *Scheduler) recheckAll(ctx context.Context) error {
	ids, err := s.store.IDsInState(ctx, jobtype.StateQueued, 100000)
	if err != nil {
		return err
	}
	jobs, err := s.store.GetMany(ctx, ids)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j == nil || j.State != jobtype.StateQueued {
			continue
		}
		if _, _, err := s.reroute(ctx, j, "config reload"); err != nil && !leftQueue(err) {
			return err
		}
	}
	s.Wake()
	return nil
}

// admission is a submit's routing outcome.
type admission struct {
	id       string
	decision routing.Decision
	route    *jobtype.RouteInfo
	records  func(seq int64) []ledger.Record // the decision's ledger records (nil without a ledger)
}

// admit decides where a submitted job goes, before it is stored. A refusal
// is recorded in the ledger and answered 422 with every backend's reason
// (the job is not stored: nothing is parked silently); otherwise the
// decision's records, under the job's id drawn here, are returned for the
// script that stores the job to append (jobstore.CreateLogged). A dry run
// decides and records nothing.
func (s *Scheduler) admit(ctx context.Context, w http.ResponseWriter, r *http.Request, p principal, spec *jobspec.Spec, dry bool) (admission, bool) {
	rs := s.routing()
	snap, err := s.snapshotFor(ctx, rs, Assumptions{})
	if err != nil {
		s.fail(w, r, err)
		return admission{}, false
	}
	id := jobstore.NewID(time.Now())
	out := strings.TrimRight(spec.Output.URI, "/") + "/" + id
	rj := routingJob(spec, id, p.Team, out)
	d := routing.Decide(rj, snap)
	if dry {
		return admission{id: id, decision: d, route: policy.RouteInfo(d, rs, "submit", 1, 0, snap.Now)}, true
	}
	s.metrics.observeDecision("submit", d.Backend, d.Refused, d.Waiting)
	if d.Refused {
		rj.ID = ""
		if _, err := s.record(ctx, rs, p, "submit", spec.Name, 0, rj, snap, d); err != nil {
			s.fail(w, r, err)
			return admission{}, false
		}
		writeJSON(w, http.StatusUnprocessableEntity, refusal(d))
		return admission{}, false
	}
	adm := admission{id: id, decision: d, route: policy.RouteInfo(d, rs, "submit", 1, 0, snap.Now)}
	if s.cfg.Ledger != nil {
		// Appended by the script that stores the job (jobstore.CreateLogged),
		// so a decision never names a job that was not stored.
		if adm.records, err = decisionRecords(rs, p, "submit", spec.Name, 1, rj, snap, d); err != nil {
			s.fail(w, r, err)
			return admission{}, false
		}
	}
	return adm, true
}

// admitBatch decides every job of a batch on one snapshot. One refusal
// refuses the batch (422, each refused job's reasons under "jobs[i]",
// every refusal recorded), and nothing is stored; otherwise njs get their
// ids, routes and decision records (appended with the jobs by
// jobstore.CreateManyLogged).
func (s *Scheduler) admitBatch(ctx context.Context, w http.ResponseWriter, r *http.Request, p principal, njs []jobstore.NewJob) ([]routing.Decision, bool) {
	rs := s.routing()
	snap, err := s.snapshotFor(ctx, rs, Assumptions{})
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	now := time.Now()
	ds := make([]routing.Decision, len(njs))
	rjs := make([]routing.Job, len(njs))
	var reasons []string
	for i := range njs {
		id := jobstore.NewID(now)
		rjs[i] = routingJob(njs[i].Spec, id, p.Team, strings.TrimRight(njs[i].Spec.Output.URI, "/")+"/"+id)
		ds[i] = routing.Decide(rjs[i], snap)
		s.metrics.observeDecision("submit", ds[i].Backend, ds[i].Refused, ds[i].Waiting)
		njs[i].ID = id
		if ds[i].Refused {
			for _, why := range ds[i].Reasons {
				reasons = append(reasons, fmt.Sprintf("jobs[%d]: %s", i, why))
			}
		}
	}
	if len(reasons) > 0 {
		for i := range njs {
			if ds[i].Refused {
				rjs[i].ID = ""
				if _, err := s.record(ctx, rs, p, "submit", njs[i].Spec.Name, 0, rjs[i], snap, ds[i]); err != nil {
					s.fail(w, r, err)
					return nil, false
				}
			}
		}
		writeJSON(w, http.StatusUnprocessableEntity, wire.BatchRefusal{Error: "no backend may run some jobs of the batch; nothing was stored",
			Code: wire.CodeRefused, Reasons: reasons})
		return nil, false
	}
	for i := range njs {
		njs[i].Route = policy.RouteInfo(ds[i], rs, "submit", 1, 0, snap.Now)
		if s.cfg.Ledger != nil {
			// Appended with the jobs by jobstore.CreateManyLogged.
			if njs[i].Records, err = decisionRecords(rs, p, "submit", njs[i].Spec.Name, 1, rjs[i], snap, ds[i]); err != nil {
				s.fail(w, r, err)
				return nil, false
			}
		}
	}
	return ds, true
}
