package routing

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// The residency property: no decision places the computation, the dataset,
// the eval dataset, the checkpoints, the output or the raw logs of a job in
// a site that lacks one of the job's effective tags. The oracle below reads
// only the public Config, not Decide's index, and checks every candidate
// Decide calls feasible, the chosen backend and every staging.
//
// Run it for a million cases:
//
//	go test -run '^$' -bench BenchmarkResidencyProperty -benchtime 1000000x ./scheduler/routing
//
// or through the test, with LATHE_ROUTING_PROPERTY_CASES=1000000 (default
// 20000; 2000 with -short).

// propTags: at most 4 tags, as the issue asks.
var propTags = []string{"onprem", "eu", "us", "cloud"}

// propWorld is a pool of random configs with their oracles, and the random
// source jobs and snapshots are drawn from.
type propWorld struct {
	r       *rand.Rand
	configs []routecfg.Config
	oracles []*oracle
}

func newPropWorld(t testing.TB, seed uint64, nConfigs int) *propWorld {
	w := &propWorld{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	for range nConfigs {
		c := w.randomConfig()
		cc, err := routecfg.Compile(c)
		if err != nil {
			t.Fatalf("generator made an invalid config: %v\n%+v", err, c)
		}
		w.configs = append(w.configs, cc)
		w.oracles = append(w.oracles, newOracle(cc))
	}
	return w
}

// siteTags draws each tag with probability 3/4.
func (w *propWorld) siteTags() []string {
	out := []string{}
	for _, t := range propTags {
		if w.r.IntN(4) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// jobTags draws 1 or 2 tags (maybe the same twice).
func (w *propWorld) jobTags() []string {
	var out []string
	for range 1 + w.r.IntN(2) {
		out = append(out, propTags[w.r.IntN(len(propTags))])
	}
	return out
}

var propModels = []struct {
	model string
	mem   float64
}{{"H100", 80}, {"A100", 40}, {"L40S", 48}, {"A10G", 24}}

func (w *propWorld) randomConfig() routecfg.Config {
	r := w.r
	var c routecfg.Config
	for i := range 1 + r.IntN(4) {
		c.Sites = append(c.Sites, routecfg.Site{Name: "s" + strconv.Itoa(i), Tags: w.siteTags()})
	}
	site := func() string { return c.Sites[r.IntN(len(c.Sites))].Name }
	c.RedisSite = site()
	var buckets []string
	if n := r.IntN(5); n > 0 {
		c.Datasets.Buckets = map[string]string{}
		for i := range n {
			b := "bucket-" + strconv.Itoa(i)
			c.Datasets.Buckets[b] = site()
			buckets = append(buckets, b)
		}
	}
	hasLocal := false
	for i := range 1 + r.IntN(5) {
		b := routecfg.Backend{Name: "b" + strconv.Itoa(i), Site: site()}
		ckpt := func() string {
			if len(buckets) > 0 && r.IntN(2) == 0 {
				return "s3://" + buckets[r.IntN(len(buckets))] + "/ckpt/" + b.Name
			}
			return "file:///ckpt/" + b.Name
		}
		if r.IntN(5) < 2 {
			hasLocal = true
			b.Kind = routecfg.KindLocal
			if r.IntN(3) > 0 {
				b.CheckpointURI = ckpt()
			}
			if r.IntN(3) > 0 {
				b.Price = &routecfg.Price{USDPerGPUHour: float64(r.IntN(300)) / 100}
			}
		} else {
			b.Kind, b.Region, b.CheckpointURI = routecfg.KindAWS, "eu-test-"+strconv.Itoa(i), ckpt()
			b.Spot = r.IntN(4) == 0
			// A startup on some backends (from the index: the draws stay
			// as they were): a cloud backend may lose to a shorter local
			// wait, never to a site check.
			b.Startup = time.Duration(i%3) * 45 * time.Minute
			if r.IntN(3) == 0 {
				b.BudgetUSDPerMonth = float64(r.IntN(500))
			}
			for k := range 1 + r.IntN(3) {
				m := propModels[r.IntN(len(propModels))]
				g := []int{1, 4, 8}[r.IntN(3)]
				price := float64(g) * (1 + float64(r.IntN(600))/100)
				b.InstanceTypes = append(b.InstanceTypes, routecfg.InstanceType{Name: "t" + strconv.Itoa(k) + ".x", GPUs: g, GPUModel: m.model,
					GPUMemoryGB: m.mem, OnDemandUSDPerHour: price, SpotUSDPerHour: price / 2})
			}
		}
		c.Backends = append(c.Backends, b)
	}
	if hasLocal || r.IntN(3) > 0 {
		c.Datasets.FileSite = site()
	}
	c.DefaultResidency = w.jobTags()
	if r.IntN(2) == 0 {
		c.TeamBudgetsUSD = map[string]float64{"t1": float64(r.IntN(200))}
	}
	return c
}

func (w *propWorld) uri(buckets map[string]string, emptyPct int) string {
	r := w.r
	n := r.IntN(100)
	switch {
	case n < emptyPct:
		return ""
	case n < emptyPct+35:
		return "file:///data/x"
	case n < 94 && len(buckets) > 0:
		keys := slices.Sorted(maps.Keys(buckets))
		return "s3://" + keys[r.IntN(len(keys))] + "/x"
	case n < 98:
		return "s3://unlisted-bucket/x"
	default:
		return "https://example.com/x"
	}
}

// randomCase draws a config from the pool, a job and a snapshot.
func (w *propWorld) randomCase() (Job, Snapshot, *oracle) {
	r := w.r
	k := r.IntN(len(w.configs))
	cfg := w.configs[k]
	j := Job{ID: "j", Team: []string{"t1", "t2"}[r.IntN(2)], BaseModel: []string{"m1", "m2"}[r.IntN(2)]}
	switch n := r.IntN(10); {
	case n < 2: // none
	case n < 3:
		j.Residency = []string{}
	default:
		j.Residency = w.jobTags()
	}
	j.Dataset = w.uri(cfg.Datasets.Buckets, 5)
	j.EvalDataset = w.uri(cfg.Datasets.Buckets, 50)
	j.Output = w.uri(cfg.Datasets.Buckets, 20)
	j.GPUs = []int{0, 1, 1, 2, 4, 8, 9}[r.IntN(7)]
	for _, m := range propModels {
		if r.IntN(5) == 0 {
			j.GPUModels = append(j.GPUModels, strings.ToLower(m.model))
		}
	}
	j.GPUMemoryGB = []float64{0, 0, 24, 40, 80, 100}[r.IntN(6)]
	j.Priority = r.IntN(3)
	j.MaxWait = time.Duration(r.IntN(4)) * time.Hour
	if r.IntN(3) == 0 {
		j.BudgetUSD = float64(r.IntN(100))
	}
	if r.IntN(2) == 0 {
		j.ExpectedRuntime = time.Duration(1+r.IntN(600)) * time.Minute
	}
	j.MaxSteps = r.IntN(3) * 1000
	if r.IntN(4) > 0 {
		j.MaxRuntime = time.Duration(1+r.IntN(24)) * time.Hour
	}
	if r.IntN(4) == 0 {
		j.ValuePerHourUSD = float64(r.IntN(200))
	}

	s := Snapshot{Config: cfg, Pools: map[string]Pool{}, BackendSpend: map[string]Spend{}, TeamSpend: map[string]Spend{},
		SecondsPerStep: map[string]float64{}}
	for _, b := range cfg.Backends {
		if b.Kind == routecfg.KindLocal {
			if r.IntN(5) == 0 {
				continue // no state
			}
			var p Pool
			for n := range r.IntN(4) {
				node := PoolNode{Name: "n" + strconv.Itoa(n)}
				for range 1 + r.IntN(2) {
					m := propModels[r.IntN(len(propModels))]
					node.GPUs = append(node.GPUs, PoolGPU{Model: "NVIDIA " + m.model, MemoryGB: m.mem, Healthy: r.IntN(9)})
				}
				p.Nodes = append(p.Nodes, node)
			}
			for i := range p.GPUHoursAhead {
				p.GPUHoursAhead[i] = float64(r.IntN(100))
			}
			if r.IntN(4) == 0 {
				p.AssumeWait = dur(time.Duration(r.IntN(10)) * time.Hour)
			}
			s.Pools[b.Name] = p
		} else if r.IntN(2) == 0 {
			s.BackendSpend[b.Name] = Spend{LimitUSD: float64(r.IntN(3) * 100), SpentUSD: float64(r.IntN(300))}
		}
	}
	s.TeamSpend["t1"] = Spend{SpentUSD: float64(r.IntN(200))}
	if r.IntN(2) == 0 {
		s.SecondsPerStep["m1|nvidia h100"] = 0.5
		s.SecondsPerStep["m1|l40s"] = 2
		s.SecondsPerStep["m2|cpu"] = 10
	}
	return j, s, w.oracles[k]
}

// oracle knows, from the public Config alone, which sites carry which tags
// and where every URI lives.
type oracle struct {
	cfg   routecfg.Config
	tags  map[string]map[string]bool // site → tags
	ckpts map[string]string          // backend → site of its checkpoints ("" unknown)
	sites map[string]string          // backend → compute site
	kinds map[string]string
}

func newOracle(c routecfg.Config) *oracle {
	o := &oracle{cfg: c, tags: map[string]map[string]bool{}, ckpts: map[string]string{}, sites: map[string]string{}, kinds: map[string]string{}}
	for _, s := range c.Sites {
		o.tags[s.Name] = map[string]bool{}
		for _, t := range s.Tags {
			o.tags[s.Name][t] = true
		}
	}
	for _, b := range c.Backends {
		o.sites[b.Name], o.kinds[b.Name] = b.Site, b.Kind
		o.ckpts[b.Name] = b.Site // file:// or none: in its own site
		if strings.HasPrefix(b.CheckpointURI, "s3://") {
			o.ckpts[b.Name] = o.bucketSite(b.CheckpointURI)
		}
	}
	return o
}

// bucketSite is the site of an s3:// URI's bucket; "" when not listed.
func (o *oracle) bucketSite(uri string) string {
	rest := strings.TrimPrefix(uri, "s3://")
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	return o.cfg.Datasets.Buckets[rest]
}

func (o *oracle) ok(site string, tags []string) bool {
	st, found := o.tags[site]
	if !found {
		return false
	}
	for _, t := range tags {
		if !st[t] {
			return false
		}
	}
	return true
}

// violations lists every breach of the residency property (and of the
// decision's basic shape) by d.
func (o *oracle) violations(j Job, d Decision) []string {
	eff := j.Residency
	if len(eff) == 0 {
		eff = o.cfg.DefaultResidency
	}
	var out []string
	if !slices.Equal(d.Residency, eff) {
		out = append(out, fmt.Sprintf("effective residency %v, want %v", d.Residency, eff))
	}
	if len(eff) == 0 {
		out = append(out, "empty effective residency")
	}
	dataSite := func(uri string) (site string, touches bool) {
		switch {
		case uri == "":
			return "", false
		case strings.HasPrefix(uri, "file://"):
			return o.cfg.Datasets.FileSite, true
		case strings.HasPrefix(uri, "s3://"):
			return o.bucketSite(uri), true
		}
		return "", true // unknown scheme: no site
	}
	outSite := j.Output
	if outSite == "" {
		outSite = "file://"
	}
	feasible := 0
	for i, c := range d.Candidates {
		if i >= len(o.cfg.Backends) || c.Backend != o.cfg.Backends[i].Name {
			out = append(out, "candidates not in config order")
			break
		}
		if !c.Feasible {
			if c.Reason == "" {
				out = append(out, c.Backend+": infeasible without a reason")
			}
			continue
		}
		feasible++
		// Raw logs: Redis for a local attempt, or for a cloud one when
		// redis_site carries the tags; else the cloud backend's own site.
		logs := o.cfg.RedisSite
		if c.Kind != routecfg.KindLocal && !o.ok(o.cfg.RedisSite, eff) {
			logs = o.sites[c.Backend]
		}
		places := [][2]string{{"compute", o.sites[c.Backend]}, {"checkpoints", o.ckpts[c.Backend]}, {"raw logs", logs}}
		for _, u := range [][2]string{{"dataset", j.Dataset}, {"eval dataset", j.EvalDataset}, {"output", outSite}} {
			if s, touches := dataSite(u[1]); touches {
				places = append(places, [2]string{u[0], s})
			}
		}
		for _, p := range places {
			if !o.ok(p[1], eff) {
				out = append(out, fmt.Sprintf("%s: %s in site %q, which lacks one of %v", c.Backend, p[0], p[1], eff))
			}
		}
	}
	if len(d.Candidates) != len(o.cfg.Backends) {
		out = append(out, "a candidate per backend")
	}
	if d.Refused != (feasible == 0) {
		out = append(out, fmt.Sprintf("refused %v with %d feasible candidates", d.Refused, feasible))
	}
	if !d.Refused {
		c, found := Candidate{}, false
		for _, cc := range d.Candidates {
			if cc.Backend == d.Backend {
				c, found = cc, true
			}
		}
		if !found || !c.Feasible || d.Site != o.sites[d.Backend] {
			out = append(out, "chose "+d.Backend+", not a feasible candidate")
		}
	}
	for _, st := range d.Staging {
		if !o.ok(st.FromSite, eff) || !o.ok(st.ToSite, eff) {
			out = append(out, fmt.Sprintf("staging %+v leaves the tags %v", st, eff))
		}
	}
	return out
}

// propStats counts outcomes, to show the generator exercises the rules.
type propStats map[string]int

func (ps propStats) add(d Decision) {
	switch {
	case d.Refused:
		ps["refused"]++
	case d.Waiting:
		ps["waiting"]++
	default:
		ps["placed"]++
	}
	if len(d.Staging) > 0 {
		ps["staging"]++
	}
	for _, c := range d.Candidates {
		if c.Feasible {
			ps["feasible "+c.Kind]++
			continue
		}
		ps[c.Reason[:strings.Index(c.Reason, ": ")]]++
	}
}

func propCases(t *testing.T) int {
	if s := os.Getenv("LATHE_ROUTING_PROPERTY_CASES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LATHE_ROUTING_PROPERTY_CASES=%q", s)
		}
		return n
	}
	if testing.Short() {
		return 2000
	}
	return 20000
}

// TestResidencyProperty checks the residency property on random jobs and
// snapshots (empty residency and unlisted buckets among them).
func TestResidencyProperty(t *testing.T) {
	n := propCases(t)
	w := newPropWorld(t, 20261202, 256)
	stats := propStats{}
	for i := range n {
		j, s, o := w.randomCase()
		d := Decide(j, s)
		if v := o.violations(j, d); len(v) > 0 {
			t.Fatalf("case %d: %v\njob %+v\nconfig %+v\ndecision %+v", i, v, j, s.Config, d)
		}
		stats.add(d)
	}
	t.Logf("%d cases: %v", n, stats)
	for _, k := range []string{"refused", "waiting", "placed", "staging", "feasible local", "feasible aws",
		ReasonComputeSite, ReasonDatasetSite, ReasonEvalDatasetSite, ReasonCheckpointSite, ReasonOutputSite, ReasonLogSite,
		ReasonBucketUnknown, ReasonNoSite, ReasonNoGPUFit, ReasonJobBudget, ReasonTeamBudget, ReasonBackendBudget} {
		if stats[k] == 0 {
			t.Errorf("the generator never produced %q", k)
		}
	}
}

// BenchmarkResidencyProperty runs the property for b.N cases: -benchtime
// 1000000x runs a million.
func BenchmarkResidencyProperty(b *testing.B) {
	w := newPropWorld(b, 20261202, 256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j, s, o := w.randomCase()
		d := Decide(j, s)
		if v := o.violations(j, d); len(v) > 0 {
			b.Fatalf("case %d: %v\njob %+v\nconfig %+v\ndecision %+v", i, v, j, s.Config, d)
		}
	}
	b.ReportMetric(float64(b.N), "cases")
}

// TestRemovingACheckBreaksResidency shows each residency check is needed:
// with any one removed, the property finds a violation.
func TestRemovingACheckBreaksResidency(t *testing.T) {
	for i, ck := range checks {
		if !ck.residency {
			continue
		}
		t.Run(strings.ReplaceAll(ck.name, " ", "_"), func(t *testing.T) {
			without := slices.Delete(slices.Clone(checks), i, i+1)
			w := newPropWorld(t, 7, 256)
			const limit = 200000
			for n := 1; n <= limit; n++ {
				j, s, o := w.randomCase()
				d := decide(&j, &s, without)
				if v := o.violations(j, d); len(v) > 0 {
					t.Logf("without %q, case %d breaks the property: %s", ck.name, n, v[0])
					return
				}
			}
			t.Errorf("without %q, %d cases found no violation: the check is not needed, or the generator misses its case", ck.name, limit)
		})
	}
}
