package routecfg

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// TagSet is a set of tags as a bitmask over the config's tag index
// (Index.TagIdx).
type TagSet [MaxTags / 64]uint64

// Add puts tag i in s.
func (s *TagSet) Add(i int) { s[i>>6] |= 1 << (i & 63) }

// Has reports whether tag i is in s.
func (s *TagSet) Has(i int) bool { return s[i>>6]&(1<<(i&63)) != 0 }

// Covers reports whether every tag of o is in s.
func (s *TagSet) Covers(o *TagSet) bool {
	for w := range s {
		if o[w]&^s[w] != 0 {
			return false
		}
	}
	return true
}

// Index is what routing.Decide needs of a Config, computed once by
// ParseConfig (or Compile) and shared, read-only, by every copy of the
// Config. Sites, backends and instance types are referred to by their
// position in its slices.
type Index struct {
	Hash     string             // Config.Hash
	TagIdx   map[string]int     // tag → its bit in a TagSet
	Sites    []SiteInfo         // in config order
	SiteIdx  map[string]int     // site name → index in Sites
	Redis    int                // redis_site, in Sites
	FileSite int                // datasets.file_site, in Sites; -1: none
	Buckets  map[string]int     // bucket → its site, in Sites
	Backends []BackendInfo      // in config order
	DefTags  []string           // default_residency
	Teams    map[string]float64 // team → monthly budget, USD
	Models   []string           // distinct GPU models of the instance types
}

// SiteInfo is a site of the Index.
type SiteInfo struct {
	Name  string
	Tags  TagSet
	Label string // "dc-frankfurt [onprem eu de]"
}

// BackendInfo is a backend of the Index; sites are indexes in Index.Sites.
type BackendInfo struct {
	Name     string
	Kind     string
	Local    bool
	Site     int
	CkptURI  string
	CkptSite int
	USD      float64 // local: $/GPU-hour
	Priced   bool
	Budget   float64
	Spot     bool
	Startup  time.Duration // aws: from dispatch to the trainer's start
	StageBps float64       // aws: staging_mbps in bytes per second; 0: not timed
	Types    []TypeInfo    // by hourly price, then config order
}

// TypeInfo is an instance type of a BackendInfo.
type TypeInfo struct {
	Name     string
	GPUs     int
	ModelID  int // in Index.Models
	Model    string
	MemGB    float64
	USDPerHr float64
}

// compile normalises and validates c and builds its index; d is the
// decoder's record of the file (nil for a Config built in Go).
//
// The defaults are written into copies of the sites and backends, never
// into the caller's: routing.Decide compiles a Config built in Go on every call, and
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
	slurmDefaults(&c)
	c.idx = buildIndex(c)
	return c, nil
}

// Index returns c's index, building it when c was not made by ParseConfig.
func (c Config) Index() (*Index, error) {
	if c.idx != nil {
		return c.idx, nil
	}
	cc, err := Compile(c)
	if err != nil {
		return nil, err
	}
	return cc.idx, nil
}

// Compile normalises and validates a Config built in Go and builds its
// index, as ParseConfig does for a file; routing.Decide compiles a Config that
// ParseConfig did not make on every call. The defaults go into a copy: c
// is not modified. The error is a *ConfigError.
func Compile(c Config) (Config, error) {
	cc, errs := compile(c, nil)
	if len(errs) > 0 {
		return Config{}, &ConfigError{Errors: capErrors(errs)}
	}
	return cc, nil
}

func buildIndex(c Config) *Index {
	x := &Index{
		Hash:     hashOf(c),
		TagIdx:   map[string]int{},
		SiteIdx:  make(map[string]int, len(c.Sites)),
		FileSite: -1,
		Buckets:  make(map[string]int, len(c.Datasets.Buckets)),
		DefTags:  c.DefaultResidency,
		Teams:    c.TeamBudgetsUSD,
	}
	for i, s := range c.Sites {
		x.Sites = append(x.Sites, x.siteInfo(s))
		x.SiteIdx[s.Name] = i
	}
	x.Redis = x.SiteIdx[c.RedisSite]
	if i, ok := x.SiteIdx[c.Datasets.FileSite]; ok {
		x.FileSite = i
	}
	for b, s := range c.Datasets.Buckets {
		x.Buckets[b] = x.SiteIdx[s]
	}
	for _, b := range c.Backends {
		x.Backends = append(x.Backends, x.backendInfo(b))
	}
	return x
}

// siteInfo is site s indexed: its tags numbered in TagIdx, new ones added.
func (x *Index) siteInfo(s Site) SiteInfo {
	si := SiteInfo{Name: s.Name, Label: s.Name + " [" + strings.Join(s.Tags, " ") + "]"}
	for _, t := range s.Tags {
		ti, ok := x.TagIdx[t]
		if !ok {
			ti = len(x.TagIdx)
			x.TagIdx[t] = ti
		}
		si.Tags.Add(ti)
	}
	return si
}

// backendInfo is backend b indexed: its site and checkpoint site by index
// (SiteIdx and Buckets must be filled), its instance types cheapest first
// with their GPU models numbered in Models, new ones added.
func (x *Index) backendInfo(b Backend) BackendInfo {
	bi := BackendInfo{
		Name: b.Name, Kind: b.Kind, Local: b.Kind == KindLocal,
		Site: x.SiteIdx[b.Site], CkptURI: b.CheckpointURI,
		USD: b.USDPerGPUHour(), Priced: b.Priced(),
		Budget: b.BudgetUSDPerMonth, Spot: b.Spot, Startup: b.Startup, StageBps: b.StagingMBps * 1e6,
	}
	bi.CkptSite = bi.Site
	if bucket, ok := S3Bucket(b.CheckpointURI); ok {
		bi.CkptSite = x.Buckets[bucket]
	}
	types := b.InstanceTypes
	if b.BatchPool() {
		types = slurmTypes(b)
	}
	for _, t := range types {
		id := slices.Index(x.Models, t.GPUModel)
		if id < 0 {
			id = len(x.Models)
			x.Models = append(x.Models, t.GPUModel)
		}
		bi.Types = append(bi.Types, TypeInfo{Name: t.Name, GPUs: t.GPUs, ModelID: id, Model: x.Models[id], MemGB: t.GPUMemoryGB, USDPerHr: t.USDPerHour(b.Spot)})
	}
	slices.SortStableFunc(bi.Types, func(a, b TypeInfo) int { return cmp.Compare(a.USDPerHr, b.USDPerHr) })
	return bi
}
