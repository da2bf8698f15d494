package ledger_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// anchored is a testBundle whose ledger has an anchor, with its keeper
// (not started: the tests call Flush, unless they Start it).
type anchored struct {
	testBundle
	path string
	k    *ledger.AnchorKeeper
}

// noSettle anchors a record as soon as Redis holds it: the test's Redis
// is not crashed.
var noSettle = ledger.AnchorKeeperConfig{Settle: -1}

// setupAnchored is setup with the ledger anchored in a file of the test's
// temporary folder.
func setupAnchored(t *testing.T, cfg ledger.AnchorKeeperConfig) anchored {
	t.Helper()
	b := setup(t)
	a := anchored{testBundle: b, path: filepath.Join(t.TempDir(), "ledger.anchor")}
	a.l = ledger.New(b.rdb, b.key, b.prefix, ledger.WithClock(tickingClock()), ledger.WithAnchor(a.path))
	k, err := ledger.NewAnchorKeeper(a.l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.k = k
	return a
}

// setupWiped is setupAnchored (no settling) with 5 records appended and
// anchored, then Redis wiped (FLUSHALL); it returns the records.
func setupWiped(t *testing.T) (anchored, []ledger.Record) {
	t.Helper()
	a := setupAnchored(t, noSettle)
	recs := fill(t, a.testBundle, 5)
	a.flush(t, 5)
	if err := a.rdb.FlushAll(a.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return a, recs
}

// start starts the keeper, stopped when the test ends.
func (a anchored) start(t *testing.T) {
	t.Helper()
	if err := a.k.Start(a.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.k.Stop(a.ctx) })
}

// flush anchors the head and checks the anchor is at record want.
func (a anchored) flush(t *testing.T, want int64) ledger.AnchorState {
	t.Helper()
	st, err := a.k.Flush(a.ctx)
	if err != nil {
		t.Fatalf("flush: %v", err)
	}
	if st.Seq != want {
		t.Fatalf("anchored record %d, want %d", st.Seq, want)
	}
	return a.load(t)
}

// load reads the anchor file.
func (a anchored) load(t *testing.T) ledger.AnchorState {
	t.Helper()
	st, ok, err := a.l.Anchor().Load()
	if err != nil || !ok {
		t.Fatalf("load anchor: ok %v, %v", ok, err)
	}
	return st
}

// verifyFails verifies and requires the first problem to hold each of want.
func (a anchored) verifyFails(t *testing.T, want ...string) ledger.Report {
	t.Helper()
	rep, err := a.l.Verify(a.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) == 0 || !errors.Is(rep.Err(), ledger.ErrTampered) {
		t.Fatalf("verify passed (%d records, anchor %+v), want a failure", rep.Records, rep.Anchor)
	}
	for _, w := range want {
		if !strings.Contains(rep.Problems[0].What, w) {
			t.Fatalf("first problem %q does not say %q (all: %+v)", rep.Problems[0].What, w, rep.Problems)
		}
	}
	return rep
}

func TestAnchorWrittenAfterAppends(t *testing.T) {
	a := setupAnchored(t, noSettle)
	if _, ok, err := a.l.Anchor().Load(); ok || err != nil {
		t.Fatalf("anchor before any flush: ok %v, %v", ok, err)
	}
	recs := fill(t, a.testBundle, 4)
	st := a.flush(t, 4)
	if st.MAC != recs[3].MAC || st.StreamID != recs[3].StreamID || st.Reset != "" {
		t.Fatalf("anchor %+v, want record 4 %s at %s", st, recs[3].MAC, recs[3].StreamID)
	}
	fi, err := os.Stat(a.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("anchor file mode %04o, want 0600", fi.Mode().Perm())
	}
	rep := verifyOK(t, a.testBundle, 4)
	if rep.Anchor == nil || rep.Anchor.Seq != 4 || rep.AnchorPath != a.path {
		t.Fatalf("report's anchor %+v at %q", rep.Anchor, rep.AnchorPath)
	}
	// Nothing new: the anchor stays.
	a.flush(t, 4)
}

// TestAnchorRedisAheadPasses: the anchor lags Redis by the appends not yet
// anchored, which is no problem.
func TestAnchorRedisAheadPasses(t *testing.T) {
	a := setupAnchored(t, noSettle)
	fill(t, a.testBundle, 3)
	a.flush(t, 3)
	fill(t, a.testBundle, 5)
	rep := verifyOK(t, a.testBundle, 8)
	if rep.Anchor == nil || rep.Anchor.Seq != 3 {
		t.Fatalf("report's anchor %+v, want record 3", rep.Anchor)
	}
	a.flush(t, 8)
	verifyOK(t, a.testBundle, 8)
}

func TestAnchorWipe(t *testing.T) {
	a, recs := setupWiped(t)
	a.verifyFails(t, "the ledger in Redis is empty, but the anchor in "+a.path+" says record 5 with MAC "+recs[4].MAC[:16],
		"Redis was wiped or rolled back")
	// The keeper neither follows Redis down nor up along a new chain.
	if _, err := a.k.Flush(a.ctx); !errors.Is(err, ledger.ErrTampered) || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("flush after the wipe: %v", err)
	}
	fill(t, a.testBundle, 7)
	if _, err := a.k.Flush(a.ctx); !errors.Is(err, ledger.ErrTampered) || !strings.Contains(err.Error(), "no longer in Redis") {
		t.Fatalf("flush on a new chain: %v", err)
	}
	if st := a.load(t); st.Seq != 5 || st.MAC != recs[4].MAC {
		t.Fatalf("anchor moved to %+v", st)
	}
	a.verifyFails(t, "record 5 in Redis has MAC", "but the anchor in "+a.path+" says "+recs[4].MAC[:16], "wiped or rolled back and written again")
}

