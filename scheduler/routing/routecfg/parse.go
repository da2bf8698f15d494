package routecfg

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/cost"
	"github.com/lathe-ml/lathe/internal/jobspec"
)

// ParseConfig reads the routing sections of lathed's config file — sites,
// redis_site, backends, datasets, routing and budgets — and ignores every
// other top-level key (the daemon's own parser checks those). It reads the
// first YAML document only, as the daemon does.
//
// Inside its sections it is strict: unknown keys, duplicate keys, YAML
// aliases, wrong types (a quoted number, a number where a word belongs) and
// every broken rule (see validate) are reported all at once, each with its
// dotted path and the value as written, in a *ConfigError. An input over
// MaxConfigBytes is an error wrapping ErrTooLarge. A file with none of these
// sections (or an empty one) is valid: the implicit single site (see
// ImplicitSite). On error the Config is the zero Config.
func ParseConfig(data []byte) (Config, error) {
	if len(data) > MaxConfigBytes {
		return Config{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(data), MaxConfigBytes)
	}
	root, errs := parseRoot(data)
	if len(errs) > 0 {
		return Config{}, &ConfigError{Errors: capErrors(errs)}
	}
	d := &decoder{raw: map[string]string{}, bad: map[string]bool{}, present: map[string]bool{}}
	var c Config
	if root != nil {
		d.top(root, &c)
	}
	errs = d.errs
	c, verrs := compile(c, d)
	errs = append(errs, verrs...)
	if len(errs) > 0 {
		return Config{}, &ConfigError{Errors: capErrors(errs)}
	}
	return c, nil
}

// parseRoot returns the top-level mapping of the first document, nil for an
// empty document.
func parseRoot(data []byte) (*yaml.Node, []FieldError) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, []FieldError{{Message: "invalid YAML: " + truncate(strings.TrimPrefix(err.Error(), "yaml: "))}}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	switch {
	case isNull(root):
		return nil, nil
	case root.Kind != yaml.MappingNode:
		return nil, []FieldError{{Message: "the config file must be a mapping of sections, not " + kindName(root)}}
	}
	return root, nil
}

// decoder walks the routing sections of the YAML tree into a Config,
// recording every problem instead of stopping at the first.
type decoder struct {
	errs []FieldError
	// raw holds each scalar as written, by path, for the rules' messages.
	raw map[string]string
	// bad holds the paths already reported, so the rules do not report them
	// again (a wrong type leaves a zero value behind).
	bad map[string]bool
	// present holds the path of every field the input set (not null).
	present map[string]bool
}

func (d *decoder) fail(path string, n *yaml.Node, msg string) {
	v := ""
	if n != nil && n.Kind == yaml.ScalarNode {
		v = truncate(n.Value)
	} else if n != nil && n.Kind == yaml.AliasNode {
		v = truncate("*" + n.Value)
	}
	d.errs = append(d.errs, FieldError{Field: path, Value: v, Message: msg})
	d.bad[path] = true
}

// topKeys are the sections ParseConfig reads.
var topKeys = map[string]bool{"sites": true, "redis_site": true, "backends": true, "datasets": true, "routing": true, "budgets": true}

func (d *decoder) top(root *yaml.Node, c *Config) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || !topKeys[k.Value] {
			continue // another section: the daemon's parser checks it
		}
		if seen[k.Value] {
			d.fail(k.Value, nil, "duplicate key")
			continue
		}
		seen[k.Value] = true
		if d.alias(k.Value, v) || isNull(v) {
			continue
		}
		d.present[k.Value] = true
		d.section(k.Value, v, c)
	}
}

// section decodes v, the section of topKeys named key, into c.
func (d *decoder) section(key string, v *yaml.Node, c *Config) {
	switch key {
	case "sites":
		d.entries("sites", v, func(name, p string, v *yaml.Node) {
			tags, _ := d.strList(p, v)
			c.Sites = append(c.Sites, Site{Name: name, Tags: tags})
		})
	case "redis_site":
		c.RedisSite, _ = d.str("redis_site", v)
	case "backends":
		d.entries("backends", v, func(name, p string, v *yaml.Node) {
			c.Backends = append(c.Backends, d.backend(name, p, v))
		})
	case "datasets":
		d.datasets(v, c)
	case "routing":
		d.routing(v, c)
	case "budgets":
		d.budgets(v, c)
	}
}

