package scheduler_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// API and placer tests against a real redis-server; no worker runs, so the
// tests drive the store the way a worker would where they need to.

type bundle struct {
	ctx   context.Context
	srv   *redistest.Server
	rdb   *redis.Client
	store *jobstore.Store
	s     *scheduler.Scheduler
	url   string
}

func setup(t *testing.T, cfg scheduler.Config, acs ...api.Config) bundle {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	cfg.Logger = quiet
	if cfg.Defaults.OutputURI == "" {
		cfg.Defaults.OutputURI = "file://" + t.TempDir()
	}
	r := apitest.Serve(t, rdb, store, cfg, apiConfig(acs))
	return bundle{ctx: context.Background(), srv: srv, rdb: rdb, store: store, s: r.S, url: r.URL}
}

// apiConfig is a test helper's optional API config (the zero one when
// none is given).
func apiConfig(acs []api.Config) api.Config {
	if len(acs) == 0 {
		return api.Config{}
	}
	return acs[0]
}

const goodSpec = `{"name":"ok","base_model":"tiny-char","dataset":"file:///data/train.jsonl"}`

// storedJob returns a getter of job id for waitfor.Value: the job as the
// store has it, nil while Get fails.
func storedJob(ctx context.Context, store *jobstore.Store, id string) func() *jobtype.Job {
	return func() *jobtype.Job {
		j, err := store.Get(ctx, id)
		if err != nil {
			return nil
		}
		return j
	}
}

// do sends one request: a body goes as JSON unless hdr sets Content-Type
// ("" sends none), and hdr's Host is the request's Host.
func do(t *testing.T, method, url, body string, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func jobOf(t *testing.T, b []byte) jobtype.Job {
	t.Helper()
	var j jobtype.Job
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return j
}

func TestSubmitGetIdempotency(t *testing.T) {
	b := setup(t, scheduler.Config{})
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, map[string]string{"Idempotency-Key": "abc"})
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	j := jobOf(t, body)
	if j.State != jobtype.StateQueued || j.Attempt != 1 || len(j.Spec.Residency) != 1 || j.Spec.Residency[0] != "onprem" {
		t.Fatalf("job %+v: want queued, attempt 1, default residency [onprem]", j)
	}
	// Accepted means stored: read it straight from Redis.
	if n, _ := b.rdb.Exists(b.ctx, "lathe:job:"+j.ID).Result(); n != 1 {
		t.Fatal("the accepted job is not in Redis")
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, map[string]string{"Idempotency-Key": "abc"})
	if code != 200 || jobOf(t, body).ID != j.ID {
		t.Fatalf("same key: %d %s", code, body)
	}
	code, body = do(t, "GET", b.url+"/api/v1/jobs/"+j.ID, "", nil)
	if code != 200 || jobOf(t, body).Name != "ok" {
		t.Fatalf("get: %d %s", code, body)
	}
	for _, id := range []string{"j-00000000000000zz", "nope", "..%2f..%2fetc"} {
		if code, _ := do(t, "GET", b.url+"/api/v1/jobs/"+id, "", nil); code != 404 {
			t.Fatalf("get %s: %d", id, code)
		}
	}
}

// requireFieldErrors fails t unless the API error in body names each field.
func requireFieldErrors(t *testing.T, body []byte, fields []string) {
	t.Helper()
	var ae struct{ Fields []jobspec.FieldError }
	_ = json.Unmarshal(body, &ae)
	for _, f := range fields {
		found := false
		for _, fe := range ae.Fields {
			found = found || fe.Field == f
		}
		if !found {
			t.Errorf("no error for field %s in %s", f, body)
		}
	}
}

func TestSubmitRefusals(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{MaxBodyBytes: 4096})
	cases := []struct {
		name, body string
		code       int
		fields     []string
	}{
		{"bad fields", `{"name":"Bad Name","base_model":"tiny-char","dataset":"http://x","lora":{"rank":-4},"priority":"sometimes","colour":1}`, 400,
			[]string{"name", "dataset", "lora.rank", "priority", "colour"}},
		{"s3 bucket not listed", `{"name":"s","base_model":"tiny-char","dataset":"s3://bucket/key.jsonl"}`, 422, nil},
		{"unknown trainer", `{"name":"t","base_model":"tiny-char","dataset":"file:///d","trainer":"axolotl"}`, 400, []string{"trainer"}},
		{"not json", `{{{`, 400, nil},
		{"too large", `{"name":"` + strings.Repeat("a", 5000) + `"}`, 413, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(t, "POST", b.url+"/api/v1/jobs", c.body, nil)
			if code != c.code {
				t.Fatalf("%d, want %d: %s", code, c.code, body)
			}
			requireFieldErrors(t, body, c.fields)
		})
	}
	if n, _ := b.rdb.Keys(b.ctx, "lathe:*").Result(); len(n) != 0 {
		t.Fatalf("refused submits stored keys: %v", n)
	}
	code, body := do(t, "POST", b.url+"/api/v1/jobs?dry_run=true", goodSpec, nil)
	if code != 200 || !strings.Contains(string(body), `"dry_run":true`) {
		t.Fatalf("dry run: %d %s", code, body)
	}
	if n, _ := b.rdb.Keys(b.ctx, "lathe:*").Result(); len(n) != 0 {
		t.Fatalf("dry run stored keys: %v", n)
	}
}

