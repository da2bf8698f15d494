package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// anchorRun is a lathed up on a data dir, with the lathe binary.
type anchorRun struct {
	lathed, lathe string
	data, base    string
	d             *daemon
}

// upOn starts lathed up on data (its own redis-server there) and waits
// for its API.
func upOn(t *testing.T, lathed, lathe, data string) *anchorRun {
	t.Helper()
	port := redistest.FreePort(t)
	r := &anchorRun{lathed: lathed, lathe: lathe, data: data, base: "http://127.0.0.1:" + strconv.Itoa(port)}
	r.d = startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data, "--gpus", "none")
	waitHTTP(t, r.base, r.d)
	return r
}

// verify runs lathe audit verify -o json: the report and the exit code.
func (r *anchorRun) verify(t *testing.T) (ledger.Report, int) {
	t.Helper()
	out, errOut, code := cli(t, r.lathe, r.base, "audit", "verify", "-o", "json")
	var rep ledger.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("lathe audit verify -o json exited %d: %v\n%s\n%s", code, err, out, errOut)
	}
	return rep, code
}

// submitAndAnchor submits n demo jobs and waits until the anchor holds
// every record Redis had after them; it returns that record's number.
func (r *anchorRun) submitAndAnchor(t *testing.T, n int) int64 {
	t.Helper()
	for range n {
		if out, errOut, code := cli(t, r.lathe, r.base, "submit", "configs/examples/tiny-lora.yaml"); code != 0 {
			t.Fatalf("submit exited %d\n%s\n%s", code, out, errOut)
		}
	}
	rep, code := r.verify(t)
	if code != 0 || rep.Records == 0 {
		t.Fatalf("verify after submitting: exit %d, %+v", code, rep)
	}
	want := rep.Records
	waitfor.True(t, time.Minute, "the anchor at record "+strconv.FormatInt(want, 10), func() bool {
		st, ok, err := ledger.NewAnchor(filepath.Join(r.data, anchorFileName)).Load()
		return err == nil && ok && st.Seq >= want
	})
	return want
}

// TestLedgerAnchorWipeEndToEnd: lathed up anchors the ledger in its data
// dir; a FLUSHALL of its Redis (what a trainer that reached it could do)
// makes lathe audit verify exit 1 saying the ledger in Redis is behind the
// anchor, and lathed logs it; lathed ledger reanchor, run beside the
// running lathed, records the reset and verify passes again.
func TestLedgerAnchorWipeEndToEnd(t *testing.T) {
	lathed, lathe := binaries(t)
	data := t.TempDir()
	r := upOn(t, lathed, lathe, data)
	anchored := r.submitAndAnchor(t, 2)
	out, _, code := cli(t, lathe, r.base, "audit", "verify")
	anchorFile := filepath.Join(data, anchorFileName)
	if code != 0 || !strings.Contains(out, "anchored outside Redis at record") || !strings.Contains(out, anchorFile) {
		t.Fatalf("verify before the wipe: exit %d\n%s", code, out)
	}

	pw, err := os.ReadFile(filepath.Join(data, "redis", "password"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(data, "redis", "redis.sock"), Password: strings.TrimSpace(string(pw))})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, lathe, r.base, "audit", "verify")
	if code != 1 || !strings.Contains(out, "but the anchor in "+anchorFile+" says record "+strconv.FormatInt(anchored, 10)) ||
		!strings.Contains(out, "Redis was wiped or rolled back") || !strings.Contains(errOut, "NOT intact") {
		t.Fatalf("verify after FLUSHALL: exit %d (want 1)\n%s\n%s", code, out, errOut)
	}
	waitfor.True(t, time.Minute, "lathed to log the mismatch", func() bool {
		return strings.Contains(r.d.output(), "does not match its anchor")
	})

	re := exec.Command(lathed, "ledger", "reanchor", "--data-dir", data, "--reason", "test: the wipe was ours")
	reOut, err := re.CombinedOutput()
	if err != nil || !strings.Contains(string(reOut), "ledger re-anchored in "+anchorFile) {
		t.Fatalf("lathed ledger reanchor: %v\n%s", err, reOut)
	}
	rep, code := r.verify(t)
	if code != 0 || rep.Anchor == nil || rep.Anchor.Reset != "test: the wipe was ours" {
		t.Fatalf("verify after reanchor: exit %d, %+v", code, rep)
	}
	out, _, _ = cli(t, lathe, r.base, "audit", "-o", "json")
	var recs []ledger.Record
	if err := json.Unmarshal([]byte(out), &recs); err != nil || len(recs) == 0 || recs[len(recs)-1].Kind != ledger.KindAnchorReset {
		t.Fatalf("the ledger does not end with an anchor_reset record (%v):\n%s", err, out)
	}
}

// TestLedgerAnchorRollbackEndToEnd: Redis put back to an older copy (its
// AOF from before some jobs, restored while lathed was stopped) makes
// lathe audit verify exit 1, though the chain in it is intact.
func TestLedgerAnchorRollbackEndToEnd(t *testing.T) {
	lathed, lathe := binaries(t)
	data := t.TempDir()
	r := upOn(t, lathed, lathe, data)
	r.submitAndAnchor(t, 1)
	stop(t, r.d, os.Interrupt)
	aof := filepath.Join(data, "redis", "appendonlydir")
	backup := filepath.Join(t.TempDir(), "appendonlydir")
	if out, err := exec.Command("cp", "-a", aof, backup).CombinedOutput(); err != nil {
		t.Fatalf("copy the AOF: %v\n%s", err, out)
	}

	r = upOn(t, lathed, lathe, data)
	later := r.submitAndAnchor(t, 2)
	stop(t, r.d, os.Interrupt)
	if err := os.RemoveAll(aof); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", backup, aof).CombinedOutput(); err != nil {
		t.Fatalf("restore the AOF: %v\n%s", err, out)
	}

	r = upOn(t, lathed, lathe, data)
	anchorFile := filepath.Join(data, anchorFileName)
	out, errOut, code := cli(t, lathe, r.base, "audit", "verify")
	if code != 1 || !strings.Contains(out, "the anchor in "+anchorFile) || !strings.Contains(out, "record "+strconv.FormatInt(later, 10)) ||
		!strings.Contains(out, "wiped or rolled back") {
		t.Fatalf("verify after restoring the older AOF: exit %d (want 1)\n%s\n%s", code, out, errOut)
	}
	if st, _, err := ledger.NewAnchor(anchorFile).Load(); err != nil || st.Seq != later {
		t.Fatalf("the anchor moved after the rollback: %+v, %v (want record %d)", st, err, later)
	}
}
