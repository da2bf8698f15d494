package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/sweep"
)

// maySeeSweep reports whether p may read sweep sw (its team's, as jobs).
func maySeeSweep(p plane.Principal, sw *jobtype.Sweep) bool {
	return p.Role == plane.RoleAdmin || p.AllTeams || sw.Team == p.Team
}

// sweepFor reads the sweep of the request's {id} that p may read, or
// answers 404 (the same for one that exists and one p may not read).
func (s sweepAPI) sweepFor(ctx context.Context, w http.ResponseWriter, r *http.Request) (*jobtype.Sweep, bool) {
	id := r.PathValue("id")
	if !jobstore.ValidSweepID(id) {
		writeJSON(w, http.StatusNotFound, wire.Error{Error: notFoundText(r), Code: "not_found"})
		return nil, false
	}
	sw, err := s.store.GetSweep(ctx, id)
	if err == nil && !maySeeSweep(principalOf(r), sw) {
		err = jobstore.ErrNotFound
	}
	if err != nil {
		if errors.Is(err, jobstore.ErrNotFound) {
			writeJSON(w, http.StatusNotFound, wire.Error{Error: notFoundText(r), Code: "not_found"})
			return nil, false
		}
		s.fail(w, r, err)
		return nil, false
	}
	return sw, true
}

