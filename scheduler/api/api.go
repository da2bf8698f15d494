package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// Server serves the HTTP API: routes, auth, the edge guards, the
// handlers, follow streams, artifacts, the dashboard, /metrics and the
// asynqmon mount. It reads jobs through the store and writes only through
// the control plane (plane.Plane): every admission, cancel and retry.
type Server struct {
	plane  plane.Plane
	cfg    Config
	store  *jobstore.Store
	follow *jobstore.Store // store over Config.FollowRedis
	rdb    redis.UniversalClient
	insp   *asynq.Inspector // asynq's queue counts (the ops view)
	log    *slog.Logger
	reg    *prometheus.Registry     // the API's own collectors (the store's figures)
	tokens atomic.Pointer[tokenSet] // the tokens in force (SetTokens swaps them)

	mu      sync.Mutex
	httpSrv *http.Server
	ln      net.Listener
	limiter *connLimiter // the connection limits of ln (Start)
}

// The API's handlers are grouped by what they serve, each group a view
// of the one Server: the ops view (overview, queues, GPUs, nodes,
// budgets, schedules, decisions, the dashboard, /metrics, asynqmon), the
// sweeps, and the audit (explain, the ledger). The jobs' own handlers are
// Server's.
type (
	opsView  struct{ *Server }
	sweepAPI struct{ *Server }
	auditAPI struct{ *Server }
)

// New is the API of control plane p over store (on rdb); Start serves it
// on cfg.Listen, Handler serves it elsewhere (tests, embedding).
func New(p plane.Plane, rdb redis.UniversalClient, store *jobstore.Store, cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{plane: p, cfg: cfg, store: store, follow: store, rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb),
		log: cfg.Logger.With(slog.String("component", "api")), reg: prometheus.NewRegistry()}
	if cfg.FollowRedis != nil {
		s.follow = store.WithClient(cfg.FollowRedis)
	}
	s.tokens.Store(newTokenSet(cfg.Tokens))
	s.reg.MustRegister(&storeCollector{s: opsView{s}}, connCollector{s})
	return s
}

func (s *Server) routes() http.Handler {
	ops, sweeps, aud := opsView{s}, sweepAPI{s}, auditAPI{s}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs", s.withAuth(plane.RoleSubmitter, s.submit))
	mux.HandleFunc("POST /api/v1/jobs/batch", s.withAuth(plane.RoleSubmitter, s.submitBatch))
	mux.HandleFunc("POST /api/v1/route", s.withAuth(plane.RoleViewer, aud.explain))
	mux.HandleFunc("GET /api/v1/audit", s.withAuth(plane.RoleAdmin, aud.audit))
	mux.HandleFunc("GET /api/v1/audit/verify", s.withAuth(plane.RoleAdmin, aud.auditVerify))
	mux.HandleFunc("GET /api/v1/audit/export", s.withAuth(plane.RoleAdmin, aud.auditExport))
	mux.HandleFunc("GET /api/v1/decisions", s.readAPI(ops.decisions))
	mux.HandleFunc("GET /api/v1/jobs", s.readAPI(s.list))
	mux.HandleFunc("GET /api/v1/jobs/{id}", s.readAPI(s.get))
	mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", s.withAuth(plane.RoleSubmitter, s.cancelJob))
	mux.HandleFunc("POST /api/v1/jobs/{id}/retry", s.withAuth(plane.RoleSubmitter, s.retryJob))
	mux.HandleFunc("GET /api/v1/jobs/{id}/events", s.readAPI(streams{s}.events))
	mux.HandleFunc("GET /api/v1/jobs/{id}/artifacts/{name}", s.withAuth(plane.RoleViewer, streams{s}.artifact))
	mux.HandleFunc("GET /api/v1/jobs/{id}/gpu", s.readAPI(ops.gpuSeries))
	mux.HandleFunc("GET /api/v1/queues", s.withAuth(plane.RoleViewer, ops.queues))
	mux.HandleFunc("GET /api/v1/gpus", s.withAuth(plane.RoleViewer, ops.listGPUs))
	mux.HandleFunc("GET /api/v1/nodes", s.withAuth(plane.RoleViewer, ops.listNodes))
	mux.HandleFunc("GET /api/v1/budgets", s.withAuth(plane.RoleViewer, ops.budgets))
	mux.HandleFunc("GET /api/v1/overview", s.readAPI(ops.overview))
	mux.HandleFunc("POST /api/v1/sweeps", s.withAuth(plane.RoleSubmitter, sweeps.submitSweep))
	mux.HandleFunc("GET /api/v1/sweeps", s.readAPI(sweeps.listSweeps))
	mux.HandleFunc("GET /api/v1/sweeps/{id}", s.readAPI(sweeps.getSweep))
	mux.HandleFunc("POST /api/v1/sweeps/{id}/cancel", s.withAuth(plane.RoleSubmitter, sweeps.cancelSweep))
	mux.HandleFunc("GET /api/v1/schedules", s.withAuth(plane.RoleViewer, ops.listSchedules))
	mux.HandleFunc("GET /metrics", s.withAuth(plane.RoleViewer, ops.metricsHandler()))
	mux.HandleFunc("GET /healthz", s.healthz)
	// The dashboard (dashboard.go): not a bare "GET /", which would clash with monitoringRoot.
	mux.HandleFunc("GET /{$}", ops.dashboardPage())
	mux.HandleFunc("GET /jobs/{id}", ops.dashboardPage())
	mux.HandleFunc("GET "+dashboardAssets, ops.dashboardAsset())
	mux.Handle(monitoringRoot+"/", ops.monitoring()) // every method: monitoring.go checks the role per method
	return s.guard(mux)
}

