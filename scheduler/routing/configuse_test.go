package routing

import (
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// The decisions on configs whose parsing routecfg's tests check.

// briefConfig is the example of the issue, TCO price included (routecfg's
// tests read it too).
var briefConfig = readTestdata("routecfg/testdata/brief.yaml")

// TestNoFileSite: with no local backend and no datasets.file_site, file://
// URIs have no site (routecfg's TestParseConfigDefaults parses the config).
func TestNoFileSite(t *testing.T) {
	c := mustParse(t, readTestdata("routecfg/testdata/cloud-only.yaml"))
	d := Decide(baseJob("eu"), Snapshot{Config: c})
	if !d.Refused || !strings.HasPrefix(d.Candidates[0].Reason, ReasonNoSite+": dataset file:///data/support/train.jsonl is file:// and there is no datasets.file_site") {
		t.Errorf("file:// data with no file site: %+v", d)
	}
	j := baseJob("eu")
	j.Dataset, j.Output = "", "file:///x"
	if d := Decide(j, Snapshot{Config: c}); !d.Refused || !strings.HasPrefix(d.Candidates[0].Reason, ReasonNoSite+": output") {
		t.Errorf("file:// output with no file site: %+v", d)
	}
}

// TestDecideOnConfigInGo: Decide on a Config built in Go (compiled on each
// call) from many goroutines: the race detector sees any write into it
// (routecfg's TestLaunchSettingsInGo checks the rules and defaults).
func TestDecideOnConfigInGo(t *testing.T) {
	base := mustParse(t, briefConfig)
	c := routecfg.Config{Sites: base.Sites, RedisSite: base.RedisSite, Datasets: base.Datasets, Backends: []routecfg.Backend{
		{Name: "aws-eu", Kind: routecfg.KindAWS, Site: "aws-eu-central-1", Region: "eu-central-1", CheckpointURI: "s3://lathe-eu-ckpt/", Spot: true,
			InstanceTypes: []routecfg.InstanceType{{Name: "g6e.xlarge", GPUs: 1, GPUModel: "L40S", GPUMemoryGB: 48, OnDemandUSDPerHour: 1.86, SpotUSDPerHour: 0.9}}},
		{Name: "local", Kind: routecfg.KindLocal, Site: "dc-frankfurt"},
	}}
	c.Sites = append([]routecfg.Site{{Name: "bare"}}, c.Sites...) // nil tags: normalised in a copy
	done := make(chan Decision)
	for range 4 {
		go func() {
			done <- Decide(Job{Residency: []string{"eu"}, GPUs: 1, Dataset: "s3://lathe-eu-data/x"}, Snapshot{Config: c})
		}()
	}
	for range 4 {
		if d := <-done; d.Refused || d.Backend != "aws-eu" || !candidate(t, d, "aws-eu").Spot {
			t.Errorf("decision %+v", d)
		}
	}
	if c.Sites[0].Tags != nil || c.Backends[0].SpotPolicy != "" || c.Backends[0].MaxInstances != 0 {
		t.Errorf("Decide wrote into the Config: %+v", c)
	}
}
