package routecfg

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/cost"
)

// briefConfig is the example of the issue, TCO price included.
var briefConfig = readTestdata("testdata/brief.yaml")

func TestParseConfigExample(t *testing.T) {
	c := mustParse(t, briefConfig)
	tco := cost.TCO{PurchaseUSDPerGPU: 30000, AmortisationMonths: 36, PowerKWPerGPU: 1, USDPerKWh: 0.25, PUE: 1.3, OpsOverheadPct: 20, Utilisation: 0.7}
	want := Config{
		Sites: []Site{
			{Name: "dc-frankfurt", Tags: []string{"onprem", "eu", "de"}},
			{Name: "aws-eu-central-1", Tags: []string{"cloud", "eu", "de"}},
			{Name: "aws-us-east-1", Tags: []string{"cloud", "us"}},
		},
		RedisSite: "dc-frankfurt",
		Backends: []Backend{
			{Name: "local", Kind: KindLocal, Site: "dc-frankfurt", CheckpointURI: "file:///shared/ckpt", Price: &Price{TCO: &tco}},
			{Name: "aws-eu", Kind: KindAWS, Site: "aws-eu-central-1", Region: "eu-central-1", CheckpointURI: "s3://lathe-eu-ckpt/",
				BudgetUSDPerMonth: 5000, SpotPolicy: SpotNever,
				// the launch defaults: the checkpoint bucket is in the backend's site
				WorkURI: "s3://lathe-eu-ckpt/", MaxInstances: DefaultMaxInstances, AgentPath: DefaultAgentPath,
				InstanceTypes: []InstanceType{
					{Name: "p5.48xlarge", GPUs: 8, GPUModel: "H100", GPUMemoryGB: 80, OnDemandUSDPerHour: 55.04, SpotUSDPerHour: 30},
					{Name: "g6e.xlarge", GPUs: 1, GPUModel: "L40S", GPUMemoryGB: 48, OnDemandUSDPerHour: 1.86},
				}},
		},
		Datasets: Datasets{FileSite: "dc-frankfurt", Buckets: map[string]string{
			"lathe-eu-data": "aws-eu-central-1", "lathe-us-data": "aws-us-east-1", "lathe-eu-ckpt": "aws-eu-central-1"}},
		DefaultResidency: []string{"onprem"},
		TeamBudgetsUSD:   map[string]float64{"ml-research": 2000},
	}
	got := c
	got.idx = nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", got, want)
	}
	p := c.LocalPrices()
	if len(p) != 1 || p["local"] != tco.USDPerGPUHour() || p["local"] <= 0 {
		t.Errorf("LocalPrices %v; TCO gives %v", p, tco.USDPerGPUHour())
	}
	if b, _ := c.Backend("aws-eu"); b.USDPerGPUHour() != 0 || !b.Priced() {
		t.Errorf("aws backend: %v per GPU-hour, priced %v", b.USDPerGPUHour(), b.Priced())
	}
	if _, ok := c.Site("aws-us-east-1"); !ok {
		t.Errorf("Site(aws-us-east-1) missing")
	}
}

func TestParseConfigDefaults(t *testing.T) {
	// file_site defaults to the local backend's site; default_residency to [onprem].
	c := mustParse(t, strings.NewReplacer("  file_site: dc-frankfurt\n", "", "routing:\n  default_residency: [onprem]\n", "").Replace(briefConfig))
	if c.Datasets.FileSite != "dc-frankfurt" || !reflect.DeepEqual(c.DefaultResidency, []string{"onprem"}) {
		t.Errorf("defaults: file_site %q, default_residency %v", c.Datasets.FileSite, c.DefaultResidency)
	}
	// No local backend and no file_site: no file site (routing's
	// TestNoFileSite decides on this config).
	c = mustParse(t, readTestdata("testdata/cloud-only.yaml"))
	if c.Datasets.FileSite != "" {
		t.Errorf("cloud only: file_site %q", c.Datasets.FileSite)
	}
}

// configErrorCase is a config with one kind of error, and the error
// expected at its path.
type configErrorCase struct {
	name, src, field, value, msg string
}

