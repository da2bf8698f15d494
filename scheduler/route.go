package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Routing: every decision goes through routing.Decide (pure) over a
// snapshot read here, and every decision is a ledger record. Paths:
// submit (api.go), every later attempt before it is placed (retry, requeue,
// preemption: placer.go), spill-over (a local job waiting past its
// max_wait) and a config reload (SetRouting).

// router holds the routing config in force and makes every routing
// decision about a job already stored (retry, requeue, preemption,
// spill-over, a config reload), each with its ledger records and, where
// the decision reserves, its budget reservation, in one store call.
type router struct {
	store   *jobstore.Store
	log     *slog.Logger
	ledger  *ledger.Ledger // nil: no records
	metrics *metrics
	wake    func() // the placer
	state   atomic.Pointer[policy.RouteState]
}

// Routing is the routing config in force.
func (r *router) Routing() *policy.RouteState { return r.state.Load() }

// Routing is the routing config in force (plane.Plane's).
func (s *Scheduler) Routing() *policy.RouteState { return s.router.Routing() }

// SetRouting replaces the routing config (a config reload) and checks every
// job that has not ended against it: a job no longer feasible where it is
// routed is held with the reason (never moved); a held job feasible again
// is released. Each change is a ledger record.
func (s *Scheduler) SetRouting(ctx context.Context, cfg routecfg.Config) error {
	s.router.state.Store(policy.NewRouteState(cfg))
	s.log.Info("routing config loaded", slog.String("config_hash", cfg.Hash()), slog.Int("backends", len(cfg.Backends)))
	return s.router.recheckAll(ctx)
}

// Assumptions are what-ifs for an explain (policy.Assumptions).
type Assumptions = policy.Assumptions

// routingJob is the routing view of a job (routing.JobFromSpec).
func routingJob(spec *jobspec.Spec, id, team, outputURI string) routing.Job {
	return routing.JobFromSpec(spec, id, team, outputURI)
}

// snapshotFor reads what a routing decision looks at.
func (r *router) snapshotFor(ctx context.Context, rs *policy.RouteState, as Assumptions) (routing.Snapshot, error) {
	now := time.Now()
	in, err := r.readRouting(ctx, rs, now, nil, true)
	if err != nil {
		return routing.Snapshot{Now: now, Config: rs.Config}, err
	}
	return policy.Snapshot(rs, as, in), nil
}

// readRouting reads a routing decision's inputs at now in one pipeline
// (jobstore.ReadRouting): with readNodes the live nodes too, else nodes
// are those a placement round has read already.
func (r *router) readRouting(ctx context.Context, rs *policy.RouteState, now time.Time, nodes []jobstore.NodeStatus, readNodes bool) (policy.RoutingInput, error) {
	q := jobstore.RoutingQuery{Pool: "local", Month: jobstore.Month(now), Nodes: readNodes}
	for _, b := range rs.Config.Backends {
		q.Scopes = append(q.Scopes, "backend:"+b.Name)
	}
	for team := range rs.Config.TeamBudgetsUSD {
		q.Scopes = append(q.Scopes, "team:"+team)
	}
	rr, err := r.store.ReadRouting(ctx, q)
	if err != nil {
		return policy.RoutingInput{Now: now, Nodes: nodes}, err
	}
	if readNodes {
		nodes = rr.Nodes
	}
	return policy.RoutingInput{Now: now, Nodes: nodes, Pressure: rr.Pressure, Spends: rr.Spends, StepTimes: rr.StepTimes,
		StartRatios: rr.StartRatios}, nil
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

// recordsFunc builds a decision's ledger records numbered from seq, the
// decision's sequence number (jobstore.NewJob.Records).
type recordsFunc = func(seq int64) []ledger.Record

// decisionRecords builds a decision's ledger records: the decision, then
// one per staging, which names the decision's sequence number seq.
func decisionRecords(rs *policy.RouteState, p plane.Principal, path, name string, attempt int, job routing.Job, snap routing.Snapshot, d routing.Decision) (recordsFunc, error) {
	sj, err := encodeSnapshot(snap)
	if err != nil {
		return nil, err
	}
	return decisionRecordsOn(rs, p, path, name, attempt, job, sj, d)
}

// decisionRecordsOn is decisionRecords with the snapshot's part encoded
// already (encodeSnapshot).
func decisionRecordsOn(rs *policy.RouteState, p plane.Principal, path, name string, attempt int, job routing.Job, sj snapshotJSON, d routing.Decision) (recordsFunc, error) {
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

// applyReroute stores a re-decided route (policy.DecideRoute) and the
// decision's ledger records in one script (jobstore.SetRouteLogged): both
// or neither, and a job that ended or was deleted meanwhile gets neither
// (the error is a jobstore.ConflictError or wraps jobstore.ErrNotFound). A
// held job's route then names the refusal's record. It returns the job's
// new route and why it is held.
func (r *router) applyReroute(ctx context.Context, rs *policy.RouteState, rp policy.Reroute) (*jobtype.RouteInfo, string, error) {
	j := rp.Job
	var records recordsFunc
	if r.ledger != nil {
		var err error
		// rp.Snapshot is the snapshot as the decision saw it (its spends
		// before later reservations of the same round).
		records, err = decisionRecords(rs, plane.Principal{Name: j.Submitter, Team: j.Team}, rp.Path, j.Name, j.Attempt, rp.RoutingJob, rp.Snapshot, rp.Decision)
		if err != nil {
			return nil, "", err
		}
	}
	u := jobstore.RouteUpdate{ID: j.ID, Route: rp.Route, Held: rp.Held, Records: records}
	if rp.Reserve && rp.Held == "" {
		u.Budget = budgetFor(rs, j.Team, rp.Decision)
	}
	set, err := r.store.SetRouteLogged(ctx, r.ledger, u)
	if err != nil {
		return nil, "", fmt.Errorf("scheduler: reroute (%s): %w", rp.Path, err)
	}
	r.metrics.observeDecision(rp.Path, rp.Decision.Backend, rp.Decision.Refused, rp.Decision.Waiting)
	switch {
	case rp.Held != "":
		r.log.Warn("job held: no longer feasible", slog.String("job_id", j.ID), slog.String("path", rp.Path), slog.String("why", rp.Held))
	case set.Held != "":
		r.log.Warn("budget reservation refused after the decision (another admission won the race); the job waits",
			slog.String("job_id", j.ID), slog.String("why", set.Held))
	}
	return set.Route, set.Held, nil
}

// reroute decides again for job j (policy.ReroutePath's paths) over a
// fresh read and stores the outcome (policy.DecideRoute, applyReroute).
func (r *router) reroute(ctx context.Context, j *jobtype.Job, path string) (*jobtype.RouteInfo, string, error) {
	rs := r.Routing()
	snap, err := r.snapshotFor(ctx, rs, Assumptions{})
	if err != nil {
		return nil, "", err
	}
	return r.applyReroute(ctx, rs, policy.DecideRoute(j, path, rs, snap, snap.Now))
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
func (r *router) recheckAll(ctx context.Context) error {
	ids, err := r.store.IDsInState(ctx, jobtype.StateQueued, 100000)
	if err != nil {
		return err
	}
	jobs, err := r.store.GetMany(ctx, ids)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if j == nil || j.State != jobtype.StateQueued {
			continue
		}
		if _, _, err := r.reroute(ctx, j, "config reload"); err != nil && !leftQueue(err) {
			return err
		}
	}
	r.wake()
	return nil
}
