package aws

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/lathe-ml/lathe/internal/cloud"
)

func validConfig() Config {
	return Config{
		Cluster: "prod", Backend: "aws-eu", Region: "eu-central-1", AMI: "ami-0123456789abcdef0",
		Subnets: []string{"subnet-0aaa", "subnet-0bbb"}, SecurityGroups: []string{"sg-0123"},
		InstanceProfile: "lathe-instance",
		InstanceTypes:   []InstanceType{{Name: "g5.xlarge", OnDemandUSDPerHour: 1.006, SpotUSDPerHour: 0.45}},
	}
}

// TestNewValidatesConfig: every bad field is named with its value; zero Spot
// becomes "never".
func TestNewValidatesConfig(t *testing.T) {
	ctx := context.Background()
	b, err := New(ctx, validConfig(), noEnv)
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if b.Config().Spot != SpotNever {
		t.Fatalf("default spot = %q", b.Config().Spot)
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want []string
	}{
		{"cluster", func(c *Config) { c.Cluster = "a b" }, []string{`cluster "a b"`}},
		{"backend", func(c *Config) { c.Backend = "" }, []string{`backend ""`}},
		{"region", func(c *Config) { c.Region = "europe" }, []string{`region "europe"`}},
		{"ami", func(c *Config) { c.AMI = "img-1" }, []string{`ami "img-1"`}},
		{"no subnets", func(c *Config) { c.Subnets = nil }, []string{"subnets: at least one"}},
		{"bad subnet", func(c *Config) { c.Subnets = []string{"subnet-0aaa", "sn-1", "subnet-0aaa"} },
			[]string{`subnets[1] "sn-1"`, `subnets[2] "subnet-0aaa": listed twice`}},
		{"sg", func(c *Config) { c.SecurityGroups = []string{"default"} }, []string{`security_groups[0] "default"`}},
		{"profile", func(c *Config) { c.InstanceProfile = " " }, []string{`instance_profile " "`}},
		{"spot", func(c *Config) { c.Spot = "sometimes" }, []string{`spot "sometimes"`}},
		{"spot only without prices", func(c *Config) {
			c.Spot = SpotOnly
			c.InstanceTypes = []InstanceType{{Name: "g5.xlarge", OnDemandUSDPerHour: 1}}
		}, []string{`spot "only": no instance type has a spot price`}},
		{"types", func(c *Config) { c.InstanceTypes = nil }, []string{"instance_types: at least one"}},
		{"type fields", func(c *Config) {
			c.InstanceTypes = []InstanceType{{Name: "gpu", OnDemandUSDPerHour: 0, SpotUSDPerHour: -1},
				{Name: "g5.xlarge", OnDemandUSDPerHour: math.NaN()}, {Name: "g5.xlarge", OnDemandUSDPerHour: 1}}
		}, []string{`instance_types[0].name "gpu"`, `instance_types[0] "gpu" on_demand_usd_per_hour 0`,
			`instance_types[0] "gpu" spot_usd_per_hour -1`, `instance_types[1] "g5.xlarge" on_demand_usd_per_hour NaN`,
			`instance_types[2].name "g5.xlarge": listed twice`}},
		{"endpoint", func(c *Config) { c.EndpointURL = "localhost:5000" }, []string{`endpoint_url "localhost:5000"`}},
		// A password in the endpoint is never echoed (nor url.Parse's error, which quotes it).
		{"endpoint password", func(c *Config) { c.EndpointURL = "ftp://AKIA:s3cret@minio:9000" }, []string{`endpoint_url "ftp://AKIA:xxxxx@minio:9000"`}},
		{"endpoint unparseable", func(c *Config) { c.EndpointURL = "http://AKIA:s3cret@minio:90x0" }, []string{`endpoint_url "http://xxxxx@minio:90x0"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := validConfig()
			c.mod(&cfg)
			_, err := New(ctx, cfg, noEnv)
			if err == nil {
				t.Fatal("New accepted a bad config")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestRequestValidation: Launch and ChooseTypes refuse a bad request before
// any AWS call (the backend has no EC2 client at all here).
func TestRequestValidation(t *testing.T) {
	b, err := New(context.Background(), validConfig(), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Request{
		{JobID: "", Attempt: 1},
		{JobID: "j", Attempt: 0},
		{JobID: "j", Attempt: 1, GPUs: -1},
		{JobID: "j", Attempt: 1, GPUMemoryGB: math.Inf(1)},
		{JobID: "j", Attempt: 1, UserData: strings.Repeat("x", maxUserDataBytes+1)},
	} {
		if _, err := b.Launch(context.Background(), r); err == nil || !strings.Contains(err.Error(), "aws: request") {
			t.Errorf("Launch(%+v) err = %v", r, err)
		}
	}
}

// TestRankChoices covers the market order of each spot policy without AWS.
func TestRankChoices(t *testing.T) {
	cfg := Config{InstanceTypes: []InstanceType{
		{Name: "a.x", OnDemandUSDPerHour: 3, SpotUSDPerHour: 1},
		{Name: "b.x", OnDemandUSDPerHour: 2},
		{Name: "c.x", OnDemandUSDPerHour: 2, SpotUSDPerHour: 1.5},
		{Name: "d.x", OnDemandUSDPerHour: 0.5, SpotUSDPerHour: 0.1},
	}}
	fits := []gpuFit{{name: "a.x", usable: true}, {name: "b.x", usable: true}, {name: "c.x", usable: true}, {name: "d.x"}}
	for spot, want := range map[string][]string{
		SpotNever:  {"b.x on-demand", "c.x on-demand", "a.x on-demand"},
		SpotOnly:   {"a.x spot", "c.x spot"},
		SpotPrefer: {"a.x spot", "c.x spot", "b.x on-demand", "c.x on-demand", "a.x on-demand"},
	} {
		cfg.Spot = spot
		if got := choiceNames(rankChoices(cfg, fits)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", spot, got, want)
		}
	}
}

// TestBackoffBounded: waits double from 500ms up to 20s, each in [d/2, d).
func TestBackoffBounded(t *testing.T) {
	for n := 0; n < 12; n++ {
		lo, hi := backoff(n, 0), backoff(n, 0.999999)
		d := backoffBase << n
		if d > backoffMax || d <= 0 {
			d = backoffMax
		}
		if lo != d/2 || hi >= d || hi < lo {
			t.Errorf("n=%d: [%v, %v], want [%v, %v)", n, lo, hi, d/2, d)
		}
	}
}

// TestClientToken: stable per attempt, choice and subnet; 64 characters.
func TestClientToken(t *testing.T) {
	a := clientToken("job", 1, 0, 0)
	if len(a) != 64 || a != clientToken("job", 1, 0, 0) {
		t.Fatalf("token %q", a)
	}
	seen := map[string]bool{a: true}
	for _, tok := range []string{clientToken("job", 2, 0, 0), clientToken("job", 1, 1, 0), clientToken("job", 1, 0, 1), clientToken("job1", 1, 0, 0)} {
		if seen[tok] {
			t.Fatalf("token collision %q", tok)
		}
		seen[tok] = true
	}
}

func managed(id, job, attempt string, launched time.Time) Instance {
	tags := map[string]string{TagManaged: "true", TagCluster: "prod"}
	if job != "" {
		tags[TagJobID] = job
	}
	if attempt != "" {
		tags[TagAttempt] = attempt
	}
	return Instance{ID: id, State: "running", LaunchTime: launched, Tags: tags}
}

// orphans is cloud.Orphans of EC2 instances seen through the seam
// (Instance.Cloud): their tags parsed, then the reconciler's policy.
func orphans(insts []Instance, live map[string]int, now time.Time, grace time.Duration) []cloud.Instance {
	out := make([]cloud.Instance, len(insts))
	for i, in := range insts {
		out[i] = in.Cloud()
	}
	return cloud.Orphans(out, live, now, grace)
}

// TestOrphans: what the reconciler terminates, failing closed, with the
// tags as EC2 holds them.
func TestOrphans(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	grace := 10 * time.Minute
	old := now.Add(-time.Hour)
	live := map[string]int{"job-a": 2, "job-b": 1}
	cases := []struct {
		name   string
		inst   Instance
		orphan bool
	}{
		{"live attempt", managed("i-1", "job-a", "2", old), false},
		{"stale attempt of a live job", managed("i-2", "job-a", "1", old), true},
		{"job without a live attempt", managed("i-3", "job-z", "1", old), true},
		{"young, no live attempt", managed("i-4", "job-z", "1", now.Add(-time.Minute)), false},
		{"exactly grace old", managed("i-5", "job-z", "1", now.Add(-grace)), false},
		{"just over grace", managed("i-6", "job-z", "1", now.Add(-grace-time.Second)), true},
		{"no job tag", managed("i-7", "", "1", old), true},
		{"no attempt tag", managed("i-8", "job-b", "", old), true},
		{"attempt not a number", managed("i-9", "job-b", "one", old), true},
		{"attempt zero", managed("i-10", "job-b", "0", old), true},
		{"young without tags", managed("i-11", "", "", now), false},
		{"unknown launch time", managed("i-12", "job-z", "1", time.Time{}), true},
		{"unknown launch time, live", managed("i-13", "job-b", "1", time.Time{}), false},
		{"terminated", func() Instance { i := managed("i-14", "job-z", "1", old); i.State = "terminated"; return i }(), false},
		{"shutting down", func() Instance { i := managed("i-15", "job-z", "1", old); i.State = "shutting-down"; return i }(), false},
		{"stopped counts", func() Instance { i := managed("i-16", "job-z", "1", old); i.State = "stopped"; return i }(), true},
		{"not managed", func() Instance { i := managed("i-17", "job-z", "1", old); i.Tags[TagManaged] = "false"; return i }(), false},
	}
	var all []Instance
	want := map[string]bool{}
	for _, c := range cases {
		got := orphans([]Instance{c.inst}, live, now, grace)
		if (len(got) == 1) != c.orphan {
			t.Errorf("%s: orphan = %v, want %v", c.name, len(got) == 1, c.orphan)
		}
		all = append(all, c.inst)
		if c.orphan {
			want[c.inst.ID] = true
		}
	}
	got := orphans(all, live, now, grace)
	if len(got) != len(want) {
		t.Fatalf("all together: %d orphans, want %d", len(got), len(want))
	}
	for _, o := range got {
		if !want[o.ID] {
			t.Errorf("unexpected orphan %s", o.ID)
		}
	}
	if got := orphans(all, nil, now, grace); len(got) < len(want) {
		t.Errorf("no live attempts: %d orphans, want at least %d", len(got), len(want))
	}
}

// TestCost: per started second with a 60-second minimum.
func TestCost(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		end   time.Time
		price float64
		want  float64
	}{
		{"one hour", t0.Add(time.Hour), 3.6, 3.6},
		{"ten seconds bills a minute", t0.Add(10 * time.Second), 3.6, 0.06},
		{"zero duration bills a minute", t0, 3.6, 0.06},
		{"end before launch bills a minute", t0.Add(-time.Hour), 3.6, 0.06},
		{"exactly a minute", t0.Add(time.Minute), 3.6, 0.06},
		{"61 s", t0.Add(61 * time.Second), 3.6, 0.061},
		{"a started second counts", t0.Add(90*time.Second + time.Millisecond), 3.6, 0.091},
		{"90 min at 1.006", t0.Add(90 * time.Minute), 1.006, 1.509},
		{"zero price", t0.Add(time.Hour), 0, 0},
		{"negative price", t0.Add(time.Hour), -1, 0},
		{"NaN price", t0.Add(time.Hour), math.NaN(), 0},
	}
	for _, c := range cases {
		if got := Cost(t0, c.end, c.price); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: Cost = %v, want %v", c.name, got, c.want)
		}
	}
}

// noEnv keeps the developer's AWS environment out of New; these tests make
// no AWS call.
var noEnv = WithAWSConfig(aws.Config{})

// TestPrice: spot price for spot instances, on-demand otherwise.
func TestPrice(t *testing.T) {
	cfg := validConfig()
	cfg.InstanceTypes = append(cfg.InstanceTypes, InstanceType{Name: "p4d.24xlarge", OnDemandUSDPerHour: 32.77})
	b, err := New(context.Background(), cfg, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		inst Instance
		want float64
	}{
		{Instance{Type: "g5.xlarge", Spot: true}, 0.45},
		{Instance{Type: "g5.xlarge"}, 1.006},
		{Instance{Type: "p4d.24xlarge", Spot: true}, 32.77},
		{Instance{Type: "m5.large"}, 0},
	} {
		if got := b.Price(c.inst); got != c.want {
			t.Errorf("Price(%+v) = %v, want %v", c.inst, got, c.want)
		}
	}
}
