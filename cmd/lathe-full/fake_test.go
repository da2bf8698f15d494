package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/wire"
)

// fakeScheduler is a stand-in for the Lathe scheduler in the CLI's tests,
// for what the real scheduler's API in process (newTestDaemon,
// daemon_test.go) cannot produce without a worker and a trainer, or not on
// demand: an httptest.Server implementing the parts of docs/api.md the CLI
// uses, over an in-memory job table whose jobs "run" instantly (a submitted
// job already has its whole event history, progress and artifacts, ending
// in finalState: submit --wait, logs, status, pull), with canned failures
// (a 5xx, a validation answer, a bad checksum), short list pages
// (pageSize), canned route decisions (explain), nodes seen at a stopped
// clock, and a ledger tests tamper with (audit verify, a cut export). It
// checks request shapes only as far as the CLI tests need. Dry runs,
// refusals, cancel, queues and GPUs are tested against the real handler.
type fakeScheduler struct {
	t   *testing.T
	srv *httptest.Server

	mu sync.Mutex
	// requests records "METHOD /path?query" of every request served.
	requests []string
	// bodies holds the body of every POST /api/v1/jobs.
	bodies [][]byte
	jobs   map[string]*jobtype.Job // final records
	order  []string                // ids, oldest first
	events map[string][]jobtype.Event
	files  map[string]map[string][]byte // job id → artifact name → bytes

	// finalState is where a submitted job ends.
	finalState jobtype.State
	// steps is how many progress events a submitted job emits.
	steps int
	// fail, when set, is answered to every request instead.
	fail *failure
	// pageSize caps a list page below the asked limit when > 0.
	pageSize int
	// nodes are served as GET /api/v1/nodes.
	nodes []wire.NodeInfo

	// explain is answered to POST /api/v1/route (a canned decision: the
	// fake does not route), after the spec is checked as the scheduler does.
	explain apiclient.Explanation
	// ledgerKey chains records, the ledger served under /api/v1/audit: each
	// record's MAC is computed with it as the real ledger does, so that
	// audit/verify (ledger.VerifyExport over the fake's own export) and an
	// offline verify of an export see a real chain. Tests tamper with
	// records directly.
	ledgerKey []byte
	records   []ledger.Record
	// cutExport makes /api/v1/audit/export end without its trailers, as a
	// scheduler that failed part-way does.
	cutExport bool
}

type failure struct {
	status int
	body   string
}

func newFakeScheduler(t *testing.T) *fakeScheduler {
	t.Helper()
	f := &fakeScheduler{
		t:          t,
		jobs:       map[string]*jobtype.Job{},
		events:     map[string][]jobtype.Event{},
		files:      map[string]map[string][]byte{},
		finalState: jobtype.StateSucceeded,
		steps:      20,
		ledgerKey:  bytes.Repeat([]byte{0x5a}, ledger.MinKeySize),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs", f.submit)
	mux.HandleFunc("POST /api/v1/route", f.route)
	mux.HandleFunc("GET /api/v1/audit", f.audit)
	mux.HandleFunc("GET /api/v1/audit/verify", f.auditVerify)
	mux.HandleFunc("GET /api/v1/audit/export", f.auditExport)
	mux.HandleFunc("GET /api/v1/jobs", f.list)
	mux.HandleFunc("GET /api/v1/jobs/{id}", f.get)
	mux.HandleFunc("GET /api/v1/jobs/{id}/events", f.eventsHandler)
	mux.HandleFunc("GET /api/v1/jobs/{id}/artifacts/{name}", f.artifact)
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		nodes := f.nodes
		if nodes == nil {
			nodes = []wire.NodeInfo{}
		}
		writeJSONStatus(w, 200, wire.NodeList{Nodes: nodes})
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		fail := f.fail
		f.mu.Unlock()
		if fail != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(fail.status)
			io.WriteString(w, fail.body)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeScheduler) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSONStatus(w, status, map[string]any{"error": msg, "code": code})
}

