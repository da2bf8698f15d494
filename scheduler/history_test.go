package scheduler_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
)

// TestHistorySamples: the leader samples the pool every HistoryEvery into
// a capped Redis list that GET /api/v1/history answers, oldest first
// (real redis-server, the real leader loop): three queued jobs on a node
// whose two GPUs (50 % and 70 % busy, unhealthy, so nothing lands there)
// take no work read pending 3, queued 3, running 0, the oldest wait
// growing, 2 GPUs, none busy, 60 % mean utilisation; a cancel shows as one
// ended job in one sample; the list never holds more than HistoryKeep
// samples; a team's viewer reads it too (Basic); a bad limit is a 400.
func TestHistorySamples(t *testing.T) {
	b, _ := startAPI(t, scheduler.Config{HistoryEvery: 100 * time.Millisecond, HistoryKeep: 8, PlaceInterval: 50 * time.Millisecond},
		api.Config{Tokens: monTokens})
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n1", Incarnation: "i1", Backend: "local", Slots: 0, GPUs: []jobtype.GPU{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", Healthy: false, Unhealthy: "XID 79", UtilizationPct: 50},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA H100 80GB HBM3", Healthy: false, Unhealthy: "XID 79", UtilizationPct: 70},
	}}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, bearer(monSubmitter))
		var j jobtype.Job
		if code != 201 || json.Unmarshal(body, &j) != nil {
			t.Fatalf("submit: %d %s", code, body)
		}
		ids = append(ids, j.ID)
	}
	history := func(auth map[string]string) []jobtype.HistorySample {
		t.Helper()
		code, body := do(t, "GET", b.url+"/api/v1/history", "", auth)
		var h wire.History
		if code != 200 || json.Unmarshal(body, &h) != nil {
			t.Fatalf("history: %d %s", code, body)
		}
		return h.Points
	}
	want := func(p jobtype.HistorySample) bool {
		return p.Pending == 3 && p.Queued == 3 && p.Running == 0 && p.GPUs == 2 && p.GPUsBusy == 0 && p.GPUUtilPct == 60 && p.OldestWaitS > 0
	}
	pts := waitfor.Value(t, 10*time.Second, "two samples of 3 queued jobs", func() []jobtype.HistorySample { return history(bearer(monViewer)) },
		func(ps []jobtype.HistorySample) bool {
			return len(ps) >= 2 && want(ps[len(ps)-1]) && want(ps[len(ps)-2])
		})
	a, z := pts[len(pts)-2], pts[len(pts)-1]
	if !z.At.After(a.At) || z.OldestWaitS <= a.OldestWaitS || a.Ended != 0 || z.Ended != 0 {
		t.Errorf("samples not oldest first with the oldest wait growing and nothing ended: %+v then %+v", a, z)
	}
	if code, body := do(t, "POST", b.url+"/api/v1/jobs/"+ids[0]+"/cancel", "", bearer(monSubmitter)); code != 202 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	// One sample counts the cancelled job; polled well within the 8 × 100 ms a sample is kept.
	var ended int64
	waitfor.True(t, 10*time.Second, "a sample with the cancelled job ended and 2 queued", func() bool {
		ps := history(bearer(monViewer))
		ended = 0
		last := ps[len(ps)-1]
		for _, p := range ps {
			ended += p.Ended
		}
		return ended >= 1 && last.Queued == 2 && last.Pending == 2
	})
	if ended != 1 {
		t.Errorf("the samples count %d ended jobs, want 1 (one cancel)", ended)
	}
	waitfor.True(t, 10*time.Second, "the history at its cap of 8", func() bool {
		n, err := b.store.HistoryLen(b.ctx)
		return err == nil && n == 8
	})
	for range 3 { // three more samples: still 8
		newest := history(bearer(monViewer))[7].At
		waitfor.True(t, 10*time.Second, "another sample", func() bool { ps := history(bearer(monViewer)); return ps[len(ps)-1].At.After(newest) })
		if n, err := b.store.HistoryLen(b.ctx); err != nil || n != 8 {
			t.Fatalf("the history holds %d samples (%v), want 8", n, err)
		}
	}
	basic := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+monViewer))}
	if ps := history(basic); len(ps) != 8 {
		t.Errorf("a team's viewer (Basic) reads %d samples, want 8", len(ps))
	}
	if code, body := do(t, "GET", b.url+"/api/v1/history?limit=0", "", bearer(monViewer)); code != 400 || !strings.Contains(string(body), `"field":"limit"`) {
		t.Errorf("limit=0: %d %s, want 400 naming limit", code, body)
	}
	if code, body := do(t, "GET", b.url+"/api/v1/history?limit=2", "", bearer(monViewer)); code != 200 || strings.Count(string(body), `"at"`) != 2 {
		t.Errorf("limit=2: %d %s, want 2 samples", code, body)
	}
	if code, _ := do(t, "GET", b.url+"/api/v1/history", "", nil); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
}
