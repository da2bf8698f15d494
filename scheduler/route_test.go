package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/ledger/ledgertest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Routing paths against a real redis-server, the real scheduler and the
// real ledger (no worker: nothing needs to run for a routing decision).

const routeConfig = `
sites:
  dc-frankfurt: [onprem, eu]
  aws-eu-central-1: [cloud, eu]
  aws-us-east-1: [cloud, us]
redis_site: dc-frankfurt
backends:
  local:
    kind: local
    site: dc-frankfurt
    checkpoint_uri: file:///shared/ckpt
    price: {usd_per_gpu_hour: 1.10}
  aws-eu:
    kind: aws
    site: aws-eu-central-1
    region: eu-central-1
    checkpoint_uri: s3://lathe-eu-ckpt/
    instance_types:
      g6e.xlarge: {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}
datasets:
  buckets: {lathe-eu-ckpt: aws-eu-central-1, lathe-us-data: aws-us-east-1}
`

type routeBundle struct {
	ctx   context.Context
	store *jobstore.Store
	led   *ledger.Ledger
	s     *scheduler.Scheduler
	url   string
	out   string
}

func routeSetup(t *testing.T, cfgText string) routeBundle {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	cfg, err := routecfg.ParseConfig([]byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	led := ledgertest.New(t, rdb)
	out := t.TempDir()
	r := apitest.Start(t, rdb, store, scheduler.Config{Logger: quiet, PlaceInterval: 30 * time.Millisecond, Routing: cfg, Ledger: led, Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(out)}}, api.Config{})
	return routeBundle{ctx: context.Background(), store: store, led: led, s: r.S, url: r.URL, out: out}
}

