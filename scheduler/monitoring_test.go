package scheduler_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// asynqmon at /monitoring (issue #14), against a real redis-server and the
// real asynqmon handler.

const (
	monViewer    = "viewer-secret-0123456789"
	monSubmitter = "submit-secret-0123456789"
	monAdmin     = "admin-secret-01234567890"
	monQueue     = "node:n1"
)

// monTokens are a viewer, a submitter and an admin.
var monTokens = []plane.Token{
	{Name: "view", Secret: monViewer, Role: plane.RoleViewer, Team: "a"},
	{Name: "sub", Secret: monSubmitter, Role: plane.RoleSubmitter, Team: "a", AllTeams: true},
	{Name: "root", Secret: monAdmin, Role: plane.RoleAdmin, Team: "ops"},
}

func bearer(secret string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + secret}
}

// monTask enqueues one task on monQueue (asynq knows a queue once a task
// was put on it) and returns its id.
func monTask(t *testing.T, b bundle) string {
	t.Helper()
	c := asynq.NewClientFromRedisClient(b.rdb)
	info, err := c.Enqueue(asynq.NewTask(jobtype.TaskType, []byte(`{"job_id":"j-x","attempt":1}`)),
		asynq.Queue(monQueue), asynq.MaxRetry(0), asynq.TaskID("j-x:1"))
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

func queuePaused(t *testing.T, b bundle) bool {
	t.Helper()
	qi, err := asynq.NewInspectorFromRedisClient(b.rdb).GetQueueInfo(monQueue)
	if err != nil {
		t.Fatal(err)
	}
	return qi.Paused
}

// TestMonitoringNeedsTokens: with tokens configured, /monitoring answers
// 401 without one (with a Basic challenge, so a browser asks for it).
func TestMonitoringNeedsTokens(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{Tokens: monTokens})
	monTask(t, b)
	for _, p := range []string{"/monitoring/", "/monitoring/api/queues", "/monitoring/static/js/main.js"} {
		req, _ := http.NewRequest("GET", b.url+p, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Fatalf("GET %s without a token: %d, WWW-Authenticate %q; want 401 and a Basic challenge", p, resp.StatusCode, resp.Header.Values("WWW-Authenticate"))
		}
	}
	for _, h := range []map[string]string{bearer("not-a-token-at-all-xx"), {"Authorization": "Basic !!!"},
		{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("view:wrong-secret-0123456"))}} {
		if code, body := do(t, "GET", b.url+"/monitoring/api/queues", "", h); code != 401 {
			t.Fatalf("GET with %v: %d %s, want 401", h, code, body)
		}
	}
	if code, _ := do(t, "POST", b.url+"/monitoring/api/queues/"+monQueue+":pause", "", nil); code != 401 || queuePaused(t, b) {
		t.Fatalf("pause without a token: %d (paused %v), want 401 and not paused", code, queuePaused(t, b))
	}
}