// snapshot is the ledger's keys as DUMP gives them: an older copy of Redis
// to put back.
type snapshot map[string]string

func takeSnapshot(t *testing.T, b testBundle) snapshot {
	t.Helper()
	s := snapshot{}
	for _, k := range []string{b.prefix + "ledger", b.prefix + "ledger:head", b.prefix + "ledger:team:nlp"} {
		v, err := b.rdb.Dump(b.ctx, k).Result()
		if err != nil {
			t.Fatalf("dump %s: %v", k, err)
		}
		s[k] = v
	}
	return s
}

// restore puts s back, as a restore of an older RDB or AOF would.
func (s snapshot) restore(t *testing.T, b testBundle) {
	t.Helper()
	for k, v := range s {
		if err := b.rdb.RestoreReplace(b.ctx, k, 0, v).Err(); err != nil {
			t.Fatalf("restore %s: %v", k, err)
		}
	}
}

func TestAnchorRollback(t *testing.T) {
	a := setupAnchored(t, noSettle)
	fill(t, a.testBundle, 3)
	a.flush(t, 3)
	old := takeSnapshot(t, a.testBundle)
	recs := fill(t, a.testBundle, 4)
	a.flush(t, 7)

	old.restore(t, a.testBundle)
	// The chain alone is intact: only the anchor shows the rollback.
	a.verifyFails(t, "the ledger in Redis ends at record 3, but the anchor in "+a.path+" says record 7 with MAC "+recs[3].MAC[:16],
		"Redis was wiped or rolled back")
	if _, err := a.k.Flush(a.ctx); !errors.Is(err, ledger.ErrTampered) || !strings.Contains(err.Error(), "ends at record 3") {
		t.Fatalf("flush after the rollback: %v", err)
	}
	// Appends go on past the anchored seq on the older copy: record 7 is
	// another record now.
	fill(t, a.testBundle, 6)
	if _, err := a.k.Flush(a.ctx); !errors.Is(err, ledger.ErrTampered) {
		t.Fatalf("flush past the anchor on the older copy: %v", err)
	}
	if st := a.load(t); st.Seq != 7 || st.MAC != recs[3].MAC {
		t.Fatalf("anchor moved to %+v", st)
	}
	a.verifyFails(t, "record 7 in Redis has MAC", "but the anchor in "+a.path+" says "+recs[3].MAC[:16])
}

