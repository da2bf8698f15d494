package routing

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/cost"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Decide routes job over snapshot s: every backend is checked (residency,
// GPU fit, budgets), estimated (runtime, cost, wait) and ranked (max_wait,
// then price; or the value of time when the job gives one). It is a pure
// function: the same job and snapshot give the same Decision, whatever the
// map iteration order; it does no I/O and reads no clock. See the package
// documentation for the rules.
func Decide(job Job, s Snapshot) Decision {
	return decide(&job, &s, checks)
}

// decide is Decide with the feasibility checks as a parameter (tests remove
// one to show the residency property needs it). It runs the checks on every
// backend, estimates the feasible ones, chooses one, and writes the reasons
// of the choice: the rules of docs/routing.md, in order.
func decide(job *Job, s *Snapshot, cks []check) Decision {
	x, err := s.Config.Index()
	if err != nil {
		return refuseConfig(job, err)
	}
	e := newEval(x, job, s)

	n := len(x.Backends)
	d := Decision{Residency: slices.Clone(e.tags), Candidates: make([]Candidate, n)}
	// The states stay on the stack for up to stackBackends backends.
	var stack [stackBackends]candState
	states := stack[:0]
	if n <= len(stack) {
		states = stack[:n]
	} else {
		states = make([]candState, n)
	}
	var buf [16]checkID
	perBackend, jobReason := e.jobChecks(cks, buf[:0])
	for i := range x.Backends {
		e.assess(&d.Candidates[i], &x.Backends[i], &states[i], perBackend, jobReason)
	}

	d.Reasons = append(d.Reasons, e.residencyReason())
	chosen := e.choose(&d, states)
	if chosen < 0 {
		d.Refused = true
		d.Reasons = append(d.Reasons, "refused: no backend is feasible")
		d.Reasons = appendRejections(d.Reasons, d.Candidates, false)
		return d
	}
	e.chosen(&d, &x.Backends[chosen], &states[chosen])
	return d
}

// refuseConfig is the Decision for a config that does not index: refused,
// with the job's residency (or the default) and the config's error.
func refuseConfig(job *Job, err error) Decision {
	tags := job.Residency
	if len(tags) == 0 {
		tags = routecfg.DefaultResidency()
	}
	return Decision{Refused: true, Residency: slices.Clone(tags), Reasons: []string{ReasonConfigInvalid + ": " + err.Error()}}
}

// jobChecks runs the checks of the job alone (where its data lives, where
// its logs go) once, since they give every backend the same answer, and
// returns the backend checks to run per backend (appended to perBackend)
// and the job's reason. The first job check that fails ends every
// backend's list there: only the backend checks before it are returned, in
// their order, so each Reason is still the first failing check in cks.
func (e *eval) jobChecks(cks []check, perBackend []checkID) ([]checkID, string) {
	jobReason := ""
	for k := range cks {
		if !cks[k].id.jobLevel() {
			perBackend = append(perBackend, cks[k].id)
		} else if jobReason = e.run(cks[k].id, nil, nil); jobReason != "" {
			break
		}
	}
	return perBackend, jobReason
}

// assess runs the backend checks on backend b (its state st), takes
// jobReason when they pass, estimates a feasible backend, and fills its
// Candidate c.
func (e *eval) assess(c *Candidate, b *routecfg.BackendInfo, st *candState, perBackend []checkID, jobReason string) {
	reason := ""
	for _, id := range perBackend {
		if reason = e.run(id, b, st); reason != "" {
			break
		}
	}
	if reason == "" {
		reason = jobReason
	}
	if reason == "" {
		e.prepare(b, st) // for the estimates, had a test removed every check that needs them
	}
	// c is zeroed: set field by field (no struct copy)
	c.Backend, c.Site, c.Kind = b.Name, e.x.Sites[b.Site].Name, b.Kind
	c.Feasible, c.Reason = reason == "", reason
	c.EstCostUSD, c.EstRuntimeS = st.cost, st.runtime.Seconds()
	switch {
	case !st.ready: // refused for residency before any estimate
	case b.Local:
		c.EstWaitS = waitOut(st.waitS)
	case st.ti >= 0:
		c.InstanceType, c.Spot = b.Types[st.ti].Name, b.Spot
		c.EstWaitS = st.waitS // the backend's startup and staging
	}
}

