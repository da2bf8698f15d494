package routecfg

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/cost"
)

// Backend kinds.
const (
	// KindLocal is a local pool: the workers of lathed, in one site.
	KindLocal = "local"
	// KindAWS is an AWS backend: EC2 GPU instances bought per job.
	KindAWS = "aws"
	// KindSlurm is a Slurm pool: owned GPUs run by Slurm, each attempt a
	// Slurm batch job submitted by lathed's slurm worker.
	KindSlurm = "slurm"
	// KindKubernetes is a Kubernetes pool: owned GPUs run by Kubernetes,
	// each attempt a Job submitted by lathed's kubernetes worker.
	KindKubernetes = "kubernetes"
)

// Defaults of a slurm backend's settings (see Backend).
const (
	// DefaultMaxJobs is max_jobs when the config gives none.
	DefaultMaxJobs = 8
	// DefaultGPUsPerNode is gpus_per_node when the config gives none.
	DefaultGPUsPerNode = 8
	// MaxGPUsPerNode is the largest gpus_per_node a slurm backend may give.
	MaxGPUsPerNode = 64
)

// Spot policies of an aws backend (Backend.SpotPolicy; the config's
// spot key).
const (
	// SpotNever buys on-demand instances only (spot: false, or no spot key).
	SpotNever = "never"
	// SpotPrefer tries spot for every instance type, then on demand
	// (spot: true, or spot: prefer).
	SpotPrefer = "prefer"
	// SpotOnly buys spot instances only (spot: only).
	SpotOnly = "only"
)

// Defaults of an aws backend's launch settings (see Backend).
const (
	// DefaultMaxInstances is max_instances when the config gives none.
	DefaultMaxInstances = 8
	// DefaultAgentPath is agent_path when the config gives none.
	DefaultAgentPath = "/usr/local/bin/lathed"
	// MaxStartup is the longest startup an aws backend may give.
	MaxStartup = 24 * time.Hour
	// MaxStagingMBps is the highest staging_mbps an aws backend may give
	// (1 TB/s: more than any link a dataset crosses).
	MaxStagingMBps = 1e6
)

// Implicit names, used when the config file has no sites: one site
// "local" tagged [onprem] holding one unpriced local backend "local", with
// Redis and file:// data in it — a deployment without routing config routes
// every job to its own workers, as before routing existed.
const (
	ImplicitSite    = "local"
	ImplicitBackend = "local"
)

// defaultResidency is routing.default_residency when the config gives none:
// a job with no residency tags stays on premises (fail closed).
var defaultResidency = []string{"onprem"}

// DefaultResidency returns a copy of the residency a config that gives no
// routing.default_residency applies ([onprem]).
func DefaultResidency() []string { return slices.Clone(defaultResidency) }

// Config is the routing part of lathed's config file: sites and their tags,
// backends, where data lives, the default residency and the budgets. Build it
// with ParseConfig, which validates it and precomputes what routing.Decide needs;
// treat it as read-only afterwards (copies share the precomputed index). The
// zero Config behaves like an empty config file (the implicit single site);
// a Config built by hand in Go is validated and indexed again on every routing.Decide
// call, and refused whole if invalid.
type Config struct {
	// Sites in config order. A site is a place with one legal standing
	// (dc-frankfurt, aws-eu-central-1), with the residency tags it carries.
	Sites []Site `json:"sites"`
	// RedisSite is the site where Redis lives, and so job events and raw
	// log lines: it must carry every tag of every job (ReasonLogSite).
	RedisSite string `json:"redis_site"`
	// Backends in config order (the order of Decision.Candidates and the
	// first tie-break).
	Backends []Backend `json:"backends"`
	// Datasets says where data lives.
	Datasets Datasets `json:"datasets"`
	// DefaultResidency is applied to a job with no residency (or
	// residency: []); never empty; default [onprem].
	DefaultResidency []string `json:"default_residency"`
	// TeamBudgetsUSD is the monthly budget of each team, in USD; a team not
	// listed, or listed with 0, has none.
	TeamBudgetsUSD map[string]float64 `json:"team_budgets_usd,omitempty"`
	// Implicit is true when the file had no sites and the implicit single
	// site and backend (ImplicitSite, ImplicitBackend) stand in.
	Implicit bool `json:"implicit,omitempty"`

	idx *Index // built by ParseConfig; nil: build on use
}

