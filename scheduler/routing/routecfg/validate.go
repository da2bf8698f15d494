package routecfg

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/lathe-ml/lathe/internal/cost"
	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/redact"
)

// MaxTags is the most distinct tags the sites may carry together (the tag
// sets are bitmasks of MaxTags bits).
const MaxTags = 256

// validTag: ^[a-z][a-z0-9-]{0,31}$, the rule of job residency tags
// (jobspec.ValidResidencyTag).
func validTag(s string) bool {
	if s == "" || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-') {
			return false
		}
	}
	return true
}

// validName: ^[a-z0-9][a-z0-9-]{0,62}$, for sites and backends (a backend
// name is part of its queue's name, cloud:<backend>).
func validName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-') {
			return false
		}
	}
	return true
}

// validInstanceType: ^[a-z0-9][a-z0-9.-]{0,62}$ (p5.48xlarge).
func validInstanceType(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '.') {
			return false
		}
	}
	return true
}

// validBucket: ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ (S3's rule).
func validBucket(s string) bool {
	if len(s) < 3 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		ok := b >= 'a' && b <= 'z' || b >= '0' && b <= '9'
		if !ok && (i == 0 || i == len(s)-1 || b != '.' && b != '-') {
			return false
		}
	}
	return true
}

// S3Bucket returns the bucket of an s3://bucket/key URI.
func S3Bucket(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, "s3://")
	if !ok {
		return "", false
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	return rest, true
}

// checker collects the rules' problems, skipping fields the decoder already
// reported and showing values as written where the decoder saw them.
type checker struct {
	errs []FieldError
	d    *decoder // nil for a Config built in Go
}

func (c *checker) add(field, value, msg string) {
	if c.d != nil {
		if c.underBad(field) {
			return
		}
		if raw, ok := c.d.raw[field]; ok {
			value = raw
		}
	}
	value, msg = redact.Field(value, msg) // a URI's password is never echoed
	c.errs = append(c.errs, FieldError{Field: field, Value: truncate(value), Message: msg})
}

// underBad reports whether field, or a field above it, was already
// reported by the decoder (a backend that is not a mapping has no site to
// complain about).
func (c *checker) underBad(field string) bool {
	for i := len(field); i > 0; i-- {
		if i == len(field) || field[i] == '.' || field[i] == '[' {
			if c.d.bad[field[:i]] {
				return true
			}
		}
	}
	return false
}

// name reports a bad name of an entry (site, backend, bucket, instance
// type): the value is the name itself, not what the entry holds.
func (c *checker) name(field, name, msg string) {
	if c.d != nil && c.underBad(field) {
		return
	}
	c.errs = append(c.errs, FieldError{Field: field, Value: truncate(name), Message: msg})
}

func (c *checker) present(field string, set bool) bool {
	if c.d != nil {
		return c.d.present[field]
	}
	return set
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (c *checker) nonNegative(field string, f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		c.add(field, fmtFloat(f), "must be a finite number ≥ 0")
	}
}

// normalize fills in the implicit config and the defaults; validate then
// checks the result.
func normalize(c *Config) {
	if len(c.Sites) == 0 && len(c.Backends) == 0 && c.RedisSite == "" && c.Datasets.FileSite == "" && len(c.Datasets.Buckets) == 0 {
		c.Sites = []Site{{Name: ImplicitSite, Tags: []string{"onprem"}}}
		c.Backends = []Backend{{Name: ImplicitBackend, Kind: KindLocal, Site: ImplicitSite}}
		c.RedisSite = ImplicitSite
		c.Datasets.FileSite = ImplicitSite
		c.Implicit = true
	}
	if len(c.DefaultResidency) == 0 {
		c.DefaultResidency = slices.Clone(defaultResidency)
	}
	if c.Datasets.FileSite == "" {
		var sites []string
		for _, b := range c.Backends {
			if b.Kind == KindLocal && !slices.Contains(sites, b.Site) {
				sites = append(sites, b.Site)
			}
		}
		if len(sites) == 1 {
			c.Datasets.FileSite = sites[0]
		}
	}
	for i := range c.Sites {
		if c.Sites[i].Tags == nil {
			c.Sites[i].Tags = []string{}
		}
	}
	for i := range c.Backends {
		if b := &c.Backends[i]; b.Kind == KindAWS && b.SpotPolicy == "" {
			b.SpotPolicy = SpotNever
			if b.Spot {
				b.SpotPolicy = SpotPrefer
			}
		}
	}
}