// chosen writes the choice of backend b (its state st) into d: where, the
// estimates, whether the job waits, and the reasons for runtime, cost and
// staging.
func (e *eval) chosen(d *Decision, b *routecfg.BackendInfo, st *candState) {
	job := &e.job
	d.Backend, d.Site = b.Name, e.x.Sites[b.Site].Name
	d.EstRuntime = st.runtime
	d.EstGPUHours = cost.GPUHours(st.runtime, job.totalGPUs())
	d.EstCostUSD = st.cost
	d.Waiting = b.Local && job.MaxWait > 0 && !(st.waitS <= job.MaxWait.Seconds())
	d.Reasons = append(d.Reasons, e.runtimeReason(b, st), e.costReason(b, st))
	if !b.Local {
		d.Reasons = append(d.Reasons, cloudWaitReason(b, st, stagingTime(&e.job, e.dataset, e.evalSet, b), e.x.Sites[b.Site].Name, e.s.QueueWait[b.Name]))
	}
	e.staging(d, b)
}

// stackBackends is how many backends' working state decide keeps on the
// stack (about 10 KB) instead of allocating it.
const stackBackends = 128

// waitOut is a wait for Candidate.EstWaitS: -1 when unknown.
func waitOut(s float64) float64 {
	if math.IsInf(s, 1) || math.IsNaN(s) {
		return -1
	}
	return s
}

// rankCost is the cost used to rank: unknown costs rank last.
func rankCost(st *candState) float64 {
	if !st.costKnown {
		return math.Inf(1)
	}
	return st.cost
}

// choose picks the backend (index, or -1 when none is feasible) and writes
// the reasons of the choice.
func (e *eval) choose(d *Decision, states []candState) int {
	j := &e.job
	if j.ValuePerHourUSD > 0 && !math.IsInf(j.ValuePerHourUSD, 0) {
		return e.chooseByValue(d, states)
	}
	within, cloud, leastWait := shortlist(e.job.MaxWait, d, states)
	if stay, ok := stayOdds(e.s.StartRatios, j, d, states, cloud, leastWait); ok {
		if stay {
			return leastWait
		}
		within = -1
	}
	switch {
	case within >= 0:
		w := states[within].waitS
		if j.MaxWait <= 0 {
			d.Reasons = append(d.Reasons, "local: max_wait is not set, so the job never bursts for queue pressure; "+
				d.Candidates[within].Backend+" estimated wait "+fmtWait(w))
		} else {
			d.Reasons = append(d.Reasons, "local: estimated wait "+fmtWait(w)+" on "+d.Candidates[within].Backend+" is within max_wait "+j.MaxWait.String())
		}
		return within
	case cloud >= 0 && leastWait >= 0:
		return e.burstOrWait(d, states, cloud, leastWait)
	case cloud >= 0:
		d.Reasons = append(d.Reasons, "cloud: no local backend is feasible; the cheapest feasible cloud backend is "+d.Candidates[cloud].Backend)
		return cloud
	case leastWait >= 0:
		d.Reasons = append(d.Reasons, "waiting: local wait "+fmtWait(states[leastWait].waitS)+" on "+d.Candidates[leastWait].Backend+
			" exceeds max_wait "+j.MaxWait.String()+", and no cloud backend can take the job")
		cloudRejections(d)
		return leastWait
	}
	return -1
}

// minStartRatios is how many start ratios (Snapshot.StartRatios) the odds
// of a local start need before they decide: fewer say little.
const minStartRatios = 20

