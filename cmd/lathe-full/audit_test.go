package main

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/ledger"
)

// auditSetup is a fake scheduler holding a three-record ledger: a decision,
// its staging, and a refusal.
func auditSetup(t *testing.T) *fakeScheduler {
	f := newFakeScheduler(t)
	f.addRecord("decision", "j-1", "ml-research", "ci", map[string]any{"path": "submit",
		"decision": map[string]any{"backend": "aws-eu", "site": "aws-eu-central-1"}})
	f.addRecord("staging", "j-1", "ml-research", "ci", map[string]any{"backend": "aws-eu", "decision_seq": 1,
		"staging": map[string]any{"what": "dataset"}})
	f.addRecord("refusal", "", "ml-research", "ci", map[string]any{"path": "submit",
		"decision": map[string]any{"backend": "", "refused": true}})
	return f
}

// keyFile writes the fake's ledger key as lathed keeps it: hex, mode 0600.
func keyFile(t *testing.T, f *fakeScheduler) string {
	p := filepath.Join(t.TempDir(), "ledger.key")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(f.ledgerKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAuditTable(t *testing.T) {
	f := auditSetup(t)
	r := lathe(t, f.srv.URL, "audit")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := [][]string{
		{"SEQ", "TIME", "KIND", "JOB", "TEAM", "TOKEN", "BACKEND", "PATH"},
		{"1", "2026-12-02T12:00:00Z", "decision", "j-1", "ml-research", "ci", "aws-eu", "submit"},
		{"2", "2026-12-02T12:00:01Z", "staging", "j-1", "ml-research", "ci", "aws-eu", "-"},
		{"3", "2026-12-02T12:00:02Z", "refusal", "-", "ml-research", "ci", "-", "submit"},
	}
	if len(lines) != len(want) {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
	for i, l := range lines {
		if got := strings.Fields(l); strings.Join(got, " ") != strings.Join(want[i], " ") {
			t.Errorf("line %d: %q, want %q", i, got, want[i])
		}
	}

	r = lathe(t, f.srv.URL, "audit", "--job", "j-1", "--after", "1", "--limit", "5", "-o", "json")
	var recs []ledger.Record
	if err := json.Unmarshal([]byte(r.stdout), &recs); err != nil || r.code != exitOK {
		t.Fatalf("exit %d, %v; stdout:\n%s", r.code, err, r.stdout)
	}
	if len(recs) != 1 || recs[0].Seq != 2 || recs[0].Kind != "staging" || recs[0].MAC == "" || len(recs[0].Body) == 0 {
		t.Errorf("records %+v", recs)
	}
	f.mu.Lock()
	req := f.requests[len(f.requests)-1]
	f.mu.Unlock()
	if req != "GET /api/v1/audit?after=1&job=j-1&limit=5" {
		t.Errorf("request %s", req)
	}
}

// TestAuditVerify checks verify's exit codes against the fake, whose
// verify endpoint runs ledger.VerifyExport over its own chain: 0 and
// "ledger intact" for an intact chain, 1 and every problem for an edited
// record or an unknown published head.
func TestAuditVerify(t *testing.T) {
	f := auditSetup(t)
	head := f.records[2].MAC
	r := lathe(t, f.srv.URL, "audit", "verify", "--head", f.records[1].MAC)
	if r.code != exitOK || strings.TrimSpace(r.stdout) != "ledger intact: 3 records, head "+head {
		t.Errorf("intact: exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = lathe(t, f.srv.URL, "audit", "verify", "--head", strings.Repeat("0", 64))
	if r.code != exitFailed || !strings.Contains(r.stdout, "problem: ") || !strings.Contains(r.stderr, "NOT intact") {
		t.Errorf("unknown head: exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}

	f.mu.Lock()
	f.records[0].Body = json.RawMessage(`{"path":"submit","decision":{"backend":"local"}}`) // edited in place
	f.mu.Unlock()
	r = lathe(t, f.srv.URL, "audit", "verify")
	if r.code != exitFailed || !strings.Contains(r.stdout, "problem: ") || !strings.Contains(r.stdout, "record 1") {
		t.Errorf("edited: exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = lathe(t, f.srv.URL, "audit", "verify", "-o", "json")
	var rep ledger.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != exitFailed || len(rep.Problems) == 0 {
		t.Errorf("edited, json: exit %d, %v; stdout:\n%s", r.code, err, r.stdout)
	}
}

// TestAuditExportAndOfflineVerify exports the fake's ledger to a file,
// checks the head printed for publishing, verifies the file offline with
// the key, then edits the file and verifies again.
func TestAuditExportAndOfflineVerify(t *testing.T) {
	f := auditSetup(t)
	key := keyFile(t, f)
	out := filepath.Join(t.TempDir(), "ledger.jsonl")
	head := f.records[2].MAC

	r := lathe(t, f.srv.URL, "audit", "export", "--to", out)
	if r.code != exitOK || !strings.Contains(r.stderr, "publish this head: "+head+" (3 records)") {
		t.Fatalf("export: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil || strings.Count(string(data), "\n") != 3 {
		t.Fatalf("export file: %v\n%s", err, data)
	}

	r = lathe(t, f.srv.URL, "audit", "export")
	if r.code != exitOK || r.stdout != string(data) {
		t.Errorf("export to stdout: exit %d; stdout:\n%s", r.code, r.stdout)
	}

	n := f.requestCount()
	r = lathe(t, f.srv.URL, "audit", "verify", "--export", out, "--key", key, "--head", head)
	if r.code != exitOK || strings.TrimSpace(r.stdout) != "ledger intact: 3 records, head "+head {
		t.Errorf("offline verify: exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if f.requestCount() != n {
		t.Errorf("offline verify sent a request")
	}

	edited := strings.Replace(string(data), `"backend":"aws-eu"`, `"backend":"aws-us"`, 1)
	if err := os.WriteFile(out, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	r = lathe(t, f.srv.URL, "audit", "verify", "--export", out, "--key", key)
	if r.code != exitFailed || !strings.Contains(r.stdout, "problem: ") {
		t.Errorf("offline verify of an edited export: exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}

	for _, args := range [][]string{
		{"audit", "verify", "--export", out},
		{"audit", "verify", "--key", key},
		{"audit", "verify", "--export", out, "--key", filepath.Join(t.TempDir(), "none")},
		{"audit", "--limit", "-1"},
	} {
		if r := lathe(t, f.srv.URL, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// TestAuditExportCutShort: an export that ends without its trailers exits
// 1, says not to trust it, and leaves no file at --to.
func TestAuditExportCutShort(t *testing.T) {
	f := auditSetup(t)
	f.cutExport = true
	out := filepath.Join(t.TempDir(), "ledger.jsonl")
	r := lathe(t, f.srv.URL, "audit", "export", "--to", out)
	if r.code != exitFailed || !strings.Contains(r.stderr, "cut short") || strings.Contains(r.stderr, "publish this head") {
		t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s exists after a cut export: %v", out, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(out))
	if len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}
	if r := lathe(t, f.srv.URL, "audit", "export"); r.code != exitFailed {
		t.Errorf("to stdout: exit %d", r.code)
	}
}

// TestCostBreakeven checks `lathe cost breakeven` with stated inputs:
// $10000 a GPU, 1 kW at $0.10/kWh, PUE 1, no ops overhead, full use.
// Running costs 1 × 1 × 0.1 × 730 = $73 a month; renting at $2/GPU-hour
// costs 2 × 730 = $1460, so owning pays off after 10000 / (1460 − 73) =
// 7.2 months; at $0.10/GPU-hour rent ($73) it never does.
func TestCostBreakeven(t *testing.T) {
	base := []string{"cost", "breakeven", "--purchase-usd-per-gpu", "10000", "--power-kw-per-gpu", "1",
		"--usd-per-kwh", "0.1", "--pue", "1", "--ops-overhead-pct", "0", "--utilisation", "1"}
	url := closedURL(t) // offline: no scheduler
	r := lathe(t, url, append(base, "--cloud-usd-per-gpu-hour", "2")...)
	if r.code != exitOK || !strings.Contains(r.stdout, "Breakeven:  7.2 months") || !strings.Contains(r.stdout, "months = purchase /") {
		t.Errorf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = lathe(t, url, append(base, "--cloud-usd-per-gpu-hour", "2", "-o", "json")...)
	var out struct {
		Breakeven struct {
			Months float64
			Never  bool
		} `json:"breakeven"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != exitOK ||
		out.Breakeven.Never || out.Breakeven.Months < 7.20 || out.Breakeven.Months > 7.21 {
		t.Errorf("json: exit %d, %v, %+v; stdout:\n%s", r.code, err, out, r.stdout)
	}
	r = lathe(t, url, append(base, "--cloud-usd-per-gpu-hour", "0.1")...)
	if r.code != exitOK || !strings.Contains(r.stdout, "Breakeven:  never") {
		t.Errorf("never: exit %d; stdout:\n%s", r.code, r.stdout)
	}
	r = lathe(t, url, append(base, "--cloud-usd-per-gpu-hour", "-1")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "-1") {
		t.Errorf("negative price: exit %d; stderr:\n%s", r.code, r.stderr)
	}
}
