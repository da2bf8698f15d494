package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// The job submissions: POST /api/v1/jobs (one job, or a dry run that
// stores nothing) and POST /api/v1/jobs/batch (up to
// jobstore.MaxCreateBatch jobs, all or nothing), with their
// Idempotency-Key and the answers to an admission's error.

// submit stores one job (201; 200 when its Idempotency-Key names it
// already), or with dry_run=1 answers the route it would take and stores
// nothing; a spec this deployment cannot run is a 400.
func (s submitAPI) submit(w http.ResponseWriter, r *http.Request) {
	spec, ok := s.readSpec(w, r)
	if !ok {
		return
	}
	if fe := s.plane.Admissible(principalOf(r), spec); len(fe) > 0 {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "job cannot run on this deployment", Code: "invalid", Fields: fe})
		return
	}
	key, ok := idemHeader(w, r)
	if !ok {
		return
	}
	dry, ok := boolParam(w, r, "dry_run") // dry_run=1 must not store a job
	if !ok {
		return
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	p := principalOf(r)
	a := plane.Admission{Who: p, Jobs: []jobstore.NewJob{{Spec: spec, IdempotencyKey: idemKey(p, key, -1)}}}
	if dry {
		planned, err := s.plane.Plan(ctx, a)
		if err != nil {
			s.admitError(w, r, err, key, false)
			return
		}
		writeJSON(w, http.StatusOK, wire.DryRun{DryRun: true, Spec: spec, Route: planned[0].Route})
		return
	}
	created, err := s.plane.Submit(ctx, a)
	if err != nil {
		s.admitError(w, r, err, key, false)
		return
	}
	job, existed := created[0].Job, created[0].Existed
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	}
	s.log.Info("job accepted", slog.String("job_id", job.ID), slog.String("name", job.Name), slog.Bool("existing", existed))
	writeJSON(w, status, job)
}

// idemHeader reads the request's Idempotency-Key ("" none); one over 200
// bytes is answered 400.
func idemHeader(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 200 {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "Idempotency-Key longer than 200 bytes", Code: "invalid"})
		return "", false
	}
	return key, true
}

// admitError answers an admission's error: 422 with the refusal (a
// one-job refusal with its decision), 409 for an idempotency conflict,
// else as fail does.
func (s submitAPI) admitError(w http.ResponseWriter, r *http.Request, err error, key string, batch bool) {
	var re *plane.RefusedError
	switch {
	case errors.As(err, &re) && re.Decision != nil:
		writeJSON(w, http.StatusUnprocessableEntity, refusal(*re.Decision))
	case errors.As(err, &re):
		writeJSON(w, http.StatusUnprocessableEntity, wire.BatchRefusal{Error: "no backend may run some " + re.What + "; nothing was stored",
			Code: wire.CodeRefused, Reasons: re.Reasons})
	case idemConflict(w, err, key, batch):
	case errors.Is(err, plane.ErrOutcomeUnknown):
		s.outcomeUnknown(w, err)
	default:
		s.fail(w, r, err)
	}
}

// submitBatch stores up to jobstore.MaxCreateBatch jobs in one request and
// one Redis script call, all or nothing: one bad spec (its errors named
// "jobs[i].field") and nothing is stored. An Idempotency-Key applies to each
// job as item i of batch KEY (idemKey), so the same request sent again
// returns the same jobs, and one with another spec under the key is a 409.
func (s submitAPI) submitBatch(w http.ResponseWriter, r *http.Request) {
	req, ok := s.readBatch(w, r)
	if !ok {
		return
	}
	key, ok := idemHeader(w, r)
	if !ok {
		return
	}
	p := principalOf(r)
	njs, fields := s.batchJobs(p, key, req)
	if len(fields) > 0 {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid job specs in batch; nothing was stored", Code: "invalid", Fields: fields})
		return
	}
	dry, ok := boolParam(w, r, "dry_run")
	if !ok {
		return
	}
	if dry {
		specs := make([]*jobspec.Spec, len(njs))
		for i := range njs {
			specs[i] = njs[i].Spec
		}
		writeJSON(w, http.StatusOK, wire.BatchDryRun{DryRun: true, Specs: specs})
		return
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	created, err := s.plane.Submit(ctx, plane.Admission{Who: p, Jobs: njs, Batch: true})
	if err != nil {
		s.admitError(w, r, err, key, true)
		return
	}
	resp := batchResponse(created)
	status := http.StatusCreated
	if resp.Existing == len(created) {
		status = http.StatusOK
	}
	s.log.Info("batch accepted", slog.Int("jobs", len(created)), slog.Int("existing", resp.Existing),
		slog.String("first_job_id", created[0].Job.ID))
	writeJSON(w, status, resp)
}

// readBatch reads the body of a batch submit (at most 16 times a single
// submit's limit) as a wire.BatchRequest of 1 to jobstore.MaxCreateBatch
// specs; otherwise it answers (413, or 400) and returns false.
func (s submitAPI) readBatch(w http.ResponseWriter, r *http.Request) (wire.BatchRequest, bool) {
	limit := s.cfg.MaxBodyBytes * 16
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, wire.Error{Error: fmt.Sprintf("body over %d bytes", limit), Code: "too_large"})
			return wire.BatchRequest{}, false
		}
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "read body: " + err.Error(), Code: "invalid"})
		return wire.BatchRequest{}, false
	}
	var req wire.BatchRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: `body must be {"jobs": [spec, …]}: ` + err.Error(), Code: "invalid"})
		return wire.BatchRequest{}, false
	}
	if len(req.Jobs) == 0 || len(req.Jobs) > jobstore.MaxCreateBatch {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid batch", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "jobs", Value: strconv.Itoa(len(req.Jobs)), Message: fmt.Sprintf("must hold 1 to %d job specs", jobstore.MaxCreateBatch)}}})
		return wire.BatchRequest{}, false
	}
	return req, true
}