// getSweep is GET /api/v1/sweeps/{id}: the record and the leaderboard;
// with record_only=true the record alone, which reads no trial (what a
// client following a big sweep's admission asks for: the whole leaderboard
// of 10,000 trials is 10,000 records read and ranked).
func (s sweepAPI) getSweep(w http.ResponseWriter, r *http.Request) {
	recordOnly, ok := boolParam(w, r, "record_only")
	if !ok {
		return
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	sw, ok := s.sweepFor(ctx, w, r)
	if !ok {
		return
	}
	if recordOnly {
		writeJSON(w, http.StatusOK, wire.SweepStatus{Sweep: sw})
		return
	}
	st, err := s.sweepStatus(ctx, sw)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// sweepStatus reads every trial of sw: the counts by state and the
// leaderboard, best first (sweep.Rank).
func (s sweepAPI) sweepStatus(ctx context.Context, sw *jobtype.Sweep) (wire.SweepStatus, error) {
	jobs, err := s.store.SweepTrials(ctx, sw.ID, 0, 0)
	if err != nil {
		return wire.SweepStatus{}, err
	}
	rs := s.plane.Routing()
	sw.Counts = map[jobtype.State]int{}
	byID := make(map[string]*jobtype.Job, len(jobs))
	trials := make([]sweep.Trial, 0, len(jobs))
	for _, j := range jobs {
		if j == nil || j.Trial == nil {
			continue
		}
		sw.Counts[j.State]++
		byID[j.ID] = j
		trials = append(trials, rankView(j, sw.Metric))
	}
	st := wire.SweepStatus{Sweep: sw, Leaderboard: make([]wire.TrialRow, 0, len(trials))}
	for _, t := range sweep.Rank(sw.Goal, trials) {
		j := byID[t.ID]
		row := trialRow(rs, j, t)
		if row.Objective != nil && st.Best == "" {
			st.Best = j.ID
		}
		if row.Objective != nil && j.State == jobtype.StateSucceeded && st.BestSucceeded == "" {
			st.BestSucceeded = j.ID
		}
		if row.Gate == jobtype.ReasonMaxParallel && sw.Stalled != "" && j.State == jobtype.StateQueued {
			// Trials are stored in line (gate max_parallel) and only the
			// head is tried: when the head waits for money, every trial
			// behind it waits for the same money, not for max_parallel.
			row.Gate = sw.Stalled
		}
		st.Leaderboard = append(st.Leaderboard, row)
	}
	return st, nil
}

// rankView is a trial as the leaderboard ranks it: its last objective
// value (the record's metric) at the step it reached.
func rankView(j *jobtype.Job, metric string) sweep.Trial {
	t := sweep.Trial{ID: j.ID, Index: j.Trial.Index, State: j.State, Rung: j.Trial.Rung, StopAtStep: j.Trial.StopAtStep}
	if v, ok := j.Metrics[metric]; ok {
		t.History = []sweep.Point{{Step: j.Progress.Step, Value: v}}
	}
	return t
}

// trialRow is one leaderboard row.
func trialRow(rs *policy.RouteState, j *jobtype.Job, t sweep.Trial) wire.TrialRow {
	usd, gpuh := policy.JobUsage(rs.Config, j)
	row := wire.TrialRow{ID: j.ID, Index: j.Trial.Index, Params: j.Trial.Params, State: j.State, Reason: j.Reason,
		Gate: j.Trial.Gate, Rung: j.Trial.Rung, GPUHours: gpuh, CostUSD: usd, Started: j.StartedAt, Finished: j.FinishedAt}
	if v, ok := sweep.Objective(t.History); ok {
		row.Objective, row.Step = &v, t.History[len(t.History)-1].Step
	}
	return row
}

// listSweeps is GET /api/v1/sweeps: the sweeps the token may read, newest
// first.
func (s sweepAPI) listSweeps(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	cursor := q.Get("cursor")
	if cursor != "" && !jobstore.ValidSweepID(cursor) {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad cursor", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "cursor", Value: cursor, Message: "not a sweep id"}}})
		return
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	p := principalOf(r)
	sws, next, err := s.store.ListSweeps(ctx, cursor, 100)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.SweepList{Sweeps: []*jobtype.Sweep{}, NextCursor: next}
	for _, sw := range sws {
		if maySeeSweep(p, sw) {
			out.Sweeps = append(out.Sweeps, sw)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// cancelSweep is POST /api/v1/sweeps/{id}/cancel: the sweep and every
// trial that has not ended (jobstore.CancelSweep); running trials are
// told through the cancel fast path, as a job's cancel.
func (s sweepAPI) cancelSweep(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	sw, ok := s.sweepFor(ctx, w, r)
	if !ok {
		return
	}
	if p := principalOf(r); !(p.Role == plane.RoleAdmin || (p.Role == plane.RoleSubmitter && sw.Team == p.Team)) {
		writeJSON(w, http.StatusForbidden, wire.Error{Error: "sweep " + sw.ID + " belongs to another team", Code: "forbidden"})
		return
	}
	sw, n, err := s.plane.CancelSweep(ctx, sw.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.SweepCancelled{Sweep: sw, Trials: n})
}

// listSweepTrials is GET /api/v1/jobs?sweep=ID: the sweep's trials in
// index order from cursor (a trial id), limit at a time.
func (s sweepAPI) listSweepTrials(ctx context.Context, p plane.Principal, sweepID, cursor string, st jobtype.State, limit int) ([]*jobtype.Job, string, error) {
	sw, err := s.store.GetSweep(ctx, sweepID)
	if err != nil || !maySeeSweep(p, sw) {
		return []*jobtype.Job{}, "", nil
	}
	from := 0
	if cursor != "" {
		prefix := strings.TrimSuffix(jobstore.TrialID(sweepID, 0), "00000")
		n, err := strconv.Atoi(strings.TrimPrefix(cursor, prefix))
		if !strings.HasPrefix(cursor, prefix) || err != nil || n < 0 {
			return []*jobtype.Job{}, "", nil
		}
		from = n + 1
	}
	jobs, err := s.store.SweepTrials(ctx, sweepID, from, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]*jobtype.Job, 0, len(jobs))
	for _, j := range jobs {
		if j != nil && (st == "" || j.State == st) {
			out = append(out, j)
		}
	}
	next := ""
	if len(jobs) == limit && from+limit < sw.Trials {
		next = jobstore.TrialID(sweepID, from+limit-1)
	}
	return out, next, nil
}

// maxSubmitLeaderboard is the most trials a submit's answer lists (its
// leaderboard); a bigger sweep's answer carries the record alone (GET
// /api/v1/sweeps/{id} lists them).
const maxSubmitLeaderboard = 1000

// submitSweep is POST /api/v1/sweeps: a sweep spec (YAML or JSON, its
// base job inline), stored with all its trials, 201 with its status (200
// when an Idempotency-Key names a sweep stored before). dry_run=true
// expands and routes without storing.
func (s sweepAPI) submitSweep(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r, s.cfg.MaxBodyBytes*16)
	if !ok {
		return
	}
	sp, err := sweepspec.Parse(body, sweepspec.Options{})
	if err != nil {
		s.sweepError(w, r, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 200 {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "Idempotency-Key longer than 200 bytes", Code: "invalid"})
		return
	}
	dry, ok := boolParam(w, r, "dry_run")
	if !ok {
		return
	}
	p := principalOf(r)
	// Expanding, checking and routing every trial is CPU work before the
	// one store call: a big sweep gets 2 ms a trial on top of the Redis
	// timeout (20 s more for 10,000 trials; about 1 s is needed here, more
	// under the race detector).
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RedisTimeout+time.Duration(sp.Search.Trials)*2*time.Millisecond)
	defer cancel()
	req := plane.SweepRequest{Spec: sp, ID: jobstore.NewSweepID(time.Now()), Who: p}
	if key != "" {
		req.Idem = idemScope(p) + key
	}
	if dry {
		s.dryRunSweep(ctx, w, r, req)
		return
	}
	sw, existed, err := s.plane.SubmitSweep(ctx, req)
	if err != nil {
		s.sweepError(w, r, err)
		return
	}
	st := wire.SweepStatus{Sweep: sw}
	if sw.Trials <= maxSubmitLeaderboard {
		// The sweep is stored: a failed read of its trials (Redis gone
		// just after) must not answer "unavailable", which says nothing
		// was stored and invites a resend without a key (a second
		// sweep). The record alone is the answer then.
		if full, err := s.sweepStatus(ctx, sw); err != nil {
			s.log.Warn("sweep stored, its trials not read for the answer", slog.String("sweep_id", sw.ID), slog.Any("err", err))
		} else {
			st = full
		}
	}
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	s.log.Info("sweep accepted", slog.String("sweep_id", sw.ID), slog.String("name", sw.Name), slog.Int("trials", sw.Trials), slog.Bool("existing", existed))
	writeJSON(w, status, st)
}

// dryRunSweep answers the trials a sweep would make and their routes.
func (s sweepAPI) dryRunSweep(ctx context.Context, w http.ResponseWriter, r *http.Request, req plane.SweepRequest) {
	ns, err := s.plane.PlanSweep(ctx, req)
	if err != nil {
		s.sweepError(w, r, err)
		return
	}
	out := wire.SweepDryRun{DryRun: true, Search: req.Spec.Search.Kind, Trials: make([]wire.DryRunTrial, len(ns.Trials))}
	for i, t := range ns.Trials {
		out.Trials[i] = wire.DryRunTrial{Index: i, Params: t.Params, Route: t.Job.Route}
	}
	writeJSON(w, http.StatusOK, out)
}

// sweepError answers an admission error: 400 with the fields, 422 with
// the refusals, else as fail does.
func (s sweepAPI) sweepError(w http.ResponseWriter, r *http.Request, err error) {
	var ve *jobspec.ValidationError
	var ie *plane.InvalidError
	var re *plane.RefusedError
	switch {
	case errors.As(err, &ve):
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid sweep spec", Code: "invalid", Fields: ve.Errors})
	case errors.As(err, &ie):
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid sweep: some trials are not valid jobs here; nothing was stored", Code: "invalid", Fields: ie.Fields})
	case errors.As(err, &re):
		writeJSON(w, http.StatusUnprocessableEntity, wire.BatchRefusal{Error: "no backend may run some trials of the sweep; nothing was stored",
			Code: wire.CodeRefused, Reasons: re.Reasons})
	case errors.Is(err, plane.ErrOutcomeUnknown):
		s.outcomeUnknown(w, err)
	default:
		s.fail(w, r, err)
	}
}