// validate checks the rules between fields of a normalised config: the
// sites, where the data and Redis live, the routing defaults and budgets,
// then each backend.
func validate(cfg *Config, d *decoder) []FieldError {
	c := &checker{d: d}
	sites := validateSites(c, cfg.Sites)
	siteRef := func(field, v, what string) {
		switch {
		case v == "":
			c.add(field, "", "is required: "+what)
		case !sites[v]:
			c.add(field, v, "is not a site (sites lists "+siteList(cfg.Sites)+")")
		}
	}

	siteRef("redis_site", cfg.RedisSite, "the site where Redis runs (job events and raw log lines live there)")
	validateDatasets(c, cfg, siteRef)
	validateDefaults(c, cfg)

	if len(cfg.Backends) == 0 {
		c.add("backends", "", "is required: at least one backend to run jobs on")
	}
	names := map[string]bool{}
	for _, b := range cfg.Backends {
		validateBackend(c, cfg, b, names, siteRef)
	}
	return c.errs
}

// validateSites checks the sites' names and tags, and returns the set of
// site names.
func validateSites(c *checker, list []Site) map[string]bool {
	sites := map[string]bool{}
	distinct := map[string]bool{}
	for _, s := range list {
		p := join("sites", s.Name)
		if !validName(s.Name) {
			c.name(p, s.Name, "a site name must be a lower-case word: a-z, 0-9 and '-', at most 63 characters")
		}
		if sites[s.Name] {
			c.name(p, s.Name, "duplicate site")
		}
		sites[s.Name] = true
		for i, t := range s.Tags {
			tp := p + "[" + strconv.Itoa(i) + "]"
			switch {
			case !validTag(t):
				c.add(tp, t, "a tag must be a lower-case word: a letter, then a-z, 0-9 and '-', at most 32 characters")
			case slices.Contains(s.Tags[:i], t):
				c.add(tp, t, "duplicate tag")
			}
			if t != "" { // "" stands for an item the decoder refused
				distinct[t] = true
			}
		}
	}
	if len(distinct) > MaxTags {
		c.add("sites", strconv.Itoa(len(distinct)), "the sites carry more than "+strconv.Itoa(MaxTags)+" distinct tags")
	}
	return sites
}

// validateDatasets checks datasets.file_site (required only when the local
// backends are in several sites) and the bucket list.
func validateDatasets(c *checker, cfg *Config, siteRef func(field, v, what string)) {
	if cfg.Datasets.FileSite != "" {
		siteRef("datasets.file_site", cfg.Datasets.FileSite, "")
	} else if !c.present("datasets.file_site", false) {
		var local []string
		for _, b := range cfg.Backends {
			if b.Kind == KindLocal && b.Site != "" && !slices.Contains(local, b.Site) {
				local = append(local, b.Site)
			}
		}
		if len(local) > 1 {
			c.add("datasets.file_site", "", "is required: the local backends are in several sites ("+strings.Join(local, ", ")+"), so where file:// data lives is not obvious")
		}
	} else {
		c.add("datasets.file_site", "", "must not be empty")
	}
	for _, name := range sortedKeys(cfg.Datasets.Buckets) {
		p := join("datasets.buckets", name)
		if !validBucket(name) {
			c.name(p, name, "is not an S3 bucket name")
		}
		siteRef(p, cfg.Datasets.Buckets[name], "the site of the bucket")
	}
}

// validateDefaults checks routing.default_residency and the team budgets.
func validateDefaults(c *checker, cfg *Config) {
	for i, t := range cfg.DefaultResidency {
		if !validTag(t) {
			c.add("routing.default_residency["+strconv.Itoa(i)+"]", t, "a tag must be a lower-case word: a letter, then a-z, 0-9 and '-', at most 32 characters")
		}
	}
	for _, team := range sortedKeys(cfg.TeamBudgetsUSD) {
		p := join("budgets.teams", team)
		if team == "" {
			c.add(p, "", "a team name must not be empty")
		}
		c.nonNegative(p, cfg.TeamBudgetsUSD[team])
	}
}

