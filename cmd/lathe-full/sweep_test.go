package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

// TestSweepCommands: against the real scheduler handler in process
// (testDaemon: no placement runs, so trials stay queued), `lathe sweep
// submit` reads the sweep file and its base job by a relative path and
// stores 4 trials (1 admitted, 3 waiting for max_parallel); `sweep status`
// prints the leaderboard with each trial's params and gate; `lathe status`
// of a waiting trial says what it waits for; `list --sweep` lists the 4 in
// index order; `sweep cancel` cancels every trial; a bad sweep field is
// named and nothing is stored.
func TestSweepCommands(t *testing.T) {
	d := newTestDaemon(t, "", time.Hour)
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "job.yaml"), []byte("name: j\nbase_model: tiny-char\ndataset: /data/train.jsonl\nresources: {gpus: 0}\n"), 0o644)
	spec := filepath.Join(dir, "sweep.yaml")
	_ = os.WriteFile(spec, []byte("name: cli-sweep\njob: job.yaml\nparameters:\n  training.learning_rate: {grid: [0.01, 0.02]}\n  lora.rank: {grid: [4, 8]}\nmax_parallel: 1\n"), 0o644)
	now := time.Now()
	r := latheAt(t, d.url, now, "sweep", "submit", spec, "-o", "json")
	var st wire.SweepStatus
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &st) != nil || st.Sweep == nil || st.Sweep.Trials != 4 {
		t.Fatalf("sweep submit: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	id := st.Sweep.ID
	r = latheAt(t, d.url, now, "sweep", "status", id)
	requireLines(t, "sweep status", r.stdout, []string{"sweep " + id + " (cli-sweep): running, grid search, 4 trials, max_parallel 1",
		"RANK", "EVAL_LOSS", "lora.rank=4 training.learning_rate=0.01", "queued (waits: max_parallel)"})
	if n := strings.Count(r.stdout, "waits: max_parallel"); n != 3 {
		t.Errorf("sweep status: %d trials wait for max_parallel, want 3:\n%s", n, r.stdout)
	}
	r = latheAt(t, d.url, now, "status", "j-"+id[2:]+"-00003")
	requireLines(t, "status of a waiting trial", r.stdout, []string{"Sweep:", id + ", trial 3 (rung 0)", "Params:", "lora.rank=8 training.learning_rate=0.02",
		"Waits for:", "the sweep: max_parallel"})
	r = latheAt(t, d.url, now, "list", "--sweep", id, "-o", "json")
	var l wire.JobList
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &l) != nil || len(l.Jobs) != 4 || l.Jobs[0].Trial.Index != 0 || l.Jobs[3].Trial.Index != 3 {
		t.Fatalf("list --sweep: exit %d\n%s", r.code, r.stdout)
	}
	r = latheAt(t, d.url, now, "sweep", "cancel", id)
	if r.code != exitOK || !strings.Contains(r.stdout, "cancelled: 4 trials") {
		t.Fatalf("sweep cancel: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, j := range l.Jobs {
		if got, err := d.store.Get(d.ctx, j.ID); err != nil || got.State != jobtype.StateCancelled {
			t.Errorf("trial %s after the cancel: %v %v", j.ID, got.State, err)
		}
	}
	_ = os.WriteFile(spec, []byte("name: bad\njob: job.yaml\nparameters:\n  lora.rank: {grid: []}\nmax_parallel: 0\n"), 0o644)
	r = latheAt(t, d.url, now, "sweep", "submit", spec)
	if r.code != exitUsage || !strings.Contains(r.stderr, "parameters.lora.rank") || !strings.Contains(r.stderr, "max_parallel") {
		t.Errorf("a bad sweep: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = latheAt(t, d.url, now, "sweep", "list")
	if n := strings.Count(r.stdout, "s-"); r.code != exitOK || n != 1 {
		t.Errorf("sweep list: exit %d, %d sweeps (want 1: the bad one was not stored):\n%s", r.code, n, r.stdout)
	}
}
