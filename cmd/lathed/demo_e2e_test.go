package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestDemoScript runs the README's one-command demo, scripts/demo.sh, with
// the binaries this test run built: it must start lathed up, run the demo
// job to success, pull an adapter that lowers the eval loss, and stop the
// daemon (the script exits only after it has).
func TestDemoScript(t *testing.T) {
	requireTorch(t)
	lathed, _ := binaries(t)
	dir := t.TempDir()
	reachableByTrainers(t, dir) // the demo's data dir is under it
	cmd := exec.Command(filepath.Join(repoRoot(t), "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "LATHE_BIN_DIR="+filepath.Dir(lathed), "LATHE_DEMO_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`eval loss ([0-9.]+); with adapter .*: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("scripts/demo.sh printed no evaluation:\n%s", out)
	}
	base, _ := strconv.ParseFloat(string(m[1]), 64)
	adapted, _ := strconv.ParseFloat(string(m[2]), 64)
	if !(adapted < base) {
		t.Errorf("the demo adapter does not lower the eval loss: base %v, adapter %v\n%s", base, adapted, out)
	}
	for _, f := range []string{"adapter_model.safetensors", "adapter_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, "adapter", f)); err != nil {
			t.Errorf("pulled adapter: %v", err)
		}
	}
	if !regexp.MustCompile(`demo: done in \d+ s; lathed stopped`).Match(out) {
		t.Errorf("scripts/demo.sh did not say it stopped lathed:\n%s", out)
	}
}
