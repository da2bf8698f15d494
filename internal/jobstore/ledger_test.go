package jobstore_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
)

// TestCreateLogged: CreateLogged and CreateManyLogged append each stored
// job's records in the script that stores it, racing plain appenders and
// each other without forking the chain; a job an idempotency key names
// already (in Redis, or earlier in the same batch, with the same spec) gets
// no record; each
// job's Route.LedgerSeq is its decision's sequence number, and a staging
// record built from that number names it.
func TestCreateLogged(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	led := ledger.New(s.Redis(), bytes.Repeat([]byte{7}, ledger.MinKeySize), s.Prefix())
	recs := func(id string) func(int64) []ledger.Record {
		return func(seq int64) []ledger.Record {
			return []ledger.Record{{Kind: "decision", JobID: id, Body: json.RawMessage(`{}`)},
				{Kind: "staging", JobID: id, Body: json.RawMessage(fmt.Sprintf(`{"decision_seq":%d}`, seq))}}
		}
	}
	newJob := func(name, key string) jobstore.NewJob {
		id := jobstore.NewID(time.Now())
		return jobstore.NewJob{ID: id, Spec: spec(name, jobspec.PriorityNormal), OutputURI: "file:///out/{id}", IdempotencyKey: key,
			Route: &jobtype.RouteInfo{Backend: "local"}, Records: recs(id)}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				var err error
				switch i % 3 {
				case 0:
					_, err = led.Append(ctx, ledger.Record{Kind: "other", Body: json.RawMessage(`{}`)})
				case 1:
					_, _, err = s.CreateLogged(ctx, led, newJob("single", ""))
				default:
					key := fmt.Sprintf("k%d-%d", g, i)
					_, err = s.CreateManyLogged(ctx, led, []jobstore.NewJob{newJob("a", key), newJob("b", ""), newJob("a", key)})
				}
				if err != nil {
					errs <- err
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A key stored before, sent again with the same spec: the job is
	// returned, nothing recorded. (The same key with another spec is a
	// conflict: TestIdempotencyKeyConflict.)
	first, _, err := s.CreateLogged(ctx, led, newJob("a", "k0-2"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := led.Verify(ctx)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
	decisions := map[string]int64{}
	if err := led.Range(ctx, "", func(r ledger.Record) error {
		switch r.Kind {
		case "decision":
			if _, dup := decisions[r.JobID]; dup {
				t.Errorf("two decisions for %s", r.JobID)
			}
			decisions[r.JobID] = r.Seq
			j, err := s.Get(ctx, r.JobID)
			if err != nil {
				t.Errorf("decision %d names %s: %v", r.Seq, r.JobID, err)
			} else if j.Route == nil || j.Route.LedgerSeq != r.Seq {
				t.Errorf("job %s: route %+v, its decision is record %d", r.JobID, j.Route, r.Seq)
			}
		case "staging":
			var body struct {
				DecisionSeq int64 `json:"decision_seq"`
			}
			_ = json.Unmarshal(r.Body, &body)
			if body.DecisionSeq != decisions[r.JobID] || body.DecisionSeq != r.Seq-1 {
				t.Errorf("staging %d of %s names decision %d", r.Seq, r.JobID, body.DecisionSeq)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// 4 goroutines × (3 singles + 3 batches of 2 stored jobs) = 36 jobs.
	stored, _ := s.Redis().ZCard(ctx, s.Prefix()+"jobs").Result()
	if len(decisions) != 36 || stored != 36 {
		t.Fatalf("%d decisions for %d stored jobs, want 36 and 36", len(decisions), stored)
	}
	if first.Name != "a" {
		t.Fatalf("key k0-2 named job %+v", first)
	}
}