// addJob stores a job with its events and artifact files, computing each
// artifact's sha256 unless the job already lists one.
func (f *fakeScheduler) addJob(j *jobtype.Job, events []jobtype.Event, files map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, b := range files {
		found := false
		for i := range j.Artifacts {
			if j.Artifacts[i].Path == name {
				found = true
				if j.Artifacts[i].SHA256 == "" {
					j.Artifacts[i].SHA256 = sha256Hex(b)
				}
			}
		}
		if !found {
			j.Artifacts = append(j.Artifacts, jobtype.Artifact{Path: name, Bytes: int64(len(b)), SHA256: sha256Hex(b)})
		}
	}
	for i := range events {
		events[i].ID = fmt.Sprintf("%d-0", i+1)
	}
	f.jobs[j.ID] = j
	f.order = append(f.order, j.ID)
	f.events[j.ID] = events
	f.files[j.ID] = files
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (f *fakeScheduler) submit(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	spec, err := jobspec.Parse(body)
	if err != nil {
		writeJSONStatus(w, 400, map[string]any{"error": "validation failed", "code": "invalid", "fields": err.(*jobspec.ValidationError).Errors})
		return
	}
	if r.URL.Query().Get("dry_run") == "true" {
		writeJSONStatus(w, 200, map[string]any{"dry_run": true, "spec": spec})
		return
	}
	f.mu.Lock()
	id := fmt.Sprintf("j-%d", len(f.order)+1)
	final, steps := f.finalState, f.steps
	f.mu.Unlock()

	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(i int, typ string, data any) jobtype.Event {
		b, _ := json.Marshal(data)
		return jobtype.Event{Time: t0.Add(time.Duration(i) * time.Second), Type: typ, Attempt: 1, Data: b}
	}
	events := []jobtype.Event{
		ev(0, jobtype.EventState, jobtype.StateChange{To: jobtype.StateQueued}),
		ev(0, jobtype.EventState, jobtype.StateChange{From: jobtype.StateQueued, To: jobtype.StateRunning, Node: "host1"}),
		ev(0, jobtype.EventLog, jobtype.LogLine{Stream: "stdout", Line: "loading tiny-char"}),
	}
	for s := 1; s <= steps; s++ {
		events = append(events, ev(s, jobtype.EventProgress, jobtype.Progress{Step: s, TotalSteps: steps, Loss: 3 - 2*float64(s)/float64(steps)}))
		if s == steps/2 {
			// A periodic eval; the final one, after the last step, is lower.
			events = append(events, ev(s, jobtype.EventEval, map[string]any{"event": "eval", "step": s, "eval_loss": 1.75}))
		}
	}
	if final == jobtype.StateSucceeded {
		events = append(events, ev(steps, jobtype.EventEval, map[string]any{"event": "eval", "step": steps, "eval_loss": 1.25}),
			ev(steps, jobtype.EventDone, map[string]any{"event": "done", "metrics": map[string]float64{"eval_loss": 1.25, "train_loss": 1}}))
	}
	sc := jobtype.StateChange{From: jobtype.StateRunning, To: final}
	job := &jobtype.Job{ID: id, Name: spec.Name, State: final, Attempt: 1, Backend: "local", Node: "host1",
		GPUs: []int{}, Progress: jobtype.Progress{Step: steps, TotalSteps: steps, Loss: 1.0},
		Metrics: map[string]float64{"eval_loss": 1.25}, CreatedAt: t0, UpdatedAt: t0, Spec: *spec}
	files := map[string][]byte{}
	if final == jobtype.StateFailed {
		sc.Reason, sc.Error = jobtype.ReasonPermanent, "bad data"
		job.Reason, job.Error = jobtype.ReasonPermanent, "bad data"
	} else {
		files["adapter_model.safetensors"] = []byte("weights")
	}
	events = append(events, ev(steps+1, jobtype.EventState, sc))
	f.addJob(job, events, files)

	first := *job
	first.State, first.Progress, first.Artifacts, first.Reason, first.Error = jobtype.StateQueued, jobtype.Progress{}, nil, "", ""
	writeJSONStatus(w, 201, first)
}

func (f *fakeScheduler) job(w http.ResponseWriter, r *http.Request) *jobtype.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[r.PathValue("id")]
	if !ok {
		apiError(w, 404, "not_found", "job "+r.PathValue("id")+" not found")
		return nil
	}
	return j
}

func (f *fakeScheduler) get(w http.ResponseWriter, r *http.Request) {
	if j := f.job(w, r); j != nil {
		writeJSONStatus(w, 200, j)
	}
}