func TestListCancelEvents(t *testing.T) {
	b := setup(t, scheduler.Config{})
	var ids []string
	for i := 0; i < 3; i++ {
		_, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, nil)
		ids = append(ids, jobOf(t, body).ID)
	}
	// Cancel a queued job: cancelled at once, and again is fine.
	for i := 0; i < 2; i++ {
		code, body := do(t, "POST", b.url+"/api/v1/jobs/"+ids[0]+"/cancel", "", nil)
		if code != 202 || jobOf(t, body).State != jobtype.StateCancelled {
			t.Fatalf("cancel queued #%d: %d %s", i, code, body)
		}
	}
	// Drive ids[1] to succeeded as a worker would; cancel is then a conflict.
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: ids[1], Attempt: 1, Node: "n1", Backend: "local", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	if out, _ := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: ids[1], Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); out != jobstore.Claimed {
		t.Fatal("claim")
	}
	if err := b.store.Finish(b.ctx, ids[1], 1, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	code, body := do(t, "POST", b.url+"/api/v1/jobs/"+ids[1]+"/cancel", "", nil)
	if code != 409 || !strings.Contains(string(body), `"state":"succeeded"`) {
		t.Fatalf("cancel succeeded job: %d %s", code, body)
	}
	// Retry: a succeeded job cannot be retried; a cancelled one is queued
	// again as the next attempt, its cancel request cleared.
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs/"+ids[1]+"/retry", "", nil); code != 409 {
		t.Fatalf("retry succeeded job: %d", code)
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs/"+ids[0]+"/retry", "", nil)
	if rj := jobOf(t, body); code != 202 || rj.State != jobtype.StateQueued || rj.Attempt != 2 || rj.CancelRequested {
		t.Fatalf("retry cancelled job: %d %s", code, body)
	}
	if ids2, _ := b.store.Pending(b.ctx, 10); len(ids2) != 2 {
		t.Fatalf("pending after retry: %v", ids2)
	}
	if _, err := b.store.Cancel(b.ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	// List by state, and pagination.
	code, body = do(t, "GET", b.url+"/api/v1/jobs?state=cancelled", "", nil)
	var l struct {
		Jobs []jobtype.Job
		Next string `json:"next_cursor"`
	}
	_ = json.Unmarshal(body, &l)
	if code != 200 || len(l.Jobs) != 1 || l.Jobs[0].ID != ids[0] {
		t.Fatalf("list cancelled: %d %s", code, body)
	}
	_, body = do(t, "GET", b.url+"/api/v1/jobs?limit=2", "", nil)
	_ = json.Unmarshal(body, &l)
	if len(l.Jobs) != 2 || l.Jobs[0].ID != ids[2] || l.Next == "" {
		t.Fatalf("page 1: %s", body)
	}
	_, body = do(t, "GET", b.url+"/api/v1/jobs?limit=2&cursor="+l.Next, "", nil)
	_ = json.Unmarshal(body, &l)
	if len(l.Jobs) != 1 || l.Jobs[0].ID != ids[0] || l.Next != "" {
		t.Fatalf("page 2: %s", body)
	}
	if code, _ := do(t, "GET", b.url+"/api/v1/jobs?state=sleeping", "", nil); code != 400 {
		t.Fatalf("bad state: %d", code)
	}
	// Events of a finished job: plain list, and a follow that ends by itself.
	code, body = do(t, "GET", b.url+"/api/v1/jobs/"+ids[1]+"/events", "", nil)
	if code != 200 || strings.Count(string(body), `"type":"state"`) != 4 {
		t.Fatalf("events: %d %s", code, body)
	}
	resp, err := http.Get(b.url + "/api/v1/jobs/" + ids[1] + "/events?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	resp.Body.Close()
	if n != 4 {
		t.Fatalf("followed %d events of a finished job, want 4 and the stream closed", n)
	}
	// Artifact names that could escape the job's folder are refused.
	for _, name := range []string{"..%2fetc", "a%00b", "%2e%2e"} {
		if code, _ := do(t, "GET", b.url+"/api/v1/jobs/"+ids[1]+"/artifacts/"+name, "", nil); code != 400 && code != 404 {
			t.Fatalf("artifact %q: %d", name, code)
		}
	}
	if code, _ := do(t, "GET", b.url+"/api/v1/jobs/"+ids[1]+"/artifacts/missing.bin", "", nil); code != 404 {
		t.Fatalf("missing artifact: %d", code)
	}
}

// TestPlacementAndRepair: the placer dispatches to a live node in priority
// order, enqueues with the attempt's TaskID, MaxRetry 0 and an explicit
// timeout; a task lost after dispatch is enqueued again by the repair loop.
func TestPlacementAndRepair(t *testing.T) {
	b := setup(t, scheduler.Config{PlaceInterval: 20 * time.Millisecond, RepairAfter: 100 * time.Millisecond}, api.Config{Listen: "127.0.0.1:0"})
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n1", Incarnation: "i", Backend: "local", Slots: 1}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	_, body := do(t, "POST", b.url+"/api/v1/jobs", `{"name":"batch","base_model":"tiny-char","dataset":"file:///d","priority":"batch"}`, nil)
	batch := jobOf(t, body)
	_, body = do(t, "POST", b.url+"/api/v1/jobs", `{"name":"urgent","base_model":"tiny-char","dataset":"file:///d","priority":"urgent","max_runtime":"2h"}`, nil)
	urgent := jobOf(t, body)
	if err := b.s.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	defer b.s.Stop(b.ctx)
	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	var info *asynq.TaskInfo
	waitfor.NoError(t, 20*time.Second, "the urgent job enqueued", func() error {
		var err error
		info, err = insp.GetTaskInfo("node:n1", jobtype.TaskID(urgent.ID, 1))
		return err
	})
	if info.MaxRetry != 0 || info.Timeout != 2*time.Hour+10*time.Second+time.Minute {
		t.Fatalf("task MaxRetry %d Timeout %s", info.MaxRetry, info.Timeout)
	}
	// One slot: the batch job waits.
	if j, _ := b.store.Get(b.ctx, batch.ID); j.State != jobtype.StateQueued {
		t.Fatalf("batch job %s with the only slot taken", j.State)
	}
	// Lose the task by hand; the repair loop puts it back.
	if err := insp.DeleteTask("node:n1", info.ID); err != nil {
		t.Fatal(err)
	}
	waitfor.NoError(t, 20*time.Second, "repair enqueuing the lost task again", func() error {
		_, err := insp.GetTaskInfo("node:n1", info.ID)
		return err
	})
}

// TestRedisDown503: with Redis killed the API answers 503 within 2 s.
func TestRedisDown503(t *testing.T) {
	b := setup(t, scheduler.Config{})
	// A client with the daemon's fail-fast settings.
	rdb := redis.NewClient(&redis.Options{Addr: b.srv.Addr, DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: 1, ContextTimeoutEnabled: true})
	hs := httptest.NewServer(apitest.New(rdb, jobstore.New(rdb, jobstore.Config{}), scheduler.Config{Logger: quiet}, api.Config{}).API.Handler())
	defer hs.Close()
	b.srv.Kill()
	c := &http.Client{Timeout: 2 * time.Second}
	for _, p := range []string{"/healthz", "/api/v1/jobs", "/api/v1/jobs/j-00000000000000zz", "/api/v1/queues"} {
		resp, err := c.Get(hs.URL + p)
		if err != nil {
			t.Fatalf("GET %s: no answer within 2 s: %v", p, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 {
			t.Fatalf("GET %s: %d, want 503", p, resp.StatusCode)
		}
	}
	resp, err := c.Post(hs.URL+"/api/v1/jobs", "application/json", strings.NewReader(goodSpec))
	if err != nil {
		t.Fatalf("POST with Redis down: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("POST with Redis down: %d", resp.StatusCode)
	}
}

// TestTokensRolesTeams: with tokens configured, every call but /healthz
// needs one; viewers read, submitters submit and touch only their team's
// jobs (another team's answer 404), admins touch any; jobs record who
// submitted them for which team.
func TestTokensRolesTeams(t *testing.T) {
	toks := []plane.Token{
		{Name: "view", Secret: "viewer-secret-0123456789", Role: plane.RoleViewer, Team: "a"},
		{Name: "alice", Secret: "alice-secret-0123456789", Role: plane.RoleSubmitter, Team: "a"},
		{Name: "bob", Secret: "bob-secret-0123456789xx", Role: plane.RoleSubmitter, Team: "b"},
		{Name: "root", Secret: "admin-secret-0123456789", Role: plane.RoleAdmin, Team: "ops"},
	}
	if err := plane.ValidateTokens(toks); err != nil {
		t.Fatal(err)
	}
	b := setup(t, scheduler.Config{}, api.Config{Tokens: toks})
	auth := func(secret string) map[string]string { return map[string]string{"Authorization": "Bearer " + secret} }
	if code, _ := do(t, "GET", b.url+"/healthz", "", nil); code != 200 {
		t.Fatalf("healthz needs no token: %d", code)
	}
	for _, h := range []map[string]string{nil, auth("wrong-secret-0123456789"), {"Authorization": "alice-secret-0123456789"}} {
		if code, _ := do(t, "GET", b.url+"/api/v1/jobs", "", h); code != 401 {
			t.Fatalf("list with %v: %d, want 401", h, code)
		}
	}
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, auth("viewer-secret-0123456789")); code != 403 {
		t.Fatalf("viewer submit: %d, want 403", code)
	}
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, map[string]string{"Authorization": "Bearer alice-secret-0123456789", "Idempotency-Key": "k"})
	j := jobOf(t, body)
	if code != 201 || j.Submitter != "alice" || j.Team != "a" {
		t.Fatalf("alice submit: %d submitter %q team %q", code, j.Submitter, j.Team)
	}
	// Bob's same Idempotency-Key is his own: a new job, not alice's.
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, map[string]string{"Authorization": "Bearer bob-secret-0123456789xx", "Idempotency-Key": "k"})
	if code != 201 || jobOf(t, body).ID == j.ID {
		t.Fatalf("bob's key returned alice's job: %d", code)
	}
	if code, _ := do(t, "GET", b.url+"/api/v1/jobs/"+j.ID, "", auth("viewer-secret-0123456789")); code != 200 {
		t.Fatalf("viewer get: %d", code)
	}
	// Another team's job is one bob cannot see: 404, as for no job.
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs/"+j.ID+"/cancel", "", auth("bob-secret-0123456789xx")); code != 404 {
		t.Fatalf("bob cancels team a's job: %d, want 404", code)
	}
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs/"+j.ID+"/cancel", "", auth("viewer-secret-0123456789")); code != 403 {
		t.Fatalf("viewer cancel: %d, want 403", code)
	}
	if cur, _ := b.store.Get(b.ctx, j.ID); cur.State != jobtype.StateQueued || cur.CancelRequested {
		t.Fatalf("a refused cancel changed the job: %s", cur.State)
	}
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs/"+j.ID+"/cancel", "", auth("alice-secret-0123456789")); code != 202 {
		t.Fatalf("alice cancels her team's job: %d", code)
	}
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs/"+j.ID+"/retry", "", auth("bob-secret-0123456789xx")); code != 404 {
		t.Fatalf("bob retries team a's job: %d, want 404", code)
	}
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs/"+j.ID+"/retry", "", auth("admin-secret-0123456789")); code != 202 {
		t.Fatalf("admin retry: %d", code)
	}
}

