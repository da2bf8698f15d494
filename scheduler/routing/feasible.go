package routing

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// check is one feasibility concern: its function returns "" when backend
// b can take the job, else a reason starting with one of the Reason*
// constants. A check reads the job, the snapshot and b's state (calling
// prepare first when it needs fit or estimates); it changes nothing but the
// evaluation's memos and that state. Checks are named by an id and run
// through a switch, not a function value, so that the evaluation stays on
// the stack.
type check struct {
	name string
	// residency: the check keeps data inside the job's tags (the property
	// test shows that removing any one of these lets data out).
	residency bool
	id        checkID
}

type checkID uint8

const (
	idKnownLocations checkID = iota
	idComputeSite
	idDatasetSite
	idEvalDatasetSite
	idCheckpointSite
	idOutputSite
	idLogSite
	idLocalS3
	idCloudTrainer
	idGPUFit
	idJobBudget
	idTeamBudget
	idBackendBudget
)

// checks are the feasibility checks in the order Decide runs them; the first
// failing one is the candidate's Reason. Tests pass Decide's core a copy
// with one removed; nothing else changes it.
var checks = []check{
	{"known locations", true, idKnownLocations},
	{"compute site", true, idComputeSite},
	{"dataset site", true, idDatasetSite},
	{"eval dataset site", true, idEvalDatasetSite},
	{"checkpoint site", true, idCheckpointSite},
	{"output site", true, idOutputSite},
	{"log site", true, idLogSite},
	{"local s3", false, idLocalS3},
	{"cloud trainer", false, idCloudTrainer},
	{"gpu fit", false, idGPUFit},
	{"job budget", false, idJobBudget},
	{"team budget", false, idTeamBudget},
	{"backend budget", false, idBackendBudget},
}

// jobLevel reports whether the check looks at the job alone, so that it
// answers alike for every backend (run passes it no backend).
func (id checkID) jobLevel() bool {
	switch id {
	case idKnownLocations, idDatasetSite, idEvalDatasetSite, idOutputSite:
		return true
	}
	return false
}

// run runs check id on backend b (nil for a job-level check).
func (e *eval) run(id checkID, b *routecfg.BackendInfo, st *candState) string {
	switch id {
	case idKnownLocations:
		return checkKnownLocations(e)
	case idComputeSite:
		return checkComputeSite(e, b)
	case idDatasetSite:
		return checkDatasetSite(e)
	case idEvalDatasetSite:
		return checkEvalDatasetSite(e)
	case idCheckpointSite:
		return checkCheckpointSite(e, b)
	case idOutputSite:
		return checkOutputSite(e)
	case idLogSite:
		return checkLogSite(e, b)
	case idLocalS3:
		return checkLocalS3(e, b)
	case idCloudTrainer:
		return checkCloudTrainer(e, b)
	case idGPUFit:
		return checkGPUFit(e, b, st)
	case idJobBudget:
		return checkJobBudget(e, b, st)
	case idTeamBudget:
		return checkTeamBudget(e, b, st)
	case idBackendBudget:
		return checkBackendBudget(e, b, st)
	}
	panic("routing: unknown check")
}

// Where a URI lives.
type locKind uint8

const (
	locNone          locKind = iota // no URI: touches nothing
	locSite                         // in site loc.site
	locUnknownBucket                // s3:// bucket not in datasets.buckets
	locNoFileSite                   // file:// with no datasets.file_site
	locBadScheme                    // neither file:// nor s3://
)

type loc struct {
	what, uri, bucket string
	kind              locKind
	site              int
}

// memo is a reason computed once per decision.
type memo struct {
	done bool
	r    string
}

// siteMemo holds the reasons that depend only on a site.
type siteMemo struct {
	compute memo
	log     memo
}