// Site is a place with one legal standing and the residency tags it
// carries (lower-case words, like job residency tags).
type Site struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

// Datasets says where data named by URI lives.
type Datasets struct {
	// FileSite is the site of file:// data and outputs. Default: the site of
	// the local backends (an error if they are in different sites); "" when
	// there is no local backend and none is given, and then a job touching
	// a file:// URI is infeasible everywhere.
	FileSite string `json:"file_site"`
	// Buckets maps an S3 bucket to its site. A job naming a bucket not
	// listed here is refused (ReasonBucketUnknown), never guessed.
	Buckets map[string]string `json:"buckets,omitempty"`
}

// Backend is a place jobs run: a local pool (KindLocal) or a cloud backend
// (KindAWS).
type Backend struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Site string `json:"site"`
	// CheckpointURI is where the backend's checkpoints go: file:// (in the
	// backend's own site) or s3://bucket/prefix (the bucket's site). Empty
	// on a local backend means file:// in its site.
	CheckpointURI string `json:"checkpoint_uri,omitempty"`

	// Price of a local backend's GPU-hour; nil: unpriced (cost 0, said so
	// in the decision's reasons).
	Price *Price `json:"price,omitempty"`

	// Region of an aws backend (eu-central-1).
	Region string `json:"region,omitempty"`
	// BudgetUSDPerMonth of an aws backend; 0 = no backend budget.
	BudgetUSDPerMonth float64 `json:"budget_usd_per_month,omitempty"`
	// Spot: price (and buy) instances at spot prices; true exactly when
	// SpotPolicy is SpotPrefer or SpotOnly.
	Spot bool `json:"spot,omitempty"`
	// SpotPolicy of an aws backend: SpotNever, SpotPrefer or SpotOnly (the
	// config's spot: true is prefer; false, or no spot key, never). Empty on
	// a local backend.
	SpotPolicy string `json:"spot_policy,omitempty"`
	// InstanceTypes of an aws backend, in config order; never empty there.
	InstanceTypes []InstanceType `json:"instance_types,omitempty"`
	// Startup of an aws backend is how long one of its jobs takes from
	// dispatch to its trainer starting: the instance's launch and boot
	// (data staging is StagingMBps'). Routing counts it as the backend's
	// wait, against the local pool's wait and max_wait, and in the value of
	// time; 0 (the default): the job is taken to start at once. At most
	// MaxStartup.
	Startup time.Duration `json:"startup,omitempty"`
	// StagingMBps of an aws backend is how fast a job's datasets reach its
	// compute site from another site, in megabytes (10^6 bytes) per
	// second: a dataset staged there (the decision's staging) takes its
	// size ÷ this rate, added to Startup as the backend's wait. 0 (the
	// default): staging is not timed (counted as 0, and the decision says
	// so). Above 0 and at most MaxStagingMBps.
	StagingMBps float64 `json:"staging_mbps,omitempty"`

	// The launch settings of an aws backend, read by the AWS worker (lathed
	// worker --backend aws). Routing needs none of them, so each is optional
	// when parsing; LaunchReady says whether the backend can launch. Each
	// is an error on a local backend.

	// AMI is the image the instances boot ("ami-…"); lathed is on it.
	AMI string `json:"ami,omitempty"`
	// Subnets the instances launch in ("subnet-…"), tried in order.
	Subnets []string `json:"subnets,omitempty"`
	// SecurityGroups of the instances ("sg-…"); none: the VPC's default.
	SecurityGroups []string `json:"security_groups,omitempty"`
	// InstanceProfile is the IAM instance profile (name or ARN) the
	// instances run as: their S3 access (no keys go into user data).
	InstanceProfile string `json:"instance_profile,omitempty"`
	// KeyName is an EC2 key pair for SSH; empty: none.
	KeyName string `json:"key_name,omitempty"`
	// WorkURI is where the backend's attempts live (job.json, staged
	// datasets, events, artifacts): s3://bucket or s3://bucket/prefix, with
	// the bucket listed in datasets.buckets in the backend's own site, so the
	// data of a job staged there stays in the site the job computes in.
	// Default: CheckpointURI, when that is s3:// in the backend's own site.
	WorkURI string `json:"work_uri,omitempty"`
	// MaxInstances is how many instances of the backend run at once, at
	// most (> 0); default DefaultMaxInstances.
	MaxInstances int `json:"max_instances,omitempty"`
	// AgentPath is the absolute path of the lathed binary on the AMI (it
	// goes into the instance's user-data script: only A-Z, a-z, 0-9, '/',
	// '.', '_' and '-'); default DefaultAgentPath. On a slurm backend it is
	// the config's lathed_path: lathed on the Slurm nodes, which the batch
	// script runs (same form, same default).
	AgentPath string `json:"agent_path,omitempty"`

	// The settings of a slurm backend (each an error on another kind).
	// MaxInstances holds its max_jobs (how many of its attempts are in
	// Slurm at once; default DefaultMaxJobs), Price its price per GPU-hour
	// and AgentPath its lathed_path.

	// Partition is the Slurm partition the attempts are submitted to
	// (sbatch --partition). Required.
	Partition string `json:"partition,omitempty"`
	// Account is the Slurm account charged (sbatch --account); empty: the
	// user's default account.
	Account string `json:"account,omitempty"`
	// WorkDir is an absolute folder on storage that the slurm worker and
	// the Slurm nodes share: each attempt's step.json, events, status and
	// output live under WORK_DIR/JOB/ATTEMPT. Required.
	WorkDir string `json:"work_dir,omitempty"`
	// GPUsPerNode is the most GPUs one attempt may ask for (its gres on one
	// node); default DefaultGPUsPerNode, at most MaxGPUsPerNode.
	GPUsPerNode int `json:"gpus_per_node,omitempty"`
	// GPUModel and GPUMemoryGB describe the partition's GPUs for routing's
	// fit ("A100", 80); empty and 0: unknown, and a job that names
	// gpu_models or gpu_memory_gb fits no such backend.
	GPUModel    string  `json:"gpu_model,omitempty"`
	GPUMemoryGB float64 `json:"gpu_memory_gb,omitempty"`
	// GRESType is Slurm's GRES type of those GPUs (sbatch
	// --gres=gpu:TYPE:N); empty: --gres=gpu:N.
	GRESType string `json:"gres_type,omitempty"`

	// Kube holds the settings of a kubernetes backend (each an error on
	// another kind); nil on the other kinds. A kubernetes backend also
	// takes work_dir, max_jobs, gpus_per_node, lathed_path, gpu_model and
	// gpu_memory_gb, meaning what they mean on a slurm backend.
	Kube *KubeSettings `json:"kubernetes,omitempty"`
}

