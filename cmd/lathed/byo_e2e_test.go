package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestUpRawTrainer: a trainer that prints none of the contract (a plain
// Python program configured under trainers:) still runs through lathed
// up; it ends succeeded on exit 0 and its artifacts are what it left at
// the top of LATHE_OUTPUT_DIR, with their sizes and sha256. It has no
// progress, no metrics and no checkpoints: what docs/trainer.md says it
// loses.
func TestUpRawTrainer(t *testing.T) {
	py := hfPython(t)
	lathed, lathe := binaries(t)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	script := filepath.Join(t.TempDir(), "raw.py")
	weights := []byte("not really weights, but bytes a trainer wrote\n")
	os.WriteFile(script, []byte(fmt.Sprintf(`import os, sys
print("loading data, training for a while (no contract lines)")
sys.stderr.write("a warning on stderr\n")
with open(os.path.join(os.environ["LATHE_OUTPUT_DIR"], "weights.bin"), "wb") as f:
    f.write(%q.encode())
`, weights)), 0o644)
	cfg := filepath.Join(t.TempDir(), "lathe.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("trainers:\n  raw: [%q, %q]\n", py, script)), 0o644)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data, "--config", cfg)
	waitHTTP(t, base, d)
	spec := filepath.Join(t.TempDir(), "raw.yaml")
	os.WriteFile(spec, []byte(fmt.Sprintf("name: raw\nbase_model: my-own-model\ndataset: file://%s/configs/examples/data/tiny-train.jsonl\ntrainer: raw\nresources: {gpus: 0}\n", repoRoot(t))), 0o644)
	id := submitID(t, lathe, base, spec)
	j := waitJob(t, base, id, 2*time.Minute, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("raw trainer: %s (%s): %s", j.State, j.Reason, j.Error)
	}
	sum := sha256.Sum256(weights)
	if len(j.Artifacts) != 1 || j.Artifacts[0].Path != "weights.bin" || j.Artifacts[0].Bytes != int64(len(weights)) ||
		j.Artifacts[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("artifacts %+v, want weights.bin of %d bytes", j.Artifacts, len(weights))
	}
	if j.Progress.Step != 0 || len(j.Metrics) != 0 || countEvents(t, base, id, "checkpoint") != 0 {
		t.Fatalf("a trainer without events has progress %+v, metrics %v", j.Progress, j.Metrics)
	}
	b, err := os.ReadFile(filepath.Join(pullAdapter(t, lathe, base, id), "weights.bin"))
	if err != nil || string(b) != string(weights) {
		t.Fatalf("pulled weights.bin: %q (%v)", b, err)
	}
}