func TestValidateTokens(t *testing.T) {
	good := plane.Token{Name: "a", Secret: "0123456789abcdef", Role: plane.RoleViewer, Team: "t"}
	for name, ts := range map[string][]plane.Token{
		"short secret":          {{Name: "a", Secret: "short", Role: plane.RoleViewer, Team: "t"}},
		"bad role":              {{Name: "a", Secret: "0123456789abcdef", Role: "god", Team: "t"}},
		"bad name":              {{Name: "A B", Secret: "0123456789abcdef", Role: plane.RoleViewer, Team: "t"}},
		"no team":               {{Name: "a", Secret: "0123456789abcdef", Role: plane.RoleViewer}},
		"same name":             {good, {Name: "a", Secret: "fedcba9876543210", Role: plane.RoleViewer, Team: "t"}},
		"same secret":           {good, {Name: "b", Secret: good.Secret, Role: plane.RoleViewer, Team: "t"}},
		"all_teams on an admin": {{Name: "a", Secret: "0123456789abcdef", Role: plane.RoleAdmin, Team: "t", AllTeams: true}},
	} {
		if err := plane.ValidateTokens(ts); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

// TestAllowedRoots: file:// datasets and outputs outside the allowed roots
// are refused at submit, naming the field.
func TestAllowedRoots(t *testing.T) {
	roots, _ := pathpolicy.New([]string{"/data"})
	b := setup(t, scheduler.Config{AllowedRoots: roots, Defaults: jobspec.Defaults{OutputURI: "file:///data/out"}})
	if code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, nil); code != 201 {
		t.Fatalf("inside: %d %s", code, body)
	}
	code, body := do(t, "POST", b.url+"/api/v1/jobs", `{"name":"no","base_model":"tiny-char","dataset":"file:///etc/shadow","output":{"uri":"file:///tmp/x"}}`, nil)
	if code != 400 || !strings.Contains(string(body), `"field":"dataset"`) || !strings.Contains(string(body), `"field":"output.uri"`) {
		t.Fatalf("outside: %d %s", code, body)
	}
}

// TestTwoSchedulersOneLeader: of two schedulers on one Redis exactly one
// leads; when it stops, the other takes over; a deposed term's fence is
// refused by the store.
func TestTwoSchedulersOneLeader(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	mk := func(id string) *scheduler.Scheduler {
		s := scheduler.New(rdb, store, scheduler.Config{ID: id, LeaderTTL: 600 * time.Millisecond, PlaceInterval: 50 * time.Millisecond, Logger: quiet})
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		return s
	}
	a, b := mk("a"), mk("b")
	waitfor.True(t, 20*time.Second, "a leader", func() bool { return a.IsLeader() || b.IsLeader() })
	if a.IsLeader() && b.IsLeader() {
		t.Fatal("two leaders")
	}
	leader, other := a, b
	if b.IsLeader() {
		leader, other = b, a
	}
	old, _ := store.Leader(context.Background())
	_ = leader.Stop(context.Background())
	waitfor.True(t, 20*time.Second, "takeover", other.IsLeader)
	cur, _ := store.Leader(context.Background())
	if cur.Token() <= old.Token() {
		t.Fatalf("new term's token %d not above the old %d", cur.Token(), old.Token())
	}
	// A late write of the old term is refused; the current term's goes through.
	j, _, _ := store.Create(context.Background(), jobstore.NewJob{Spec: &jobspec.Spec{Name: "f", Priority: jobspec.PriorityNormal}})
	if err := store.Dispatch(context.Background(), jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1, Fence: old}); !errors.Is(err, jobstore.ErrFenced) {
		t.Fatalf("dispatch with a deposed fence: %v", err)
	}
	if got, _ := store.Get(context.Background(), j.ID); got.State != jobtype.StateQueued {
		t.Fatalf("a fenced dispatch changed the job: %s", got.State)
	}
	if err := store.Dispatch(context.Background(), jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 1, Fence: cur}); err != nil {
		t.Fatalf("dispatch with the current fence: %v", err)
	}
}

