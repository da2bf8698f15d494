package routing

import (
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lathe-ml/lathe/internal/cost"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Where a runtime estimate came from.
const (
	rtUnknown  uint8 = iota
	rtExpected       // the job's expected_runtime
	rtLearned        // max_steps × learned seconds per step
	rtMax            // max_runtime, an upper bound
)

// maxEstimate caps estimates so the arithmetic stays in range (100 years).
const maxEstimate = 100 * 365 * 24 * time.Hour

// candState is what the checks and the ranking know of one backend for the
// job: GPU fit, the instance type, the estimates.
type candState struct {
	ready     bool // prepare ran
	known     bool // local: the snapshot has the pool
	hasNodes  bool // local: the pool has nodes
	fits      bool
	costKnown bool  // false: no runtime estimate on a priced backend
	rtSrc     uint8 // rtExpected, rtLearned, rtMax or rtUnknown
	ti        int   // aws: index in BackendInfo.Types of the chosen type; -1: none
	most      int   // the most matching GPUs on one node / in one type (for reasons)
	fitNodes  int   // local: nodes with the job's GPUs, counted up to its node count (for reasons)

	runtime   time.Duration
	rate      float64 // learned seconds per step, when rtSrc == rtLearned
	rateModel string
	cost      float64
	waitS     float64 // local: Job.Waited plus waitNowS; cloud: the backend's startup plus stageS
	stageS    float64 // cloud: the time its datasets take to reach the backend's site (stagingTime)
	waitNowS  float64 // local: the wait from now on (Job.Waited aside)
}

// prepare works out fit and estimates of job on backend b, once: the
// checks that need them call it, so a backend refused for residency costs
// no more than its site checks.
func (e *eval) prepare(b *routecfg.BackendInfo, st *candState) {
	if st.ready {
		return
	}
	*st = candState{ready: true, ti: -1}
	if b.Local {
		pool, known := e.s.Pools[b.Name]
		st.known, st.hasNodes = known, len(pool.Nodes) > 0
		e.fitLocal(b, &pool, st)
		e.waitLocal(&pool, st)
	} else {
		e.fitCloud(b, st)
		if !routecfg.BatchPoolKind(b.Kind) { // a Slurm or Kubernetes pool reads its file:// data in place
			st.stageS = stagingTime(&e.job, e.dataset, e.evalSet, b).seconds
		}
		st.waitS = min(b.Startup.Seconds()+st.stageS+e.s.QueueWait[b.Name].Seconds(), maxEstimate.Seconds())
		st.waitNowS = st.waitS
	}
}

// gpuMatches reports whether a GPU of this model and memory serves the job.
// The last answer is kept: the nodes of a pool mostly repeat one model.
func (e *eval) gpuMatches(model string, memGB float64) bool {
	if memGB < e.job.GPUMemoryGB {
		return false
	}
	if len(e.job.GPUModels) == 0 {
		return true
	}
	if c := &e.lastMatch; c.valid && c.model == model {
		return c.ok
	}
	ok := false
	for _, m := range e.job.GPUModels {
		if containsFold(model, m) {
			ok = true
			break
		}
	}
	e.lastMatch = matchMemo{valid: true, model: model, ok: ok}
	return ok
}

// typeMatches is gpuMatches for an instance type, with the answer on its
// model kept per decision.
func (e *eval) typeMatches(t *routecfg.TypeInfo) bool {
	if t.MemGB < e.job.GPUMemoryGB {
		return false
	}
	if t.ModelID >= len(e.typeMatch) {
		return e.gpuMatches(t.Model, t.MemGB)
	}
	m := &e.typeMatch[t.ModelID]
	if *m == 0 {
		*m = 2
		if e.gpuMatches(t.Model, t.MemGB) {
			*m = 1
		}
	}
	return *m == 1
}

// matchMemo is gpuMatches' last answer on models (memory aside).
type matchMemo struct {
	valid bool
	model string
	ok    bool
}

// fitLocal: Nodes nodes (at least one) each have ≥ GPUs healthy matching
// GPUs; a job with no GPUs always fits (CPU slots are not modelled here).
func (e *eval) fitLocal(b *routecfg.BackendInfo, pool *Pool, st *candState) {
	want, nodes := e.job.GPUs, e.job.nodeCount()
	if want <= 0 {
		st.fits = true
		e.runtimeFor(st, "cpu", true)
		e.costLocal(b, st)
		return
	}
	for i := range pool.Nodes {
		have := 0
		for _, g := range pool.Nodes[i].GPUs {
			if g.Healthy > 0 && e.gpuMatches(g.Model, g.MemoryGB) {
				have += g.Healthy
			}
		}
		st.most = max(st.most, have)
		if have >= want {
			if st.fitNodes++; st.fitNodes == nodes {
				break // fits; most and fitNodes only explain a misfit
			}
		}
	}
	st.fits = st.fitNodes >= nodes
	// Runtime: the slowest learned rate among the models that could take
	// the job (placement may choose any of them).
	first := true
	if st.fits && e.needRate() {
		for i := range pool.Nodes {
			n := &pool.Nodes[i]
			have := 0
			for _, g := range n.GPUs {
				if g.Healthy > 0 && e.gpuMatches(g.Model, g.MemoryGB) {
					have += g.Healthy
				}
			}
			if have < want {
				continue
			}
			for _, g := range n.GPUs {
				if g.Healthy > 0 && e.gpuMatches(g.Model, g.MemoryGB) {
					if r, ok := e.rate(g.Model); ok && (first || r > st.rate) {
						st.rate, st.rateModel, first = r, g.Model, false
					}
				}
			}
		}
	}
	e.runtimeFor(st, "", !first)
	e.costLocal(b, st)
}

func (e *eval) costLocal(b *routecfg.BackendInfo, st *candState) {
	switch {
	case !b.Priced || b.USD == 0 || e.job.GPUs <= 0:
		st.costKnown = true // nothing to pay, whatever the runtime
	case st.rtSrc != rtUnknown:
		st.cost, st.costKnown = cost.GPUHours(st.runtime, e.job.totalGPUs())*b.USD, true
	}
}

// fitCloud chooses the instance type with the lowest estimated cost among
// those with ≥ GPUs GPUs of a matching model and memory (any type for a job
// with no GPUs); ties go to the lower hourly price, then config order. A
// cloud backend launches one instance per attempt: a job of several nodes
// needs one type with all of them (GPUs × Nodes), or it does not fit.
func (e *eval) fitCloud(b *routecfg.BackendInfo, st *candState) {
	want := e.job.totalGPUs()
	var best candState
	found := false
	for i := range b.Types {
		t := &b.Types[i]
		if e.job.GPUs > 0 && !e.typeMatches(t) {
			continue
		}
		if t.GPUs > st.most {
			st.most = t.GPUs
		}
		if t.GPUs < want {
			continue
		}
		var c candState
		c.ti = i
		if e.job.GPUs <= 0 {
			e.runtimeFor(&c, "cpu", true)
		} else {
			r, ok := 0.0, false
			if e.needRate() {
				r, ok = e.rate(t.Model)
			}
			c.rate, c.rateModel = r, t.Model
			e.runtimeFor(&c, "", ok)
		}
		if c.rtSrc != rtUnknown {
			c.cost, c.costKnown = c.runtime.Hours()*t.USDPerHr, true
		} else if t.USDPerHr == 0 {
			c.costKnown = true
		}
		if !found || better(&c, &best) {
			c.fits = true
			best, found = c, true
		}
	}
	most := st.most
	if found {
		*st = best
	}
	st.ready, st.most = true, most
}

// better: known cost beats unknown, then lower cost; the types are already
// in price order, so a tie keeps the earlier.
func better(a, b *candState) bool {
	if a.costKnown != b.costKnown {
		return a.costKnown
	}
	return a.costKnown && a.cost < b.cost
}

// needRate: the runtime comes from a learned rate only without
// expected_runtime and with max_steps.
func (e *eval) needRate() bool {
	return e.job.ExpectedRuntime <= 0 && e.job.MaxSteps > 0 && len(e.s.SecondsPerStep) > 0
}

// runtimeFor fills st's runtime: expected_runtime, else max_steps × the
// learned rate (st.rate, or the "cpu" rate when cpu), else max_runtime.
func (e *eval) runtimeFor(st *candState, cpu string, haveRate bool) {
	j := &e.job
	if cpu != "" {
		haveRate = false
		if e.needRate() {
			st.rate, haveRate = e.rate(cpu)
			st.rateModel = cpu
		}
	}
	switch {
	case j.ExpectedRuntime > 0:
		st.runtime, st.rtSrc = min(j.ExpectedRuntime, maxEstimate), rtExpected
	case j.MaxSteps > 0 && haveRate:
		secs := float64(j.MaxSteps) * st.rate
		st.runtime, st.rtSrc = seconds(secs), rtLearned
	case j.MaxRuntime > 0:
		st.runtime, st.rtSrc = min(j.MaxRuntime, maxEstimate), rtMax
	default:
		st.runtime, st.rtSrc = 0, rtUnknown
	}
}

// seconds converts to a Duration, capped at maxEstimate.
func seconds(s float64) time.Duration {
	if !(s < maxEstimate.Seconds()) {
		return maxEstimate
	}
	if s <= 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// rate looks up the learned seconds per step of the job's base model on
// model, without allocating for ASCII names.
func (e *eval) rate(model string) (float64, bool) {
	m := e.s.SecondsPerStep
	var buf [128]byte
	k, ok := appendLower(buf[:0], e.job.BaseModel)
	if ok {
		k = append(k, '|')
		k, ok = appendLower(k, model)
	}
	var r float64
	var found bool
	if ok {
		r, found = m[string(k)]
	} else {
		r, found = m[strings.ToLower(e.job.BaseModel)+"|"+strings.ToLower(model)]
	}
	if !found || !(r > 0) || math.IsInf(r, 0) {
		return 0, false
	}
	return r, true
}

// appendLower appends ASCII s lower-cased; false when s is not ASCII.
func appendLower(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return b, false
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b, true
}

// containsFold reports whether sub is in s, ignoring ASCII case (and any
// case, more slowly, for other text).
func containsFold(s, sub string) bool {
	if len(sub) == 0 {
		return true
	}
	for i := 0; i < len(sub); i++ {
		if sub[i] >= utf8.RuneSelf {
			return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
		}
	}
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for j < len(sub) && lowerASCII(s[i+j]) == lowerASCII(sub[j]) {
			j++
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}

// joinWait sets st.waitS from pool.Joins and reports whether it could: the
// job's priority has joins, one is at least the job's size, and every GPU
// of the pool could serve the job (the joins are for any model and memory).
func (e *eval) joinWait(pool *Pool, st *candState) bool {
	joins := pool.Joins[min(max(e.job.Priority, 0), 2)]
	if len(joins) == 0 {
		return false
	}
	for _, n := range pool.Nodes {
		for _, g := range n.GPUs {
			if g.Healthy > 0 && !e.gpuMatches(g.Model, g.MemoryGB) {
				return false
			}
		}
	}
	n := e.job.nodeCount()
	for _, jw := range joins {
		// A job of one node reads the joins of one node; a gang those of
		// as many whole nodes or more.
		if jw.GPUs < e.job.GPUs || (n == 1) != (jw.Nodes <= 1) || max(jw.Nodes, 1) < n {
			continue
		}
		switch {
		case jw.WaitS < 0 || math.IsNaN(jw.WaitS) || math.IsInf(jw.WaitS, 0):
			st.waitS = math.Inf(1)
		default:
			st.waitS = min(jw.WaitS, maxEstimate.Seconds())
		}
		return true
	}
	return false
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// waitLocal: Job.Waited plus, from now: AssumeWait when set; 0 for a job with no GPUs (CPU slots are
// not modelled); else the wait of a job of its size joining the queue at
// its priority (Pool.Joins) when every GPU of the pool could serve it; else
// the GPU-hours ahead at priority ≤ the job's over the healthy GPUs; +Inf
// with no healthy GPUs.
func (e *eval) waitLocal(pool *Pool, st *candState) {
	e.waitLocalEstimate(pool, st)
	st.waitNowS = st.waitS
	if w := e.job.Waited.Seconds(); w > 0 && st.waitS > 0 {
		st.waitS = min(st.waitS+w, maxEstimate.Seconds())
	}
}

// waitLocalEstimate is the local wait from now (waitLocal's rules).
func (e *eval) waitLocalEstimate(pool *Pool, st *candState) {
	switch {
	case pool.AssumeWait != nil:
		st.waitS = max(0, min(pool.AssumeWait.Seconds(), maxEstimate.Seconds()))
	case e.job.StartIn != nil:
		st.waitS = max(0, min(e.job.StartIn.Seconds(), maxEstimate.Seconds()))
	case e.job.GPUs <= 0:
		st.waitS = 0
	case e.joinWait(pool, st):
	default:
		healthy := pool.HealthyGPUs
		if healthy <= 0 {
			for _, n := range pool.Nodes {
				for _, g := range n.GPUs {
					healthy += max(g.Healthy, 0)
				}
			}
		}
		if healthy <= 0 {
			st.waitS = math.Inf(1)
			return
		}
		p := min(max(e.job.Priority, 0), 2)
		ahead := 0.0
		for i := 0; i <= p; i++ {
			if v := pool.GPUHoursAhead[i]; v > 0 && !math.IsInf(v, 0) {
				ahead += v
			}
		}
		st.waitS = min(ahead/float64(healthy)*3600, maxEstimate.Seconds())
	}
}

// staged is what a job's datasets cost backend b in staging: the bytes of
// known size that move into its site, the seconds they take at its
// staging_mbps (0 when it gives none), and the datasets that move with no
// known size (counted 0).
type staged struct {
	bytes   int64
	seconds float64
	unknown []loc
	moves   int // datasets that move, sized or not
}

// stagingTime works out staged for backend b: each of job's datasets (at
// dataset and evalSet) in another site than b's is staged into it (the
// decision's staging).
func stagingTime(job *Job, dataset, evalSet loc, b *routecfg.BackendInfo) staged {
	var out staged
	for i, l := range [...]*loc{&dataset, &evalSet} {
		if l.kind != locSite || l.site == b.Site {
			continue
		}
		out.moves++
		size := job.DatasetSize
		if i == 1 {
			size = job.EvalDatasetSize
		}
		if !size.Known {
			out.unknown = append(out.unknown, *l)
			continue
		}
		out.bytes += size.Bytes
	}
	if b.StageBps > 0 && out.bytes > 0 {
		out.seconds = min(float64(out.bytes)/b.StageBps, maxEstimate.Seconds())
	}
	return out
}