// writeJSON answers v with status; a refusal (401, 403, 413, 415, 421)
// closes the connection without reading the rest of the body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	if closesConn(status) {
		refusing(w)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail translates a store error into its HTTP answer. The answer says
// what a user needs ("job j-1 not found"); the packages' wrapping
// ("jobstore: get j-1: …") goes to the log only.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ce *jobstore.ConflictError
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		s.log.Debug("api: not found", slog.String("path", r.URL.Path), slog.Any("err", err))
		writeJSON(w, http.StatusNotFound, wire.Error{Error: notFoundText(r), Code: "not_found"})
	case errors.As(err, &ce):
		writeJSON(w, http.StatusConflict, wire.Error{Error: ce.Error(), Code: "conflict", State: ce.State})
	case jobstore.Unreachable(err):
		s.plane.SawRedis(err)
		s.log.Debug("api: Redis unreachable", slog.String("path", r.URL.Path), slog.Any("err", err))
		writeJSON(w, http.StatusServiceUnavailable, wire.Error{Error: "Redis is unreachable: " + rootCause(err), Code: "unavailable"})
	case jobstore.OutOfMemory(err):
		writeJSON(w, http.StatusServiceUnavailable, wire.Error{Error: "Redis is out of memory (maxmemory reached under noeviction; see docs/operations.md on retention): " + rootCause(err), Code: "unavailable"})
	default:
		s.log.Error("api", slog.String("path", r.URL.Path), slog.Any("err", err))
		writeJSON(w, http.StatusInternalServerError, wire.Error{Error: "internal error: " + rootCause(err) + " (the scheduler's log has the rest)", Code: "internal"})
	}
}

// notFoundText is a 404's message: the job or sweep of the request's path
// ("job j-1 not found"), the id quoted when it is empty or has a space or
// a character Go would escape.
func notFoundText(r *http.Request) string {
	id := r.PathValue("id")
	if id == "" {
		if c := r.URL.Query().Get("cursor"); c != "" {
			return "cursor " + quoteOdd(c) + " not found"
		}
		return "not found"
	}
	kind := "job"
	if strings.HasPrefix(r.URL.Path, "/api/v1/sweeps/") {
		kind = "sweep"
	}
	return kind + " " + quoteOdd(id) + " not found"
}

// quoteOdd is s, or s quoted when it is empty or has a space or a
// character strconv.Quote escapes.
func quoteOdd(s string) string {
	if q := strconv.Quote(s); s == "" || strings.ContainsRune(s, ' ') || q != `"`+s+`"` {
		return q
	}
	return s
}

// rootCause is the innermost error err wraps ("dial tcp …: connection
// refused"), without the context each package added on the way out.
func rootCause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

func (s *Server) rctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.RedisTimeout)
}

