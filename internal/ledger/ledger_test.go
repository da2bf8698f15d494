package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/redistest"
)

type testBundle struct {
	ctx    context.Context
	srv    *redistest.Server
	rdb    *redis.Client
	key    []byte
	prefix string
	l      *ledger.Ledger
}

// setup starts a real redis-server (internal/redistest) and a ledger on it
// with a fixed test key and a clock that ticks a second per record.
func setup(t testing.TB) testBundle {
	t.Helper()
	srv := redistest.Start(t)
	b := testBundle{ctx: context.Background(), srv: srv, rdb: srv.Client(), key: testKey('k'), prefix: "lathe:"}
	b.l = ledger.New(b.rdb, b.key, b.prefix, ledger.WithClock(tickingClock()))
	return b
}

func testKey(c byte) []byte { return bytes.Repeat([]byte{c}, ledger.MinKeySize) }

func tickingClock() func() time.Time {
	var mu sync.Mutex
	t := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(1500 * time.Millisecond)
		return t
	}
}

// decision is a routing decision body as the scheduler might write it.
func decision(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{
		"inputs": {"residency": ["onprem", "eu"], "gpus": %d},
		"candidates": [
			{"site": "onprem", "accepted": true, "est_usd": 1.5},
			{"site": "aws-us", "accepted": false, "reason": "residency: tag eu not carried <us-east-1>"}
		],
		"choice": "onprem"}`, i%4+1))
}

// fill appends n records for jobs j-0, j-1 and j-2 in turn.
func fill(t testing.TB, b testBundle, n int) []ledger.Record {
	t.Helper()
	out := make([]ledger.Record, 0, n)
	for i := 0; i < n; i++ {
		r, err := b.l.Append(b.ctx, ledger.Record{Kind: "decision", JobID: fmt.Sprintf("j-%d", i%3), Team: "nlp",
			Token: "ci-bot", ConfigHash: "sha256:abc", Body: decision(i)})
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		out = append(out, r)
	}
	return out
}

func verifyOK(t *testing.T, b testBundle, wantRecords int64) ledger.Report {
	t.Helper()
	rep, err := b.l.Verify(b.ctx)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if len(rep.Problems) > 0 || rep.Err() != nil {
		t.Fatalf("verify of an untouched ledger: %+v", rep.Problems)
	}
	if rep.Records != wantRecords {
		t.Fatalf("verify read %d records, want %d", rep.Records, wantRecords)
	}
	return rep
}

func TestAppendRangeHead(t *testing.T) {
	b := setup(t)
	if seq, mac, err := b.l.Head(b.ctx); err != nil || seq != 0 || mac != "" {
		t.Fatalf("head of an empty ledger: %d %q %v", seq, mac, err)
	}
	verifyOK(t, b, 0)

	recs := fill(t, b, 7)
	for i, r := range recs {
		if r.Seq != int64(i+1) || r.StreamID == "" || len(r.MAC) != 64 {
			t.Fatalf("record %d: %+v", i, r)
		}
		if i == 0 && r.Prev != "" || i > 0 && r.Prev != recs[i-1].MAC {
			t.Fatalf("record %d prev %q", r.Seq, r.Prev)
		}
		want := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i+1) * 1500 * time.Millisecond)
		if !r.Time.Equal(want) {
			t.Fatalf("record %d time %v, want %v", r.Seq, r.Time, want)
		}
		if ledger.ComputeMAC(b.key, r) != r.MAC {
			t.Fatalf("record %d MAC is not ComputeMAC", r.Seq)
		}
	}
	// Bodies are stored compacted, HTML-escaped as encoding/json writes them.
	if s := string(recs[0].Body); strings.ContainsAny(s, "\n\t<") || !strings.Contains(s, `\u003cus-east-1\u003e`) {
		t.Fatalf("stored body: %s", s)
	}

	seq, mac, err := b.l.Head(b.ctx)
	if err != nil || seq != 7 || mac != recs[6].MAC {
		t.Fatalf("head: %d %s %v", seq, mac, err)
	}

	var all, j1 []ledger.Record
	if err := b.l.Range(b.ctx, "", func(r ledger.Record) error { all = append(all, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.l.Range(b.ctx, "j-1", func(r ledger.Record) error { j1 = append(j1, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(all) != 7 || len(j1) != 2 || j1[0].Seq != 2 || j1[1].Seq != 5 {
		t.Fatalf("range: %d records, j-1: %+v", len(all), j1)
	}
	for i, r := range all {
		w := recs[i]
		if r.Seq != w.Seq || !r.Time.Equal(w.Time) || r.Kind != w.Kind || r.JobID != w.JobID || r.Team != w.Team ||
			r.Token != w.Token || r.ConfigHash != w.ConfigHash || !bytes.Equal(r.Body, w.Body) || r.Prev != w.Prev ||
			r.MAC != w.MAC || r.StreamID != w.StreamID {
			t.Fatalf("range record %d:\n got %+v\nwant %+v", i+1, r, w)
		}
	}
	stop := errors.New("stop")
	n := 0
	if err := b.l.Range(b.ctx, "", func(ledger.Record) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("range stops at fn's error: %v after %d", err, n)
	}
	verifyOK(t, b, 7)

	// The stream is never capped: no MAXLEN, every record stays.
	if n, _ := b.rdb.XLen(b.ctx, "lathe:ledger").Result(); n != 7 {
		t.Fatalf("stream length %d", n)
	}
}

func TestAppendRejects(t *testing.T) {
	b := setup(t)
	if _, err := b.l.Append(b.ctx, ledger.Record{Kind: "decision", Body: json.RawMessage(`{"a":`)}); err == nil {
		t.Fatal("append accepted a body that is not JSON")
	}
	if _, err := b.l.Append(b.ctx, ledger.Record{Kind: "decision", Team: "\xff"}); err == nil {
		t.Fatal("append accepted a team that is not UTF-8")
	}
	r, err := b.l.Append(b.ctx, ledger.Record{Kind: "staging"})
	if err != nil || string(r.Body) != "null" || r.Seq != 1 {
		t.Fatalf("append with no body: %+v %v", r, err)
	}
	// An attacker deleted the head: appending must not start a second chain.
	b.rdb.Del(b.ctx, "lathe:ledger:head")
	if _, err := b.l.Append(b.ctx, ledger.Record{Kind: "decision"}); !errors.Is(err, ledger.ErrTampered) {
		t.Fatalf("append with the head deleted: %v", err)
	}
	if n, _ := b.rdb.XLen(b.ctx, "lathe:ledger").Result(); n != 1 {
		t.Fatalf("stream length %d after a refused append", n)
	}
}

// TestConcurrentAppend has two Ledger values on two connections (two
// schedulers) append from several goroutines each: the chain must come out
// numbered without gaps or repeats, and intact.
func TestConcurrentAppend(t *testing.T) {
	b := setup(t)
	other := ledger.New(b.srv.Client(), b.key, b.prefix)
	const perWorker, workers = 40, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		l := b.l
		if w%2 == 1 {
			l = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				if _, err := l.Append(b.ctx, ledger.Record{Kind: "decision", JobID: fmt.Sprintf("w%d", w), Body: decision(i)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const total = perWorker * workers
	rep := verifyOK(t, b, total)
	seq, mac, _ := b.l.Head(b.ctx)
	if seq != total || rep.Head != mac {
		t.Fatalf("head %d %s, report head %s", seq, mac, rep.Head)
	}
	var want int64 = 1
	perJob := map[string]int{}
	err := b.l.Range(b.ctx, "", func(r ledger.Record) error {
		if r.Seq != want {
			return fmt.Errorf("record %d where %d was expected", r.Seq, want)
		}
		want++
		perJob[r.JobID]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for w := 0; w < workers; w++ {
		if perJob[fmt.Sprintf("w%d", w)] != perWorker {
			t.Fatalf("records per worker: %v", perJob)
		}
	}
}

func TestExportVerifyExport(t *testing.T) {
	b := setup(t)
	recs := fill(t, b, 10)
	var buf bytes.Buffer
	head, n, err := b.l.Export(b.ctx, &buf)
	if err != nil || n != 10 || head != recs[9].MAC {
		t.Fatalf("export: head %s n %d err %v", head, n, err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 10 {
		t.Fatalf("export has %d lines", len(lines))
	}
	var first ledger.Record
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Seq != 1 || first.StreamID != recs[0].StreamID {
		t.Fatalf("first line: %+v %v", first, err)
	}
	rep, err := ledger.VerifyExport(strings.NewReader(buf.String()), b.key, head)
	if err != nil || len(rep.Problems) > 0 || rep.Records != 10 || rep.Head != head {
		t.Fatalf("verify export: %+v %v", rep, err)
	}
	// An older published head is fine: the ledger only grew since.
	if rep, _ := ledger.VerifyExport(strings.NewReader(buf.String()), b.key, recs[4].MAC); len(rep.Problems) > 0 {
		t.Fatalf("verify export against an older head: %+v", rep.Problems)
	}
	// The wrong key fails every record.
	rep, _ = ledger.VerifyExport(strings.NewReader(buf.String()), testKey('x'), "")
	if len(rep.Problems) != 10 || !strings.Contains(rep.Problems[0].What, "record 1 (line 1, stream id ") {
		t.Fatalf("verify export with another key: %+v", rep.Problems)
	}

	join := func(ls []string) string { return strings.Join(ls, "\n") + "\n" }
	edited := append([]string(nil), lines...)
	edited[3] = strings.Replace(edited[3], `"choice":"onprem"`, `"choice":"aws-us"`, 1)
	if edited[3] == lines[3] {
		t.Fatal("test did not edit line 4")
	}
	dropped := append(append([]string(nil), lines[:5]...), lines[6:]...)
	cases := []struct {
		name, export, published, want string
	}{
		{"edited", join(edited), head, "record 4 (line 4, stream id " + recs[3].StreamID + "): MAC mismatch: edited"},
		{"deleted", join(dropped), head, "record 6 missing: deleted (5 is followed by 7)"},
		{"truncated", join(lines[:8]), head, "published head " + head[:16] + "… is not in the export, which ends at record 8: truncated"},
		{"garbled", join(append([]string{"{"}, lines[1:]...)), "", "line 1 is unreadable"},
		{"unknown field", join(append([]string{strings.Replace(lines[0], `{"seq"`, `{"approved_by":"ceo","seq"`, 1)}, lines[1:]...)), "", "line 1 is unreadable"},
	}
	for _, c := range cases {
		rep, err := ledger.VerifyExport(strings.NewReader(c.export), b.key, c.published)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Problems) == 0 || !strings.HasPrefix(rep.Problems[0].What, c.want) {
			t.Errorf("%s: problems %+v, want first %q", c.name, rep.Problems, c.want)
		}
		if !errors.Is(rep.Err(), ledger.ErrTampered) {
			t.Errorf("%s: Err() = %v", c.name, rep.Err())
		}
	}

	// Export stops at the head it read first.
	fill(t, b, 2)
	buf.Reset()
	head2, n, err := b.l.Export(b.ctx, &buf)
	if err != nil || n != 12 {
		t.Fatalf("second export: %d %v", n, err)
	}
	if rep, _ := ledger.VerifyExport(&buf, b.key, head); len(rep.Problems) > 0 || rep.Head != head2 {
		t.Fatalf("second export against the first head: %+v", rep)
	}
}

// TestCanonical pins the canonical bytes and the MAC (doc.go): a change to
// either breaks every ledger already written. The MAC was computed outside Go:
// printf %s "<canonical>" | openssl dgst -sha256 -hmac kkkk…k (32 k).
func TestCanonical(t *testing.T) {
	r := ledger.Record{Seq: 1, Time: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), Kind: "decision", Body: json.RawMessage(`{"a":1}`)}
	want := `14:lathe-ledger/1,1:1,20:2025-03-01T12:00:00Z,8:decision,0:,0:,0:,0:,7:{"a":1},0:,`
	if got := string(ledger.Canonical(r)); got != want {
		t.Fatalf("canonical bytes\n got %s\nwant %s", got, want)
	}
	// MAC and StreamID are not covered; the time zone does not matter.
	r2 := r
	r2.MAC, r2.StreamID, r2.Time = "x", "1-0", r.Time.In(time.FixedZone("CET", 3600))
	if string(ledger.Canonical(r2)) != want {
		t.Fatal("canonical bytes depend on MAC, StreamID or the time zone")
	}
	r3 := r
	r3.Time = r.Time.Add(500 * time.Millisecond)
	r3.Team, r3.Prev = "a,b", "00ff"
	want3 := `14:lathe-ledger/1,1:1,22:2025-03-01T12:00:00.5Z,8:decision,0:,3:a,b,0:,0:,7:{"a":1},4:00ff,`
	if got := string(ledger.Canonical(r3)); got != want3 {
		t.Fatalf("canonical bytes\n got %s\nwant %s", got, want3)
	}
	const wantMAC = "5afd87e58e1d5b57acffdfc600fc40ce0219dfbe62beabbce0c8f31509aab707"
	if got := ledger.ComputeMAC(testKey('k'), r); got != wantMAC {
		t.Fatalf("MAC %s, want %s", got, wantMAC)
	}
}

func BenchmarkAppend(b *testing.B) {
	tb := setup(b)
	body := decision(1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tb.l.Append(tb.ctx, ledger.Record{Kind: "decision", JobID: "j-1", Team: "nlp", Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}