// validateBackend checks backend b: its name and site, its checkpoint_uri,
// then the settings of its kind.
func validateBackend(c *checker, cfg *Config, b Backend, names map[string]bool, siteRef func(field, v, what string)) {
	p := join("backends", b.Name)
	if !validName(b.Name) {
		c.name(p, b.Name, "a backend name must be a lower-case word: a-z, 0-9 and '-', at most 63 characters")
	}
	if names[b.Name] {
		c.name(p, b.Name, "duplicate backend")
	}
	names[b.Name] = true
	siteRef(p+".site", b.Site, "the site the backend computes in")
	validateCheckpointURI(c, cfg, p, b)

	switch b.Kind {
	case KindLocal:
		validateLocal(c, p, b)
	case KindAWS:
		validateAWS(c, cfg, p, b)
	case KindSlurm:
		validateSlurm(c, p, b)
	case KindKubernetes:
		validateKube(c, p, b)
	case "":
		c.add(p+".kind", "", "is required: local, aws, slurm or kubernetes")
	default:
		c.add(p+".kind", b.Kind, "must be local, aws, slurm or kubernetes")
	}
	if b.Kind != KindSlurm {
		refuseSlurmKeys(c, p, b)
	}
	if b.Kind != KindKubernetes {
		refuseKubeKeys(c, p, b)
	}
}

// validateCheckpointURI checks the checkpoint_uri of backend b at path p:
// required for kind aws; an s3:// one names a listed bucket.
func validateCheckpointURI(c *checker, cfg *Config, p string, b Backend) {
	switch u := b.CheckpointURI; {
	case u == "" && b.Kind == KindAWS:
		c.add(p+".checkpoint_uri", "", "is required for kind aws: where its checkpoints go (s3://bucket/prefix, or file:// on the instance)")
	case u == "":
	case strings.HasPrefix(u, "file://"):
		if _, err := fileuri.Path(u); err != nil {
			c.add(p+".checkpoint_uri", u, "must be file:///absolute/path or s3://bucket/prefix")
		}
	case strings.HasPrefix(u, "s3://"):
		bucket, _ := S3Bucket(u)
		if _, ok := cfg.Datasets.Buckets[bucket]; !ok {
			c.add(p+".checkpoint_uri", u, "bucket "+strconv.Quote(bucket)+" is not listed in datasets.buckets (its site must be known)")
		}
	default:
		c.add(p+".checkpoint_uri", u, "must be file:///absolute/path or s3://bucket/prefix")
	}
}

// validateLocal checks local backend b at path p: no aws settings, and a
// well-formed price if it has one.
func validateLocal(c *checker, p string, b Backend) {
	awsOnly := refuseAWSKeys(c, p, b)
	awsOnly("budget_usd_per_month", b.BudgetUSDPerMonth != 0)
	awsOnly("max_instances", b.MaxInstances != 0)
	awsOnly("agent_path", b.AgentPath != "")
	awsOnly("startup", b.Startup != 0)
	if b.Price != nil {
		validatePrice(c, p+".price", *b.Price)
	}
}

