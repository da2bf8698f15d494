package routecfg

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
)

// validateSlurm checks slurm backend b at path p: a partition and account
// of Slurm's name form, an absolute work_dir, max_jobs, gpus_per_node and
// lathed_path in range, a well-formed price, a file:// checkpoint_uri, and
// none of an aws backend's settings.
func validateSlurm(c *checker, p string, b Backend) {
	awsOnly := refuseAWSKeys(c, p, b)
	awsOnly("max_instances", false) // max_jobs here
	awsOnly("agent_path", false)    // lathed_path here
	c.nonNegative(p+".budget_usd_per_month", b.BudgetUSDPerMonth)
	switch {
	case b.Partition == "":
		c.add(p+".partition", "", "is required for kind slurm: the Slurm partition its attempts are submitted to")
	case !validSlurmName(b.Partition):
		c.add(p+".partition", b.Partition, "must be a Slurm partition name: A-Z, a-z, 0-9, '_', '.' and '-'")
	}
	if b.Account != "" && !validSlurmName(b.Account) {
		c.add(p+".account", b.Account, "must be a Slurm account name: A-Z, a-z, 0-9, '_', '.' and '-'")
	}
	switch {
	case b.WorkDir == "":
		c.add(p+".work_dir", "", "is required for kind slurm: an absolute folder the slurm worker and the Slurm nodes share")
	case !validAgentPath(b.WorkDir) || filepath.Clean(b.WorkDir) != b.WorkDir:
		c.add(p+".work_dir", b.WorkDir, "must be a clean absolute path of A-Z, a-z, 0-9, '/', '.', '_' and '-' (it goes into the batch script)")
	}
	validateSlurmNumbers(c, p, b)
	if b.Price != nil {
		validatePrice(c, p+".price", *b.Price)
	}
	if u := b.CheckpointURI; u != "" && !strings.HasPrefix(u, "file://") {
		c.add(p+".checkpoint_uri", u, "must be file:///absolute/path for kind slurm (storage the Slurm nodes share)")
	}
}

// validateSlurmNumbers checks max_jobs, gpus_per_node, startup and
// lathed_path of slurm backend b at path p.
func validateSlurmNumbers(c *checker, p string, b Backend) {
	if b.MaxInstances < 0 || c.present(p+".max_jobs", b.MaxInstances != 0) && b.MaxInstances == 0 {
		c.add(p+".max_jobs", strconv.Itoa(b.MaxInstances), "must be a whole number > 0: how many of the backend's attempts may be in Slurm at once")
	}
	if n := b.GPUsPerNode; n < 0 || n > MaxGPUsPerNode || c.present(p+".gpus_per_node", n != 0) && n == 0 {
		c.add(p+".gpus_per_node", strconv.Itoa(n), "must be a whole number from 1 to "+strconv.Itoa(MaxGPUsPerNode)+": the most GPUs one attempt may ask of a node")
	}
	if b.Startup < 0 || b.Startup > MaxStartup {
		c.add(p+".startup", b.Startup.String(), "must be a duration from 0 to "+MaxStartup.String()+": how long a job waits in Slurm before its trainer starts")
	}
	if c.present(p+".gpu_model", b.GPUModel != "") && strings.TrimSpace(b.GPUModel) == "" {
		c.add(p+".gpu_model", b.GPUModel, "must name the partition's GPU model (A100, H100…)")
	}
	if m := b.GPUMemoryGB; math.IsNaN(m) || math.IsInf(m, 0) || m < 0 || c.present(p+".gpu_memory_gb", m != 0) && m == 0 {
		c.add(p+".gpu_memory_gb", fmtFloat(m), "must be a number > 0: the memory of each of the partition's GPUs, in GB")
	}
	if c.present(p+".gres_type", b.GRESType != "") && !validSlurmName(b.GRESType) {
		c.add(p+".gres_type", b.GRESType, "must be a Slurm GRES type name: A-Z, a-z, 0-9, '_', '.' and '-'")
	}
	if c.present(p+".lathed_path", b.AgentPath != "") && !validAgentPath(b.AgentPath) {
		c.add(p+".lathed_path", b.AgentPath, "must be the absolute path of lathed on the Slurm nodes: '/' then only A-Z, a-z, 0-9, '/', '.', '_' and '-' (it goes into the batch script)")
	}
}

