package routecfg

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// issueConfig is the config of the issue's scenarios (routing's tests
// decide on it).
var issueConfig = readTestdata("../testdata/issue.yaml")

// FuzzParseConfig checks that ParseConfig never panics, that every error it
// returns is one a caller can branch on, and that every config it accepts
// is valid by the rules in Go too and hashes the same when compiled or
// parsed again. Seeds: the issue's configs, one config per kind of error
// (configErrorCases), and odd YAML. routing's FuzzDecideOnParsedConfig
// holds the configs it accepts to the residency property.
//
//	go test -fuzz FuzzParseConfig -fuzztime 30s ./scheduler/routing/routecfg
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{issueConfig, briefConfig, strings.Replace(issueConfig, "redis_site: dc-frankfurt", "redis_site: aws-us-east-1", 1), "", "data_dir: /x\n", "---\n", "[]", "null",
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
	})
}
