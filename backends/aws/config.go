package aws

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"

	"github.com/lathe-ml/lathe/internal/redact"
)

// Spot policies for Config.Spot.
const (
	// SpotPrefer tries spot for every type that has a spot price, then
	// on-demand.
	SpotPrefer = "prefer"
	// SpotNever launches on-demand only.
	SpotNever = "never"
	// SpotOnly launches spot only; types without a spot price are not used.
	SpotOnly = "only"
)

// InstanceType is one instance type a backend may launch, with the prices
// Lathe uses to rank choices and compute cost.
type InstanceType struct {
	// Name is the EC2 instance type, e.g. "g5.xlarge".
	Name string
	// OnDemandUSDPerHour is the on-demand price; required, > 0.
	OnDemandUSDPerHour float64
	// SpotUSDPerHour is the expected spot price; 0 means spot is not used
	// for this type.
	SpotUSDPerHour float64
}

// Config configures one AWS backend. New validates it and names every bad
// field with its value.
type Config struct {
	// Cluster is this deployment's name, the lathe:cluster tag. Required.
	// Two deployments sharing an account must use different names: the
	// reconciler terminates orphans of its own cluster only.
	Cluster string
	// Backend is the backend's name in the daemon's config, the
	// lathe:backend tag. Required.
	Backend string
	// Region is the EC2 region; required. Launches never leave it.
	Region string
	// AMI is the image id ("ami-…"). Required.
	AMI string
	// Subnets are tried in order for each choice. At least one.
	Subnets []string
	// SecurityGroups are security group ids ("sg-…"). Zero means the VPC's
	// default group.
	SecurityGroups []string
	// InstanceProfile is the IAM instance profile name or ARN the instance
	// runs as (its S3 access; keys never go into user data). Required.
	InstanceProfile string
	// KeyName is an EC2 key pair for SSH; empty means none.
	KeyName string
	// Spot is SpotPrefer, SpotNever or SpotOnly; empty means SpotNever.
	Spot string
	// InstanceTypes is the allowed list with prices. At least one.
	InstanceTypes []InstanceType
	// EndpointURL points the EC2 client at a compatible endpoint instead of
	// AWS (moto in tests); empty means AWS's endpoint for Region (or
	// AWS_ENDPOINT_URL from the environment).
	EndpointURL string
}

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	regionRE = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-\d+$`)
)

// withDefaults returns c with zero values replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Spot == "" {
		c.Spot = SpotNever
	}
	return c
}

// validate returns an error naming every bad field with its value.
func (c Config) validate() error {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if !nameRE.MatchString(c.Cluster) {
		add("cluster %q: want 1-63 of [A-Za-z0-9._-]", c.Cluster)
	}
	if !nameRE.MatchString(c.Backend) {
		add("backend %q: want 1-63 of [A-Za-z0-9._-]", c.Backend)
	}
	if !regionRE.MatchString(c.Region) {
		add("region %q: want a region like eu-central-1", c.Region)
	}
	if !strings.HasPrefix(c.AMI, "ami-") || len(c.AMI) < 5 {
		add("ami %q: want an image id ami-…", c.AMI)
	}
	c.validateNetwork(add)
	if strings.TrimSpace(c.InstanceProfile) == "" {
		add("instance_profile %q: required (the instance's S3 access)", c.InstanceProfile)
	}
	switch c.Spot {
	case SpotPrefer, SpotNever, SpotOnly:
	default:
		add("spot %q: want prefer, never or only", c.Spot)
	}
	c.validateTypes(add)
	c.validateEndpoint(add)
	if len(bad) > 0 {
		return fmt.Errorf("aws: config: %s", strings.Join(bad, "; "))
	}
	return nil
}

// validateNetwork adds what is wrong with the subnets (none, a bad id, one
// listed twice) and the security groups to validate's list.
func (c Config) validateNetwork(add func(format string, args ...any)) {
	if len(c.Subnets) == 0 {
		add("subnets: at least one is required")
	}
	seen := map[string]bool{}
	for i, s := range c.Subnets {
		if !strings.HasPrefix(s, "subnet-") || len(s) < 8 {
			add("subnets[%d] %q: want a subnet id subnet-…", i, s)
		} else if seen[s] {
			add("subnets[%d] %q: listed twice", i, s)
		}
		seen[s] = true
	}
	for i, s := range c.SecurityGroups {
		if !strings.HasPrefix(s, "sg-") || len(s) < 4 {
			add("security_groups[%d] %q: want a security group id sg-…", i, s)
		}
	}
}

// validateEndpoint adds an endpoint URL that is not http(s)://host[:port]
// to validate's list, its password never shown.
func (c Config) validateEndpoint(add func(format string, args ...any)) {
	if c.EndpointURL == "" {
		return
	}
	u, err := url.Parse(c.EndpointURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Never echo a password the URL carries (nor url.Parse's
		// error, which quotes the whole URL).
		add("endpoint_url %q: want http(s)://host[:port]", redact.URL(c.EndpointURL))
	}
}

// validateTypes adds what is wrong with the instance types (and with spot
// "only" when none has a spot price) to validate's list.
func (c Config) validateTypes(add func(format string, args ...any)) {
	if len(c.InstanceTypes) == 0 {
		add("instance_types: at least one is required")
	}
	types := map[string]bool{}
	anySpot := false
	for i, t := range c.InstanceTypes {
		if t.Name == "" || strings.ContainsAny(t.Name, " \t") || !strings.Contains(t.Name, ".") {
			add("instance_types[%d].name %q: want an EC2 type like g5.xlarge", i, t.Name)
		} else if types[t.Name] {
			add("instance_types[%d].name %q: listed twice", i, t.Name)
		}
		types[t.Name] = true
		if !(t.OnDemandUSDPerHour > 0) || math.IsInf(t.OnDemandUSDPerHour, 0) {
			add("instance_types[%d] %q on_demand_usd_per_hour %v: want a price > 0", i, t.Name, t.OnDemandUSDPerHour)
		}
		if !(t.SpotUSDPerHour >= 0) || math.IsInf(t.SpotUSDPerHour, 0) {
			add("instance_types[%d] %q spot_usd_per_hour %v: want a price >= 0 (0: no spot)", i, t.Name, t.SpotUSDPerHour)
		}
		if t.SpotUSDPerHour > 0 {
			anySpot = true
		}
	}
	if c.Spot == SpotOnly && len(c.InstanceTypes) > 0 && !anySpot {
		add("spot %q: no instance type has a spot price", c.Spot)
	}
}