// stayOdds decides, when a cloud backend could take job j and a local
// pool could too, by the odds that the local pool starts it within the
// max_wait it has left (ok false: not decided so, the estimate against
// max_wait decides). The odds are the share of recent local starts whose
// wait, as a multiple of what was estimated at their submit
// (r: Snapshot.StartRatios), would bring this job's estimated wait within
// what is left. Staying is wrong when the job spills over after all: it
// waited what was left and pays the rent anyway. Bursting is wrong when
// the pool would have started it in time: it paid the rent of its whole
// run. With time valued at what renting buys it (the job's own GPUs at
// the cloud's price, so both wrongs are in the same unit), the job stays
// when the odds are at least left ÷ (left + runtime): a long job stays on
// fair odds, a short one rents unless the pool is all but sure.
func stayOdds(r []float64, j *Job, d *Decision, states []candState, cloud, leastWait int) (stay, ok bool) {
	if len(r) < minStartRatios || cloud < 0 || leastWait < 0 || j.MaxWait <= 0 {
		return false, false
	}
	st := &states[leastWait]
	left := (j.MaxWait - j.Waited).Seconds()
	if !(left > 0) || !(st.waitNowS > 0) || st.runtime <= 0 {
		return false, false // none left, or it starts now, or its run time is unknown
	}
	at, _ := slices.BinarySearch(r, left/st.waitNowS)
	odds := float64(at) / float64(len(r))
	need := left / (left + st.runtime.Seconds())
	word := "burst"
	if odds >= need {
		word = "stay"
	}
	d.Reasons = append(d.Reasons, fmt.Sprintf("%s: %.0f%% of the last %d local starts came within %.2f× their estimated wait, as this job's %s on %s must to start within the %s of max_wait left; it needs %.0f%% (%s left ÷ (%s left + its %s run))",
		word, 100*odds, len(r), left/st.waitNowS, fmtWait(st.waitNowS), d.Candidates[leastWait].Backend, fmtWait(left), 100*need,
		fmtWait(left), fmtWait(left), st.runtime.Round(time.Second)))
	return odds >= need, true
}

// burstOrWait chooses for a job whose least local wait (leastWait) is
// beyond max_wait while a cloud backend could take it (cloud, the
// cheapest): it bursts to the cheapest cloud backend that would start it
// sooner than the local pool would (its startup shorter than the local wait
// from now), else it waits for the local pool, which starts it first.
func (e *eval) burstOrWait(d *Decision, states []candState, cloud, leastWait int) int {
	j := &e.job
	local := &states[leastWait]
	sooner := -1
	for i := range d.Candidates {
		c, st := &d.Candidates[i], &states[i]
		if !c.Feasible || c.Kind == routecfg.KindLocal || !(st.waitS < local.waitNowS) {
			continue
		}
		if sooner < 0 || rankCost(st) < rankCost(&states[sooner]) {
			sooner = i
		}
	}
	lw := "local wait " + fmtWait(local.waitS) + " on " + d.Candidates[leastWait].Backend + " exceeds max_wait " + j.MaxWait.String()
	if local.waitS <= j.MaxWait.Seconds() {
		lw = "local wait " + fmtWait(local.waitS) + " on " + d.Candidates[leastWait].Backend + " is within max_wait " + j.MaxWait.String() +
			", but the odds of a start in time are too low (above)"
	}
	switch {
	case sooner >= 0 && sooner == cloud && states[cloud].waitS == 0:
		d.Reasons = append(d.Reasons, "burst: "+lw+"; the cheapest feasible cloud backend is "+d.Candidates[cloud].Backend)
		return cloud
	case sooner >= 0:
		d.Reasons = append(d.Reasons, "burst: "+lw+"; the cheapest feasible cloud backend that starts the job sooner ("+
			fmtWait(states[sooner].waitS)+" start-up and staging, against "+fmtWait(local.waitNowS)+" more local wait) is "+d.Candidates[sooner].Backend)
		return sooner
	}
	d.Reasons = append(d.Reasons, "waiting: "+lw+", but it starts there sooner ("+fmtWait(local.waitNowS)+
		" more) than on any feasible cloud backend (the cheapest, "+d.Candidates[cloud].Backend+", takes "+fmtWait(states[cloud].waitS)+" to start: its startup and staging)")
	return leastWait
}