// eval is one Decide call: the job, its effective tags as a set, where its
// data lives, and memos so that 100 backends in a few sites build each
// reason once.
type eval struct {
	x          *routecfg.Index
	job        Job // a copy: the eval holds no pointer into the caller's data, so it stays on the stack
	s          snapMaps
	tags       []string // effective residency
	defaulted  bool     // tags came from the config default
	want       routecfg.TagSet
	unknown    bool // a tag no site carries
	dataset    loc
	evalSet    loc
	output     loc
	dataMemo   [3]memo // dataset, eval dataset, output
	knownMemo  memo
	siteBuf    [16]siteMemo // by site index (see site)
	siteMore   []siteMemo
	lastMatch  matchMemo
	need       string // describeNeed, once computed
	lastMisfit misfit
	team       teamBudget
	typeMatch  [64]int8 // by Index.Models id: 0 unknown, 1 matches, 2 not
}

// snapMaps are the maps of the Snapshot that the checks read.
type snapMaps struct {
	Pools          map[string]Pool
	BackendSpend   map[string]Spend
	TeamSpend      map[string]Spend
	SecondsPerStep map[string]float64
	QueueWait      map[string]time.Duration
	StartRatios    []float64
}

// site is the memo of site i.
func (e *eval) site(i int) *siteMemo {
	if i < len(e.siteBuf) {
		return &e.siteBuf[i]
	}
	return &e.siteMore[i-len(e.siteBuf)]
}

// newEval starts the evaluation of job over s. It returns the eval by value
// so that the caller's copy stays on the stack.
func newEval(x *routecfg.Index, job *Job, s *Snapshot) eval {
	var e eval
	e.x, e.job = x, *job
	e.s = snapMaps{Pools: s.Pools, BackendSpend: s.BackendSpend, TeamSpend: s.TeamSpend, SecondsPerStep: s.SecondsPerStep, QueueWait: s.QueueWait, StartRatios: s.StartRatios}
	if n := len(x.Sites) - len(e.siteBuf); n > 0 {
		e.siteMore = make([]siteMemo, n)
	}
	e.tags = job.Residency
	if len(e.tags) == 0 {
		e.tags, e.defaulted = x.DefTags, true
	}
	for _, t := range e.tags {
		if i, ok := x.TagIdx[t]; ok {
			e.want.Add(i)
		} else {
			e.unknown = true
		}
	}
	e.dataset = locate(x, "dataset", job.Dataset, false)
	e.evalSet = locate(x, "eval dataset", job.EvalDataset, false)
	e.output = locate(x, "output", job.Output, true)
	return e
}

// locate finds the site of uri; an empty uri touches nothing, except an
// empty output, which is the daemon's default output folder (file://).
func locate(x *routecfg.Index, what, uri string, emptyIsFile bool) loc {
	l := loc{what: what, uri: uri, site: -1}
	switch {
	case uri == "" && !emptyIsFile:
		l.kind = locNone
	case uri == "" || strings.HasPrefix(uri, "file://"):
		if x.FileSite < 0 {
			l.kind = locNoFileSite
		} else {
			l.kind, l.site = locSite, x.FileSite
		}
	case strings.HasPrefix(uri, "s3://"):
		l.bucket, _ = routecfg.S3Bucket(uri)
		if i, ok := x.Buckets[l.bucket]; ok {
			l.kind, l.site = locSite, i
		} else {
			l.kind = locUnknownBucket
		}
	default:
		l.kind = locBadScheme
	}
	return l
}

// carries reports whether site i carries every effective tag of the job.
func (e *eval) carries(i int) bool {
	return !e.unknown && e.x.Sites[i].Tags.Covers(&e.want)
}

// lacking writes head + "site NAME [tags]" + which + the effective tags the
// site lacks, in job order ("…, which lacks eu, us"), in one allocation.
func (e *eval) lacking(head string, i int, which string) string {
	si := &e.x.Sites[i]
	var b strings.Builder
	b.Grow(len(head) + 5 + len(si.Label) + len(which) + 16)
	b.WriteString(head)
	b.WriteString("site ")
	b.WriteString(si.Label)
	b.WriteString(which)
	n := 0
	for k, t := range e.tags {
		if ti, ok := e.x.TagIdx[t]; ok && si.Tags.Has(ti) {
			continue
		}
		dup := false
		for _, u := range e.tags[:k] {
			dup = dup || u == t
		}
		if dup {
			continue
		}
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t)
		n++
	}
	return b.String()
}