// validateAWS checks aws backend b at path p: no price, region, budget,
// spot policy, the launch settings, then the instance types.
func validateAWS(c *checker, cfg *Config, p string, b Backend) {
	if c.present(p+".price", b.Price != nil) {
		c.add(p+".price", "", "only for kind local (an aws backend is priced per instance type)")
	}
	switch {
	case b.Region == "":
		c.add(p+".region", "", "is required for kind aws")
	case !validRegion(b.Region):
		c.add(p+".region", b.Region, "must be an AWS region name like eu-central-1 (lower-case words and a number, joined by '-'; it goes into the instance's user-data script)")
	}
	c.nonNegative(p+".budget_usd_per_month", b.BudgetUSDPerMonth)
	switch b.SpotPolicy {
	case SpotNever, SpotPrefer, SpotOnly:
		if b.Spot != (b.SpotPolicy != SpotNever) { // only in a Config built in Go
			c.add(p+".spot", strconv.FormatBool(b.Spot), "disagrees with the spot policy "+strconv.Quote(b.SpotPolicy)+": Spot must be true exactly when SpotPolicy is prefer or only")
		}
	default:
		c.add(p+".spot", b.SpotPolicy, "is not a spot policy: want "+spotWords)
	}
	spotWord := b.SpotPolicy // as written, where the file gave it
	if c.d != nil && c.d.raw[p+".spot"] != "" {
		spotWord = c.d.raw[p+".spot"]
	}
	validateLaunch(c, cfg, p, b)
	validateInstanceTypes(c, p, b, spotWord)
}

// validateInstanceTypes checks the instance types of aws backend b at path
// p; spotWord is its spot policy as written, for the message that a spot
// price is missing.
func validateInstanceTypes(c *checker, p string, b Backend, spotWord string) {
	if len(b.InstanceTypes) == 0 {
		c.add(p+".instance_types", "", "is required for kind aws: at least one instance type")
	}
	seen := map[string]bool{}
	for _, t := range b.InstanceTypes {
		tp := join(p+".instance_types", t.Name)
		if !validInstanceType(t.Name) {
			c.name(tp, t.Name, "is not an instance type name (a-z, 0-9, '.' and '-')")
		}
		if seen[t.Name] {
			c.name(tp, t.Name, "duplicate instance type")
		}
		seen[t.Name] = true
		if t.GPUs < 1 {
			c.add(tp+".gpus", strconv.Itoa(t.GPUs), "must be at least 1")
		}
		if strings.TrimSpace(t.GPUModel) == "" {
			c.add(tp+".gpu_model", t.GPUModel, "is required (H100, L40S…)")
		}
		if math.IsNaN(t.GPUMemoryGB) || math.IsInf(t.GPUMemoryGB, 0) || t.GPUMemoryGB <= 0 {
			c.add(tp+".gpu_memory_gb", fmtFloat(t.GPUMemoryGB), "must be a number > 0")
		}
		if !c.present(tp+".on_demand_usd_per_hour", true) {
			c.add(tp+".on_demand_usd_per_hour", "", "is required")
		} else {
			c.nonNegative(tp+".on_demand_usd_per_hour", t.OnDemandUSDPerHour)
		}
		c.nonNegative(tp+".spot_usd_per_hour", t.SpotUSDPerHour)
		if b.Spot && !c.present(tp+".spot_usd_per_hour", t.SpotUSDPerHour > 0) {
			c.add(tp+".spot_usd_per_hour", "", "is required: the backend buys spot (spot: "+spotWord+")")
		}
	}
}