// TestMonitoringViewerReadsOnly: a viewer (and a submitter) reads asynqmon's
// API and gets its read-only UI; every write is 403 and changes nothing.
func TestMonitoringViewerReadsOnly(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{Tokens: monTokens})
	tid := monTask(t, b)
	code, body := do(t, "GET", b.url+"/monitoring/api/queues", "", bearer(monViewer))
	if code != 200 {
		t.Fatalf("viewer GET queues: %d %s", code, body)
	}
	var qs struct {
		Queues []struct {
			Queue string `json:"queue"`
			Size  int    `json:"size"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(body, &qs); err != nil || len(qs.Queues) != 1 || qs.Queues[0].Queue != monQueue || qs.Queues[0].Size != 1 {
		t.Fatalf("viewer's queues %s (%v): want %s holding 1 task", body, err, monQueue)
	}
	basic := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:"+monViewer))}
	if code, body := do(t, "GET", b.url+"/monitoring/api/queues/"+monQueue+"/pending_tasks", "", basic); code != 200 || !strings.Contains(string(body), tid) {
		t.Fatalf("viewer (Basic) GET pending tasks: %d %s, want 200 naming %s", code, body, tid)
	}
	if code, body := do(t, "GET", b.url+"/monitoring/", "", bearer(monViewer)); code != 200 || !strings.Contains(string(body), `READ_ONLY="true"`) {
		t.Fatalf("viewer's UI: %d, want 200 and asynqmon's read-only page: %.300s", code, body)
	}
	writes := []struct{ method, path string }{
		{"POST", "/monitoring/api/queues/" + monQueue + ":pause"},
		{"DELETE", "/monitoring/api/queues/" + monQueue + "/pending_tasks/" + tid},
		{"POST", "/monitoring/api/queues/" + monQueue + "/pending_tasks/" + tid + ":archive"},
		{"DELETE", "/monitoring/api/queues/" + monQueue},
		{"PUT", "/monitoring/api/queues/" + monQueue},
		{"PATCH", "/monitoring/api/queues/" + monQueue},
	}
	for _, secret := range []string{monViewer, monSubmitter} {
		for _, wr := range writes {
			if code, body := do(t, wr.method, b.url+wr.path, "", bearer(secret)); code != 403 {
				t.Fatalf("%s %s as a %s: %d %s, want 403", wr.method, wr.path, secret[:4], code, body)
			}
		}
	}
	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	if info, err := insp.GetTaskInfo(monQueue, tid); err != nil || info.State != asynq.TaskStatePending || queuePaused(t, b) {
		t.Fatalf("after refused writes: task %v (%v), queue paused %v; want the task pending and the queue running", info, err, queuePaused(t, b))
	}
}

// TestMonitoringAdminWrites: an admin gets the full UI and its writes
// land (asynq's Inspector says the queue is paused); a cross-site page or
// a form body is refused even with the admin's credentials.
func TestMonitoringAdminWrites(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{Tokens: monTokens})
	monTask(t, b)
	if code, body := do(t, "GET", b.url+"/monitoring/", "", bearer(monAdmin)); code != 200 || !strings.Contains(string(body), `READ_ONLY="false"`) {
		t.Fatalf("admin's UI: %d, want 200 and asynqmon's full page: %.300s", code, body)
	}
	pause := b.url + "/monitoring/api/queues/" + monQueue + ":pause"
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"+monAdmin))
	if code, _ := do(t, "POST", pause, "", map[string]string{"Authorization": basic, "Origin": "https://evil.example"}); code != 403 {
		t.Fatalf("cross-site pause with the admin's Basic credentials: %d, want 403", code)
	}
	if code, _ := do(t, "POST", pause, "a=b", map[string]string{"Authorization": basic, "Content-Type": "application/x-www-form-urlencoded"}); code != 415 {
		t.Fatalf("form pause with the admin's Basic credentials: %d, want 415", code)
	}
	if queuePaused(t, b) {
		t.Fatal("a refused pause paused the queue")
	}
	if code, body := do(t, "POST", pause, "", bearer(monAdmin)); code != 204 {
		t.Fatalf("admin pause: %d %s, want 204", code, body)
	}
	if !queuePaused(t, b) {
		t.Fatal("the admin's pause answered 204 but asynq's Inspector says the queue is not paused")
	}
	if code, body := do(t, "POST", b.url+"/monitoring/api/queues/"+monQueue+":resume", "", map[string]string{"Authorization": basic}); code != 204 || queuePaused(t, b) {
		t.Fatalf("admin (Basic) resume: %d %s, paused %v", code, body, queuePaused(t, b))
	}
}

// TestMonitoringOpenOnLoopback: without tokens /monitoring is open to a
// loopback Host, as the API is, and refuses any other name.
func TestMonitoringOpenOnLoopback(t *testing.T) {
	b := setup(t, scheduler.Config{})
	monTask(t, b)
	if code, body := do(t, "GET", b.url+"/monitoring/api/queues", "", nil); code != 200 {
		t.Fatalf("open GET queues: %d %s", code, body)
	}
	pause := b.url + "/monitoring/api/queues/" + monQueue + ":pause"
	if code, _ := do(t, "POST", pause, "", map[string]string{"Host": "lathe.example.com"}); code != 421 || queuePaused(t, b) {
		t.Fatalf("open pause with Host lathe.example.com: %d, paused %v; want 421 and not paused", code, queuePaused(t, b))
	}
	if code, body := do(t, "POST", pause, "", map[string]string{"Host": "localhost"}); code != 204 || !queuePaused(t, b) {
		t.Fatalf("open pause on loopback: %d %s, paused %v; want 204 and paused", code, body, queuePaused(t, b))
	}
}

// TestMonitoringAdminDeleteIsRepaired: an admin deleting or archiving a
// dispatched attempt's task through asynqmon does not strand the job: the
// leader's repair duty enqueues the attempt again (the store, not asynq,
// says what is dispatched). No worker runs; the job stays dispatched.
func TestMonitoringAdminDeleteIsRepaired(t *testing.T) {
	b := setup(t, scheduler.Config{PlaceInterval: 20 * time.Millisecond, RepairAfter: 100 * time.Millisecond}, api.Config{Listen: "127.0.0.1:0", Tokens: monTokens})
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n1", Incarnation: "i", Backend: "local", Slots: 1}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, bearer(monAdmin))
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	job := jobOf(t, body)
	if err := b.s.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	defer b.s.Stop(b.ctx)
	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	tid := jobtype.TaskID(job.ID, 1)
	pending := func() error {
		info, err := insp.GetTaskInfo(monQueue, tid)
		if err == nil && info.State != asynq.TaskStatePending {
			return &stateError{info.State}
		}
		return err
	}
	waitfor.NoError(t, 20*time.Second, "the job's attempt enqueued", pending)
	for _, wr := range []struct{ method, path string }{
		{"DELETE", "/monitoring/api/queues/" + monQueue + "/pending_tasks/" + tid},
		{"POST", "/monitoring/api/queues/" + monQueue + "/pending_tasks/" + tid + ":archive"},
	} {
		if code, body := do(t, wr.method, b.url+wr.path, "", bearer(monAdmin)); code != 204 {
			t.Fatalf("admin %s %s: %d %s", wr.method, wr.path, code, body)
		}
		// 204: asynq's Inspector deleted or archived the task (asynqmon
		// answers 500 otherwise). Repair may already have put it back.
		waitfor.NoError(t, 20*time.Second, "repair enqueuing the attempt again after "+wr.path, pending)
		if j, err := b.store.Get(b.ctx, job.ID); err != nil || j.State != jobtype.StateDispatched || j.Attempt != 1 {
			t.Fatalf("job after repair: %+v (%v), want dispatched attempt 1", j, err)
		}
	}
}

type stateError struct{ s asynq.TaskState }

func (e *stateError) Error() string { return "task is " + e.s.String() }

// TestMonitoringQueueNamesWithColons: asynq queue names hold ':'
// (node:<name>), and asynqmon's per-queue reads take the whole path
// segment as the name. GET /monitoring/api/queues/node:n1 answers the
// queue; GET …/node:n1:pause (the POST action opened with GET) is a 405
// naming POST, and an unknown queue a 404, where asynqmon alone answered
// both with a 500. The queue's task list still answers.
func TestMonitoringQueueNamesWithColons(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{Tokens: monTokens})
	monTask(t, b)
	q := b.url + "/monitoring/api/queues/"
	code, body := do(t, "GET", q+monQueue, "", bearer(monViewer))
	var info struct {
		Current struct {
			Queue string `json:"queue"`
			Size  int    `json:"size"`
		} `json:"current"`
	}
	if code != 200 || json.Unmarshal(body, &info) != nil || info.Current.Queue != monQueue || info.Current.Size != 1 {
		t.Fatalf("GET %s: %d %.300s, want 200 with the queue and its one task", monQueue, code, body)
	}
	for _, c := range []struct {
		path string
		want int
	}{
		{monQueue + ":pause", 405}, {monQueue + ":resume", 405}, {"node:gone", 404},
		{"node:gone:pause", 404}, {"node:gone/pending_tasks", 404},
	} {
		code, body := do(t, "GET", q+c.path, "", bearer(monViewer))
		if code != c.want || !strings.Contains(string(body), `"error"`) {
			t.Errorf("GET %s: %d %.200s, want %d with a JSON error", c.path, code, body, c.want)
		}
	}
	if code, body := do(t, "GET", q+monQueue+"/pending_tasks", "", bearer(monViewer)); code != 200 || !strings.Contains(string(body), "j-x:1") {
		t.Fatalf("GET %s/pending_tasks: %d %.300s, want 200 listing j-x:1", monQueue, code, body)
	}
	if queuePaused(t, b) {
		t.Fatal("a GET of :pause paused the queue")
	}
}

// TestMonitoringWholeTaskIDs: asynqmon's UI script, as /monitoring serves
// it, shows a task id whole: its helper that cut an id at the first '-'
// (every Lathe task id, j-…:N, showed as "j") answers the id itself, and
// nothing else of the script changed. It fails when an asynqmon upgrade
// moves the helper (monitoring.go's uuidPrefixJS).
func TestMonitoringWholeTaskIDs(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{Tokens: monTokens})
	code, page := do(t, "GET", b.url+"/monitoring/", "", bearer(monViewer))
	m := regexp.MustCompile(`/monitoring/static/js/main\.[0-9a-f]+\.chunk\.js`).Find(page)
	if code != 200 || m == nil {
		t.Fatalf("asynqmon's page: %d, script %q", code, m)
	}
	code, js := do(t, "GET", b.url+string(m), "", bearer(monViewer))
	cut := `{var t=e.indexOf("-");return-1===t?e:e.substr(0,t)}`
	if code != 200 || strings.Contains(string(js), cut) {
		t.Fatalf("GET %s: %d; the id-cutting helper is still there: %v", m, code, strings.Contains(string(js), cut))
	}
	if !strings.Contains(string(js), `{return e}function `) {
		t.Fatalf("GET %s: no whole-id helper in the script", m)
	}
	// The rest of the script is asynqmon's, byte for byte.
	orig := strings.Replace(string(js), `{return e}`, cut, 1)
	if len(orig) != len(js)-len(`{return e}`)+len(cut) || !strings.Contains(orig, "Copy full ID to clipboard") {
		t.Fatalf("GET %s: the script changed beyond the helper", m)
	}
	if code, _ := do(t, "GET", b.url+string(m), "", nil); code != 401 {
		t.Fatalf("the script without a token: %d, want 401", code)
	}
}