// readSpec reads the request body as a job spec (strict parse) and
// normalises it with the deployment's defaults; on a bad body it answers
// (413, or 400 with every bad field) and returns false.
func (s *Server) readSpec(w http.ResponseWriter, r *http.Request) (*jobspec.Spec, bool) {
	body, ok := s.readBody(w, r, s.cfg.MaxBodyBytes)
	if !ok {
		return nil, false
	}
	spec, err := jobspec.Parse(body)
	if err != nil {
		var ve *jobspec.ValidationError
		if errors.As(err, &ve) {
			writeJSON(w, http.StatusBadRequest, wire.Error{Error: "invalid job spec", Code: "invalid", Fields: ve.Errors})
			return nil, false
		}
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: err.Error(), Code: "invalid"})
		return nil, false
	}
	spec.Normalize(s.cfg.Defaults)
	return spec, true
}

// readBody reads a request's body of at most limit bytes; otherwise it
// answers (413, or 400) and returns false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, wire.Error{Error: fmt.Sprintf("body over %d bytes", limit), Code: "too_large"})
			return nil, false
		}
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "read body: " + err.Error(), Code: "invalid"})
		return nil, false
	}
	return body, true
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
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
func (s *Server) admitError(w http.ResponseWriter, r *http.Request, err error, key string, batch bool) {
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

// outcomeUnknown answers 503 outcome_unknown: the write that stores an
// admission got no answer from Redis, so it may have been stored; a retry
// with the same Idempotency-Key gets the outcome (the CLI sends a key and
// retries with it).
func (s *Server) outcomeUnknown(w http.ResponseWriter, err error) {
	s.plane.SawRedis(err)
	writeJSON(w, http.StatusServiceUnavailable, wire.Error{Code: "outcome_unknown",
		Error: "Redis did not answer the write (" + rootCause(err) + "): it may or may not have been stored; send it again with the same Idempotency-Key to get the outcome"})
}

// submitBatch stores up to jobstore.MaxCreateBatch jobs in one request and
// one Redis script call, all or nothing: one bad spec (its errors named
// "jobs[i].field") and nothing is stored. An Idempotency-Key applies to each
// job as item i of batch KEY (idemKey), so the same request sent again
// returns the same jobs, and one with another spec under the key is a 409.
func (s *Server) submitBatch(w http.ResponseWriter, r *http.Request) {
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
func (s *Server) readBatch(w http.ResponseWriter, r *http.Request) (wire.BatchRequest, bool) {
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
func (s *Server) batchJobs(p plane.Principal, key string, req wire.BatchRequest) ([]jobstore.NewJob, []jobspec.FieldError) {
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

// get answers one job; a queued job carries its place in line from the
// leader's last placement round (wait), when that round listed it.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	job, ok := s.readJob(ctx, w, r, r.PathValue("id"))
	if !ok {
		return
	}
	if job.State == jobtype.StateQueued {
		// The wait is a hint: without it the job is still the answer.
		if wait, err := s.store.WaitOf(ctx, job.ID); err != nil {
			s.log.Debug("wait of queued job", slog.String("job_id", job.ID), slog.Any("err", err))
		} else {
			job.Wait = wait
		}
		if t := job.Trial; t != nil && t.Gate == jobtype.ReasonMaxParallel {
			// Trials wait in line and only the head is tried: when the
			// head waits for money, this one waits for the same money
			// (the sweep's stalled), as the sweep's status shows it.
			if sw, err := s.store.GetSweep(ctx, t.SweepID); err == nil && sw.Stalled != "" {
				t.Gate = sw.Stalled
			}
		}
	}
	writeJSON(w, http.StatusOK, job)
}

// gpuSeries answers a job's downsampled GPU series (no points when it
// never ran on GPUs); 404 for an unknown job.
func (s opsView) gpuSeries(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	id := r.PathValue("id")
	if _, ok := s.readJob(ctx, w, r, id); !ok {
		return
	}
	series, err := s.store.GPUSeriesOf(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, series)
}

// listGPUs answers every GPU of every live node, as its last heartbeat
// reported it, with the job holding it.
func (s opsView) listGPUs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.GPUList{GPUs: gpuRows(nodes)})
}

// listNodes answers one row per live node.
func (s opsView) listNodes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows := make([]wire.NodeInfo, len(nodes))
	for i, n := range nodes {
		rows[i] = nodeInfo(n)
	}
	writeJSON(w, http.StatusOK, wire.NodeList{Nodes: rows})
}

