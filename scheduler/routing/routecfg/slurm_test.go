package routecfg

import (
	"errors"
	"strings"
	"testing"
)

// slurmConfig is briefConfig with a slurm backend in the on-prem site.
var slurmConfig = strings.Replace(briefConfig, "  aws-eu:\n", `  hpc:
    kind: slurm
    site: dc-frankfurt
    partition: gpu
    account: ml-team
    work_dir: /shared/lathe/slurm
    price: {usd_per_gpu_hour: 1.5}
  aws-eu:
`, 1)

// TestParseSlurmBackend: a slurm backend's settings and defaults, and the
// GPU shapes routing sees.
func TestParseSlurmBackend(t *testing.T) {
	c, err := ParseConfig([]byte(slurmConfig))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := c.Backend("hpc")
	if !ok {
		t.Fatal("no backend hpc")
	}
	if b.Kind != KindSlurm || b.Partition != "gpu" || b.Account != "ml-team" || b.WorkDir != "/shared/lathe/slurm" {
		t.Errorf("backend = %+v", b)
	}
	if b.MaxInstances != DefaultMaxJobs || b.GPUsPerNode != DefaultGPUsPerNode || b.AgentPath != DefaultAgentPath {
		t.Errorf("defaults: max_jobs %d gpus_per_node %d lathed_path %q", b.MaxInstances, b.GPUsPerNode, b.AgentPath)
	}
	if got := b.USDPerGPUHour(); got != 1.5 || !b.Priced() {
		t.Errorf("price %v priced %v", got, b.Priced())
	}
	types := slurmTypes(b)
	if len(types) != DefaultGPUsPerNode || types[1].GPUs != 2 || types[1].OnDemandUSDPerHour != 3 {
		t.Errorf("types = %+v", types)
	}
}

// TestParseSlurmErrors: one row per kind of error of a slurm backend.
func TestParseSlurmErrors(t *testing.T) {
	with := func(old, new string) string {
		if !strings.Contains(slurmConfig, old) {
			t.Fatalf("slurmConfig lacks %q", old)
		}
		return strings.Replace(slurmConfig, old, new, 1)
	}
	const p = "backends.hpc."
	cases := []configErrorCase{
		{"no partition", with("    partition: gpu\n", ""), p + "partition", "", "is required for kind slurm"},
		{"bad partition", with("partition: gpu", "partition: 'gpu;rm'"), p + "partition", "gpu;rm", "must be a Slurm partition name"},
		{"bad account", with("account: ml-team", "account: -x"), p + "account", "-x", "must be a Slurm account name"},
		{"no work dir", with("    work_dir: /shared/lathe/slurm\n", ""), p + "work_dir", "", "is required for kind slurm"},
		{"relative work dir", with("work_dir: /shared/lathe/slurm", "work_dir: shared/x"), p + "work_dir", "shared/x", "clean absolute path"},
		{"max jobs 0", with("    partition: gpu\n", "    partition: gpu\n    max_jobs: 0\n"), p + "max_jobs", "0", "must be a whole number > 0"},
		{"gpus per node too many", with("    partition: gpu\n", "    partition: gpu\n    gpus_per_node: 65\n"), p + "gpus_per_node", "65", "from 1 to 64"},
		{"lathed path", with("    partition: gpu\n", "    partition: gpu\n    lathed_path: 'bin/lathed'\n"), p + "lathed_path", "bin/lathed", "absolute path of lathed"},
		{"aws key on slurm", with("    partition: gpu\n", "    partition: gpu\n    ami: ami-1\n"), p + "ami", "ami-1", "only for kind aws"},
		{"s3 checkpoints", with("    partition: gpu\n", "    partition: gpu\n    checkpoint_uri: s3://lathe-eu-ckpt/x\n"), p + "checkpoint_uri", "s3://lathe-eu-ckpt/x", "must be file:///absolute/path for kind slurm"},
		{"slurm key on local", with("    checkpoint_uri: file:///shared/ckpt\n", "    checkpoint_uri: file:///shared/ckpt\n    partition: gpu\n"), "backends.local.partition", "gpu", "only for kind slurm"},
		{"unknown kind", with("kind: slurm", "kind: pbs"), p + "kind", "pbs", "must be local, aws, slurm or kubernetes"},
		{"gpu memory negative", with("    partition: gpu\n", "    partition: gpu\n    gpu_memory_gb: -1\n"), p + "gpu_memory_gb", "-1", "must be a number > 0"},
		{"blank gpu model", with("    partition: gpu\n", "    partition: gpu\n    gpu_model: ' '\n"), p + "gpu_model", " ", "must name the partition's GPU model"},
		{"bad gres type", with("    partition: gpu\n", "    partition: gpu\n    gres_type: 'a 100'\n"), p + "gres_type", "a 100", "must be a Slurm GRES type name"},
		{"gres type on local", with("    checkpoint_uri: file:///shared/ckpt\n", "    checkpoint_uri: file:///shared/ckpt\n    gres_type: a100\n"), "backends.local.gres_type", "a100", "only for kind slurm"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.src))
			var ce *ConfigError
			if !errors.As(err, &ce) {
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
