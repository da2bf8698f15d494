package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/wire"
)

// Limits of GET /api/v1/decisions' ?limit.
const (
	DecisionsDefault = 50
	DecisionsMax     = 200
)

// decisions answers GET /api/v1/decisions?limit=N (wire.Decisions): the
// newest N routing decisions and refusals in the ledger, newest first. A
// token that reads its team's jobs only gets its team's, read through the
// ledger's team index (ledger.Recent), so another team's records are never
// read, counted or shown; an admin or all-teams token gets every team's.
// The dashboard's routing panel polls it.
//
// Redis round trips: for a team, one LRANGE of its index and one pipeline
// of an XRANGE per id, per page of max(2N, 50) records (one page unless
// staging records crowd the decisions out); for every team, one XREVRANGE
// per such page. At most ledger.RecentMax records are read.
func (s opsView) decisions(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ledger == nil {
		writeJSON(w, http.StatusNotImplemented, wire.Error{Error: "this scheduler keeps no ledger", Code: "unavailable"})
		return
	}
	limit := DecisionsDefault
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > DecisionsMax {
			writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid limit " + strconv.Quote(v), Code: "invalid",
				Fields: []jobspec.FieldError{{Field: "limit", Value: v, Message: "must be a whole number 1–" + strconv.Itoa(DecisionsMax)}}})
			return
		}
		limit = n
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	p := principalOf(r)
	out := wire.Decisions{Decisions: []wire.DecisionRow{}}
	if !allTeams(p) {
		out.Team = p.Team
	}
	recs, err := s.cfg.Ledger.Recent(ctx, out.Team, limit, func(rec ledger.Record) bool {
		return rec.Kind == "decision" || rec.Kind == "refusal"
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, rec := range recs {
		out.Decisions = append(out.Decisions, decisionRow(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

// decisionRow is rec (a decision or refusal record, body ledgerBody) in
// short; a body it cannot read leaves the decision's fields empty.
func decisionRow(rec ledger.Record) wire.DecisionRow {
	var body struct {
		Path     string `json:"path"`
		Name     string `json:"name"`
		Attempt  int    `json:"attempt"`
		Decision struct {
			Backend    string   `json:"backend"`
			Site       string   `json:"site"`
			Refused    bool     `json:"refused"`
			Waiting    bool     `json:"waiting"`
			Reasons    []string `json:"reasons"`
			EstCostUSD float64  `json:"est_cost_usd"`
		} `json:"decision"`
	}
	_ = json.Unmarshal(rec.Body, &body)
	d := body.Decision
	if d.Reasons == nil {
		d.Reasons = []string{}
	}
	return wire.DecisionRow{Time: rec.Time, Kind: rec.Kind, JobID: rec.JobID, JobName: body.Name, Team: rec.Team,
		Path: body.Path, Attempt: body.Attempt, Backend: d.Backend, Site: d.Site, Refused: d.Refused || rec.Kind == "refusal",
		Waiting: d.Waiting, Reasons: d.Reasons, EstCostUSD: d.EstCostUSD}
}
