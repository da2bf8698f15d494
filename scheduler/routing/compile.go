package routing

import (
	"cmp"
	"slices"
	"strings"
)

// tagSet is a set of tags as a bitmask over the config's tag index.
type tagSet [maxTags / 64]uint64

func (s *tagSet) add(i int)      { s[i>>6] |= 1 << (i & 63) }
func (s *tagSet) has(i int) bool { return s[i>>6]&(1<<(i&63)) != 0 }
func (s *tagSet) covers(o *tagSet) bool {
	for w := range s {
		if o[w]&^s[w] != 0 {
			return false
		}
	}
	return true
}

// index is what Decide needs of a Config, computed once by ParseConfig.
type index struct {
	hash     string
	tagIdx   map[string]int
	sites    []siteInfo
	siteIdx  map[string]int
	redis    int
	fileSite int // -1: none
	buckets  map[string]int
	backends []backendInfo
	defTags  []string
	teams    map[string]float64
	models   []string // distinct GPU models of the instance types
}

type siteInfo struct {
	name  string
	tags  tagSet
	label string // "dc-frankfurt [onprem eu de]"
}

type backendInfo struct {
	name     string
	kind     string
	local    bool
	site     int
	ckptURI  string
	ckptSite int
	usd      float64 // local: $/GPU-hour
	priced   bool
	budget   float64
	spot     bool
	types    []typeInfo // by hourly price, then config order
}

type typeInfo struct {
	name     string
	gpus     int
	modelID  int // in index.models
	model    string
	memGB    float64
	usdPerHr float64
}

// compile normalises and validates c and builds its index; d is the
// decoder's record of the file (nil for a Config built in Go).
//
// The defaults are written into copies of the sites and backends, never
// into the caller's: Decide compiles a Config built in Go on every call, and
// calls may share it.
func compile(c Config, d *decoder) (Config, []FieldError) {
	c.idx = nil
	c.Sites = slices.Clone(c.Sites)
	c.Backends = slices.Clone(c.Backends)
	normalize(&c)
	if errs := validate(&c, d); len(errs) > 0 {
		return Config{}, errs
	}
	launchDefaults(&c)
	c.idx = buildIndex(c)
	return c, nil
}

// index returns c's index, building it when c was not made by ParseConfig.
func (c Config) index() (*index, error) {
	if c.idx != nil {
		return c.idx, nil
	}
	cc, errs := compile(c, nil)
	if len(errs) > 0 {
		return nil, &ConfigError{Errors: capErrors(errs)}
	}
	return cc.idx, nil
}

func buildIndex(c Config) *index {
	x := &index{
		hash:     hashOf(c),
		tagIdx:   map[string]int{},
		siteIdx:  make(map[string]int, len(c.Sites)),
		fileSite: -1,
		buckets:  make(map[string]int, len(c.Datasets.Buckets)),
		defTags:  c.DefaultResidency,
		teams:    c.TeamBudgetsUSD,
	}
	for i, s := range c.Sites {
		si := siteInfo{name: s.Name, label: s.Name + " [" + strings.Join(s.Tags, " ") + "]"}
		for _, t := range s.Tags {
			ti, ok := x.tagIdx[t]
			if !ok {
				ti = len(x.tagIdx)
				x.tagIdx[t] = ti
			}
			si.tags.add(ti)
		}
		x.sites = append(x.sites, si)
		x.siteIdx[s.Name] = i
	}
	x.redis = x.siteIdx[c.RedisSite]
	if i, ok := x.siteIdx[c.Datasets.FileSite]; ok {
		x.fileSite = i
	}
	for b, s := range c.Datasets.Buckets {
		x.buckets[b] = x.siteIdx[s]
	}
	for _, b := range c.Backends {
		bi := backendInfo{
			name: b.Name, kind: b.Kind, local: b.Kind == KindLocal,
			site: x.siteIdx[b.Site], ckptURI: b.CheckpointURI,
			usd: b.USDPerGPUHour(), priced: b.Priced(),
			budget: b.BudgetUSDPerMonth, spot: b.Spot,
		}
		bi.ckptSite = bi.site
		if bucket, ok := s3Bucket(b.CheckpointURI); ok {
			bi.ckptSite = x.buckets[bucket]
		}
		for _, t := range b.InstanceTypes {
			id := slices.Index(x.models, t.GPUModel)
			if id < 0 {
				id = len(x.models)
				x.models = append(x.models, t.GPUModel)
			}
			bi.types = append(bi.types, typeInfo{name: t.Name, gpus: t.GPUs, modelID: id, model: x.models[id], memGB: t.GPUMemoryGB, usdPerHr: t.USDPerHour(b.Spot)})
		}
		slices.SortStableFunc(bi.types, func(a, b typeInfo) int { return cmp.Compare(a.usdPerHr, b.usdPerHr) })
		x.backends = append(x.backends, bi)
	}
	return x
}