// BatchPool reports whether b is a pool of owned GPUs run by a batch
// system (slurm or kubernetes): one worker submits each attempt there as a
// batch job, the step runs the trainer, and work_dir holds the attempt.
func (b Backend) BatchPool() bool { return BatchPoolKind(b.Kind) }

// BatchPoolKind reports whether kind is one of a batch pool (slurm or
// kubernetes; Backend.BatchPool).
func BatchPoolKind(kind string) bool { return kind == KindSlurm || kind == KindKubernetes }

// LaunchReady returns nil when aws backend b has everything the AWS worker
// needs to launch its instances — an ami, at least one subnet, an
// instance_profile and an s3:// work_uri — and otherwise an error naming
// every missing key by its path (backends.<name>.<key>). Routing to b needs
// none of them; launching does. For a backend of another kind it returns an
// error saying b is not a cloud backend.
func (b Backend) LaunchReady() error {
	if b.Kind != KindAWS {
		return fmt.Errorf("backend %s is not a cloud backend (kind %q): it launches no instances", b.Name, b.Kind)
	}
	p := join("backends", b.Name) + "."
	var missing []string
	if b.AMI == "" {
		missing = append(missing, p+"ami")
	}
	if len(b.Subnets) == 0 {
		missing = append(missing, p+"subnets")
	}
	if strings.TrimSpace(b.InstanceProfile) == "" {
		missing = append(missing, p+"instance_profile")
	}
	if bucket, ok := S3Bucket(b.WorkURI); !ok || bucket == "" {
		missing = append(missing, p+"work_uri")
	}
	if len(missing) > 0 {
		return fmt.Errorf("backend %s cannot launch: missing %s", b.Name, strings.Join(missing, ", "))
	}
	return nil
}

