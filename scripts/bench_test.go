package scripts

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestBenchScriptsParse runs bash -n on every benchmark script: they need
// what CI lacks (Slurm, minutes of machine time), so a syntax error would
// otherwise show only when someone next measures.
func TestBenchScriptsParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("bench", "*.sh"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no bench/*.sh (err %v)", err)
	}
	for _, f := range files {
		if out, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", f, err, out)
		}
	}
}