// cloudWaitReason says what cloud backend b's wait (its state st) is made
// of: its startup, plus the time the job's datasets take to reach its site
// (sg: size ÷ staging_mbps), and what could not be timed; site is b's
// site's name; a slurm backend's also of Slurm's queue (q).
func cloudWaitReason(b *routecfg.BackendInfo, st *candState, sg staged, site string, q time.Duration) string {
	var s strings.Builder
	if b.Kind == routecfg.KindSlurm {
		s.WriteString("slurm wait " + fmtWait(st.waitS) + ": queue " + q.String() +
			" (the pending GPU-hours of its partition over its GPUs, as its worker last saw them) + startup " + b.Startup.String())
		return s.String()
	}
	if b.Kind == routecfg.KindKubernetes {
		s.WriteString("kubernetes wait " + fmtWait(st.waitS) + ": startup " + b.Startup.String() + " (the cluster's queue is not estimated)")
		return s.String()
	}
	s.WriteString("cloud wait ")
	s.WriteString(fmtWait(st.waitS))
	s.WriteString(": ")
	if b.Startup > 0 {
		s.WriteString("startup " + b.Startup.String() + " (backend " + b.Name + "'s instance launch to trainer start)")
	} else {
		s.WriteString("startup 0 (backend " + b.Name + " gives no startup: capacity is bought)")
	}
	switch {
	case sg.moves == 0:
		s.WriteString(" + no staging (no dataset lies outside site " + site + ")")
	case b.StageBps > 0:
		s.WriteString(" + staging " + gbText(sg.bytes) + " at " + strconv.FormatFloat(b.StageBps/1e6, 'g', -1, 64) +
			" MB/s (" + fmtWait(sg.seconds) + ")")
	case sg.bytes > 0:
		s.WriteString("; staging " + gbText(sg.bytes) + " is not timed: backend " + b.Name + " gives no staging_mbps")
	default:
		s.WriteString("; staging is not timed: backend " + b.Name + " gives no staging_mbps")
	}
	for _, l := range sg.unknown {
		s.WriteString("; the size of " + l.what + " " + uriText(l.uri) + " is unknown (")
		if strings.HasPrefix(l.uri, "s3://") {
			s.WriteString("an s3:// dataset is not read at admission")
		} else {
			s.WriteString("a file:// dataset's size is learned at admission, and none was learned for this one")
		}
		s.WriteString("), so its staging counts 0")
	}
	return s.String()
}

// gbText writes bytes as gigabytes (10^9), "50.0 GB", or under 1 GB as
// megabytes (10^6), "3.5 MB".
func gbText(n int64) string {
	if n < 1e9 {
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB"
	}
	return strconv.FormatFloat(float64(n)/1e9, 'f', 1, 64) + " GB"
}

// shortlist returns the feasible candidates choose weighs, -1 for none:
// the cheapest local one whose wait is within maxWait (any, when max_wait
// is not set), the cheapest cloud one, and the local one with the least
// wait. The first of equals wins.
func shortlist(maxWait time.Duration, d *Decision, states []candState) (within, cloud, leastWait int) {
	within, cloud, leastWait = -1, -1, -1
	for i := range d.Candidates {
		c, st := &d.Candidates[i], &states[i]
		if !c.Feasible {
			continue
		}
		if c.Kind != routecfg.KindLocal {
			if cloud < 0 || rankCost(st) < rankCost(&states[cloud]) {
				cloud = i
			}
			continue
		}
		if leastWait < 0 || st.waitS < states[leastWait].waitS {
			leastWait = i
		}
		if maxWait <= 0 || st.waitS <= maxWait.Seconds() {
			if within < 0 || rankCost(st) < rankCost(&states[within]) {
				within = i
			}
		}
	}
	return within, cloud, leastWait
}

// cloudRejections adds why each cloud backend could not take the job.
func cloudRejections(d *Decision) {
	n := len(d.Reasons)
	d.Reasons = appendRejections(d.Reasons, d.Candidates, true)
	if len(d.Reasons) == n {
		d.Reasons = append(d.Reasons, "no cloud backend is configured")
	}
}