// datasets decodes the datasets section: file_site and buckets.
func (d *decoder) datasets(v *yaml.Node, c *Config) {
	d.fields("datasets", v, func(key, p string, v *yaml.Node) bool {
		switch key {
		case "file_site":
			c.Datasets.FileSite, _ = d.str(p, v)
		case "buckets":
			c.Datasets.Buckets = map[string]string{}
			d.entries(p, v, func(name, p string, v *yaml.Node) {
				c.Datasets.Buckets[name], _ = d.str(p, v)
			})
		default:
			return false
		}
		return true
	})
}

// routing decodes the routing section: default_residency, which must not
// be an empty list.
func (d *decoder) routing(v *yaml.Node, c *Config) {
	d.fields("routing", v, func(key, p string, v *yaml.Node) bool {
		if key != "default_residency" {
			return false
		}
		tags, ok := d.strList(p, v)
		if ok && len(tags) == 0 {
			d.fail(p, nil, "must list at least one tag: jobs with no residency get it (fail closed); leave it out for [onprem]")
		}
		c.DefaultResidency = tags
		return true
	})
}

// budgets decodes the budgets section: teams, each team's budget in USD.
func (d *decoder) budgets(v *yaml.Node, c *Config) {
	d.fields("budgets", v, func(key, p string, v *yaml.Node) bool {
		if key != "teams" {
			return false
		}
		c.TeamBudgetsUSD = map[string]float64{}
		d.entries(p, v, func(name, p string, v *yaml.Node) {
			c.TeamBudgetsUSD[name], _ = d.float(p, v)
		})
		return true
	})
}

func (d *decoder) backend(name, path string, n *yaml.Node) Backend {
	b := Backend{Name: name}
	d.fields(path, n, func(key, p string, v *yaml.Node) bool {
		switch key {
		case "kind":
			b.Kind, _ = d.str(p, v)
		case "site":
			b.Site, _ = d.str(p, v)
		case "checkpoint_uri":
			b.CheckpointURI, _ = d.str(p, v)
		case "region":
			b.Region, _ = d.str(p, v)
		case "budget_usd_per_month":
			b.BudgetUSDPerMonth, _ = d.float(p, v)
		case "spot":
			if policy, ok := d.spot(p, v); ok {
				b.SpotPolicy, b.Spot = policy, policy != SpotNever
			}
		case "ami", "subnets", "security_groups", "instance_profile", "key_name", "work_uri",
			"max_instances", "agent_path", "startup", "staging_mbps":
			d.launch(&b, key, p, v)
		case "price":
			b.Price = d.price(p, v)
		case "partition", "account", "work_dir", "max_jobs", "gpus_per_node", "lathed_path", "gpu_model", "gpu_memory_gb", "gres_type":
			d.slurm(&b, key, p, v)
		case "namespace", "image", "service_account", "node_selector", "tolerations", "queue_name", "volume_claim", "host_paths":
			d.kube(&b, key, p, v)
		case "instance_types":
			b.InstanceTypes = []InstanceType{}
			d.entries(p, v, func(name, p string, v *yaml.Node) {
				b.InstanceTypes = append(b.InstanceTypes, d.instanceType(name, p, v))
			})
		default:
			return false
		}
		return true
	})
	return b
}

// launch decodes one of an aws backend's launch settings (key) into b.
func (d *decoder) launch(b *Backend, key, p string, v *yaml.Node) {
	switch key {
	case "ami":
		b.AMI, _ = d.str(p, v)
	case "subnets":
		b.Subnets, _ = d.strList(p, v)
	case "security_groups":
		b.SecurityGroups, _ = d.strList(p, v)
	case "instance_profile":
		b.InstanceProfile, _ = d.str(p, v)
	case "key_name":
		b.KeyName, _ = d.str(p, v)
	case "work_uri":
		b.WorkURI, _ = d.str(p, v)
	case "max_instances":
		b.MaxInstances, _ = d.int(p, v)
	case "agent_path":
		b.AgentPath, _ = d.str(p, v)
	case "startup":
		b.Startup, _ = d.duration(p, v)
	case "staging_mbps":
		b.StagingMBps, _ = d.float(p, v)
	}
}

// slurm decodes one of a slurm backend's settings (key) into b.
func (d *decoder) slurm(b *Backend, key, p string, v *yaml.Node) {
	switch key {
	case "partition":
		b.Partition, _ = d.str(p, v)
	case "account":
		b.Account, _ = d.str(p, v)
	case "work_dir":
		b.WorkDir, _ = d.str(p, v)
	case "max_jobs":
		b.MaxInstances, _ = d.int(p, v)
	case "gpus_per_node":
		b.GPUsPerNode, _ = d.int(p, v)
	case "lathed_path":
		b.AgentPath, _ = d.str(p, v)
	case "gpu_model":
		b.GPUModel, _ = d.str(p, v)
	case "gpu_memory_gb":
		b.GPUMemoryGB, _ = d.float(p, v)
	case "gres_type":
		b.GRESType, _ = d.str(p, v)
	}
}