// dataCheck is the residency check of a URI the job names: its site, when
// it has one, carries every tag (checkKnownLocations refuses the others).
func (e *eval) dataCheck(l *loc, reason string, m *memo) string {
	if l.kind != locSite || e.carries(l.site) {
		return ""
	}
	if !m.done {
		m.done, m.r = true, e.lacking(reason+": "+l.what+" "+uriText(l.uri)+" is in ", l.site, ", which lacks ")
	}
	return m.r
}

func uriText(uri string) string {
	if uri == "" {
		return "(the default output folder, file://)"
	}
	return uri
}

// checkKnownLocations: every URI the job names has a known site: an s3://
// bucket listed in datasets.buckets (never guessed), file:// with a
// datasets.file_site, and no other scheme.
func checkKnownLocations(e *eval) string {
	m := &e.knownMemo
	if m.done {
		return m.r
	}
	m.done = true
	for _, l := range [...]*loc{&e.dataset, &e.evalSet, &e.output} {
		switch l.kind {
		case locUnknownBucket:
			m.r = ReasonBucketUnknown + ": " + l.what + " " + l.uri + " names bucket " + strconv.Quote(l.bucket)
		case locNoFileSite:
			m.r = ReasonNoSite + ": " + l.what + " " + uriText(l.uri) + " is file:// and there is no datasets.file_site"
		case locBadScheme:
			m.r = ReasonNoSite + ": " + l.what + " " + l.uri + " is neither file:// nor s3://"
		default:
			continue
		}
		return m.r
	}
	return ""
}

// checkComputeSite: the backend's site carries every tag.
func checkComputeSite(e *eval, b *routecfg.BackendInfo) string {
	if e.carries(b.Site) {
		return ""
	}
	m := &e.site(b.Site).compute
	if !m.done {
		m.done, m.r = true, e.lacking(ReasonComputeSite+": ", b.Site, " lacks ")
	}
	return m.r
}

// checkDatasetSite: the dataset's site carries every tag (and is known).
func checkDatasetSite(e *eval) string {
	return e.dataCheck(&e.dataset, ReasonDatasetSite, &e.dataMemo[0])
}

// checkEvalDatasetSite: the eval dataset's site carries every tag.
func checkEvalDatasetSite(e *eval) string {
	return e.dataCheck(&e.evalSet, ReasonEvalDatasetSite, &e.dataMemo[1])
}

// checkOutputSite: the output's site carries every tag.
func checkOutputSite(e *eval) string {
	return e.dataCheck(&e.output, ReasonOutputSite, &e.dataMemo[2])
}

// checkCheckpointSite: the site of the backend's checkpoints carries every
// tag.
func checkCheckpointSite(e *eval, b *routecfg.BackendInfo) string {
	if e.carries(b.CkptSite) {
		return ""
	}
	uri := b.CkptURI
	if uri == "" {
		uri = "file://"
	}
	return e.lacking(ReasonCheckpointSite+": checkpoints "+uri+" go to ", b.CkptSite, ", which lacks ")
}

// checkLogSite: where the attempt's raw log lines go carries every tag. A
// local attempt's raw lines stream into Redis (redis_site). A cloud
// attempt's go to Redis when redis_site carries the tags, and otherwise stay
// in the backend's own site (DESIGN.md: "a cloud attempt's raw logs stay in
// its site's bucket unless the Redis site satisfies the job's tags"), which
// the compute check already holds to the tags; the cloud agent keeps them
// there and the AWS worker copies only metadata (docs/aws.md). See logSite.
func checkLogSite(e *eval, b *routecfg.BackendInfo) string {
	if e.carries(e.logSite(b)) {
		return ""
	}
	m := &e.site(e.x.Redis).log
	if !m.done {
		m.done, m.r = true, e.lacking(ReasonLogSite+": ", e.x.Redis, " lacks ")
	}
	return m.r
}

