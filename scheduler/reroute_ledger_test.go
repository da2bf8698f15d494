package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// rerouteBundle is a scheduler that is not started (no placement loop: the
// test drives every reroute itself, through SetRouting, the config-reload
// path), its HTTP handler, a real redis-server and a real ledger.
type rerouteBundle struct {
	ctx   context.Context
	srv   *redistest.Server
	store *jobstore.Store
	led   *ledger.Ledger
	s     *scheduler.Scheduler
	url   string
	cfgs  [2]routecfg.Config // routeConfig, and one in which no site carries "eu"
}

func rerouteSetup(t *testing.T) rerouteBundle {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	b := rerouteBundle{ctx: context.Background(), srv: srv, store: store, led: ledgertest.New(t, rdb)}
	noEU := strings.Replace(strings.Replace(routeConfig, "dc-frankfurt: [onprem, eu]", "dc-frankfurt: [onprem]", 1),
		"aws-eu-central-1: [cloud, eu]", "aws-eu-central-1: [cloud]", 1)
	for i, text := range []string{routeConfig, noEU} {
		var err error
		if b.cfgs[i], err = routecfg.ParseConfig([]byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	r := apitest.Serve(t, rdb, store, scheduler.Config{Logger: quiet, Ledger: b.led, Routing: b.cfgs[0],
		Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}}, api.Config{})
	b.s, b.url = r.S, r.URL
	return b
}

// submit stores n jobs with residency [eu] (local under routeConfig, held
// under the other) and returns their ids.
func (b rerouteBundle) submit(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		code, body := do(t, "POST", b.url+"/api/v1/jobs", spec(fmt.Sprintf("eu-%d", i), `["eu"]`, ""), nil)
		if code != 201 {
			t.Fatalf("submit %d: %d %s", i, code, body)
		}
		ids = append(ids, jobOf(t, body).ID)
	}
	return ids
}