// validateLaunch checks the launch settings of aws backend b at path p,
// those the config gives: none is required to route (LaunchReady says what
// launching lacks).
func validateLaunch(c *checker, cfg *Config, p string, b Backend) {
	if c.present(p+".ami", b.AMI != "") && (!strings.HasPrefix(b.AMI, "ami-") || len(b.AMI) <= len("ami-")) {
		c.add(p+".ami", b.AMI, "must be an image id: ami-…")
	}
	ids := func(key string, list []string, prefix, what string) {
		for i, s := range list {
			ip := p + "." + key + "[" + strconv.Itoa(i) + "]"
			switch {
			case !strings.HasPrefix(s, prefix) || len(s) <= len(prefix):
				c.add(ip, s, "must be a "+what+" id: "+prefix+"…")
			case slices.Contains(list[:i], s):
				c.add(ip, s, "duplicate "+what)
			}
		}
	}
	ids("subnets", b.Subnets, "subnet-", "subnet")
	ids("security_groups", b.SecurityGroups, "sg-", "security group")
	if c.present(p+".instance_profile", b.InstanceProfile != "") && !validInstanceProfile(b.InstanceProfile) {
		c.add(p+".instance_profile", b.InstanceProfile, "must be an IAM instance profile name (1 to 128 of A-Z, a-z, 0-9 and +=,.@_-) or ARN (arn:aws:iam::ACCOUNT:instance-profile/NAME)")
	}
	if c.present(p+".key_name", b.KeyName != "") && !validKeyName(b.KeyName) {
		c.add(p+".key_name", b.KeyName, "must be an EC2 key pair name: not blank, at most 255 printable ASCII characters")
	}
	if c.present(p+".work_uri", b.WorkURI != "") {
		validateWorkURI(c, cfg, p, b)
	}
	if c.present(p+".max_instances", b.MaxInstances != 0) && b.MaxInstances <= 0 {
		c.add(p+".max_instances", strconv.Itoa(b.MaxInstances), "must be a whole number > 0: how many instances of the backend may run at once")
	}
	if c.present(p+".agent_path", b.AgentPath != "") && !validAgentPath(b.AgentPath) {
		c.add(p+".agent_path", b.AgentPath, "must be the absolute path of lathed on the AMI: '/' then only A-Z, a-z, 0-9, '/', '.', '_' and '-' (it goes into the instance's user-data script)")
	}
	if b.Startup < 0 || b.Startup > MaxStartup {
		c.add(p+".startup", b.Startup.String(), "must be a duration from 0 to "+MaxStartup.String()+": how long a job takes from dispatch to its trainer starting on a new instance")
	}
	if r := b.StagingMBps; c.present(p+".staging_mbps", r != 0) && !(r > 0 && r <= MaxStagingMBps) {
		c.add(p+".staging_mbps", fmtFloat(r), "must be a number of megabytes per second above 0 and at most "+
			strconv.FormatFloat(MaxStagingMBps, 'f', -1, 64)+": how fast a dataset reaches the backend's site from another site")
	}
}

// validateWorkURI checks an aws backend's work_uri: an s3:// bucket listed
// in datasets.buckets, in the backend's own site, with a key the
// instance's user-data script can hold.
func validateWorkURI(c *checker, cfg *Config, p string, b Backend) {
	bucket, ok := S3Bucket(b.WorkURI)
	site, listed := cfg.Datasets.Buckets[bucket]
	_, known := cfg.Site(b.Site)
	switch {
	case !ok || bucket == "":
		c.add(p+".work_uri", b.WorkURI, "must be s3://bucket or s3://bucket/prefix: where the backend's attempts live (job.json, staged datasets, events, artifacts)")
	case !validBucket(bucket):
		c.add(p+".work_uri", b.WorkURI, "bucket "+strconv.Quote(bucket)+" is not an S3 bucket name (3 to 63 of a-z, 0-9, '.' and '-')")
	case !validS3Key(strings.TrimPrefix(b.WorkURI, "s3://"+bucket)):
		c.add(p+".work_uri", b.WorkURI, "the key may hold only A-Z, a-z, 0-9, '/', '.', '_', '-', '=' and '+' (it goes into the instance's user-data script)")
	case !listed:
		c.add(p+".work_uri", b.WorkURI, "bucket "+strconv.Quote(bucket)+" is not listed in datasets.buckets (its site must be known)")
	case known && site != b.Site:
		c.add(p+".work_uri", b.WorkURI, "bucket "+strconv.Quote(bucket)+" is in site "+site+", not in the backend's site "+b.Site+": the data of a job staged there must stay in the site it computes in")
	}
}

// launchDefaults fills in the launch settings an aws backend left out:
// max_instances, agent_path, and work_uri from an s3:// checkpoint_uri in
// the backend's own site whose key is of work_uri's safe form (one in
// another site is no place to stage a job's data, one with other characters
// no value for user data: work_uri stays empty, and LaunchReady says so).
func launchDefaults(cfg *Config) {
	for i := range cfg.Backends {
		b := &cfg.Backends[i]
		if b.Kind != KindAWS {
			continue
		}
		if b.MaxInstances == 0 {
			b.MaxInstances = DefaultMaxInstances
		}
		if b.AgentPath == "" {
			b.AgentPath = DefaultAgentPath
		}
		// work_uri goes into the instance's user data: only a checkpoint_uri
		// of its safe form is a default for it.
		if bucket, ok := S3Bucket(b.CheckpointURI); ok && b.WorkURI == "" && validBucket(bucket) && cfg.Datasets.Buckets[bucket] == b.Site &&
			validS3Key(strings.TrimPrefix(b.CheckpointURI, "s3://"+bucket)) {
			b.WorkURI = b.CheckpointURI
		}
	}
}