// configErrorCases has one case per kind of error (also the fuzz seeds).
func configErrorCases() []configErrorCase {
	replace := func(old, new string) string {
		if !strings.Contains(briefConfig, old) {
			panic("briefConfig lacks " + old)
		}
		return strings.Replace(briefConfig, old, new, 1)
	}
	twoLocalSites := strings.Replace(replace("  file_site: dc-frankfurt\n", ""), "  aws-eu:\n", "  local-2: {kind: local, site: aws-us-east-1}\n  aws-eu:\n", 1)
	return append([]configErrorCase{
		{"unknown key in a section", replace("    region: eu-central-1\n", "    region: eu-central-1\n    zone: a\n"), "backends.aws-eu.zone", "", "unknown field"},
		{"unknown key in datasets", replace("  file_site: dc-frankfurt\n", "  file_site: dc-frankfurt\n  roots: [/data]\n"), "datasets.roots", "", "unknown field"},
		{"unknown key in routing", replace("  default_residency: [onprem]\n", "  default_residency: [onprem]\n  strategy: cheapest\n"), "routing.strategy", "", "unknown field"},
		{"unknown key in budgets", replace("  teams: {ml-research: 2000}\n", "  teams: {ml-research: 2000}\n  backends: {}\n"), "budgets.backends", "", "unknown field"},
		{"wrong type: quoted number", replace("gpus: 8,", `gpus: "8",`), "backends.aws-eu.instance_types.p5.48xlarge.gpus", "8", "must be a whole number"},
		{"wrong type: fraction", replace("gpus: 8,", "gpus: 8.5,"), "backends.aws-eu.instance_types.p5.48xlarge.gpus", "8.5", "must be a whole number"},
		{"wrong type: number for a word", replace("redis_site: dc-frankfurt", "redis_site: 12"), "redis_site", "12", "must be a string"},
		{"wrong type: list for a mapping", replace("  teams: {ml-research: 2000}", "  teams: [ml-research]"), "budgets.teams", "", "must be a mapping"},
		{"spot neither bool nor policy", replace("    spot: false\n", "    spot: sometimes\n"), "backends.aws-eu.spot", "sometimes", "is not a spot policy: want true, false, prefer, never or only"},
		{"wrong type: price", replace("on_demand_usd_per_hour: 1.86}", "on_demand_usd_per_hour: cheap}"), "backends.aws-eu.instance_types.g6e.xlarge.on_demand_usd_per_hour", "cheap", "must be a number"},
		{"infinite price", replace("on_demand_usd_per_hour: 1.86}", "on_demand_usd_per_hour: .inf}"), "backends.aws-eu.instance_types.g6e.xlarge.on_demand_usd_per_hour", ".inf", "must be a finite number"},
		{"upper-case tag", replace("[onprem, eu, de]", "[onprem, EU, de]"), "sites.dc-frankfurt[1]", "EU", "lower-case word"},
		{"tag with a space", replace("[cloud, us]", "[cloud, 'u s']"), "sites.aws-us-east-1[1]", "u s", "lower-case word"},
		{"duplicate tag", replace("[cloud, us]", "[cloud, us, us]"), "sites.aws-us-east-1[2]", "us", "duplicate tag"},
		{"bad default residency tag", replace("default_residency: [onprem]", "default_residency: [On-Prem]"), "routing.default_residency[0]", "On-Prem", "lower-case word"},
		{"empty default residency", replace("default_residency: [onprem]", "default_residency: []"), "routing.default_residency", "", "at least one tag"},
		{"bad site name", replace("  aws-us-east-1: [cloud, us]\n", "  AWS_US: [cloud, us]\n"), "sites.AWS_US", "AWS_US", "site name"},
		{"backend site not a site", replace("    site: aws-eu-central-1\n", "    site: aws-eu-west-1\n"), "backends.aws-eu.site", "aws-eu-west-1", "is not a site"},
		{"backend without a site", replace("    site: aws-eu-central-1\n", ""), "backends.aws-eu.site", "", "is required"},
		{"bucket site not a site", replace("lathe-us-data: aws-us-east-1", "lathe-us-data: aws-us-west-2"), "datasets.buckets.lathe-us-data", "aws-us-west-2", "is not a site"},
		{"bad bucket name", replace("lathe-us-data: aws-us-east-1", "Lathe_US: aws-us-east-1"), "datasets.buckets.Lathe_US", "Lathe_US", "S3 bucket name"},
		{"redis_site not a site", replace("redis_site: dc-frankfurt", "redis_site: dc-paris"), "redis_site", "dc-paris", "is not a site"},
		{"redis_site missing", replace("redis_site: dc-frankfurt\n", ""), "redis_site", "", "is required"},
		{"file_site not a site", replace("file_site: dc-frankfurt", "file_site: nas"), "datasets.file_site", "nas", "is not a site"},
		{"aws without instance types", replace("    instance_types:\n      p5.48xlarge: {gpus: 8, gpu_model: H100, gpu_memory_gb: 80, on_demand_usd_per_hour: 55.04, spot_usd_per_hour: 30.0}\n      g6e.xlarge:  {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}\n", ""), "backends.aws-eu.instance_types", "", "at least one instance type"},
		{"aws with empty instance types", replace("      p5.48xlarge: {gpus: 8, gpu_model: H100, gpu_memory_gb: 80, on_demand_usd_per_hour: 55.04, spot_usd_per_hour: 30.0}\n      g6e.xlarge:  {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}\n", "      {}\n"), "backends.aws-eu.instance_types", "", "at least one instance type"},
		{"instance type with 0 GPUs", replace("gpus: 1,", "gpus: 0,"), "backends.aws-eu.instance_types.g6e.xlarge.gpus", "0", "at least 1"},
		{"instance type without a model", replace("gpu_model: L40S, ", ""), "backends.aws-eu.instance_types.g6e.xlarge.gpu_model", "", "is required"},
		{"instance type without memory", replace("gpu_memory_gb: 48, ", ""), "backends.aws-eu.instance_types.g6e.xlarge.gpu_memory_gb", "0", "> 0"},
		{"instance type without a price", replace(", on_demand_usd_per_hour: 1.86}", "}"), "backends.aws-eu.instance_types.g6e.xlarge.on_demand_usd_per_hour", "", "is required"},
		{"negative instance price", replace("on_demand_usd_per_hour: 55.04", "on_demand_usd_per_hour: -55.04"), "backends.aws-eu.instance_types.p5.48xlarge.on_demand_usd_per_hour", "-55.04", "≥ 0"},
		{"negative spot price", replace("spot_usd_per_hour: 30.0", "spot_usd_per_hour: -1"), "backends.aws-eu.instance_types.p5.48xlarge.spot_usd_per_hour", "-1", "≥ 0"},
		{"spot without a spot price", replace("    spot: false\n", "    spot: true\n"), "backends.aws-eu.instance_types.g6e.xlarge.spot_usd_per_hour", "", "spot: true"},
		{"negative backend budget", replace("budget_usd_per_month: 5000", "budget_usd_per_month: -5"), "backends.aws-eu.budget_usd_per_month", "-5", "≥ 0"},
		{"negative team budget", replace("ml-research: 2000", "ml-research: -1"), "budgets.teams.ml-research", "-1", "≥ 0"},
		{"negative flat price", replace("price: {tco: {purchase_usd_per_gpu: 30000, amortisation_months: 36, power_kw_per_gpu: 1.0, usd_per_kwh: 0.25, pue: 1.3, ops_overhead_pct: 20, utilisation: 0.7}}", "price: {usd_per_gpu_hour: -1.10}"), "backends.local.price.usd_per_gpu_hour", "-1.10", "≥ 0"},
		{"both flat and tco", replace("price: {tco:", "price: {usd_per_gpu_hour: 1.10, tco:"), "backends.local.price", "", "not both"},
		{"neither flat nor tco", replace("price: {tco: {purchase_usd_per_gpu: 30000, amortisation_months: 36, power_kw_per_gpu: 1.0, usd_per_kwh: 0.25, pue: 1.3, ops_overhead_pct: 20, utilisation: 0.7}}", "price: {}"), "backends.local.price", "", "needs usd_per_gpu_hour or tco"},
		{"tco that fails Validate", replace("amortisation_months: 36", "amortisation_months: 0"), "backends.local.price.tco.amortisation_months", "0", "must be > 0"},
		{"tco unknown key", replace("pue: 1.3,", "pue: 1.3, cooling: 3,"), "backends.local.price.tco.cooling", "", "unknown field"},
		{"price on an aws backend", replace("    budget_usd_per_month: 5000\n", "    budget_usd_per_month: 5000\n    price: {usd_per_gpu_hour: 2}\n"), "backends.aws-eu.price", "", "only for kind local"},
		{"instance types on a local backend", replace("    checkpoint_uri: file:///shared/ckpt\n", "    checkpoint_uri: file:///shared/ckpt\n    spot: true\n"), "backends.local.spot", "true", "only for kind aws"},
		{"spot only without a spot price", replace("    spot: false\n", "    spot: only\n"), "backends.aws-eu.instance_types.g6e.xlarge.spot_usd_per_hour", "", "(spot: only)"},
		{"spot policy in capitals", replace("    spot: false\n", "    spot: Prefer\n"), "backends.aws-eu.spot", "Prefer", "want true, false, prefer, never or only"},
		{"spot quoted true", replace("    spot: false\n", "    spot: \"true\"\n"), "backends.aws-eu.spot", "true", "without quotes"},
		{"spot as a number", replace("    spot: false\n", "    spot: 1\n"), "backends.aws-eu.spot", "1", "want true, false, prefer, never or only"},
		{"spot as a list", replace("    spot: false\n", "    spot: [prefer]\n"), "backends.aws-eu.spot", "", "must be true, false, prefer, never or only, not a list"},
		{"unknown kind", replace("    kind: aws\n", "    kind: gcp\n"), "backends.aws-eu.kind", "gcp", "must be local, aws, slurm or kubernetes"},
		{"missing kind", replace("    kind: aws\n", ""), "backends.aws-eu.kind", "", "is required"},
		{"aws without region", replace("    region: eu-central-1\n", ""), "backends.aws-eu.region", "", "is required"},
		{"checkpoint uri neither file nor s3", replace("checkpoint_uri: s3://lathe-eu-ckpt/", "checkpoint_uri: gs://lathe-eu-ckpt/"), "backends.aws-eu.checkpoint_uri", "gs://lathe-eu-ckpt/", "must be file:///absolute/path or s3://bucket/prefix"},
		{"checkpoint file uri not absolute", replace("checkpoint_uri: file:///shared/ckpt", "checkpoint_uri: file://shared/ckpt"), "backends.local.checkpoint_uri", "file://shared/ckpt", "must be file:///absolute/path"},
		{"checkpoint bucket not listed", replace("checkpoint_uri: s3://lathe-eu-ckpt/", "checkpoint_uri: s3://lathe-other/"), "backends.aws-eu.checkpoint_uri", "s3://lathe-other/", "not listed in datasets.buckets"},
		// A URI with a password: neither the value nor the message (which
		// quotes the bucket) shows it.
		{"checkpoint uri with a password", replace("checkpoint_uri: s3://lathe-eu-ckpt/", "checkpoint_uri: s3://AKIA:s3cretpw@lathe-eu-ckpt/"), "backends.aws-eu.checkpoint_uri", "s3://AKIA:xxxxx@lathe-eu-ckpt/", `bucket "xxxxx@lathe-eu-ckpt" is not listed`},
		{"file checkpoint uri with a password", replace("checkpoint_uri: file:///shared/ckpt", "checkpoint_uri: file://u:s3cretpw@[::1/x"), "backends.local.checkpoint_uri", "file://xxxxx@[::1/x", "must be file:///absolute/path"},
		{"aws without checkpoint uri", replace("    checkpoint_uri: s3://lathe-eu-ckpt/\n", ""), "backends.aws-eu.checkpoint_uri", "", "is required for kind aws"},
		{"duplicate key", replace("    region: eu-central-1\n", "    region: eu-central-1\n    region: eu-west-1\n"), "backends.aws-eu.region", "", "duplicate key"},
		{"duplicate section", briefConfig + "redis_site: dc-frankfurt\n", "redis_site", "", "duplicate key"},
		{"alias", "base: &b [onprem]\n" + replace("default_residency: [onprem]", "default_residency: *b"), "routing.default_residency", "*b", "aliases are not allowed"},
		{"bad backend name", replace("  aws-eu:\n", "  aws_eu:\n"), "backends.aws_eu", "aws_eu", "backend name"},
		{"several local sites, no file_site", twoLocalSites, "datasets.file_site", "", "local backends are in several sites (dc-frankfurt, aws-us-east-1)"},
		{"not a mapping", "- sites\n", "", "", "must be a mapping of sections"},
		{"tag index after a refused tag", replace("[cloud, us]", "[12, us, us]"), "sites.aws-us-east-1[2]", "us", "duplicate tag"},
		{"bad YAML", "sites: [\n", "", "", "invalid YAML"},
		{"no backends", "sites: {a: [onprem]}\nredis_site: a\n", "backends", "", "at least one backend"},
		{"backends without sites", "backends: {local: {kind: local, site: local}}\n", "backends.local.site", "local", "is not a site"},
	}, launchErrorCases(replace)...)
}

