package routing

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// issueConfig is the config of the issue's scenarios: a local pool in an
// [onprem eu] site, aws-eu in a [cloud eu] site and aws-us in a [cloud us]
// site, Redis beside the local pool.
var issueConfig = readTestdata("testdata/issue.yaml")

// readTestdata returns a file of testdata, for configs shared with other
// packages' tests.
func readTestdata(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func mustParse(t testing.TB, src string) routecfg.Config {
	t.Helper()
	c, err := routecfg.ParseConfig([]byte(src))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return c
}

// withRedisIn is issueConfig with Redis in another site.
func withRedisIn(site string) string {
	return strings.Replace(issueConfig, "redis_site: dc-frankfurt", "redis_site: "+site, 1)
}

// h100Pool is a local pool of n nodes with 8 healthy H100s each.
func h100Pool(n int) Pool {
	p := Pool{HealthyGPUs: 8 * n}
	for i := range n {
		p.Nodes = append(p.Nodes, PoolNode{Name: "gpu" + string(rune('a'+i)), GPUs: []PoolGPU{{Model: "NVIDIA H100 80GB HBM3", MemoryGB: 80, Healthy: 8}}})
	}
	return p
}

// baseSnapshot: the issue config, a 2-node H100 pool with an empty queue.
func baseSnapshot(t testing.TB, cfg string) Snapshot {
	return Snapshot{
		Now:    time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
		Config: mustParse(t, cfg),
		Pools:  map[string]Pool{"local": h100Pool(2)},
	}
}

func dur(d time.Duration) *time.Duration { return &d }

// candidate returns the candidate of backend name.
func candidate(t testing.TB, d Decision, name string) Candidate {
	t.Helper()
	for _, c := range d.Candidates {
		if c.Backend == name {
			return c
		}
	}
	t.Fatalf("no candidate %s in %+v", name, d.Candidates)
	return Candidate{}
}

// hasReason reports whether some reason of d contains sub.
func hasReason(d Decision, sub string) bool {
	for _, r := range d.Reasons {
		if strings.Contains(r, sub) {
			return true
		}
	}
	return false
}