func (b routeBundle) records(t *testing.T, job string) []ledger.Record {
	t.Helper()
	var out []ledger.Record
	if err := b.led.Range(b.ctx, job, func(r ledger.Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func (b routeBundle) waitRoute(t *testing.T, id, what string, cond func(*jobtype.Job) bool) *jobtype.Job {
	t.Helper()
	return waitfor.Value(t, 20*time.Second, "job "+id+": "+what, storedJob(b.ctx, b.store, id), func(j *jobtype.Job) bool { return j != nil && cond(j) })
}

func spec(name, residency, extra string) string {
	return fmt.Sprintf(`{"name":%q,"base_model":"tiny-char","dataset":"file:///d.jsonl","residency":%s%s}`, name, residency, extra)
}

// TestSubmitRouting: a job no site may hold is refused (422, reasons, a
// ledger refusal record, nothing stored); an accepted one carries its
// decision and a ledger record under its id with the config hash.
func TestSubmitRouting(t *testing.T) {
	b := routeSetup(t, routeConfig)
	code, body := do(t, "POST", b.url+"/api/v1/jobs", spec("us", `["us"]`, ""), nil)
	if code != 422 || !strings.Contains(string(body), "refused") {
		t.Fatalf("[us] job: %d %s", code, body)
	}
	if keys, _ := b.store.IDsInState(b.ctx, jobtype.StateQueued, 10); len(keys) != 0 {
		t.Fatalf("a refused job was stored: %v", keys)
	}
	recs := b.records(t, "")
	if len(recs) != 1 || recs[0].Kind != "refusal" || recs[0].Token != "anonymous" || recs[0].ConfigHash == "" {
		t.Fatalf("ledger after a refusal: %+v", recs)
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs", spec("eu", `["eu"]`, ""), nil)
	if code != 201 {
		t.Fatalf("[eu] job: %d %s", code, body)
	}
	j := jobOf(t, body)
	if j.Route == nil || j.Route.Backend != "local" || j.Route.Path != "submit" || j.Route.LedgerSeq != 2 {
		t.Fatalf("route of the [eu] job: %+v", j.Route)
	}
	recs = b.records(t, j.ID)
	var d routing.Decision
	if len(recs) != 1 || recs[0].Kind != "decision" {
		t.Fatalf("ledger of %s: %+v", j.ID, recs)
	}
	var body2 struct{ Decision routing.Decision }
	if err := json.Unmarshal(recs[0].Body, &body2); err != nil {
		t.Fatal(err)
	}
	d = body2.Decision
	if d.Backend != "local" || len(d.Candidates) != 2 {
		t.Fatalf("recorded decision: %+v", d)
	}
	// The explain endpoint decides the same without storing anything.
	code, body = do(t, "POST", b.url+"/api/v1/route?assume_wait=local=10h", spec("eu", `["eu"]`, `,"max_wait":"1h"`), nil)
	var ex wire.Explanation
	_ = json.Unmarshal(body, &ex)
	if code != 200 || ex.Backend != "aws-eu" {
		t.Fatalf("explain [eu] with local wait 10h and max_wait 1h: %d %s", code, body)
	}
	if n := len(b.records(t, "")); n != 2 {
		t.Fatalf("explain recorded something: %d records", n)
	}
}

// TestRetryAndPreemptionAreRerouted: a later attempt (a retry, a
// preemption) is decided again before placement, and recorded.
func TestRetryAndPreemptionAreRerouted(t *testing.T) {
	b := routeSetup(t, routeConfig)
	code, body := do(t, "POST", b.url+"/api/v1/jobs", spec("r", `["eu"]`, ""), nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	id := jobOf(t, body).ID
	// Drive the job as a worker would: a node, a dispatch, a claim, a failure.
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n1", Incarnation: "i", Backend: "local", Slots: 1}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	b.waitRoute(t, id, "dispatched", func(j *jobtype.Job) bool { return j.State == jobtype.StateDispatched })
	if out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	if err := b.store.Finish(b.ctx, id, 1, jobstore.Ending{State: jobtype.StateFailed, Reason: jobtype.ReasonExit, Error: "x"}); err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, "POST", b.url+"/api/v1/jobs/"+id+"/retry", "", nil); code != 202 {
		t.Fatalf("retry: %d %s", code, body)
	}
	j := b.waitRoute(t, id, "rerouted for attempt 2", func(j *jobtype.Job) bool { return j.Route != nil && j.Route.Attempt == 2 })
	if j.Route.Path != "retry" {
		t.Fatalf("attempt 2 route: %+v", j.Route)
	}
	// Attempt 2 runs and is preempted: attempt 3 is decided again.
	b.waitRoute(t, id, "dispatched again", func(j *jobtype.Job) bool { return j.State == jobtype.StateDispatched && j.Attempt == 2 })
	if out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: id, Attempt: 2, Node: "n1", Incarnation: "i", Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim 2: %v %v", out, err)
	}
	if err := b.store.Preempted(b.ctx, id, 2, "j-urgent"); err != nil {
		t.Fatal(err)
	}
	j = b.waitRoute(t, id, "rerouted after the preemption", func(j *jobtype.Job) bool { return j.Route != nil && j.Route.Attempt == 3 })
	if j.Route.Path != "preemption" {
		t.Fatalf("attempt 3 route: %+v", j.Route)
	}
	paths := []string{}
	for _, r := range b.records(t, id) {
		var lb struct{ Path string }
		_ = json.Unmarshal(r.Body, &lb)
		paths = append(paths, lb.Path)
	}
	if strings.Join(paths, ",") != "submit,retry,preemption" {
		t.Fatalf("ledger paths of the job: %v", paths)
	}
}

// TestSpillOver: a job decided local (no wait) whose wait then grows past
// its max_wait is decided again by the placer (path "spill-over") and
// bursts to the cloud backend its tags allow; an [onprem] job in the same
// situation is decided again too and stays local, waiting, saying why.
func TestSpillOver(t *testing.T) {
	b := routeSetup(t, routeConfig)
	// One 48 GB GPU of which a foreign process holds 30 GB: routing sees
	// the hardware (a 40 GB job fits it), placement sees 18 GB free (it
	// does not place the job): the job waits locally.
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n1", Incarnation: "i", Backend: "local", Slots: 0,
		GPUs: []jobtype.GPU{{Index: 0, Name: "NVIDIA L40S", MemoryTotalMB: 49152, ForeignUsedMB: 30000, Healthy: true}}}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	big := `,"max_wait":"2s","expected_runtime":"1h","resources":{"gpus":1,"gpu_memory_gb":40}`
	code, body := do(t, "POST", b.url+"/api/v1/jobs", spec("eu", `["eu"]`, big), nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	eu := jobOf(t, body)
	if eu.Route.Backend != "local" || eu.Route.Waiting {
		t.Fatalf("with no work ahead the [eu] job should be local: %+v", eu.Route)
	}
	// Now a day of work lands on the pool (a job holding the GPU).
	hold, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "hold", BaseModel: "tiny-char", Dataset: "file:///d",
		Trainer: "reference", Priority: jobspec.PriorityUrgent, Resources: jobspec.Resources{GPUs: 1}, Residency: []string{"onprem"},
		ExpectedRuntime: jobspec.Duration(24 * time.Hour)}, Route: &jobtype.RouteInfo{Backend: "local", Kind: "local", Attempt: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: hold.ID, Attempt: 1, Node: "n1", Backend: "local", Capacity: 0, GPUs: []int{0}}); err != nil {
		t.Fatal(err)
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs", spec("onprem", `["onprem"]`, big), nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	op := jobOf(t, body)
	e := b.waitRoute(t, eu.ID, "spilled over to aws-eu", func(j *jobtype.Job) bool { return j.Route != nil && j.Route.Path == "spill-over" })
	if e.Route.Backend != "aws-eu" {
		t.Fatalf("[eu] job after spill-over: %+v", e.Route)
	}
	j := b.waitRoute(t, op.ID, "spill-over decision", func(j *jobtype.Job) bool { return j.Route != nil && j.Route.Path == "spill-over" })
	if j.Route.Backend != "local" || !j.Route.Waiting {
		t.Fatalf("[onprem] job after spill-over: %+v", j.Route)
	}
	w := waitfor.Value(t, 10*time.Second, "the job routed to aws-eu waiting on aws-eu",
		func() *jobtype.WaitInfo { w, _ := b.store.WaitOf(b.ctx, e.ID); return w },
		func(w *jobtype.WaitInfo) bool { return w != nil && strings.Contains(w.Reason, "aws-eu") })
	if !strings.Contains(w.Reason, "no AWS worker") {
		t.Fatalf("the job routed to aws-eu waits with %+v", w)
	}
}

// TestConfigReloadHolds: after a reload in which the local site no longer
// carries "eu", a queued [eu] job is held with the reason, never moved;
// reloading the old config releases it.
func TestConfigReloadHolds(t *testing.T) {
	b := routeSetup(t, routeConfig)
	code, body := do(t, "POST", b.url+"/api/v1/jobs", spec("eu", `["eu"]`, ""), nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	id := jobOf(t, body).ID
	noEU := strings.Replace(strings.Replace(routeConfig, "dc-frankfurt: [onprem, eu]", "dc-frankfurt: [onprem]", 1),
		"aws-eu-central-1: [cloud, eu]", "aws-eu-central-1: [cloud]", 1)
	cfg, err := routecfg.ParseConfig([]byte(noEU))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.s.SetRouting(b.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	j, _ := b.store.Get(b.ctx, id)
	if j.Held == "" || !strings.Contains(j.Held, "config reload") || j.Route.Backend != "local" {
		t.Fatalf("after the reload: held %q route %+v", j.Held, j.Route)
	}
	old, _ := routecfg.ParseConfig([]byte(routeConfig))
	if err := b.s.SetRouting(b.ctx, old); err != nil {
		t.Fatal(err)
	}
	if j, _ := b.store.Get(b.ctx, id); j.Held != "" {
		t.Fatalf("still held after the old config came back: %q", j.Held)
	}
}

// TestAuditVerifyAPI: the chain verifies; after a record is deleted in
// Redis by hand, verify answers 409 naming it.
func TestAuditVerifyAPI(t *testing.T) {
	b := routeSetup(t, routeConfig)
	for i := range 3 {
		if code, body := do(t, "POST", b.url+"/api/v1/jobs", spec(fmt.Sprintf("a%d", i), `["eu"]`, ""), nil); code != 201 {
			t.Fatalf("submit: %d %s", code, body)
		}
	}
	if code, body := do(t, "GET", b.url+"/api/v1/audit/verify", "", nil); code != 200 {
		t.Fatalf("verify untouched: %d %s", code, body)
	}
	recs := b.records(t, "")
	if err := b.store.Redis().XDel(b.ctx, "lathe:ledger", recs[1].StreamID).Err(); err != nil {
		t.Fatal(err)
	}
	code, body := do(t, "GET", b.url+"/api/v1/audit/verify", "", nil)
	if code != 409 || !strings.Contains(string(body), "record 2") {
		t.Fatalf("verify after deleting record 2: %d %s", code, body)
	}
	_ = os.Remove
}

// TestBudgetReservedAndSettled: admission reserves the estimated cost
// against the backend's month; when the job ends the leader releases the
// reservation and counts what it ran (GPU-hours × the local price).
func TestBudgetReservedAndSettled(t *testing.T) {
	b := routeSetup(t, routeConfig)
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n1", Incarnation: "i", Backend: "local", Slots: 1,
		GPUs: []jobtype.GPU{{Index: 0, Name: "NVIDIA L40S", MemoryTotalMB: 49152, Healthy: true}}}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	code, body := do(t, "POST", b.url+"/api/v1/jobs", spec("paid", `["eu"]`, `,"expected_runtime":"2h","resources":{"gpus":1}`), nil)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	j := jobOf(t, body)
	if j.Route.Backend != "local" || j.Route.EstCostUSD != 2.2 {
		t.Fatalf("route: %+v", j.Route)
	}
	month := jobstore.Month(time.Now())
	sp, _ := b.store.Spends(b.ctx, month, []string{"backend:local"})
	if sp["backend:local"].ReservedUSD != 2.2 {
		t.Fatalf("reserved at admission: %+v", sp)
	}
	b.waitRoute(t, j.ID, "dispatched", func(j *jobtype.Job) bool { return j.State == jobtype.StateDispatched })
	if out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: "n1", Incarnation: "i", Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	if err := b.store.Finish(b.ctx, j.ID, 1, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	sp = waitfor.Value(t, 20*time.Second, "the reservation settled", func() map[string]jobstore.Spend {
		sp, _ := b.store.Spends(b.ctx, month, []string{"backend:local"})
		return sp
	}, func(sp map[string]jobstore.Spend) bool { return sp["backend:local"].ReservedUSD == 0 })
	got, _ := b.store.Get(b.ctx, j.ID)
	ran := got.FinishedAt.Sub(*got.StartedAt).Hours()
	want := ran * 1.10
	if d := sp["backend:local"].SpentUSD - want; d > 1e-6 || d < -1e-6 || got.CostUSD != sp["backend:local"].SpentUSD {
		t.Fatalf("spent %v, job cost %v; want %v (%.6f h × $1.10)", sp["backend:local"].SpentUSD, got.CostUSD, want, ran)
	}
}

// TestLocalS3Refused: residency may allow an s3 bucket's data on the local
// pool, but staging s3 onto local workers is not built: such a job is refused
// with that reason, not stored to fail later.
func TestLocalS3Refused(t *testing.T) {
	cfg := strings.Replace(routeConfig, "lathe-eu-ckpt: aws-eu-central-1,", "lathe-eu-ckpt: aws-eu-central-1, lathe-fra-data: dc-frankfurt,", 1)
	b := routeSetup(t, cfg)
	code, body := do(t, "POST", b.url+"/api/v1/jobs", `{"name":"s","base_model":"tiny-char","dataset":"s3://lathe-fra-data/train.jsonl","residency":["onprem"]}`, nil)
	if code != 422 || !strings.Contains(string(body), "not built yet") {
		t.Fatalf("s3 data on the local pool: %d %s", code, body)
	}
}