// TestParseConfigErrors: one row per kind of error, each reported at its
// path with its value.
func TestParseConfigErrors(t *testing.T) {
	cases := configErrorCases()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.src))
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Errors) == 0 {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			for _, fe := range ce.Errors {
				if fe.Field == tc.field && fe.Value == tc.value && strings.Contains(fe.Message, tc.msg) {
					return
				}
			}
			t.Errorf("no error {%s %q …%s…} in\n%v", tc.field, tc.value, tc.msg, err)
		})
	}
}

// TestParseConfigAllAtOnce: every problem in one answer.
func TestParseConfigAllAtOnce(t *testing.T) {
	src := strings.NewReplacer(
		"gpus: 8,", "gpus: -8,",
		"redis_site: dc-frankfurt", "redis_site: dc-paris",
		"[cloud, us]", "[Cloud, us]",
		"lathe-us-data: aws-us-east-1", "lathe-us-data: nowhere",
		"    spot: false\n", "    spot: false\n    zone: a\n",
	).Replace(briefConfig)
	_, err := ParseConfig([]byte(src))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err %v", err)
	}
	var fields []string
	for _, fe := range ce.Errors {
		fields = append(fields, fe.Field)
	}
	want := []string{"backends.aws-eu.zone", "sites.aws-us-east-1[0]", "redis_site", "datasets.buckets.lathe-us-data", "backends.aws-eu.instance_types.p5.48xlarge.gpus"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields %v\nwant   %v\n%v", fields, want, err)
	}
	if !strings.HasPrefix(err.Error(), "invalid routing config: backends.aws-eu.zone: unknown field; ") {
		t.Errorf("message %q", err)
	}
}