// checkLocalS3: a local pool reads and writes file:// only; staging s3://
// data onto local workers is not built yet. Residency may allow the bucket,
// so this is a feasibility check of its own: a cloud backend may still take
// the job, and a refusal names it for the local backend.
func checkLocalS3(e *eval, b *routecfg.BackendInfo) string {
	if !b.Local && !routecfg.BatchPoolKind(b.Kind) {
		return ""
	}
	for _, u := range [...]string{e.job.Dataset, e.job.EvalDataset, e.job.Output} {
		if strings.HasPrefix(u, "s3://") {
			if routecfg.BatchPoolKind(b.Kind) {
				return ReasonLocalS3 + ": " + u + ": staging S3 onto a " + b.Kind + " pool is not built yet; use file:// data on storage its nodes share"
			}
			return ReasonLocalS3 + ": " + u + ": staging S3 onto local workers is not built yet; use file:// data for local jobs"
		}
	}
	return ""
}

// checkCloudTrainer: the cloud agent runs the reference trainer only
// (named trainers on instances are not built yet), so a job naming another
// trainer must not go to a cloud backend, where it would silently run the
// wrong one.
func checkCloudTrainer(e *eval, b *routecfg.BackendInfo) string {
	// A slurm backend runs the trainers of its worker's config, named ones too.
	if b.Local || routecfg.BatchPoolKind(b.Kind) || e.job.Trainer == "" || e.job.Trainer == "reference" {
		return ""
	}
	return ReasonCloudTrainer + ": the job names trainer " + strconv.Quote(e.job.Trainer) + "; named trainers on cloud instances are not built yet"
}

// logSite is the site of backend b's raw log lines for this job.
func (e *eval) logSite(b *routecfg.BackendInfo) int {
	if b.Local || e.carries(e.x.Redis) {
		return e.x.Redis
	}
	return b.Site
}

// checkGPUFit: a node of the pool, or an instance type, has the GPUs.
func checkGPUFit(e *eval, b *routecfg.BackendInfo, st *candState) string {
	e.prepare(b, st)
	if st.fits {
		return ""
	}
	kind := misfitCloud
	if b.Local {
		kind = misfitLocal
		if !st.known || !st.hasNodes {
			kind = misfitNoPool
		}
	}
	m := &e.lastMisfit
	if m.r != "" && m.kind == kind && m.most == st.most && m.nodes == st.fitNodes {
		return m.r // the same words as the last misfit: one string for both
	}
	need := e.describeNeed()
	var r string
	switch {
	case kind == misfitNoPool:
		r = ReasonNoGPUFit + ": needs " + need + "; the pool has no GPUs (no state for it)"
	case kind == misfitLocal && st.most >= e.job.GPUs:
		r = ReasonNoGPUFit + ": needs " + need + "; only " + strconv.Itoa(st.fitNodes) + " of the pool's nodes have that many such healthy GPUs"
	case kind == misfitLocal:
		r = ReasonNoGPUFit + ": needs " + need + "; the most such healthy GPUs on one node is " + strconv.Itoa(st.most)
	case st.most == 0:
		r = ReasonNoGPUFit + ": needs " + need + "; no instance type has such GPUs"
	case e.job.nodeCount() > 1:
		r = ReasonNoGPUFit + ": needs " + need + ", " + strconv.Itoa(e.job.totalGPUs()) + " GPUs on one instance (a cloud backend launches one instance per attempt); the largest matching instance type has " + strconv.Itoa(st.most)
	default:
		r = ReasonNoGPUFit + ": needs " + need + "; the largest matching instance type has " + strconv.Itoa(st.most)
	}
	*m = misfit{kind: kind, most: st.most, nodes: st.fitNodes, r: r}
	return r
}

// misfit is the last GPU misfit reason, reused while the next is the same.
type misfit struct {
	kind  int
	most  int
	nodes int
	r     string
}

const (
	misfitLocal = iota
	misfitNoPool
	misfitCloud
)

// describeNeed writes "2 GPUs", "8 × H100 or A100 ≥80 GB" (once).
func (e *eval) describeNeed() string {
	if e.need == "" {
		e.need = e.job.describeNeed()
	}
	return e.need
}