// gpuRows lists the GPUs of nodes, sorted by node then index, with Node and
// JobID filled in (JobID "" for a free GPU). It is never nil.
func gpuRows(nodes []jobstore.NodeStatus) []jobtype.GPU {
	out := []jobtype.GPU{}
	for _, n := range nodes {
		for _, g := range n.GPUs {
			g.Node = n.Name
			g.JobID = n.GPUHolder(g.Index)
			g.Simulated = g.Simulated || n.Simulated
			out = append(out, g)
		}
	}
	slices.SortStableFunc(out, func(a, b jobtype.GPU) int {
		if c := strings.Compare(a.Node, b.Node); c != 0 {
			return c
		}
		return a.Index - b.Index
	})
	return out
}

// nodeInfo is n's row of GET /api/v1/nodes.
func nodeInfo(n jobstore.NodeStatus) wire.NodeInfo {
	ni := wire.NodeInfo{Name: n.Name, Backend: n.Backend, Host: n.Host, Incarnation: n.Incarnation,
		StartedAt: n.StartedAt, SeenAt: n.SeenAt, Slots: n.Slots, CPUReserved: n.CPUReserved,
		GPUs: len(n.GPUs), Driver: n.Driver, CUDA: n.CUDA, Simulated: n.Simulated,
		CheckpointRoot: n.CheckpointRoot, Jobs: make([]string, 0, len(n.Reservations))}
	for _, g := range n.GPUs {
		switch {
		case !g.Healthy:
			ni.GPUsUnhealthy++
		case n.GPUHolder(g.Index) == "":
			ni.GPUsFree++
		}
	}
	for id := range n.Reservations {
		ni.Jobs = append(ni.Jobs, id)
	}
	slices.Sort(ni.Jobs)
	return ni
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := jobtype.State(q.Get("state"))
	if st != "" && !st.Valid() {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad state", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "state", Value: string(st), Message: "not a job state"}}})
		return
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad limit", Code: "invalid",
				Fields: []jobspec.FieldError{{Field: "limit", Value: v, Message: "must be 1–1000"}}})
			return
		}
		limit = n
	}
	cursor := q.Get("cursor")
	if cursor != "" && !jobstore.ValidID(cursor) {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad cursor", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "cursor", Value: cursor, Message: "not a job id"}}})
		return
	}
	withLoss, ok := boolParam(w, r, "loss_series")
	if !ok {
		return
	}
	sweepID := q.Get("sweep")
	if sweepID != "" && !jobstore.ValidSweepID(sweepID) {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad sweep", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "sweep", Value: sweepID, Message: "not a sweep id"}}})
		return
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	var jobs []*jobtype.Job
	var next string
	var err error
	if sweepID != "" {
		jobs, next, err = sweepAPI{s}.listSweepTrials(ctx, principalOf(r), sweepID, cursor, st, limit)
	} else {
		jobs, next, err = s.listFor(ctx, principalOf(r), st, cursor, limit)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.addWaits(ctx, jobs)
	out := wire.JobList{Jobs: jobs, NextCursor: next}
	if withLoss {
		if out.LossSeries, err = s.listLossSeries(ctx, jobs); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// addWaits sets the wait of each queued job of jobs the last placement
// round listed, as GET /api/v1/jobs/{id} answers it: one HMGET, none when
// no job is queued. The waits are hints: without them the list is still
// the answer.
func (s *Server) addWaits(ctx context.Context, jobs []*jobtype.Job) {
	var ids []string
	for _, j := range jobs {
		if j.State == jobtype.StateQueued {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	waits, err := s.store.WaitsOf(ctx, ids)
	if err != nil {
		s.log.Debug("waits of listed jobs", slog.Any("err", err))
		return
	}
	for _, j := range jobs {
		if w, ok := waits[j.ID]; ok && j.State == jobtype.StateQueued {
			j.Wait = &w
		}
	}
}

// listLossSeries is the loss series (with the latest progress) of each of
// jobs that has made progress, by id: one pipeline of an LRANGE per such
// job (none when none has).
func (s *Server) listLossSeries(ctx context.Context, jobs []*jobtype.Job) (map[string][]jobtype.LossPoint, error) {
	var ids []string
	for _, j := range jobs {
		if j.Progress.Step > 0 {
			ids = append(ids, j.ID)
		}
	}
	series, err := s.store.LossSeries(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]jobtype.LossPoint, len(ids))
	for _, j := range jobs {
		if j.Progress.Step > 0 {
			out[j.ID] = withLatest(series[j.ID], j.Progress.Step, j.Progress.Loss)
		}
	}
	return out, nil
}

// listScan bounds how many job ids one list request looks through for a
// token that reads only its team's jobs; past it the page ends short (even
// empty) with a cursor to go on from.
const listScan = 20000

// listFor is the store's List of the jobs p may read: newest first, up to
// limit, and the cursor of the next page ("" at the end).
func (s *Server) listFor(ctx context.Context, p plane.Principal, st jobtype.State, cursor string, limit int) ([]*jobtype.Job, string, error) {
	if p.Role == plane.RoleAdmin || p.AllTeams {
		return s.store.List(ctx, st, cursor, limit)
	}
	const page = 500
	out := []*jobtype.Job{}
	for scanned := 0; ; scanned += page {
		jobs, next, err := s.store.List(ctx, st, cursor, page)
		if err != nil {
			return nil, "", err
		}
		for i, j := range jobs {
			if !mayRead(p, j) {
				continue
			}
			out = append(out, j)
			if len(out) == limit {
				if i == len(jobs)-1 && next == "" {
					return out, "", nil
				}
				return out, j.ID, nil
			}
		}
		if next == "" {
			return out, "", nil
		}
		if scanned+page >= listScan {
			return out, next, nil
		}
		cursor = next
	}
}

// cancelJob asks for a cancel in the store (durable), then takes the fast
// paths: a task still waiting in its queue is deleted and the attempt
// cancelled here; a running one is told through asynq's CancelProcessing.
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	id := r.PathValue("id")
	if !s.allowed(ctx, w, r, id, "cancel") {
		return
	}
	job, err := s.plane.Cancel(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("cancel requested", slog.String("job_id", id), slog.String("state", string(job.State)))
	writeJSON(w, http.StatusAccepted, job)
}

// allowed answers 403 (and returns false) unless the request's plane.Principal may
// act on the job: an admin on any job, a submitter on its own team's.
func (s *Server) allowed(ctx context.Context, w http.ResponseWriter, r *http.Request, id, what string) bool {
	job, ok := s.readJob(ctx, w, r, id)
	if !ok {
		return false // another team's job is one that does not exist
	}
	if p := principalOf(r); !plane.MayTouch(p, job) {
		writeJSON(w, http.StatusForbidden, wire.Error{Error: fmt.Sprintf("token %s (team %s) may not %s job %s of team %s", p.Name, orNone(p.Team), what, id, orNone(job.Team)), Code: "forbidden"})
		return false
	}
	return true
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// retryJob makes a new attempt of a failed or cancelled job.
func (s *Server) retryJob(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	if !s.allowed(ctx, w, r, r.PathValue("id"), "retry") {
		return
	}
	job, err := s.plane.Retry(ctx, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("retry", slog.String("job_id", job.ID), slog.Int("attempt", job.Attempt))
	writeJSON(w, http.StatusAccepted, job)
}

func (s opsView) queues(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	pending, err := s.store.PendingCount(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	counts, err := s.store.CountByState(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	qs, err := s.queueInfos(ctx, nodes)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.QueueStats{Pending: pending, ByState: counts, Queues: qs})
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, wire.Health{OK: false, Redis: "down: " + err.Error(), Code: wire.CodeUnavailable, Error: "Redis is unreachable: " + err.Error()})
		return
	}
	// The eviction policy may change under a running Lathe (CONFIG SET, a
	// failover to a replica configured otherwise): check it every time.
	if !s.cfg.NoEvictionCheck {
		if err := s.plane.CheckEviction(ctx); err != nil {
			var pe *jobstore.EvictionPolicyError
			code := "unavailable"
			if errors.As(err, &pe) {
				code = "eviction_policy"
			}
			writeJSON(w, http.StatusServiceUnavailable, wire.Health{OK: false, Redis: "up", Code: code, Error: err.Error(), Leader: ptr(s.plane.IsLeader())})
			return
		}
	}
	writeJSON(w, http.StatusOK, wire.Health{OK: true, Redis: "up", Leader: ptr(s.plane.IsLeader())})
}

// ptr returns a pointer to v (an optional field of an answer).
func ptr[T any](v T) *T { return &v }
