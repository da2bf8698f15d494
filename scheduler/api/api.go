package api

import (
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
// job submissions (one job, a batch), the sweeps, and the audit (explain,
// the ledger). The handlers of a stored job (get, list, cancel, retry)
// are Server's.
type (
	opsView   struct{ *Server }
	submitAPI struct{ *Server }
	sweepAPI  struct{ *Server }
	auditAPI  struct{ *Server }
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
	ops, subs, sweeps, aud := opsView{s}, submitAPI{s}, sweepAPI{s}, auditAPI{s}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs", s.withAuth(plane.RoleSubmitter, subs.submit))
	mux.HandleFunc("POST /api/v1/jobs/batch", s.withAuth(plane.RoleSubmitter, subs.submitBatch))
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
	mux.HandleFunc("GET /api/v1/budgets", s.readAPI(ops.budgets))
	mux.HandleFunc("GET /api/v1/overview", s.readAPI(ops.overview))
	mux.HandleFunc("GET /api/v1/history", s.readAPI(ops.history))
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

// outcomeUnknown answers 503 outcome_unknown: the write that stores an
// admission got no answer from Redis, so it may have been stored; a retry
// with the same Idempotency-Key gets the outcome (the CLI sends a key and
// retries with it).
func (s *Server) outcomeUnknown(w http.ResponseWriter, err error) {
	s.plane.SawRedis(err)
	writeJSON(w, http.StatusServiceUnavailable, wire.Error{Code: "outcome_unknown",
		Error: "Redis did not answer the write (" + rootCause(err) + "): it may or may not have been stored; send it again with the same Idempotency-Key to get the outcome"})
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
	job.CostNowUSD = costNow(s.plane.Routing().Config, job, time.Now())
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

// list answers a page of the jobs the caller may read, newest first
// (listQuery: a state, a sweep's trials, a page size and cursor, each
// job's loss series).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	lq, ok := readListQuery(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.rctx(r)
	defer cancel()
	var jobs []*jobtype.Job
	var next string
	var err error
	if lq.sweepID != "" {
		jobs, next, err = sweepAPI{s}.listSweepTrials(ctx, principalOf(r), lq.sweepID, lq.cursor, lq.state, lq.limit)
	} else {
		jobs, next, err = s.listFor(ctx, principalOf(r), lq.state, lq.cursor, lq.limit)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.addWaits(ctx, jobs)
	out := wire.JobList{Jobs: jobs, NextCursor: next}
	if lq.withLoss {
		if out.LossSeries, err = s.listLossSeries(ctx, jobs); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// listQuery is what GET /api/v1/jobs asks for: jobs in state ("" any), the
// trials of sweep sweepID ("" every job), limit of them after cursor ("" the
// newest), with their loss series when withLoss.
type listQuery struct {
	state    jobtype.State
	limit    int
	cursor   string
	withLoss bool
	sweepID  string
}

// readListQuery reads a list request's query (limit 50 when not given); a
// bad parameter is answered 400 naming it, and readListQuery returns false.
func readListQuery(w http.ResponseWriter, r *http.Request) (listQuery, bool) {
	q := r.URL.Query()
	lq := listQuery{state: jobtype.State(q.Get("state")), limit: 50, cursor: q.Get("cursor"), sweepID: q.Get("sweep")}
	if lq.state != "" && !lq.state.Valid() {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad state", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "state", Value: string(lq.state), Message: "not a job state"}}})
		return listQuery{}, false
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad limit", Code: "invalid",
				Fields: []jobspec.FieldError{{Field: "limit", Value: v, Message: "must be 1–1000"}}})
			return listQuery{}, false
		}
		lq.limit = n
	}
	if lq.cursor != "" && !jobstore.ValidID(lq.cursor) {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad cursor", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "cursor", Value: lq.cursor, Message: "not a job id"}}})
		return listQuery{}, false
	}
	withLoss, ok := boolParam(w, r, "loss_series")
	if !ok {
		return listQuery{}, false
	}
	lq.withLoss = withLoss
	if lq.sweepID != "" && !jobstore.ValidSweepID(lq.sweepID) {
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad sweep", Code: "invalid",
			Fields: []jobspec.FieldError{{Field: "sweep", Value: lq.sweepID, Message: "not a sweep id"}}})
		return listQuery{}, false
	}
	return lq, true
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
