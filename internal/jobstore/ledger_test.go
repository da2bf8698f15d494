package jobstore_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/waitfor"
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

// TestSetRouteLogged: SetRouteLogged writes a route and appends its
// records in one script, racing plain appenders and each other without
// forking the chain; each job's stored route names its last decision
// record (sealed again when the head moved); a job that ended or is gone
// gets neither route nor record; without a ledger it is SetRoute.
func TestSetRouteLogged(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	led := ledger.New(s.Redis(), bytes.Repeat([]byte{7}, ledger.MinKeySize), s.Prefix())
	recs := func(id, path string) func(int64) []ledger.Record {
		return func(seq int64) []ledger.Record {
			return []ledger.Record{{Kind: "decision", JobID: id, Body: json.RawMessage(fmt.Sprintf(`{"path":%q}`, path))},
				{Kind: "staging", JobID: id, Body: json.RawMessage(fmt.Sprintf(`{"decision_seq":%d}`, seq))}}
		}
	}
	var ids []string
	for i := range 3 {
		j, _, err := s.Create(ctx, jobstore.NewJob{Spec: spec(fmt.Sprintf("j%d", i), jobspec.PriorityNormal), OutputURI: "file:///out/{id}"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				var err error
				if i%3 == 2 {
					_, err = led.Append(ctx, ledger.Record{Kind: "other", Body: json.RawMessage(`{}`)})
				} else {
					id := ids[(g+i)%len(ids)]
					var set jobstore.RouteSet
					set, err = s.SetRouteLogged(ctx, led, jobstore.RouteUpdate{ID: id, Route: &jobtype.RouteInfo{Backend: "local", Path: "retry", Attempt: 1}, Records: recs(id, "retry")})
					if ri := set.Route; err == nil && (ri.LedgerSeq == 0 || ri.Backend != "local") {
						err = fmt.Errorf("returned route %+v", ri)
					}
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	headBefore, _, err := led.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// The job ended: nothing is written, nothing appended.
	if _, err := s.Cancel(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Get(ctx, ids[0])
	_, err = s.SetRouteLogged(ctx, led, jobstore.RouteUpdate{ID: ids[0], Route: &jobtype.RouteInfo{Backend: "aws-eu", Path: "config reload", Attempt: 1}, Records: recs(ids[0], "config reload")})
	var ce *jobstore.ConflictError
	if !errors.As(err, &ce) || ce.State != jobtype.StateCancelled {
		t.Fatalf("set route on a cancelled job: %v", err)
	}
	if after, _ := s.Get(ctx, ids[0]); after.Route == nil || after.Route.Backend != "local" || after.Route.LedgerSeq != before.Route.LedgerSeq {
		t.Fatalf("the cancelled job's route changed: %+v", after.Route)
	}
	// A job that is not there: not found, nothing appended.
	if _, err := s.SetRouteLogged(ctx, led, jobstore.RouteUpdate{ID: "j-nosuchjob00000", Route: &jobtype.RouteInfo{Backend: "local"}, Records: recs("j-nosuchjob00000", "retry")}); !errors.Is(err, jobstore.ErrNotFound) {
		t.Fatalf("set route on a missing job: %v", err)
	}
	if h, _, err := led.Head(ctx); err != nil || h != headBefore {
		t.Fatalf("ledger head %d after two refused route writes, was %d (%v)", h, headBefore, err)
	}

	// Without a ledger: the route alone.
	if set, err := s.SetRouteLogged(ctx, nil, jobstore.RouteUpdate{ID: ids[1], Route: &jobtype.RouteInfo{Backend: "local", Path: "retry", Attempt: 1, LedgerSeq: 0}, Held: "held: why"}); err != nil || set.Route.LedgerSeq != 0 || set.Held != "held: why" {
		t.Fatalf("without a ledger: %+v %v", set, err)
	}
	if j, _ := s.Get(ctx, ids[1]); j.Held != "held: why" {
		t.Fatalf("held %q", j.Held)
	}
	if h, _, _ := led.Head(ctx); h != headBefore {
		t.Fatalf("a route without a ledger appended records: head %d, was %d", h, headBefore)
	}
	// Put ids[1] back on a logged route for the check below.
	if _, err := s.SetRouteLogged(ctx, led, jobstore.RouteUpdate{ID: ids[1], Route: &jobtype.RouteInfo{Backend: "local", Path: "retry", Attempt: 1}, Records: recs(ids[1], "retry")}); err != nil {
		t.Fatal(err)
	}

	rep, err := led.Verify(ctx)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("verify: %v %+v", err, rep.Problems)
	}
	last := map[string]int64{}
	var seqs []int64
	if err := led.Range(ctx, "", func(r ledger.Record) error {
		seqs = append(seqs, r.Seq)
		switch r.Kind {
		case "decision":
			last[r.JobID] = r.Seq
		case "staging":
			var body struct {
				DecisionSeq int64 `json:"decision_seq"`
			}
			_ = json.Unmarshal(r.Body, &body)
			if body.DecisionSeq != last[r.JobID] || body.DecisionSeq != r.Seq-1 {
				t.Errorf("staging %d of %s names decision %d", r.Seq, r.JobID, body.DecisionSeq)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, seq := range seqs {
		if seq != int64(i+1) {
			t.Fatalf("stream entry %d has seq %d", i+1, seq)
		}
	}
	if len(last) != len(ids) {
		t.Fatalf("decisions for %d jobs, want %d", len(last), len(ids))
	}
	for id, seq := range last {
		j, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Route == nil || j.Route.LedgerSeq != seq {
			t.Errorf("job %s: last decision %d, stored route %+v", id, seq, j.Route)
		}
	}
}

// TestLoggedWritesTellTheAnchorKeeper: each script that appends ledger
// records (create, set route, a sweep's chunk) tells the ledger's anchor
// keeper, which anchors the new head without waiting for its poll.
func TestLoggedWritesTellTheAnchorKeeper(t *testing.T) {
	b := setup(t)
	ctx, s := b.ctx, b.store
	anchor := filepath.Join(t.TempDir(), "ledger.anchor")
	led := ledger.New(s.Redis(), bytes.Repeat([]byte{7}, ledger.MinKeySize), s.Prefix(), ledger.WithAnchor(anchor))
	k, err := ledger.NewAnchorKeeper(led, ledger.AnchorKeeperConfig{Settle: -1, Poll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer k.Stop(ctx)
	anchoredAtHead := func(what string) {
		t.Helper()
		seq, mac, err := led.Head(ctx)
		if err != nil || seq == 0 {
			t.Fatalf("%s: head %d, %v", what, seq, err)
		}
		waitfor.True(t, 10*time.Second, what+": the anchor at the head", func() bool {
			st, _, _ := led.Anchor().Load()
			return st.Seq == seq && st.MAC == mac
		})
	}
	id := jobstore.NewID(time.Now())
	_, _, err = s.CreateLogged(ctx, led, jobstore.NewJob{ID: id, Spec: spec("a", jobspec.PriorityNormal), OutputURI: "file:///out/{id}",
		Route: &jobtype.RouteInfo{Backend: "local"}, Records: func(int64) []ledger.Record {
			return []ledger.Record{{Kind: "decision", JobID: id, Body: json.RawMessage(`{}`)}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	anchoredAtHead("create")
	_, err = s.SetRouteLogged(ctx, led, jobstore.RouteUpdate{ID: id, Route: &jobtype.RouteInfo{Backend: "local", Path: "retry", Attempt: 1},
		Records: func(int64) []ledger.Record {
			return []ledger.Record{{Kind: "decision", JobID: id, Body: json.RawMessage(`{}`)}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	anchoredAtHead("set route")
	if _, _, err := s.CreateSweep(ctx, led, sweepOf(3, nil)); err != nil {
		t.Fatal(err)
	}
	anchoredAtHead("sweep")
}
