package scheduler_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
)

func batchBody(specs ...string) string { return `{"jobs":[` + strings.Join(specs, ",") + `]}` }

// TestSubmitBatch: a batch is stored whole, in order, each job queued and
// pending; the same Idempotency-Key returns the same jobs.
func TestSubmitBatch(t *testing.T) {
	b := setup(t, scheduler.Config{})
	var specs []string
	for i := range 5 {
		specs = append(specs, fmt.Sprintf(`{"name":"sweep-%d","base_model":"tiny-char","dataset":"file:///data/train.jsonl","lora":{"rank":%d}}`, i, 4<<i))
	}
	code, body := do(t, "POST", b.url+"/api/v1/jobs/batch", batchBody(specs...), map[string]string{"Idempotency-Key": "nightly-1"})
	if code != 201 {
		t.Fatalf("batch: %d %s", code, body)
	}
	var resp wire.BatchResponse
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Jobs) != 5 || resp.Existing != 0 {
		t.Fatalf("got %d jobs, %d existing", len(resp.Jobs), resp.Existing)
	}
	seen := map[string]bool{}
	for i, j := range resp.Jobs {
		if j.Name != fmt.Sprintf("sweep-%d", i) || j.Spec.LoRA.Rank != 4<<i || seen[j.ID] {
			t.Fatalf("job %d: %s rank %d (order or ids wrong)", i, j.Name, j.Spec.LoRA.Rank)
		}
		seen[j.ID] = true
		got, err := b.store.Get(b.ctx, j.ID)
		if err != nil || got.State != "queued" || got.Name != j.Name {
			t.Fatalf("job %s in store: %+v %v", j.ID, got, err)
		}
		if _, err := b.rdb.ZScore(b.ctx, "lathe:pending", j.ID).Result(); err != nil {
			t.Fatalf("job %s not pending: %v", j.ID, err)
		}
		evs, _ := b.store.Events(b.ctx, j.ID, "", 10)
		if len(evs) != 1 || evs[0].Type != "state" {
			t.Fatalf("job %s first events: %+v", j.ID, evs)
		}
	}
	code, body = do(t, "POST", b.url+"/api/v1/jobs/batch", batchBody(specs...), map[string]string{"Idempotency-Key": "nightly-1"})
	var again wire.BatchResponse
	_ = json.Unmarshal(body, &again)
	if code != 200 || again.Existing != 5 {
		t.Fatalf("same key again: %d %s", code, body)
	}
	for i := range again.Jobs {
		if again.Jobs[i].ID != resp.Jobs[i].ID {
			t.Fatalf("same key, job %d: %s, was %s", i, again.Jobs[i].ID, resp.Jobs[i].ID)
		}
	}
	if n, _ := b.rdb.ZCard(b.ctx, "lathe:jobs").Result(); n != 5 {
		t.Fatalf("%d jobs stored, want 5", n)
	}
}

// TestSubmitBatchAllOrNothing: one bad spec anywhere in the batch and
// nothing is stored; every bad field is named with its job's index.
func TestSubmitBatchAllOrNothing(t *testing.T) {
	b := setup(t, scheduler.Config{})
	good := `{"name":"ok","base_model":"tiny-char","dataset":"file:///d.jsonl"}`
	cases := []struct {
		name, body string
		fields     []string
	}{
		{"bad fields in two jobs", batchBody(good, `{"name":"x","base_model":"tiny-char","dataset":"file:///d","lora":{"rank":-4},"colour":1}`, good, `{"name":"y","base_model":"tiny-char","dataset":"file:///d","priority":"sometimes"}`),
			[]string{"jobs[1].lora.rank", "jobs[1].colour", "jobs[3].priority"}},
		{"not a spec", batchBody(good, `[1,2]`), []string{"jobs[1]"}},
		{"empty", `{"jobs":[]}`, []string{"jobs"}},
		{"unknown top-level key", `{"jobs":[` + good + `],"extra":1}`, nil},
		{"not json", `{{`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(t, "POST", b.url+"/api/v1/jobs/batch", c.body, nil)
			if code != 400 {
				t.Fatalf("%d, want 400: %s", code, body)
			}
			requireFieldErrors(t, body, c.fields)
		})
	}
	if n, _ := b.rdb.DBSize(b.ctx).Result(); n != 0 {
		keys, _ := b.rdb.Keys(b.ctx, "*").Result()
		t.Fatalf("refused batches stored keys: %v", keys)
	}
	over := make([]string, 1001)
	for i := range over {
		over[i] = good
	}
	if code, body := do(t, "POST", b.url+"/api/v1/jobs/batch", batchBody(over...), nil); code != 400 || !strings.Contains(string(body), "1 to 1000") {
		t.Fatalf("1001 jobs: %d %s", code, body)
	}
}