func (j *Job) describeNeed() string {
	if j.nodeCount() > 1 {
		one := *j
		one.Nodes = 1
		return strconv.Itoa(j.Nodes) + " nodes of " + one.describeNeed()
	}
	n := strconv.Itoa(j.GPUs)
	if len(j.GPUModels) == 0 && j.GPUMemoryGB <= 0 {
		if j.GPUs == 1 {
			return "1 GPU"
		}
		return n + " GPUs"
	}
	s := n + " ×"
	if len(j.GPUModels) > 0 {
		s += " " + strings.Join(j.GPUModels, " or ")
	}
	if j.GPUMemoryGB > 0 {
		s += " ≥" + strconv.FormatFloat(j.GPUMemoryGB, 'g', -1, 64) + " GB"
	}
	return s
}

// hasCost reports whether running on b costs anything (a budget applies).
func hasCost(e *eval, b *routecfg.BackendInfo, st *candState) bool {
	if b.Local {
		return b.Priced && b.USD > 0 && e.job.GPUs > 0
	}
	return st.ti < 0 || b.Types[st.ti].USDPerHr > 0
}

// overBudget says why the estimated cost does not fit in left, or "";
// what describes the budget (called only to explain a refusal).
func overBudget(st *candState, left float64, what func() string) string {
	if !st.costKnown {
		return "the runtime is unknown (no expected_runtime, learned rate or max_runtime), so the cost cannot be held to " + what()
	}
	if !(st.cost <= left) {
		return "estimated " + usd(st.cost) + " > " + what()
	}
	return ""
}

// checkJobBudget: the estimated cost is within the job's budget_usd.
func checkJobBudget(e *eval, b *routecfg.BackendInfo, st *candState) string {
	e.prepare(b, st)
	if e.job.BudgetUSD <= 0 || !hasCost(e, b, st) {
		return ""
	}
	if r := overBudget(st, e.job.BudgetUSD, func() string { return "budget_usd " + usd(e.job.BudgetUSD) }); r != "" {
		return ReasonJobBudget + ": " + r
	}
	return ""
}

// checkTeamBudget: the estimated cost is within what is left of the team's
// monthly budget (the tighter of the config's and the snapshot's limit).
func checkTeamBudget(e *eval, b *routecfg.BackendInfo, st *candState) string {
	e.prepare(b, st)
	if !hasCost(e, b, st) {
		return ""
	}
	t := &e.team
	if !t.done {
		t.done = true
		t.sp = e.s.TeamSpend[e.job.Team]
		t.limit = tighter(e.x.Teams[e.job.Team], t.sp.LimitUSD)
		t.left = t.limit - t.sp.SpentUSD - t.sp.ReservedUSD
	}
	if t.limit <= 0 {
		return ""
	}
	if r := overBudget(st, t.left, func() string { return spendText(t.left, t.limit, t.sp) }); r != "" {
		return ReasonTeamBudget + ": team " + strconv.Quote(e.job.Team) + ": " + r
	}
	return ""
}

// teamBudget is the job's team's budget this month, looked up once.
type teamBudget struct {
	done        bool
	sp          Spend
	limit, left float64
}

// checkBackendBudget: a cloud backend's estimated cost is within what is
// left of its monthly budget.
func checkBackendBudget(e *eval, b *routecfg.BackendInfo, st *candState) string {
	e.prepare(b, st)
	if b.Local || !hasCost(e, b, st) {
		return ""
	}
	sp := e.s.BackendSpend[b.Name]
	limit := tighter(b.Budget, sp.LimitUSD)
	if limit <= 0 {
		return ""
	}
	left := limit - sp.SpentUSD - sp.ReservedUSD
	if r := overBudget(st, left, func() string { return spendText(left, limit, sp) }); r != "" {
		return ReasonBackendBudget + ": " + r
	}
	return ""
}

// tighter is the smaller positive limit of a and b; 0 when neither is.
func tighter(a, b float64) float64 {
	switch {
	case !(a > 0):
		return max(b, 0)
	case !(b > 0):
		return a
	}
	return min(a, b)
}

func spendText(left, limit float64, sp Spend) string {
	return usd(max(left, 0)) + " left of " + usd(limit) + " this month (spent " + usd(sp.SpentUSD) + ", reserved " + usd(sp.ReservedUSD) + ")"
}

// usd writes "$12.34".
func usd(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "$" + strconv.FormatFloat(v, 'f', -1, 64)
	}
	return "$" + strconv.FormatFloat(v, 'f', 2, 64)
}