func (d *decoder) price(path string, n *yaml.Node) *Price {
	pr := &Price{}
	d.fields(path, n, func(key, p string, v *yaml.Node) bool {
		switch key {
		case "usd_per_gpu_hour":
			pr.USDPerGPUHour, _ = d.float(p, v)
		case "tco":
			t := &cost.TCO{}
			d.fields(p, v, func(key, p string, v *yaml.Node) bool {
				f := tcoField(t, key)
				if f == nil {
					return false
				}
				*f, _ = d.float(p, v)
				return true
			})
			pr.TCO = t
		default:
			return false
		}
		return true
	})
	return pr
}

// tcoKeys maps the YAML keys of a TCO to cost.TCO's field names (for
// Validate's errors) in the order of the struct.
var tcoKeys = [...][2]string{
	{"purchase_usd_per_gpu", "PurchaseUSDPerGPU"},
	{"amortisation_months", "AmortisationMonths"},
	{"power_kw_per_gpu", "PowerKWPerGPU"},
	{"usd_per_kwh", "USDPerKWh"},
	{"pue", "PUE"},
	{"ops_overhead_pct", "OpsOverheadPct"},
	{"utilisation", "Utilisation"},
}

func tcoField(t *cost.TCO, key string) *float64 {
	switch key {
	case "purchase_usd_per_gpu":
		return &t.PurchaseUSDPerGPU
	case "amortisation_months":
		return &t.AmortisationMonths
	case "power_kw_per_gpu":
		return &t.PowerKWPerGPU
	case "usd_per_kwh":
		return &t.USDPerKWh
	case "pue":
		return &t.PUE
	case "ops_overhead_pct":
		return &t.OpsOverheadPct
	case "utilisation":
		return &t.Utilisation
	}
	return nil
}

func (d *decoder) instanceType(name, path string, n *yaml.Node) InstanceType {
	t := InstanceType{Name: name}
	d.fields(path, n, func(key, p string, v *yaml.Node) bool {
		switch key {
		case "gpus":
			t.GPUs, _ = d.int(p, v)
		case "gpu_model":
			t.GPUModel, _ = d.str(p, v)
		case "gpu_memory_gb":
			t.GPUMemoryGB, _ = d.float(p, v)
		case "on_demand_usd_per_hour":
			t.OnDemandUSDPerHour, _ = d.float(p, v)
		case "spot_usd_per_hour":
			t.SpotUSDPerHour, _ = d.float(p, v)
		default:
			return false
		}
		return true
	})
	return t
}

// alias reports (and refuses) an alias node.
func (d *decoder) alias(path string, n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode {
		d.fail(path, n, "YAML aliases are not allowed in the routing sections: write the value out")
		return true
	}
	return false
}

// pairs calls f for each key and value of mapping n at path, reporting a
// node that is not a mapping, non-scalar keys, duplicate keys and aliases.
// A null value is passed on (f decides); a null mapping has no pairs.
func (d *decoder) pairs(path string, n *yaml.Node, f func(key, p string, v *yaml.Node)) {
	if d.alias(path, n) || isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(path, n, "must be a mapping, not "+kindName(n))
		return
	}
	var seen map[string]bool
	if len(n.Content) > 16 {
		seen = make(map[string]bool, len(n.Content)/2)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if d.alias(path, k) {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(path, nil, "keys must be plain words, not "+kindName(k))
			continue
		}
		p := join(path, k.Value)
		dup := false
		if seen != nil {
			dup = seen[k.Value]
			seen[k.Value] = true
		} else {
			for j := 0; j < i; j += 2 {
				if n.Content[j].Kind == yaml.ScalarNode && n.Content[j].Value == k.Value {
					dup = true
					break
				}
			}
		}
		if dup {
			d.fail(p, nil, "duplicate key")
			continue
		}
		if d.alias(p, v) {
			continue
		}
		f(k.Value, p, v)
	}
}

// fields decodes a mapping of known fields: f returns false for an unknown
// key. Null values count as left out.
func (d *decoder) fields(path string, n *yaml.Node, f func(key, p string, v *yaml.Node) bool) {
	d.pairs(path, n, func(key, p string, v *yaml.Node) {
		if isNull(v) {
			return
		}
		if !f(key, p, v) {
			d.fail(p, nil, "unknown field")
			return
		}
		d.present[p] = true
	})
}

