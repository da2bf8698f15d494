package ledger_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/ledger"
)

// entryFields are the stream entry's fields (doc.go), which anyone reading
// Redis sees.
var entryFields = []string{"seq", "time", "kind", "job_id", "team", "token", "config_hash", "body", "prev", "mac"}

// attacker can read and write Redis with go-redis, and knows the format and
// the algorithm, but not the ledger key.
type attacker struct {
	t testing.TB
	b testBundle
}

func (a attacker) stream() string { return a.b.prefix + "ledger" }
func (a attacker) head() string   { return a.b.prefix + "ledger:head" }

func (a attacker) entries() []redis.XMessage {
	a.t.Helper()
	msgs, err := a.b.rdb.XRange(a.b.ctx, a.stream(), "-", "+").Result()
	if err != nil {
		a.t.Fatal(err)
	}
	return msgs
}

// rewrite replaces the whole stream with msgs, each under its original id:
// streams cannot be edited in place, so this is how an entry gets "edited".
func (a attacker) rewrite(msgs []redis.XMessage) {
	a.t.Helper()
	ctx := a.b.ctx
	if err := a.b.rdb.Del(ctx, a.stream()).Err(); err != nil {
		a.t.Fatal(err)
	}
	for _, m := range msgs {
		vals := make([]any, 0, 2*len(m.Values))
		for _, f := range entryFields {
			if v, ok := m.Values[f]; ok {
				vals = append(vals, f, v)
			}
		}
		for f, v := range m.Values { // fields an attacker added
			if !contains(entryFields, f) {
				vals = append(vals, f, v)
			}
		}
		if err := a.b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: a.stream(), ID: m.ID, Values: vals}).Err(); err != nil {
			a.t.Fatal(err)
		}
	}
}

func (a attacker) xdel(ids ...string) {
	a.t.Helper()
	if err := a.b.rdb.XDel(a.b.ctx, a.stream(), ids...).Err(); err != nil {
		a.t.Fatal(err)
	}
}

func (a attacker) setHead(seq any, mac string) {
	a.t.Helper()
	if err := a.b.rdb.HSet(a.b.ctx, a.head(), "seq", seq, "mac", mac).Err(); err != nil {
		a.t.Fatal(err)
	}
}