// validInstanceProfile: an IAM instance profile name, ^[\w+=,.@-]{1,128}$,
// or its ARN, arn:PARTITION:iam::ACCOUNT:instance-profile/[PATH/]NAME.
func validInstanceProfile(s string) bool {
	name := s
	if rest, ok := strings.CutPrefix(s, "arn:"); ok {
		parts := strings.SplitN(rest, ":", 5) // partition, iam, "", account, instance-profile/…
		if len(parts) != 5 || !strings.HasPrefix(parts[0], "aws") || parts[1] != "iam" || parts[2] != "" || len(parts[3]) != 12 || strings.Trim(parts[3], "0123456789") != "" {
			return false
		}
		path, ok := strings.CutPrefix(parts[4], "instance-profile/")
		if !ok {
			return false
		}
		if i := strings.LastIndexByte(path, '/'); i >= 0 {
			for _, seg := range strings.Split(path[:i], "/") {
				if !profileName(seg) {
					return false
				}
			}
			path = path[i+1:]
		}
		name = path
	}
	return profileName(name)
}

func profileName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("+=,.@_-", b) >= 0) {
			return false
		}
	}
	return true
}

// validKeyName: an EC2 key pair name, not blank, at most 255 printable
// ASCII characters.
func validKeyName(s string) bool {
	if strings.TrimSpace(s) == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// validRegion: ^[a-z]{2}(-[a-z]+)+-[0-9]+$, an AWS region name
// (eu-central-1, us-gov-west-1).
func validRegion(s string) bool {
	parts := strings.Split(s, "-")
	if len(parts) < 3 || len(parts[0]) != 2 {
		return false
	}
	for i, part := range parts {
		if part == "" {
			return false
		}
		last := i == len(parts)-1
		for j := 0; j < len(part); j++ {
			if b := part[j]; last && !(b >= '0' && b <= '9') || !last && !(b >= 'a' && b <= 'z') {
				return false
			}
		}
	}
	return true
}

// validS3Key: the key part of an s3:// URI ("" or "/prefix/…"), of
// [A-Za-z0-9/._=+-] only: safe in a shell script, and in S3's "safe
// characters".
func validS3Key(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("/._=+-", b) >= 0) {
			return false
		}
	}
	return true
}

// validAgentPath: ^/[A-Za-z0-9/._-]*$ — an absolute path that is safe in a
// shell script unquoted.
func validAgentPath(s string) bool {
	if !strings.HasPrefix(s, "/") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '/' || b == '.' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

func validatePrice(c *checker, p string, pr Price) {
	flat := c.present(p+".usd_per_gpu_hour", pr.TCO == nil || pr.USDPerGPUHour != 0)
	switch {
	case flat && pr.TCO != nil:
		c.add(p, "", "give usd_per_gpu_hour or tco, not both")
	case !flat && pr.TCO == nil:
		c.add(p, "", "needs usd_per_gpu_hour or tco")
	}
	c.nonNegative(p+".usd_per_gpu_hour", pr.USDPerGPUHour)
	if pr.TCO == nil {
		return
	}
	err := pr.TCO.Validate()
	if err == nil {
		return
	}
	var fes []*cost.FieldError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			var fe *cost.FieldError
			if errors.As(e, &fe) {
				fes = append(fes, fe)
			}
		}
	}
	if len(fes) == 0 {
		c.add(p+".tco", "", err.Error())
		return
	}
	for _, fe := range fes {
		key := fe.Field
		for _, k := range tcoKeys {
			if k[1] == fe.Field {
				key = k[0]
			}
		}
		c.add(p+".tco."+key, fmtFloat(fe.Value), fe.Rule)
	}
}

func siteList(sites []Site) string {
	if len(sites) == 0 {
		return "none"
	}
	names := make([]string, len(sites))
	for i, s := range sites {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