// entries decodes a mapping of named entries (sites, backends, buckets…).
// A null value is an entry with zero fields.
func (d *decoder) entries(path string, n *yaml.Node, f func(name, p string, v *yaml.Node)) {
	d.pairs(path, n, func(name, p string, v *yaml.Node) {
		d.present[p] = true
		f(name, p, v)
	})
}

func (d *decoder) scalar(path string, n *yaml.Node, want string) bool {
	if isNull(n) {
		return false
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(path, n, "must be "+want+", not "+kindName(n))
		return false
	}
	d.raw[path] = n.Value
	return true
}

func (d *decoder) str(path string, n *yaml.Node) (string, bool) {
	if !d.scalar(path, n, "a string") {
		return "", false
	}
	if n.Tag != "!!str" {
		d.fail(path, n, "must be a string, not "+kindName(n)+" (quote it)")
		return "", false
	}
	return n.Value, true
}

func (d *decoder) float(path string, n *yaml.Node) (float64, bool) {
	if !d.scalar(path, n, "a number") {
		return 0, false
	}
	var f float64
	if n.Tag != "!!int" && n.Tag != "!!float" || n.Decode(&f) != nil {
		d.fail(path, n, "must be a number, not "+kindName(n))
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		d.fail(path, n, "must be a finite number")
		return 0, false
	}
	return f, true
}

func (d *decoder) int(path string, n *yaml.Node) (int, bool) {
	if !d.scalar(path, n, "a whole number") {
		return 0, false
	}
	var v int64
	if n.Tag != "!!int" || n.Decode(&v) != nil || v < math.MinInt32 || v > math.MaxInt32 {
		d.fail(path, n, "must be a whole number")
		return 0, false
	}
	return int(v), true
}

// duration decodes a duration written like 90s, 5m or 1h30m (a bare
// number has no unit and is refused).
func (d *decoder) duration(path string, n *yaml.Node) (time.Duration, bool) {
	if !d.scalar(path, n, "a duration") {
		return 0, false
	}
	v, err := jobspec.ParseDuration(n.Value)
	if n.Tag != "!!str" || err != nil || n.Value == "" {
		d.fail(path, n, "must be a duration like 90s, 5m or 1h30m")
		return 0, false
	}
	return v, true
}

func (d *decoder) bool(path string, n *yaml.Node) (bool, bool) {
	if !d.scalar(path, n, "true or false") {
		return false, false
	}
	var b bool
	if n.Tag != "!!bool" || n.Decode(&b) != nil {
		d.fail(path, n, "must be true or false")
		return false, false
	}
	return b, true
}

// spotWords is what the spot key takes.
const spotWords = "true, false, prefer, never or only"

// spot decodes an aws backend's spot key: true (SpotPrefer), false
// (SpotNever) or a policy word.
func (d *decoder) spot(path string, n *yaml.Node) (string, bool) {
	if !d.scalar(path, n, spotWords) {
		return "", false
	}
	var b bool
	switch {
	case n.Tag == "!!bool" && n.Decode(&b) == nil:
		if b {
			return SpotPrefer, true
		}
		return SpotNever, true
	case n.Tag == "!!str" && (n.Value == SpotNever || n.Value == SpotPrefer || n.Value == SpotOnly):
		return n.Value, true
	case n.Tag == "!!str" && (strings.EqualFold(n.Value, "true") || strings.EqualFold(n.Value, "false")):
		d.fail(path, n, "must be true or false without quotes, or a spot policy: want "+spotWords)
		return "", false
	}
	d.fail(path, n, "is not a spot policy: want "+spotWords)
	return "", false
}

// strList decodes a sequence of strings; null is an empty list. A bad item
// is reported and stands as "" in the list, so the rules name the items
// after it by their index as written.
func (d *decoder) strList(path string, n *yaml.Node) ([]string, bool) {
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(path, n, "must be a list, not "+kindName(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	ok := true
	for i, item := range n.Content {
		p := path + "[" + strconv.Itoa(i) + "]"
		if d.alias(p, item) {
			ok = false
			out = append(out, "")
			continue
		}
		if isNull(item) {
			d.fail(p, nil, "must be a string, not null")
			ok = false
			out = append(out, "")
			continue
		}
		s, good := d.str(p, item)
		ok = ok && good
		out = append(out, s)
	}
	return out, ok
}

// join appends key to path with a dot.
func join(path, key string) string {
	if path == "" {
		return truncate(key)
	}
	return path + "." + truncate(key)
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// kindName names what a node holds, for "must be X, not Y".
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return "a string"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "null"
		case "!!timestamp":
			return "a timestamp"
		case "!!binary":
			return "binary data"
		}
		return "a value tagged " + truncate(n.Tag)
	}
	return "a document"
}
