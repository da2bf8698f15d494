package scheduler_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/ledger/ledgertest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
)

// TestLedgerUnderOOM: a decision record and the job it admits are stored
// together or not at all. A real redis-server with a small maxmemory under
// noeviction is filled until writes fail; then, round after round, a little
// room is freed (one 512-byte key) and a job or a batch is submitted through
// the scheduler's HTTP handler, so that the limit is crossed in the middle
// of admissions. Afterwards every decision record names a job that exists,
// the number of decision records is the number of jobs stored, and audit
// verify calls the chain intact. Submits sent again with their idempotency
// keys add no record either.
func TestLedgerUnderOOM(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	led := ledgertest.New(t, rdb)
	hs := httptest.NewServer(apitest.New(rdb, store, scheduler.Config{Logger: quiet, Ledger: led,
		Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}}, api.Config{}).API.Handler())
	t.Cleanup(hs.Close)

	if code, body := do(t, "POST", hs.URL+"/api/v1/jobs", goodSpec, nil); code != 201 {
		t.Fatalf("submit before the limit: %d %s", code, body)
	}
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
	var accepted, refused int
	var keys []string
	for round := 0; round < 120 && n > 0; round++ {
		n--
		if err := rdb.Del(ctx, fmt.Sprintf("fill:%d", n)).Err(); err != nil {
			t.Fatal(err)
		}
		k := fmt.Sprintf("round-%d", round)
		keys = append(keys, k)
		var code int
		var body []byte
		if round%3 == 0 {
			batch := `{"jobs":[` + goodSpec + `,` + strings.Replace(goodSpec, `"ok"`, `"ok2"`, 1) + `]}`
			code, body = do(t, "POST", hs.URL+"/api/v1/jobs/batch", batch, map[string]string{"Idempotency-Key": k})
		} else {
			code, body = do(t, "POST", hs.URL+"/api/v1/jobs", goodSpec, map[string]string{"Idempotency-Key": k})
		}
		switch code {
		case 201:
			accepted++
		case 503:
			if !strings.Contains(string(body), "out of memory") {
				t.Fatalf("round %d: 503 that does not say Redis is out of memory: %s", round, body)
			}
			refused++
		default:
			t.Fatalf("round %d: %d %s", round, code, body)
		}
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("the limit was not crossed during admissions (%d accepted, %d refused): the test shows nothing", accepted, refused)
	}
	t.Logf("%d submits accepted, %d refused at maxmemory", accepted, refused)
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// The same requests again: each key's job (if stored) is answered, no
	// new decision is recorded for a job that is not stored.
	for i, k := range keys {
		path, body := "/api/v1/jobs", goodSpec
		if i%3 == 0 {
			path, body = "/api/v1/jobs/batch", `{"jobs":[`+goodSpec+`,`+strings.Replace(goodSpec, `"ok"`, `"ok2"`, 1)+`]}`
		}
		if code, b := do(t, "POST", hs.URL+path, body, map[string]string{"Idempotency-Key": k}); code != 200 && code != 201 {
			t.Fatalf("again with key %s: %d %s", k, code, b)
		}
	}

	decisions := 0
	if err := led.Range(ctx, "", func(r ledger.Record) error {
		if r.Kind != "decision" {
			return nil
		}
		decisions++
		if code, body := do(t, "GET", hs.URL+"/api/v1/jobs/"+r.JobID, "", nil); code != 200 {
			t.Errorf("decision record %d names job %q: GET answers %d %s", r.Seq, r.JobID, code, body)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stored, err := rdb.ZCard(ctx, "lathe:jobs").Result()
	if err != nil {
		t.Fatal(err)
	}
	if int64(decisions) != stored {
		t.Errorf("%d decision records for %d stored jobs", decisions, stored)
	}
	if code, body := do(t, "GET", hs.URL+"/api/v1/audit/verify", "", nil); code != 200 {
		t.Errorf("audit verify: %d %s", code, body)
	}
}

// usedMemory reads used_memory from an INFO memory answer.
func usedMemory(_ context.Context, info string) (int64, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}
