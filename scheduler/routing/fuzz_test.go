package routing

import (
	"testing"
	"time"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// FuzzDecideOnParsedConfig checks that every config ParseConfig accepts
// keeps the residency property for a few jobs (routecfg's FuzzParseConfig
// checks the parsing itself). Seeds: the issue's configs and a minimal one.
//
//	go test -fuzz FuzzDecideOnParsedConfig -fuzztime 30s ./scheduler/routing
func FuzzDecideOnParsedConfig(f *testing.F) {
	for _, s := range []string{issueConfig, briefConfig, withRedisIn("aws-us-east-1"), "",
		"sites: {a: [onprem]}\nredis_site: a\nbackends: {l: {kind: local, site: a}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := routecfg.ParseConfig(data)
		if err != nil {
			return
		}
		o := newOracle(c)
		jobs := []Job{{GPUs: 1, MaxWait: time.Hour, ExpectedRuntime: time.Hour, Dataset: "file:///d"}}
		for _, s := range c.Sites {
			jobs = append(jobs, Job{Residency: s.Tags, GPUs: 0, Output: "file:///o", MaxRuntime: time.Hour})
		}
		for b := range c.Datasets.Buckets {
			jobs = append(jobs, Job{Residency: c.DefaultResidency, Dataset: "s3://" + b + "/x", ValuePerHourUSD: 10, GPUs: 1})
		}
		s := Snapshot{Config: c, Pools: map[string]Pool{}}
		for _, b := range c.Backends {
			s.Pools[b.Name] = h100Pool(1)
		}
		for _, j := range jobs {
			d := Decide(j, s)
			if v := o.violations(j, d); len(v) > 0 {
				t.Fatalf("job %+v: %v\ndecision %+v", j, v, d)
			}
		}
	})
}
