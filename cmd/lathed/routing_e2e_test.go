package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

const e2eRouting = `
sites:
  dc-frankfurt: [onprem, eu]
  aws-eu-central-1: [cloud, eu]
  aws-us-east-1: [cloud, us]
redis_site: dc-frankfurt
backends:
  local:
    kind: local
    site: dc-frankfurt
    price: {usd_per_gpu_hour: 1.10}
  aws-eu:
    kind: aws
    site: aws-eu-central-1
    region: eu-central-1
    checkpoint_uri: s3://lathe-eu-ckpt/
    budget_usd_per_month: 5000
    instance_types:
      g6e.xlarge: {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}
datasets:
  buckets: {lathe-eu-ckpt: aws-eu-central-1, lathe-us-data: aws-us-east-1}
`

// TestRoutingEndToEnd: the real lathed and lathe with a routing config. A
// [us] job is refused at submit (exit 2, the reasons printed, nothing
// stored); an [eu] job runs on the local pool (its site carries eu) with
// the real trainer and succeeds, its artifacts tagged; route --explain with
// a what-if sends an [eu] job with max_wait 1h to aws-eu; the ledger holds
// the decisions and verifies, and after a record is deleted in Redis by
// hand, `lathe audit verify` exits 1 naming it; an export verifies offline
// with the key file until the ledger was tampered with.
func TestRoutingEndToEnd(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	rs := redistest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "lathed.yaml")
	root := repoRoot(t)
	cfg := e2eRouting + "jobs:\n  allowed_roots: [" + root + ", " + dir + "]\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(dir, "data"),
		"--redis-url", rs.URL(), "--config", cfgPath, "--gpus", "none")
	waitHTTP(t, base, d)

	us := filepath.Join(dir, "us.yaml")
	_ = os.WriteFile(us, []byte("name: us-job\nbase_model: tiny-char\ndataset: file://"+root+"/configs/examples/data/tiny-train.jsonl\nresidency: [us]\n"), 0o644)
	_, errOut, code := cli(t, lathe, base, "submit", us)
	if code != 2 || !strings.Contains(errOut, "refused") || !strings.Contains(errOut, "lacks us") {
		t.Fatalf("[us] submit: exit %d\n%s", code, errOut)
	}

	eu := filepath.Join(dir, "eu.yaml")
	spec, _ := os.ReadFile(filepath.Join(root, "configs/examples/tiny-lora.yaml"))
	euSpec := strings.Replace(string(spec), "name: tiny-lora", "name: eu-job\nresidency: [eu]\nmax_wait: 1h", 1)
	euSpec = strings.ReplaceAll(euSpec, "data/tiny-", root+"/configs/examples/data/tiny-")
	_ = os.WriteFile(eu, []byte(euSpec), 0o644)
	out, errOut, code := cli(t, lathe, base, "route", "--explain", eu, "--assume-wait", "local=3h", "-o", "json")
	var ex struct {
		Backend string `json:"backend"`
		Refused bool   `json:"refused"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ex) != nil || ex.Backend != "aws-eu" {
		t.Fatalf("route --explain [eu] with local=3h: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = cli(t, lathe, base, "submit", eu, "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("[eu] submit --wait: exit %d\n%s\n%s", code, out, errOut)
	}
	j := decodeJob(t, out)
	if j.State != jobtype.StateSucceeded || j.Route == nil || j.Route.Backend != "local" || j.Route.Site != "dc-frankfurt" ||
		len(j.Artifacts) == 0 || j.Artifacts[0].Site != "dc-frankfurt" || strings.Join(j.Artifacts[0].Residency, ",") != "eu" {
		t.Fatalf("[eu] job: %s route %+v artifacts %+v", j.State, j.Route, j.Artifacts)
	}

	out, errOut, code = cli(t, lathe, base, "audit", "-o", "json")
	if code != 0 || strings.Count(out, `"kind": "refusal"`)+strings.Count(out, `"kind":"refusal"`) != 1 {
		t.Fatalf("lathe audit: exit %d\n%s\n%s", code, out, errOut)
	}
	if out, errOut, code = cli(t, lathe, base, "audit", "verify"); code != 0 || !strings.Contains(out+errOut, "intact") {
		t.Fatalf("audit verify, untouched: exit %d\n%s\n%s", code, out, errOut)
	}
	exp := filepath.Join(dir, "ledger.jsonl")
	_, errOut, code = cli(t, lathe, base, "audit", "export", "--to", exp)
	if code != 0 || !strings.Contains(errOut, "publish this head") {
		t.Fatalf("audit export: exit %d\n%s", code, errOut)
	}
	key := filepath.Join(dir, "data", "ledger.key")
	if out, errOut, code = cli(t, lathe, base, "audit", "verify", "--export", exp, "--key", key); code != 0 {
		t.Fatalf("offline verify of the export: exit %d\n%s\n%s", code, out, errOut)
	}
	// Tamper: delete the first record in Redis by hand.
	ids, err := rs.Client().XRange(t.Context(), "lathe:ledger", "-", "+").Result()
	if err != nil || len(ids) < 2 {
		t.Fatalf("ledger stream: %v (%d entries)", err, len(ids))
	}
	if err := rs.Client().XDel(t.Context(), "lathe:ledger", ids[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = cli(t, lathe, base, "audit", "verify")
	if code != 1 || !strings.Contains(out+errOut, "record 1") {
		t.Fatalf("audit verify after deleting record 1: exit %d\n%s\n%s", code, out, errOut)
	}
	// SIGHUP reloads the routing sections (what a reload does to queued
	// jobs is scheduler's TestConfigReloadHolds).
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	waitfor.Value(t, 10*time.Second, "a reload logged after SIGHUP", d.output,
		func(log string) bool { return strings.Contains(log, "routing config reloaded") })
}
