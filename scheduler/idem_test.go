package scheduler_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
)

// TestIdempotencyKeyReusedWithAnotherSpec: the same key with another spec
// is a 409 that names the key (as Stripe answers), not the old job with the
// new spec dropped; nothing is stored. The same spec still gets its job.
func TestIdempotencyKeyReusedWithAnotherSpec(t *testing.T) {
	b := setup(t, scheduler.Config{})
	h := map[string]string{"Idempotency-Key": "deploy-42"}
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, h)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	first := jobOf(t, body)
	other := strings.Replace(goodSpec, `"name":"ok"`, `"name":"other"`, 1)
	code, body = do(t, "POST", b.url+"/api/v1/jobs", other, h)
	var ae struct{ Error, Code string }
	_ = json.Unmarshal(body, &ae)
	if code != 409 || ae.Code != "idempotency_conflict" || !strings.Contains(ae.Error, `Idempotency-Key "deploy-42"`) || !strings.Contains(ae.Error, first.ID) {
		t.Fatalf("another spec, same key: %d %s; want 409 idempotency_conflict naming the key and %s", code, body, first.ID)
	}
	if n, _ := b.rdb.ZCard(b.ctx, "lathe:jobs").Result(); n != 1 {
		t.Fatalf("%d jobs stored, want 1", n)
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, h)
	if code != 200 || jobOf(t, body).ID != first.ID {
		t.Fatalf("same spec, same key: %d %s", code, body)
	}

	// A batch sent again with one spec changed: 409, nothing stored.
	specs := []string{goodSpec, other}
	if code, body := do(t, "POST", b.url+"/api/v1/jobs/batch", batchBody(specs...), map[string]string{"Idempotency-Key": "nightly"}); code != 201 {
		t.Fatalf("batch: %d %s", code, body)
	}
	changed := strings.Replace(other, `"name":"other"`, `"name":"changed"`, 1)
	code, body = do(t, "POST", b.url+"/api/v1/jobs/batch", batchBody(goodSpec, changed), map[string]string{"Idempotency-Key": "nightly"})
	_ = json.Unmarshal(body, &ae)
	if code != 409 || ae.Code != "idempotency_conflict" || !strings.Contains(ae.Error, `Idempotency-Key "nightly"`) || !strings.Contains(ae.Error, "jobs[1]") {
		t.Fatalf("batch, one spec changed: %d %s", code, body)
	}
	if n, _ := b.rdb.ZCard(b.ctx, "lathe:jobs").Result(); n != 3 {
		t.Fatalf("%d jobs stored, want 3", n)
	}
}

// TestIdempotencyKeyNamespaces: a single submit's key "K#0" is not item 0
// of a batch sent with key "K".
func TestIdempotencyKeyNamespaces(t *testing.T) {
	b := setup(t, scheduler.Config{})
	code, body := do(t, "POST", b.url+"/api/v1/jobs/batch", batchBody(goodSpec), map[string]string{"Idempotency-Key": "K"})
	var resp wire.BatchResponse
	if err := json.Unmarshal(body, &resp); code != 201 || err != nil || len(resp.Jobs) != 1 {
		t.Fatalf("batch: %d %s", code, body)
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, map[string]string{"Idempotency-Key": "K#0"})
	if code != 201 || jobOf(t, body).ID == resp.Jobs[0].ID {
		t.Fatalf("single submit with key K#0: %d %s; want a new job, not %s of batch K", code, body, resp.Jobs[0].ID)
	}
	// And the other way round.
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, map[string]string{"Idempotency-Key": "L#0"})
	single := jobOf(t, body)
	code, body = do(t, "POST", b.url+"/api/v1/jobs/batch", batchBody(goodSpec), map[string]string{"Idempotency-Key": "L"})
	if err := json.Unmarshal(body, &resp); code != 201 || err != nil || resp.Jobs[0].ID == single.ID {
		t.Fatalf("batch L after single L#0: %d %s", code, body)
	}
}

// TestIdempotencyKeyOfPrunedJob: a job pruned by retention takes its key
// with it: the key then makes a new job (it answered 404 for 24 h).
func TestIdempotencyKeyOfPrunedJob(t *testing.T) {
	b := setup(t, scheduler.Config{})
	h := map[string]string{"Idempotency-Key": "once"}
	code, body := do(t, "POST", b.url+"/api/v1/jobs", goodSpec, h)
	if code != 201 {
		t.Fatalf("submit: %d %s", code, body)
	}
	j := jobOf(t, body)
	if code, body := do(t, "POST", b.url+"/api/v1/jobs/"+j.ID+"/cancel", "", nil); code != 200 && code != 202 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	if n, err := b.store.PruneFinished(b.ctx, 0, j.CreatedAt.Add(1e9), 10); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs", goodSpec, h)
	if code != 201 || jobOf(t, body).ID == j.ID {
		t.Fatalf("the pruned job's key: %d %s; want 201 and a new job", code, body)
	}
}