// record reads an entry the way the attacker would, to recompute its MAC.
func record(t testing.TB, m redis.XMessage) ledger.Record {
	t.Helper()
	s := func(f string) string { return m.Values[f].(string) }
	seq, err := strconv.ParseInt(s("seq"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := time.Parse(time.RFC3339Nano, s("time"))
	if err != nil {
		t.Fatal(err)
	}
	return ledger.Record{Seq: seq, Time: tm, Kind: s("kind"), JobID: s("job_id"), Team: s("team"), Token: s("token"),
		ConfigHash: s("config_hash"), Body: json.RawMessage(s("body")), Prev: s("prev"), MAC: s("mac")}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// TestVerifyDetectsTampering tampers with a fresh ledger of 20 records in
// each case, as someone with Redis access but without the key would, and
// checks that Verify names the record (the first problem) and that Report.Err
// wraps ErrTampered.
func TestVerifyDetectsTampering(t *testing.T) {
	const n, k = 20, 7
	type check struct {
		first    string // prefix of the first problem
		seq      int64  // its Seq
		onlyOne  bool   // and it is the only problem
		headOnly bool   // only the head was touched, which an export does not carry
		also     string // the first problem also says this
	}
	cases := []struct {
		name   string
		tamper func(a attacker, recs []ledger.Record) check
	}{
		{"edit body", func(a attacker, recs []ledger.Record) check {
			msgs := a.entries()
			msgs[k-1].Values["body"] = strings.Replace(msgs[k-1].Values["body"].(string), `"choice":"onprem"`, `"choice":"aws-us"`, 1)
			a.rewrite(msgs)
			return check{first: "record 7 (stream id " + recs[k-1].StreamID + "): MAC mismatch: edited", seq: k, onlyOne: true}
		}},
		{"edit submitter", func(a attacker, recs []ledger.Record) check {
			msgs := a.entries()
			msgs[k-1].Values["team"], msgs[k-1].Values["token"] = "finance", "admin"
			a.rewrite(msgs)
			return check{first: "record 7 (stream id " + recs[k-1].StreamID + "): MAC mismatch: edited", seq: k, onlyOne: true}
		}},
		{"edit config hash", func(a attacker, recs []ledger.Record) check {
			msgs := a.entries()
			msgs[k-1].Values["config_hash"] = "sha256:evil"
			a.rewrite(msgs)
			return check{first: "record 7 (stream id " + recs[k-1].StreamID + "): MAC mismatch: edited", seq: k, onlyOne: true}
		}},
		{"edit time", func(a attacker, recs []ledger.Record) check {
			msgs := a.entries()
			msgs[k-1].Values["time"] = "2024-01-01T00:00:00Z"
			a.rewrite(msgs)
			return check{first: "record 7 (stream id " + recs[k-1].StreamID + "): MAC mismatch: edited", seq: k, onlyOne: true}
		}},
		{"edit by XDEL and re-XADD at the end", func(a attacker, recs []ledger.Record) check {
			m := a.entries()[k-1]
			a.xdel(m.ID)
			m.ID = "*"
			m.Values["team"] = "finance"
			a.rewrite(append(a.entries(), m))
			return check{first: "record 7 missing: deleted (6 is followed by 8)", seq: k, onlyOne: false}
		}},
		{"add a field", func(a attacker, recs []ledger.Record) check {
			msgs := a.entries()
			msgs[k-1].Values["approved_by"] = "ceo"
			a.rewrite(msgs)
			return check{first: "stream entry " + recs[k-1].StreamID + " is unreadable: unknown field \"approved_by\"", seq: 0, onlyOne: false}
		}},
		{"delete a record", func(a attacker, recs []ledger.Record) check {
			a.xdel(recs[k-1].StreamID)
			return check{first: "record 7 missing: deleted (6 is followed by 8)", seq: k, onlyOne: true}
		}},
		{"delete two records", func(a attacker, recs []ledger.Record) check {
			a.xdel(recs[k-1].StreamID, recs[k].StreamID)
			return check{first: "records 7–8 missing: deleted (6 is followed by 9)", seq: k, onlyOne: true}
		}},
		{"delete the first record", func(a attacker, recs []ledger.Record) check {
			a.xdel(recs[0].StreamID)
			return check{first: "record 1 missing: deleted (the stream starts at 2)", seq: 1, onlyOne: true}
		}},
		{"duplicate a record", func(a attacker, recs []ledger.Record) check {
			m := a.entries()[4]
			m.ID = "*"
			a.rewrite(append(a.entries(), m))
			return check{first: "record 5 (stream id ", seq: 5, onlyOne: true, also: "comes after record 20: duplicated or reordered"}
		}},
		{"truncate the tail", func(a attacker, recs []ledger.Record) check {
			a.xdel(recs[n-2].StreamID, recs[n-1].StreamID)
			return check{first: "head says 20 records, the stream ends at 18: truncated", seq: n - 1, onlyOne: true}
		}},
		{"truncate everything", func(a attacker, recs []ledger.Record) check {
			a.b.rdb.Del(a.b.ctx, a.stream())
			return check{first: "head says 20 records, the stream is empty: truncated", seq: 1, onlyOne: true}
		}},
		{"delete the head", func(a attacker, recs []ledger.Record) check {
			a.b.rdb.Del(a.b.ctx, a.head())
			return check{first: "the head key lathe:ledger:head is missing but the stream holds 20 records: head deleted", seq: 0, onlyOne: true, headOnly: true}
		}},
		{"head pointed at an earlier record", func(a attacker, recs []ledger.Record) check {
			a.setHead(n-2, recs[n-3].MAC)
			return check{first: "head says 18 records, the stream goes on to 20", seq: n - 1, onlyOne: true, headOnly: true}
		}},
		{"edit the head MAC", func(a attacker, recs []ledger.Record) check {
			a.setHead(n, strings.Repeat("0", 64))
			return check{first: "head MAC 0000000000000000… is not record 20's MAC", seq: n, onlyOne: true, headOnly: true}
		}},
		{"edit and rechain with another key", func(a attacker, recs []ledger.Record) check {
			// The attacker edits record k, then recomputes every MAC from k
			// on with a key of their own, relinks prev and fixes the head:
			// the chain is consistent, but not under the real key.
			evil := testKey('e')
			msgs := a.entries()
			prev := msgs[k-2].Values["mac"].(string)
			for i := k - 1; i < len(msgs); i++ {
				if i == k-1 {
					msgs[i].Values["body"] = `{"choice":"aws-us"}`
				}
				msgs[i].Values["prev"] = prev
				r := record(a.t, msgs[i])
				msgs[i].Values["mac"] = ledger.ComputeMAC(evil, r)
				prev = msgs[i].Values["mac"].(string)
			}
			a.rewrite(msgs)
			a.setHead(n, prev)
			return check{first: "record 7 (stream id " + recs[k-1].StreamID + "): MAC mismatch: edited", seq: k, onlyOne: false}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			recs := fill(t, b, n)
			verifyOK(t, b, n)
			want := c.tamper(attacker{t, b}, recs)
			rep, err := b.l.Verify(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) == 0 {
				t.Fatal("verify found nothing")
			}
			p := rep.Problems[0]
			if !strings.HasPrefix(p.What, want.first) || !strings.Contains(p.What, want.also) || p.Seq != want.seq {
				t.Fatalf("first problem %+v\nwant seq %d, %q…\nall: %+v", p, want.seq, want.first, rep.Problems)
			}
			if want.onlyOne && len(rep.Problems) != 1 {
				t.Fatalf("want only one problem, got %+v", rep.Problems)
			}
			if err := rep.Err(); !errors.Is(err, ledger.ErrTampered) || !strings.Contains(err.Error(), want.first) {
				t.Fatalf("Err() = %v", err)
			}
			if c.name == "edit and rechain with another key" {
				// Every rechained record fails, and only on its MAC: the
				// links themselves are consistent.
				if len(rep.Problems) != n-k+1 {
					t.Fatalf("problems: %+v", rep.Problems)
				}
				for _, p := range rep.Problems {
					if !strings.HasSuffix(p.What, "MAC mismatch: edited") {
						t.Fatalf("problem %+v", p)
					}
				}
			}
			// An export taken now (where one can still be read) fails too.
			var buf bytes.Buffer
			if _, _, err := b.l.Export(b.ctx, &buf); err == nil && !want.headOnly {
				rep, err := ledger.VerifyExport(&buf, b.key, recs[n-1].MAC)
				if err != nil || len(rep.Problems) == 0 {
					t.Fatalf("the export of a tampered ledger verifies: %+v %v", rep, err)
				}
			}
		})
	}
}

// TestPublishedHead: cutting the tail and pointing the head at the new last
// record (copying its MAC, which anyone can read) leaves a consistent chain.
// Only a head published before the cut shows it, in Redis and in an export.
func TestPublishedHead(t *testing.T) {
	for _, wipe := range []bool{false, true} {
		b := setup(t)
		recs := fill(t, b, 12)
		_, published, err := b.l.Head(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep, _ := b.l.VerifyAgainst(b.ctx, published); len(rep.Problems) > 0 {
			t.Fatalf("untouched ledger against its head: %+v", rep.Problems)
		}
		a := attacker{t, b}
		var want string
		if wipe {
			a.b.rdb.Del(b.ctx, a.stream(), a.head())
			want = "published head " + published[:16] + "… is not in the stream, which ends at record 0: truncated or rewritten since it was published"
		} else {
			a.xdel(recs[10].StreamID, recs[11].StreamID)
			a.setHead(10, recs[9].MAC)
			want = "published head " + published[:16] + "… is not in the stream, which ends at record 10: truncated or rewritten since it was published"
		}
		if rep, err := b.l.Verify(b.ctx); err != nil || len(rep.Problems) > 0 {
			t.Fatalf("without a published head the cut is invisible (documented): %+v %v", rep.Problems, err)
		}
		rep, err := b.l.VerifyAgainst(b.ctx, published)
		if err != nil || len(rep.Problems) != 1 || rep.Problems[0].What != want {
			t.Fatalf("against the published head: %+v %v\nwant %s", rep.Problems, err, want)
		}
		var buf bytes.Buffer
		if _, _, err := b.l.Export(b.ctx, &buf); err != nil {
			t.Fatal(err)
		}
		rep, err = ledger.VerifyExport(&buf, b.key, published)
		if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].What, "is not in the export") {
			t.Fatalf("export against the published head: %+v %v", rep.Problems, err)
		}
	}
}

// TestVerifyWrongKey: under another key every record fails, and the report
// stays bounded.
func TestVerifyWrongKey(t *testing.T) {
	b := setup(t)
	fill(t, b, 150)
	rep, err := ledger.New(b.rdb, testKey('x'), "").Verify(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 150 || len(rep.Problems) != 101 || rep.Problems[100].What != "… and 50 more problems" {
		t.Fatalf("records %d, %d problems, last %+v", rep.Records, len(rep.Problems), rep.Problems[len(rep.Problems)-1])
	}
}