// TestRedisOOM503: a Redis at maxmemory under noeviction refuses writes;
// the API answers 503 saying so, not 500.
func TestRedisOOM503(t *testing.T) {
	b := setup(t, scheduler.Config{})
	if err := b.rdb.ConfigSet(b.ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer b.rdb.ConfigSet(b.ctx, "maxmemory", "0")
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, nil)
	if code != 503 || !strings.Contains(string(body), "out of memory") {
		t.Fatalf("submit at maxmemory: %d %s", code, body)
	}
}

// TestHealthzEvictionPolicy: the eviction policy is read on every /healthz,
// not only at start. CONFIG SET maxmemory-policy allkeys-lru on the running
// Redis turns /healthz into a 503 that names the policy; setting it back
// turns it into a 200 again.
func TestHealthzEvictionPolicy(t *testing.T) {
	b := setup(t, scheduler.Config{})
	if code, body := do(t, "GET", b.url+"/healthz", "", nil); code != 200 {
		t.Fatalf("healthz on a noeviction Redis: %d %s", code, body)
	}
	if err := b.rdb.ConfigSet(b.ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	code, body := do(t, "GET", b.url+"/healthz", "", nil)
	if code != 503 || !strings.Contains(string(body), "maxmemory-policy is allkeys-lru; Lathe needs noeviction") ||
		!strings.Contains(string(body), `"code":"eviction_policy"`) {
		t.Fatalf("healthz after CONFIG SET maxmemory-policy allkeys-lru: %d %s", code, body)
	}
	if err := b.rdb.ConfigSet(b.ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, "GET", b.url+"/healthz", "", nil); code != 200 {
		t.Fatalf("healthz after setting noeviction back: %d %s", code, body)
	}
}