// refuseAWSKeys refuses the launch settings of an aws backend on backend
// b of another kind, at path p, and returns the check for more of them.
func refuseAWSKeys(c *checker, p string, b Backend) func(field string, set bool) {
	awsOnly := func(field string, set bool) {
		if c.present(p+"."+field, set) {
			c.add(p+"."+field, "", "only for kind aws")
		}
	}
	awsOnly("region", b.Region != "")
	awsOnly("spot", b.Spot || b.SpotPolicy != "")
	awsOnly("instance_types", b.InstanceTypes != nil)
	awsOnly("ami", b.AMI != "")
	awsOnly("subnets", b.Subnets != nil)
	awsOnly("security_groups", b.SecurityGroups != nil)
	awsOnly("instance_profile", b.InstanceProfile != "")
	awsOnly("key_name", b.KeyName != "")
	awsOnly("work_uri", b.WorkURI != "")
	awsOnly("staging_mbps", b.StagingMBps != 0)
	return awsOnly
}

// refuseSlurmKeys refuses the settings of a slurm backend on backend b of
// another kind, at path p.
func refuseSlurmKeys(c *checker, p string, b Backend) {
	only := func(field string, set bool) {
		if c.present(p+"."+field, set) {
			c.add(p+"."+field, "", "only for kind slurm")
		}
	}
	only("partition", b.Partition != "")
	only("account", b.Account != "")
	only("gres_type", b.GRESType != "")
	if b.Kind == KindKubernetes {
		return // the pool settings below are a kubernetes backend's too
	}
	only = func(field string, set bool) {
		if c.present(p+"."+field, set) {
			c.add(p+"."+field, "", "only for kind slurm or kubernetes")
		}
	}
	only("work_dir", b.WorkDir != "")
	only("max_jobs", false)
	only("gpus_per_node", b.GPUsPerNode != 0)
	only("lathed_path", false)
	only("gpu_model", b.GPUModel != "")
	only("gpu_memory_gb", b.GPUMemoryGB != 0)
}

// validSlurmName reports whether s is a Slurm partition or account name
// of the safe form: 1 to 64 of A-Z, a-z, 0-9, '_', '.' and '-', not
// starting with '-'.
func validSlurmName(s string) bool {
	if s == "" || len(s) > 64 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '.' || b == '-') {
			return false
		}
	}
	return true
}

// slurmDefaults fills in the settings a slurm backend left out: max_jobs,
// gpus_per_node and lathed_path.
func slurmDefaults(cfg *Config) {
	for i := range cfg.Backends {
		b := &cfg.Backends[i]
		if !b.BatchPool() {
			continue
		}
		if b.MaxInstances == 0 {
			b.MaxInstances = DefaultMaxJobs
		}
		if b.GPUsPerNode == 0 {
			b.GPUsPerNode = DefaultGPUsPerNode
		}
		if b.AgentPath == "" {
			b.AgentPath = DefaultAgentPath
		}
	}
}

// slurmTypes are the GPU shapes of slurm backend b as routing sees them:
// one per GPU count from 1 to GPUsPerNode, named gpu:N, priced N × its
// price per GPU-hour, of its gpu_model and gpu_memory_gb (a job that names
// gpu_models or gpu_memory_gb fits no slurm backend that gives none).
func slurmTypes(b Backend) []InstanceType {
	n := b.GPUsPerNode
	if n <= 0 {
		n = DefaultGPUsPerNode
	}
	out := make([]InstanceType, 0, n)
	usd := b.USDPerGPUHour()
	for g := 1; g <= n; g++ {
		out = append(out, InstanceType{Name: "gpu:" + strconv.Itoa(g), GPUs: g, GPUModel: b.GPUModel, GPUMemoryGB: b.GPUMemoryGB,
			OnDemandUSDPerHour: float64(g) * usd})
	}
	return out
}
