package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing"
)

// explain runs routing on a spec without submitting it. Query:
// assume_wait=BACKEND=DURATION and assume_spent=BACKEND=USD (repeatable)
// state a what-if for the pressure and budget inputs.
func (s auditAPI) explain(w http.ResponseWriter, r *http.Request) {
	spec, ok := s.readSpec(w, r)
	if !ok {
		return
	}
	as, fe := ParseAssumptions(r.URL.Query()["assume_wait"], r.URL.Query()["assume_spent"])
	if len(fe) > 0 {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid what-if", Code: "invalid", Fields: fe})
		return
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	d, hash, err := s.plane.Explain(ctx, principalOf(r), spec, as)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Explanation{Decision: d.Wire(), ConfigHash: hash})
}

// refusal is the 422 answer of a single submit that d refuses.
func refusal(d routing.Decision) wire.Error {
	wd := d.Wire()
	return wire.Error{Error: "no backend may run this job; nothing was stored", Code: wire.CodeRefused, Reasons: d.Reasons, Decision: &wd}
}

// ParseAssumptions reads BACKEND=DURATION and BACKEND=USD what-ifs
// (routing.ParseWhatIf, the CLI's rules too); every bad one is a field
// error naming it and its value.
func ParseAssumptions(waits, spents []string) (policy.Assumptions, []jobspec.FieldError) {
	wi, fe := routing.ParseWhatIf(waits, spents)
	return policy.Assumptions{Wait: wi.Wait, Spent: wi.Spent}, fe
}

// audit lists ledger records, all or one job's (?job=ID), oldest first,
// at most limit (default 1000) after seq ?after=N.
func (s auditAPI) audit(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ledger == nil {
		writeJSON(w, http.StatusNotImplemented, wire.Error{Error: "this scheduler keeps no ledger", Code: "unavailable"})
		return
	}
	q := r.URL.Query()
	limit, after := 1000, int64(0)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100000 {
			writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid limit", Code: "invalid", Fields: []jobspec.FieldError{{Field: "limit", Value: v, Message: "must be 1–100000"}}})
			return
		}
		limit = n
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid after", Code: "invalid", Fields: []jobspec.FieldError{{Field: "after", Value: v, Message: "must be a record number ≥ 0"}}})
			return
		}
		after = n
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	out := []ledger.Record{}
	errEnough := errors.New("enough")
	err := s.cfg.Ledger.Range(ctx, q.Get("job"), func(rec ledger.Record) error {
		if rec.Seq <= after {
			return nil
		}
		out = append(out, rec)
		if len(out) >= limit {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.AuditRecords{Records: out})
}

// auditVerify checks the whole chain with the key (and against a head
// published earlier, ?head=MAC). 200 with the report when intact, 409 with
// it when not.
func (s auditAPI) auditVerify(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ledger == nil {
		writeJSON(w, http.StatusNotImplemented, wire.Error{Error: "this scheduler keeps no ledger", Code: "unavailable"})
		return
	}
	dw := s.longResponse(w) // reading a long ledger may outlast ReadTimeout
	rep, err := s.cfg.Ledger.VerifyAgainst(r.Context(), r.URL.Query().Get("head"))
	dw.extend()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if len(rep.Problems) > 0 {
		status = http.StatusConflict
	}
	writeJSON(w, status, rep)
}

// auditExport streams the ledger as JSON lines (ledger.VerifyExport reads
// them back); the head MAC it ends at, to publish, is in the
// X-Lathe-Ledger-Head trailer, and the record count in X-Lathe-Ledger-Records.
func (s auditAPI) auditExport(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ledger == nil {
		writeJSON(w, http.StatusNotImplemented, wire.Error{Error: "this scheduler keeps no ledger", Code: "unavailable"})
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Trailer", "X-Lathe-Ledger-Head, X-Lathe-Ledger-Records")
	head, n, err := s.cfg.Ledger.Export(r.Context(), s.longResponse(w)) // a long ledger outlasts WriteTimeout
	if err != nil {
		// The status is sent; a client sees no head trailer and must not trust the file.
		s.log.Warn("audit export failed", "err", err)
		return
	}
	w.Header().Set("X-Lathe-Ledger-Head", head)
	w.Header().Set("X-Lathe-Ledger-Records", strconv.FormatInt(n, 10))
}
