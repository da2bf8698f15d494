package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden_summaries.json from this code")

// goldenCase is one simulation whose outcome is pinned: what the simulator
// decided before issue #25's speed-up, which must not change it.
type goldenCase struct {
	Name     string
	Jobs     int // the trace's first Jobs jobs
	Owned    int
	NodeGPUs int
	NoCloud  bool
	Est      string // learned, hint:1, oracle
	Mixed    bool   // draw priorities urgent/normal/batch (preemptions)
}

// goldenResult is a case's Summary and a digest of every job's Outcome.
type goldenResult struct {
	Summary  Summary `json:"summary"`
	Outcomes string  `json:"outcomes_sha256"`
}

var goldenCases = []goldenCase{
	{Name: "nocloud-600-32-learned", Jobs: 600, Owned: 32, NoCloud: true, Est: "learned"},
	{Name: "nocloud-600-32x8-hint-mixed", Jobs: 600, Owned: 32, NodeGPUs: 8, NoCloud: true, Est: "hint:1", Mixed: true},
	{Name: "cloud-1500-64-learned", Jobs: 1500, Owned: 64, Est: "learned"},
	{Name: "cloud-1500-128-oracle-mixed", Jobs: 1500, Owned: 128, Est: "oracle", Mixed: true},
}

func (c goldenCase) run(t *testing.T) goldenResult {
	t.Helper()
	jobs, setup := simTrace(t)
	if c.Mixed {
		mix, err := ParseMix("--priority", "urgent=0.1,normal=0.6,batch=0.3", ValidPriority)
		if err != nil {
			t.Fatal(err)
		}
		tr, _ := simTraceRaw(t)
		jobs, _ = JobsFromTrace(tr, Draws{Seed: 7, Priority: mix})
	}
	if c.NoCloud {
		setup = noCloud(t, setup)
	}
	setup.Owned, setup.NodeGPUs = c.Owned, c.NodeGPUs
	e, err := ParseEstimator(c.Est)
	if err != nil {
		t.Fatal(err)
	}
	jobs = WithEstimates(jobs[:c.Jobs], e, 1)
	res, err := Simulate(context.Background(), setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, o := range res.Jobs {
		fmt.Fprintf(h, "%+v\n", o)
	}
	return goldenResult{Summary: Summarize(res, jobs, c.Owned, c.Est), Outcomes: hex.EncodeToString(h.Sum(nil))}
}

// TestSimulateGolden checks that the simulator decides exactly as it did
// when testdata/golden_summaries.json was recorded (go test
// -update-golden rewrites it): the same Summary and the same outcome of
// every job, on traces with and without a cloud backend, one node or
// several, learned, hinted and oracle estimates, with and without
// preemptions.
func TestSimulateGolden(t *testing.T) {
	const path = "testdata/golden_summaries.json"
	got := map[string]goldenResult{}
	for _, c := range goldenCases {
		got[c.Name] = c.run(t)
	}
	if *updateGolden {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for _, c := range goldenCases {
		g, err := json.MarshalIndent(got[c.Name], "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		var w bytes.Buffer
		if err := json.Indent(&w, want[c.Name], "", "  "); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if !bytes.Equal(g, w.Bytes()) {
			t.Errorf("%s: the simulation decided differently:\ngot  %s\nwant %s", c.Name, g, w.Bytes())
		}
	}
}