// appendRejections appends why the infeasible candidates (only the cloud
// ones when cloudOnly) were refused, one line per distinct reason, naming
// its backends in config order: "aws-0, aws-3: compute site lacks …". With
// 100 backends in a few sites that is a few lines, not a hundred.
func appendRejections(reasons []string, cands []Candidate, cloudOnly bool) []string {
	skip := func(c *Candidate) bool { return c.Feasible || cloudOnly && c.Kind == routecfg.KindLocal }
	var done [stackBackends]bool
	var more []bool
	if len(cands) > len(done) {
		more = make([]bool, len(cands))
	}
	seen := func(i int) *bool {
		if more != nil {
			return &more[i]
		}
		return &done[i]
	}
	for i := range cands {
		c := &cands[i]
		if skip(c) || *seen(i) {
			continue
		}
		size := len(c.Backend) + 2 + len(c.Reason)
		for k := i + 1; k < len(cands); k++ {
			if o := &cands[k]; !skip(o) && o.Reason == c.Reason {
				size += 2 + len(o.Backend)
			}
		}
		var b strings.Builder
		b.Grow(size)
		b.WriteString(c.Backend)
		for k := i + 1; k < len(cands); k++ {
			if o := &cands[k]; !skip(o) && o.Reason == c.Reason {
				*seen(k) = true
				b.WriteString(", ")
				b.WriteString(o.Backend)
			}
		}
		b.WriteString(": ")
		b.WriteString(c.Reason)
		reasons = append(reasons, b.String())
	}
	return reasons
}

// score is cost + wait hours × value per hour; +Inf when either is unknown.
func (e *eval) score(st *candState) float64 {
	return rankCost(st) + st.waitS/3600*e.job.ValuePerHourUSD
}

// chooseByValue picks the feasible backend with the least cost plus the
// value of the time spent waiting, and writes the trade.
func (e *eval) chooseByValue(d *Decision, states []candState) int {
	best, bestLocal, bestCloud := -1, -1, -1
	for i := range d.Candidates {
		if !d.Candidates[i].Feasible {
			continue
		}
		s := e.score(&states[i])
		if best < 0 || s < e.score(&states[best]) {
			best = i
		}
		if d.Candidates[i].Kind == routecfg.KindLocal {
			if bestLocal < 0 || s < e.score(&states[bestLocal]) {
				bestLocal = i
			}
		} else if bestCloud < 0 || s < e.score(&states[bestCloud]) {
			bestCloud = i
		}
	}
	if best < 0 {
		return -1
	}
	vph := e.job.ValuePerHourUSD
	side := func(label string, i int) string {
		if i < 0 {
			return label + ": none feasible"
		}
		st := &states[i]
		s := label + " " + d.Candidates[i].Backend + ": " + costText(st) + " + " + hoursText(st.waitS) + " wait × " + usd(vph) + "/h = "
		if math.IsInf(e.score(st), 1) {
			return s + "unbounded"
		}
		return s + usd(e.score(st))
	}
	d.Trade = "value of time " + usd(vph) + "/h: " + side("best local", bestLocal) + "; " + side("best cloud", bestCloud) +
		" → " + d.Candidates[best].Backend
	d.Reasons = append(d.Reasons, "value: "+d.Candidates[best].Backend+" has the least cost plus waiting time valued at "+usd(vph)+"/h (see trade); residency is never traded")
	if bestCloud < 0 && d.Candidates[best].Kind == routecfg.KindLocal {
		if w := states[best].waitS; e.job.MaxWait > 0 && !(w <= e.job.MaxWait.Seconds()) {
			cloudRejections(d) // waiting past max_wait because no cloud could take it
		}
	}
	return best
}

func costText(st *candState) string {
	if !st.costKnown {
		return "cost unknown"
	}
	return usd(st.cost)
}

func hoursText(waitS float64) string {
	if math.IsInf(waitS, 1) {
		return "unknown h"
	}
	return strconv.FormatFloat(waitS/3600, 'f', 2, 64) + " h"
}

// fmtWait writes a wait as a duration, or "unknown (no healthy GPUs)".
func fmtWait(s float64) string {
	if math.IsInf(s, 1) || math.IsNaN(s) {
		return "unknown (no healthy GPUs)"
	}
	return seconds(s).Round(time.Second).String()
}

func (e *eval) residencyReason() string {
	tags := "[" + strings.Join(e.tags, " ") + "]"
	if e.defaulted {
		return "residency " + tags + ": the job gives none, so routing.default_residency applies (fail closed)"
	}
	return "residency " + tags
}