func (f *fakeScheduler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 {
		limit = 50
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pageSize > 0 && limit > f.pageSize {
		limit = f.pageSize
	}
	start, _ := strconv.Atoi(q.Get("cursor"))
	var page []jobtype.Job
	next := ""
	for i := len(f.order) - 1 - start; i >= 0; i-- { // newest first
		j := f.jobs[f.order[i]]
		if s := q.Get("state"); s != "" && string(j.State) != s {
			continue
		}
		if len(page) == limit {
			next = strconv.Itoa(len(f.order) - 1 - i)
			break
		}
		page = append(page, *j)
	}
	writeJSONStatus(w, 200, map[string]any{"jobs": page, "next_cursor": next})
}

// eventsHandler serves stored events after ?after=, as JSON or, with
// follow=true, as a complete SSE stream (the fake's jobs are already over).
func (f *fakeScheduler) eventsHandler(w http.ResponseWriter, r *http.Request) {
	if f.job(w, r) == nil {
		return
	}
	f.mu.Lock()
	all := f.events[r.PathValue("id")]
	f.mu.Unlock()
	after := 0
	if a := r.URL.Query().Get("after"); a != "" {
		after, _ = strconv.Atoi(strings.TrimSuffix(a, "-0"))
	}
	evs := []jobtype.Event{}
	if after < len(all) {
		evs = all[after:]
	}
	if r.URL.Query().Get("follow") != "true" {
		writeJSONStatus(w, 200, map[string]any{"events": evs})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, b)
	}
}

func (f *fakeScheduler) artifact(w http.ResponseWriter, r *http.Request) {
	if f.job(w, r) == nil {
		return
	}
	f.mu.Lock()
	b, ok := f.files[r.PathValue("id")][r.PathValue("name")]
	f.mu.Unlock()
	if !ok {
		apiError(w, 404, "not_found", "no artifact")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Lathe-SHA256", sha256Hex(b))
	w.Write(b)
}

// route answers POST /api/v1/route with f.explain after checking the spec
// and the what-ifs as the scheduler does (400 invalid with fields).
func (f *fakeScheduler) route(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if _, err := jobspec.Parse(body); err != nil {
		writeJSONStatus(w, 400, map[string]any{"error": "invalid job spec", "code": "invalid", "fields": err.(*jobspec.ValidationError).Errors})
		return
	}
	for _, v := range r.URL.Query()["assume_wait"] {
		if b, d, ok := strings.Cut(v, "="); !ok || b == "" || d == "" {
			writeJSONStatus(w, 400, map[string]any{"error": "invalid what-if", "code": "invalid",
				"fields": []jobspec.FieldError{{Field: "assume_wait", Value: v, Message: "want BACKEND=DURATION"}}})
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSONStatus(w, 200, f.explain)
}

// addRecord appends a ledger record, chained and MACed as ledger.Append
// does.
func (f *fakeScheduler) addRecord(kind, jobID, team, token string, body any) ledger.Record {
	b, err := json.Marshal(body)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := ledger.Record{Seq: int64(len(f.records) + 1), Time: time.Date(2026, 12, 2, 12, 0, len(f.records), 0, time.UTC),
		Kind: kind, JobID: jobID, Team: team, Token: token, ConfigHash: "cfg1", Body: b}
	if n := len(f.records); n > 0 {
		r.Prev = f.records[n-1].MAC
	}
	r.MAC = ledger.ComputeMAC(f.ledgerKey, r)
	r.StreamID = fmt.Sprintf("%d-0", r.Seq)
	f.records = append(f.records, r)
	return r
}

func (f *fakeScheduler) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
	limit := 1000
	if v := q.Get("limit"); v != "" {
		limit, _ = strconv.Atoi(v)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []ledger.Record{}
	for _, rec := range f.records {
		if rec.Seq > after && (q.Get("job") == "" || rec.JobID == q.Get("job")) && len(out) < limit {
			out = append(out, rec)
		}
	}
	writeJSONStatus(w, 200, map[string]any{"records": out})
}

// exportLines writes the fake's records as ledger.Export does.
func (f *fakeScheduler) exportLines(w io.Writer) (head string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	enc := json.NewEncoder(w)
	for _, rec := range f.records {
		enc.Encode(rec)
		head = rec.MAC
	}
	return head, int64(len(f.records))
}

// auditVerify checks the fake's records with ledger.VerifyExport: 200 with
// the report when intact, 409 with it when not.
func (f *fakeScheduler) auditVerify(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	f.exportLines(&buf)
	rep, err := ledger.VerifyExport(&buf, f.ledgerKey, r.URL.Query().Get("head"))
	if err != nil {
		apiError(w, 500, "internal", err.Error())
		return
	}
	status := 200
	if len(rep.Problems) > 0 {
		status = 409
	}
	writeJSONStatus(w, status, rep)
}

func (f *fakeScheduler) auditExport(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Trailer", "X-Lathe-Ledger-Head, X-Lathe-Ledger-Records")
	head, n := f.exportLines(w)
	f.mu.Lock()
	cut := f.cutExport
	f.mu.Unlock()
	if cut {
		return
	}
	w.Header().Set("X-Lathe-Ledger-Head", head)
	w.Header().Set("X-Lathe-Ledger-Records", strconv.FormatInt(n, 10))
}
