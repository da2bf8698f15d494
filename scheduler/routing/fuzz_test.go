package routing

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzParseConfig checks that ParseConfig never panics, that every error it
// returns is one a caller can branch on, and that every config it accepts
// is valid by the rules in Go too, hashes the same when parsed again, and
// keeps the residency property for a few jobs. Seeds: the issue's configs,
// one config per kind of error (configErrorCases), and odd YAML.
//
//	go test -fuzz FuzzParseConfig -fuzztime 30s ./scheduler/routing
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{issueConfig, briefConfig, withRedisIn("aws-us-east-1"), "", "data_dir: /x\n", "---\n", "[]", "null",
		"a: &a {x: 1}\nsites: *a\n", "sites: {a: [onprem]}\nredis_site: a\nbackends: {l: {kind: local, site: a}}\n",
		"sites: {a: ~}\nredis_site: a\nbackends: {l: {kind: local, site: a, price: {usd_per_gpu_hour: 0x10}}}\nbudgets: {teams: {x: 1e3}}\n",
		`{"sites": {"a": ["eu"]}, "redis_site": "a", "backends": {"l": {"kind": "local", "site": "a"}}}`,
	} {
		f.Add([]byte(s))
	}
	for _, tc := range configErrorCases() {
		f.Add([]byte(tc.src))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %T %v is neither *ConfigError nor ErrTooLarge", err, err)
			}
			if ce != nil && len(ce.Errors) == 0 {
				t.Fatalf("empty ConfigError")
			}
			if !reflect.DeepEqual(c, Config{}) {
				t.Fatalf("a Config with the error: %+v", c)
			}
			return
		}
		if len(c.Sites) == 0 || len(c.Backends) == 0 || len(c.DefaultResidency) == 0 {
			t.Fatalf("accepted config lacks sites, backends or a default residency: %+v", c)
		}
		again, errs := compile(c, nil)
		if len(errs) > 0 {
			t.Fatalf("ParseConfig accepted a config the Go rules refuse: %v", &ConfigError{Errors: errs})
		}
		if again.Hash() != c.Hash() || hashOf(c) != c.Hash() {
			t.Fatalf("hash changed on recompiling")
		}
		c2, err := ParseConfig(data)
		if err != nil || c2.Hash() != c.Hash() {
			t.Fatalf("second parse: %v, hash %s vs %s", err, c2.Hash(), c.Hash())
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