// runtimeReason says which estimate the runtime comes from.
func (e *eval) runtimeReason(b *routecfg.BackendInfo, st *candState) string {
	j := &e.job
	switch st.rtSrc {
	case rtExpected:
		return "runtime " + st.runtime.String() + ": the job's expected_runtime"
	case rtLearned:
		return "runtime " + st.runtime.String() + ": max_steps " + strconv.Itoa(j.MaxSteps) + " × " +
			strconv.FormatFloat(st.rate, 'g', 4, 64) + " s/step learned for " + j.BaseModel + " on " + st.rateModel
	case rtMax:
		if j.MaxSteps <= 0 {
			return "runtime " + st.runtime.String() + ": max_runtime, an upper bound (no expected_runtime, and no max_steps: " +
				"the spec runs epochs, so its step count is unknown before the data is read)"
		}
		return "runtime " + st.runtime.String() + ": max_runtime, an upper bound (no expected_runtime, and no learned seconds per step for " +
			j.BaseModel + " on " + b.Name + ")"
	}
	return "runtime unknown: no expected_runtime, learned seconds per step or max_runtime, so the cost is not estimated"
}

// costReason shows how the cost was worked out.
func (e *eval) costReason(b *routecfg.BackendInfo, st *candState) string {
	if b.Local {
		if !b.Priced {
			return "cost " + usd(0) + ": local backend " + b.Name + " is unpriced (no price in the config)"
		}
		return "cost " + costText(st) + ": " + strconv.FormatFloat(cost.GPUHours(st.runtime, e.job.totalGPUs()), 'f', 2, 64) +
			" GPU-hours × " + usd(b.USD) + "/GPU-hour on " + b.Name
	}
	t := &b.Types[st.ti]
	if routecfg.BatchPoolKind(b.Kind) {
		if !b.Priced {
			return "cost " + usd(0) + ": " + b.Kind + " backend " + b.Name + " is unpriced (no price in the config)"
		}
		return "cost " + costText(st) + ": " + strconv.FormatFloat(st.runtime.Hours(), 'f', 2, 64) + " h × " + strconv.Itoa(t.GPUs) +
			" GPUs × " + usd(b.USD) + "/GPU-hour on " + b.Kind + " backend " + b.Name
	}
	price := "on demand"
	if b.Spot {
		price = "spot"
	}
	return "cost " + costText(st) + ": " + strconv.FormatFloat(st.runtime.Hours(), 'f', 2, 64) + " h × " + usd(t.USDPerHr) +
		"/h (" + price + ") for a whole " + t.Name + " (" + strconv.Itoa(t.GPUs) + " × " + t.Model + ")"
}

// staging lists the data the decision moves between sites, each allowed
// because both sites carry every tag (the checks said so).
func (e *eval) staging(d *Decision, b *routecfg.BackendInfo) {
	x := e.x
	compute := x.Sites[b.Site].Name
	tags := "[" + strings.Join(e.tags, " ") + "]"
	for _, l := range [...]*loc{&e.dataset, &e.evalSet} {
		if l.kind == locSite && l.site != b.Site {
			d.addStaging(l.what, l.uri, x.Sites[l.site].Name, compute, tags)
		}
	}
	if b.CkptSite != b.Site {
		d.addStaging("checkpoints", b.CkptURI, compute, x.Sites[b.CkptSite].Name, tags)
	}
	if l := &e.output; l.kind == locSite && l.site != b.Site {
		uri := l.uri
		if uri == "" {
			uri = "file://"
		}
		d.addStaging("output", uri, compute, x.Sites[l.site].Name, tags)
	}
	if ls := e.logSite(b); ls != b.Site {
		d.addStaging("raw logs", "redis", compute, x.Sites[ls].Name, tags)
	} else if !b.Local && x.Redis != b.Site {
		where := "the agent keeps them in the backend's bucket"
		if routecfg.BatchPoolKind(b.Kind) {
			where = "the " + b.Kind + " step keeps them in the backend's work_dir"
		}
		d.Reasons = append(d.Reasons, "raw logs stay in site "+compute+" (redis_site "+x.Sites[x.Redis].Name+
			" lacks a tag; only control-plane metadata crosses): "+where)
	}
}

func (d *Decision) addStaging(what, uri, from, to, tags string) {
	d.Staging = append(d.Staging, Staging{What: what, URI: uri, FromSite: from, ToSite: to})
	d.Reasons = append(d.Reasons, "staging: "+what+" "+uri+" moves from site "+from+" to site "+to+"; both carry "+tags)
}