// TestAnchorForgedHead: someone who can write to Redis but has no key
// cannot move the anchor on, whatever head they write.
func TestAnchorForgedHead(t *testing.T) {
	a := setupAnchored(t, noSettle)
	recs := fill(t, a.testBundle, 3)
	a.flush(t, 3)
	att := attacker{t: t, b: a.testBundle}
	forged := recs[2]
	forged.Seq, forged.Prev, forged.MAC = 4, recs[2].MAC, strings.Repeat("ab", 32)
	vals := []any{}
	for _, f := range entryFields {
		vals = append(vals, f, map[string]string{"seq": "4", "time": forged.Time.Add(time.Second).Format(time.RFC3339Nano),
			"kind": forged.Kind, "job_id": forged.JobID, "team": forged.Team, "token": forged.Token, "config_hash": forged.ConfigHash,
			"body": string(forged.Body), "prev": forged.Prev, "mac": forged.MAC}[f])
	}
	if err := a.rdb.XAdd(a.ctx, &redis.XAddArgs{Stream: att.stream(), Values: vals}).Err(); err != nil {
		t.Fatal(err)
	}
	att.setHead(4, forged.MAC)
	if _, err := a.k.Flush(a.ctx); !errors.Is(err, ledger.ErrTampered) || !strings.Contains(err.Error(), "is not a record made with the key") {
		t.Fatalf("flush of a forged head: %v", err)
	}
	if st := a.load(t); st.Seq != 3 {
		t.Fatalf("anchor moved to %+v", st)
	}
	a.verifyFails(t, "record 4", "MAC mismatch")

	// A head pointed at an older record (the tail cut off with it) is
	// behind the anchor.
	for _, m := range att.entries()[2:] {
		att.xdel(m.ID)
	}
	att.setHead(2, recs[1].MAC)
	a.verifyFails(t, "the ledger in Redis ends at record 2, but the anchor in "+a.path+" says record 3")
}