func TestParseConfigLimits(t *testing.T) {
	if _, err := ParseConfig(make([]byte, MaxConfigBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("err %v", err)
	}
	var b strings.Builder
	b.WriteString("sites:\n")
	for i := range 150 {
		b.WriteString("  S" + strconv.Itoa(i) + ": [X]\n")
	}
	_, err := ParseConfig([]byte(b.String()))
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Errors) != maxErrors+1 || !strings.Contains(ce.Errors[maxErrors].Message, "more problems") {
		t.Errorf("capped errors: %d", len(ce.Errors))
	}
	// More than 256 distinct tags.
	b.Reset()
	b.WriteString("sites:\n")
	for i := range 260 {
		b.WriteString("  s" + strconv.Itoa(i) + ": [t" + strconv.Itoa(i) + "]\n")
	}
	b.WriteString("redis_site: s0\nbackends: {l: {kind: local, site: s0}}\n")
	_, err = ParseConfig([]byte(b.String()))
	if !errors.As(err, &ce) || ce.Errors[0].Field != "sites" {
		t.Errorf("260 tags: %v", err)
	}
}

// TestHash: the hash follows what routes, not how the file is written.
func TestHash(t *testing.T) {
	h := mustParse(t, briefConfig).Hash()
	if len(h) != 64 {
		t.Fatalf("hash %q", h)
	}
	same := []string{
		"# a comment\nlisten: x\n" + briefConfig,
		strings.Replace(briefConfig, "{lathe-eu-data: aws-eu-central-1, lathe-us-data: aws-us-east-1, lathe-eu-ckpt: aws-eu-central-1}",
			"{lathe-eu-ckpt: aws-eu-central-1, lathe-us-data: aws-us-east-1, lathe-eu-data: aws-eu-central-1}", 1),
		strings.Replace(briefConfig, "routing:\n  default_residency: [onprem]\n", "", 1), // the default, written out or not
	}
	for i, src := range same {
		if got := mustParse(t, src).Hash(); got != h {
			t.Errorf("variant %d hashes %s, want %s", i, got, h)
		}
	}
	differ := []string{
		strings.Replace(briefConfig, "55.04", "55.05", 1),
		strings.Replace(briefConfig, "[cloud, us]", "[us, cloud]", 1), // order of tags is kept as written
		strings.Replace(briefConfig, "ml-research: 2000", "ml-research: 2001", 1),
	}
	for i, src := range differ {
		if got := mustParse(t, src).Hash(); got == h {
			t.Errorf("changed variant %d hashes the same", i)
		}
	}
	if c := mustParse(t, briefConfig); hashOf(c) != h {
		t.Errorf("Hash is not hashOf")
	}
}
