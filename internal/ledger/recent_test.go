package ledger_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/lathe-ml/lathe/internal/ledger"
)

// TestRecent: Recent answers the newest records a keep takes, newest
// first, of every team or of one (through its index, which append keeps
// and caps), never another team's even when the index names one, and the
// chain still verifies.
func TestRecent(t *testing.T) {
	b := setup(t)
	teams := []string{"a", "b", "b", ""}
	for i := range 200 {
		kind := "decision"
		if i%5 == 4 {
			kind = "staging"
		}
		if _, err := b.l.Append(b.ctx, ledger.Record{Kind: kind, JobID: fmt.Sprintf("j-%03d", i), Team: teams[i%4], Body: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// AppendMany, as a sweep's admission appends, indexes each record.
	var many []ledger.Record
	for i := 200; i < 210; i++ {
		many = append(many, ledger.Record{Kind: "decision", JobID: fmt.Sprintf("j-%03d", i), Team: "a", Body: json.RawMessage(`{}`)})
	}
	if _, err := b.l.AppendMany(b.ctx, many); err != nil {
		t.Fatal(err)
	}
	decisions := func(r ledger.Record) bool { return r.Kind == "decision" }
	check := func(team string, n int, want func(i int) bool) {
		t.Helper()
		got, err := b.l.Recent(b.ctx, team, n, decisions)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := 209; i >= 0 && len(ids) < n; i-- {
			if want(i) && (i >= 200 || i%5 != 4) {
				ids = append(ids, fmt.Sprintf("j-%03d", i))
			}
		}
		var gotIDs []string
		for _, r := range got {
			gotIDs = append(gotIDs, r.JobID)
			if team != "" && r.Team != team {
				t.Fatalf("team %q got a record of team %q", team, r.Team)
			}
		}
		if fmt.Sprint(gotIDs) != fmt.Sprint(ids) {
			t.Fatalf("Recent(%q, %d):\n got %v\nwant %v", team, n, gotIDs, ids)
		}
	}
	check("", 30, func(int) bool { return true })
	check("", 500, func(int) bool { return true })
	check("a", 7, func(i int) bool { return i >= 200 || i%4 == 0 })
	check("a", 500, func(i int) bool { return i >= 200 || i%4 == 0 })
	check("b", 100, func(i int) bool { return i < 200 && (i%4 == 1 || i%4 == 2) })
	check("c", 10, func(int) bool { return false })
	// An index entry naming another team's record (written by hand) or
	// no record at all shows nothing.
	last, _ := b.l.Recent(b.ctx, "b", 1, nil)
	if err := b.rdb.LPush(b.ctx, "lathe:ledger:team:a", last[0].StreamID, "99-0", "junk").Err(); err != nil {
		t.Fatal(err)
	}
	check("a", 500, func(i int) bool { return i >= 200 || i%4 == 0 })
	for i := range ledger.TeamIndexMax + 5 {
		if _, err := b.l.Append(b.ctx, ledger.Record{Kind: "decision", JobID: fmt.Sprint(i), Team: "c", Body: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := b.rdb.LLen(b.ctx, "lathe:ledger:team:c").Result(); n != ledger.TeamIndexMax {
		t.Fatalf("team c's index holds %d ids, want the newest %d", n, ledger.TeamIndexMax)
	}
	if got, _ := b.l.Recent(b.ctx, "c", 1, nil); len(got) != 1 || got[0].JobID != fmt.Sprint(ledger.TeamIndexMax+4) {
		t.Fatalf("team c's newest: %+v", got)
	}
	if rep, err := b.l.Verify(b.ctx); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("verify with the team indexes: %v %+v", err, rep)
	}
}