// batchJobs parses and normalises every spec of req into the job to store
// (item i under the Idempotency-Key key); every bad field of every spec is
// returned, named "jobs[i].field".
func (s submitAPI) batchJobs(p plane.Principal, key string, req wire.BatchRequest) ([]jobstore.NewJob, []jobspec.FieldError) {
	var fields []jobspec.FieldError
	njs := make([]jobstore.NewJob, 0, len(req.Jobs))
	for i, raw := range req.Jobs {
		prefix := fmt.Sprintf("jobs[%d]", i)
		spec, err := jobspec.Parse(raw)
		if err != nil {
			var ve *jobspec.ValidationError
			if !errors.As(err, &ve) {
				fields = append(fields, jobspec.FieldError{Field: prefix, Message: err.Error()})
				continue
			}
			for _, fe := range ve.Errors {
				fields = append(fields, fe.Under(prefix))
			}
			continue
		}
		spec.Normalize(s.cfg.Defaults)
		for _, fe := range s.plane.Admissible(p, spec) {
			fields = append(fields, fe.Under(prefix))
		}
		njs = append(njs, jobstore.NewJob{Spec: spec, IdempotencyKey: idemKey(p, key, i)})
	}
	return njs, fields
}

// batchResponse is the answer of a stored batch, in the request's order.
func batchResponse(created []jobstore.Created) wire.BatchResponse {
	resp := wire.BatchResponse{Jobs: make([]*jobtype.Job, len(created))}
	for i, c := range created {
		resp.Jobs[i] = c.Job
		if c.Existed {
			resp.Existing++
		}
	}
	return resp
}

// idemKey is the store's key for a request's Idempotency-Key (key; "" for
// none): scoped to the token (token names hold no ':' or '/'), and to a
// single submit (TEAM/TOKEN:KEY) or to job item of a batch
// (TEAM/TOKEN/batch:KEY#i); teams and token names hold no ':' or '/',
// so that a single submit's "K#0" is never job 0 of batch "K". The store
// also keeps a fingerprint of the spec and the team with it.
func idemKey(p plane.Principal, key string, item int) string {
	switch {
	case key == "":
		return ""
	case item < 0:
		return idemScope(p) + key
	default:
		return p.Team + "/" + p.Name + "/batch:" + key + "#" + strconv.Itoa(item)
	}
}

// idemConflict answers 409 idempotency_conflict when err says the key was
// used for another spec (or by another team), naming the key; it reports
// whether it answered.
func idemConflict(w http.ResponseWriter, err error, key string, batch bool) bool {
	var ce *jobstore.IdempotencyConflictError
	if !errors.As(err, &ce) {
		return false
	}
	msg := fmt.Sprintf("Idempotency-Key %q was used before with another job spec (it names job %s): send that spec again to get the job, or use a new key for a new job; nothing was stored", key, ce.JobID)
	switch {
	case batch && ce.JobID == "":
		msg = fmt.Sprintf("Idempotency-Key %q: jobs[%d] differs from another job of the batch with the same key; nothing was stored", key, ce.Index)
	case batch:
		msg = fmt.Sprintf("Idempotency-Key %q was used before with another batch: jobs[%d] differs from job %s; send that batch again to get its jobs, or use a new key; nothing was stored", key, ce.Index, ce.JobID)
	}
	writeJSON(w, http.StatusConflict, wire.Error{Error: msg, Code: "idempotency_conflict"})
	return true
}