// Price is a local backend's price per GPU-hour: flat, or from the total
// cost of ownership (exactly one of the two).
type Price struct {
	USDPerGPUHour float64   `json:"usd_per_gpu_hour,omitempty"`
	TCO           *cost.TCO `json:"tco,omitempty"`
}

// InstanceType is an EC2 instance type an aws backend may buy.
type InstanceType struct {
	Name               string  `json:"name"`
	GPUs               int     `json:"gpus"`
	GPUModel           string  `json:"gpu_model"`
	GPUMemoryGB        float64 `json:"gpu_memory_gb"`
	OnDemandUSDPerHour float64 `json:"on_demand_usd_per_hour"`
	// SpotUSDPerHour is required when the backend buys spot (spot: true,
	// prefer or only).
	SpotUSDPerHour float64 `json:"spot_usd_per_hour,omitempty"`
}

// USDPerHour is what one instance of t costs per hour: the spot price when
// spot, else on demand.
func (t InstanceType) USDPerHour(spot bool) float64 {
	if spot {
		return t.SpotUSDPerHour
	}
	return t.OnDemandUSDPerHour
}

// USDPerGPUHour is the effective price of one GPU-hour on local or slurm
// backend b: the flat price, or cost.TCO.USDPerGPUHour of its TCO. It is 0
// for an unpriced backend and for an aws backend (priced per instance).
func (b Backend) USDPerGPUHour() float64 {
	if b.Kind == KindAWS || b.Price == nil {
		return 0
	}
	if b.Price.TCO != nil {
		return b.Price.TCO.USDPerGPUHour()
	}
	return b.Price.USDPerGPUHour
}

// Priced reports whether b has a price (an aws backend always has; a local
// or slurm one when price is configured).
func (b Backend) Priced() bool { return b.Kind == KindAWS || b.Price != nil }

// Backend returns the backend called name.
func (c Config) Backend(name string) (Backend, bool) {
	for _, b := range c.Backends {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// Site returns the site called name.
func (c Config) Site(name string) (Site, bool) {
	for _, s := range c.Sites {
		if s.Name == name {
			return s, true
		}
	}
	return Site{}, false
}

// LocalPrices returns the effective $/GPU-hour of every local backend
// (flat or from its TCO; 0 when unpriced), by backend name.
func (c Config) LocalPrices() map[string]float64 {
	out := make(map[string]float64)
	for _, b := range c.Backends {
		if b.Kind == KindLocal {
			out[b.Name] = b.USDPerGPUHour()
		}
	}
	return out
}

// Hash identifies the effective routing config: the hex sha256 of its
// canonical JSON encoding (fields in a fixed order, maps sorted by key,
// implicit defaults filled in). Two files that route alike byte for byte —
// comments, key order of maps and unrelated sections aside — hash alike.
// The ledger records it with every decision.
func (c Config) Hash() string {
	if x, err := c.Index(); err == nil {
		return x.Hash
	}
	return hashOf(c) // an invalid Config built in Go: hashed as it stands
}

// hashOf is the sha256 of c's canonical JSON (its unexported index aside).
func hashOf(c Config) string {
	c.idx = nil
	b, err := json.Marshal(c)
	if err != nil { // not reached: ParseConfig refuses NaN and ±Inf
		b = []byte(err.Error())
	}
	sum := sha256.Sum256(append([]byte("lathe-routing-config-v1\n"), b...))
	return hex.EncodeToString(sum[:])
}