// checkRoutesMatchLedger: for every job, the last decision or refusal
// record that names it is the one its stored route names (Route.LedgerSeq);
// every such record names a job that exists; the chain verifies. A record
// on a later path whose route was never stored would be the last record of
// its job with the route naming an earlier one. It returns how many
// records were on a reroute path.
func (b rerouteBundle) checkRoutesMatchLedger(t *testing.T) int {
	t.Helper()
	last := map[string]int64{}
	reroutes := 0
	if err := b.led.Range(b.ctx, "", func(r ledger.Record) error {
		if r.Kind != "decision" && r.Kind != "refusal" {
			return nil
		}
		var body struct {
			Path string `json:"path"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			return fmt.Errorf("record %d: body: %w", r.Seq, err)
		}
		switch body.Path {
		case "submit":
		case "retry", "preemption", "spill-over", "config reload", "placement":
			reroutes++
		default:
			t.Errorf("record %d: path %q", r.Seq, body.Path)
		}
		if r.JobID != "" {
			last[r.JobID] = r.Seq
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, seq := range last {
		j, err := b.store.Get(b.ctx, id)
		if err != nil {
			t.Errorf("record %d names job %s: %v", seq, id, err)
			continue
		}
		if j.Route == nil || j.Route.LedgerSeq != seq {
			t.Errorf("job %s: its last decision record is %d, its stored route names %d (held %q): a decision whose route was never stored", id, seq, ledgerSeq(j.Route), j.Held)
		}
	}
	if rep, err := b.led.Verify(b.ctx); err != nil || len(rep.Problems) > 0 {
		t.Errorf("audit verify: %v %+v", err, rep.Problems)
	}
	if code, body := do(t, "GET", b.url+"/api/v1/audit/verify", "", nil); code != 200 {
		t.Errorf("audit verify through the API: %d %s", code, body)
	}
	return reroutes
}

// TestRerouteLedgerUnderOOM: a reroute's decision record and the route it
// decides are stored together or not at all. Queued jobs are stored; a
// real redis-server with a small maxmemory under noeviction is filled until
// writes fail; then, round after round, a little room is freed (one
// 512-byte key) and the routing config is reloaded (SetRouting re-decides
// every queued job: a decision under one config, a refusal that holds the
// job under the other), so that the limit is crossed between reroutes.
// Afterwards each job's last decision or refusal record is the one its
// stored route names, and the chain verifies.
func TestRerouteLedgerUnderOOM(t *testing.T) {
	b := rerouteSetup(t)
	ctx, rdb := b.ctx, b.srv.Client()
	b.submit(t, 4)
	used, err := usedMemory(ctx, rdb.Info(ctx, "memory").Val())
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+256<<10, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
	filler := strings.Repeat("x", 512)
	n := 0
	for ; ; n++ {
		err := rdb.Set(ctx, fmt.Sprintf("fill:%d", n), filler, 0).Err()
		if err != nil {
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatal(err)
			}
			break
		}
		if n > 1_000_000 {
			t.Fatal("Redis never refused a write")
		}
	}
	// What filled it may have overshot the limit (buffers, the script
	// cache): come back to just under it, then free one key a round.
	for max := used + 256<<10; n > 0; {
		u, err := usedMemory(ctx, rdb.Info(ctx, "memory").Val())
		if err != nil {
			t.Fatal(err)
		}
		if u < max {
			break
		}
		n--
		if err := rdb.Del(ctx, fmt.Sprintf("fill:%d", n)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before, _, err := b.led.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	failed, ok := 0, 0
	// Until some dozens of reroutes were recorded with the limit in the way
	// (Redis counts a little more than INFO shows: it takes a while).
	for round := 0; round < 3000 && n > 0; round++ {
		if h, _, err := b.led.Head(ctx); err != nil {
			t.Fatal(err)
		} else if h-before >= 40 && failed > 0 {
			break
		}
		n--
		if err := rdb.Del(ctx, fmt.Sprintf("fill:%d", n)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.s.SetRouting(ctx, b.cfgs[round%2]); err != nil {
			if !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("round %d: a reload that failed for another reason than Redis's memory limit: %v", round, err)
			}
			failed++
		} else {
			ok++
		}
	}
	after, _, err := b.led.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if failed == 0 || after == before {
		t.Fatalf("the limit was not crossed during reroutes (%d reloads failed, %d whole, ledger %d → %d): the test shows nothing", failed, ok, before, after)
	}
	t.Logf("%d reloads cut short by maxmemory, %d whole; ledger %d → %d", failed, ok, before, after)
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if b.checkRoutesMatchLedger(t) == 0 {
		t.Fatal("no reroute was recorded")
	}
}

// TestRerouteConcurrentAppenders: config reloads racing each other,
// submits (whose records the create script appends) and refused submits
// (plain appends) never fork the chain, and each job's stored route names
// its last decision record.
func TestRerouteConcurrentAppenders(t *testing.T) {
	b := rerouteSetup(t)
	b.submit(t, 3)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				if err := b.s.SetRouting(b.ctx, b.cfgs[(g+i)%2]); err != nil {
					errs <- fmt.Errorf("reload: %w", err)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 6 {
			// [eu] is accepted or refused by the config in force; no
			// site carries both us and onprem: refused, recorded.
			residency := `["eu"]`
			if i%2 == 1 {
				residency = `["us", "onprem"]`
			}
			if code, body := do(t, "POST", b.url+"/api/v1/jobs", spec(fmt.Sprintf("c%d", i), residency, ""), nil); code != 201 && code != 422 {
				errs <- fmt.Errorf("submit %d: %d %s", i, code, body)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var seqs []int64
	if err := b.led.Range(b.ctx, "", func(r ledger.Record) error { seqs = append(seqs, r.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("record %d of the stream has seq %d: the chain forked or has a gap", i+1, seq)
		}
	}
	if b.checkRoutesMatchLedger(t) == 0 {
		t.Fatal("no reroute was recorded")
	}
}

func ledgerSeq(ri *jobtype.RouteInfo) int64 {
	if ri == nil {
		return 0
	}
	return ri.LedgerSeq
}

// TestRerouteUnderChangedConfig: a queued job whose route was decided under
// another routing config than the one in force is decided again before it
// is placed (path "config reload"), even when no reload re-checked it: a
// scheduler that starts with a changed config file, or a reload cut short
// (Redis at its memory limit, a crash) before it reached every job. Here
// jobs stored under routeConfig meet a started scheduler whose config has
// no site carrying "eu": each is held, its route names the refusal, and
// nothing else is recorded for it.
func TestRerouteUnderChangedConfig(t *testing.T) {
	b := rerouteSetup(t)
	ids := b.submit(t, 2)
	s2 := scheduler.New(b.srv.Client(), b.store, scheduler.Config{Logger: quiet, PlaceInterval: 30 * time.Millisecond, Ledger: b.led, Routing: b.cfgs[1], Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}})
	if err := s2.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Stop(context.Background()) })
	for _, id := range ids {
		j := waitfor.Value(t, 15*time.Second, "job "+id+", decided under another config, decided again under the one in force", func() *jobtype.Job {
			j, err := b.store.Get(b.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return j
		}, func(j *jobtype.Job) bool { return j.Held != "" })
		if !strings.Contains(j.Held, "config reload") || j.Route == nil || j.Route.Backend != "local" {
			t.Fatalf("job %s held %q with route %+v", id, j.Held, j.Route)
		}
	}
	// Held under this config, they are not decided again round after round:
	// wait for a placement round that began after they were all held.
	head, _, err := b.led.Head(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	waitfor.True(t, 15*time.Second, "a placement round after the jobs were held", func() bool {
		w, _ := b.store.WaitOf(b.ctx, ids[0])
		return w != nil && w.At.After(held)
	})
	if err := s2.Stop(b.ctx); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := b.led.Head(b.ctx); h != head {
		t.Errorf("ledger head moved from %d to %d while the held jobs waited", head, h)
	}
	if head != int64(2*len(ids)) {
		t.Errorf("ledger head %d: want a decision and a refusal per job (%d)", head, 2*len(ids))
	}
	b.checkRoutesMatchLedger(t)
}