func TestAnchorKeeperInBackground(t *testing.T) {
	// Poll is long: this process's appends must reach the anchor by the
	// notice they give, not by the poll.
	a := setupAnchored(t, ledger.AnchorKeeperConfig{Settle: -1, Poll: time.Hour})
	fill(t, a.testBundle, 2)
	a.start(t)
	if st := a.load(t); st.Seq != 2 {
		t.Fatalf("anchor after Start: %+v", st)
	}
	recs := fill(t, a.testBundle, 5)
	waitfor.True(t, 10*time.Second, "the anchor at record 7", func() bool {
		st, _, _ := a.l.Anchor().Load()
		return st.Seq == 7 && st.MAC == recs[4].MAC
	})
	// A script using LuaAppend tells the ledger through Appended; records
	// appended by another process are anchored at Stop at the latest.
	other := ledger.New(a.rdb, a.key, a.prefix)
	if _, err := other.Append(a.ctx, ledger.Record{Kind: "staging", Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	a.l.Appended()
	waitfor.True(t, 10*time.Second, "the anchor at record 8", func() bool {
		st, _, _ := a.l.Anchor().Load()
		return st.Seq == 8
	})
	if _, err := other.Append(a.ctx, ledger.Record{Kind: "staging", Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := a.k.Stop(a.ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.k.Stop(a.ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if st := a.load(t); st.Seq != 9 {
		t.Fatalf("anchor after Stop: %+v, want record 9", st)
	}
}

// TestAnchorKeeperPolls: other processes' appends are anchored by the poll.
func TestAnchorKeeperPolls(t *testing.T) {
	a := setupAnchored(t, ledger.AnchorKeeperConfig{Settle: -1, Poll: 5 * time.Millisecond})
	a.start(t)
	other := ledger.New(a.rdb, a.key, a.prefix)
	for i := 0; i < 3; i++ {
		if _, err := other.Append(a.ctx, ledger.Record{Kind: "staging", Body: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.True(t, 10*time.Second, "the anchor at record 3", func() bool {
		st, _, _ := a.l.Anchor().Load()
		return st.Seq == 3
	})
}

// TestAnchorKeepersShareAFile: two keepers of one file (two schedulers with
// one data dir) move it forward, never back.
func TestAnchorKeepersShareAFile(t *testing.T) {
	a := setupAnchored(t, noSettle)
	second := ledger.New(a.rdb, a.key, a.prefix, ledger.WithAnchor(a.path))
	k2, err := ledger.NewAnchorKeeper(second, noSettle)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, a.testBundle, 3)
	a.flush(t, 3)
	fill(t, a.testBundle, 2)
	if st, err := k2.Flush(a.ctx); err != nil || st.Seq != 5 {
		t.Fatalf("second keeper: %+v, %v", st, err)
	}
	a.flush(t, 5)
}

func TestAnchorUnreadable(t *testing.T) {
	a := setupAnchored(t, noSettle)
	fill(t, a.testBundle, 2)
	if err := os.WriteFile(a.path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.verifyFails(t, "anchor "+a.path+" is unreadable", "the anchor cannot be checked")
	if _, err := a.k.Flush(a.ctx); err == nil {
		t.Fatal("flush over an unreadable anchor: no error")
	}
}

func TestReanchor(t *testing.T) {
	a, recs := setupWiped(t)
	fill(t, a.testBundle, 2)
	a.verifyFails(t, "says record 5")

	from, to, _, err := a.l.Reanchor(a.ctx, "restored the backup of 02:00")
	if err != nil {
		t.Fatal(err)
	}
	if from.Seq != 5 || from.MAC != recs[4].MAC || to.Seq != 3 || to.Reset != "restored the backup of 02:00" {
		t.Fatalf("reanchor: from %+v to %+v", from, to)
	}
	rep := verifyOK(t, a.testBundle, 3)
	if rep.Anchor == nil || rep.Anchor.Seq != 3 || rep.Anchor.MAC != rep.Head {
		t.Fatalf("report's anchor %+v, head %s", rep.Anchor, rep.Head)
	}
	var reset ledger.Record
	if err := a.l.Range(a.ctx, "", func(r ledger.Record) error { reset = r; return nil }); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Anchor struct {
			Seq int64  `json:"seq"`
			MAC string `json:"mac"`
		} `json:"anchor"`
		Redis struct {
			Seq int64 `json:"seq"`
		} `json:"redis"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(reset.Body, &body); err != nil {
		t.Fatal(err)
	}
	if reset.Kind != ledger.KindAnchorReset || body.Anchor.Seq != 5 || body.Anchor.MAC != recs[4].MAC || body.Redis.Seq != 2 ||
		body.Reason != "restored the backup of 02:00" {
		t.Fatalf("reset record: %s %s", reset.Kind, reset.Body)
	}
	// The keeper moves on from the new anchor.
	fill(t, a.testBundle, 1)
	a.flush(t, 4)
}

func TestReanchorRefusesABrokenChain(t *testing.T) {
	a := setupAnchored(t, noSettle)
	fill(t, a.testBundle, 3)
	a.flush(t, 3)
	att := attacker{t: t, b: a.testBundle}
	att.xdel(att.entries()[1].ID)
	if _, _, _, err := a.l.Reanchor(a.ctx, "x"); !errors.Is(err, ledger.ErrTampered) || !strings.Contains(err.Error(), "not intact") {
		t.Fatalf("reanchor of a broken chain: %v", err)
	}
	if st := a.load(t); st.Seq != 3 {
		t.Fatalf("anchor moved to %+v", st)
	}
}

// TestAnchorWaitsForRecordsToSettle: a record Redis has held for less than
// Settle (which a crash of Redis could still lose) is not anchored yet.
func TestAnchorWaitsForRecordsToSettle(t *testing.T) {
	a := setupAnchored(t, ledger.AnchorKeeperConfig{Settle: time.Hour})
	fill(t, a.testBundle, 3)
	if st, err := a.k.Flush(a.ctx); err != nil || st.Seq != 0 {
		t.Fatalf("flush of unsettled records: %+v, %v", st, err)
	}
	if _, ok, err := a.l.Anchor().Load(); ok || err != nil {
		t.Fatalf("anchor written: ok %v, %v", ok, err)
	}
	verifyOK(t, a.testBundle, 3)
}

// TestAnchorKeeperAnchorsOnceSettled: the notice of an append schedules a
// look at Redis once the records have settled; the poll is not needed.
func TestAnchorKeeperAnchorsOnceSettled(t *testing.T) {
	a := setupAnchored(t, ledger.AnchorKeeperConfig{Settle: 100 * time.Millisecond, Poll: time.Hour})
	a.start(t)
	recs := fill(t, a.testBundle, 3)
	waitfor.True(t, 10*time.Second, "the anchor at record 3", func() bool {
		st, _, _ := a.l.Anchor().Load()
		return st.Seq == 3 && st.MAC == recs[2].MAC
	})
}
