package sim

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/poolstate"
	"github.com/lathe-ml/lathe/scheduler/placement"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Job is one job of a simulation.
type Job struct {
	ID string
	// Submit is when it arrives, after the simulation's start.
	Submit time.Duration
	// Duration is its true run time, which the policy does not see.
	Duration time.Duration
	GPUs     int
	Priority jobspec.Priority
	// Residency tags; empty: the config's default_residency.
	Residency []string
	// GPUModel, when set, is a GPU model the job asks for.
	GPUModel string
	// Hint is what the policy is told of its run time (expected_runtime);
	// 0: the policy learns it (Setup.Learned).
	Hint time.Duration
	// DatasetBytes is the size of its dataset; 0: Setup.DatasetBytes.
	DatasetBytes int64
}

// Setup is one simulated deployment.
type Setup struct {
	// Config is the routing config: sites, the local backend (the owned
	// pool) and cloud backends with their instance types and prices.
	Config routecfg.Config
	// Owned is how many GPUs the local pool has; NodeGPUs how many per node
	// (0: one node of Owned GPUs, a pool in which any job fits that fits
	// the pool, as the trace's cluster gang-scheduled multi-node jobs).
	Owned, NodeGPUs int
	// NoProgress: running jobs print no progress lines (a trainer that
	// reports no total_steps); else each reports its step of 1000 as it
	// runs, and placement estimates its end from them (progress).
	NoProgress bool
	// Gangs, with NodeGPUs above 0, runs a job of more GPUs than a node
	// as a gang of whole nodes (resources.nodes ⌈GPUs ÷ NodeGPUs⌉ of
	// NodeGPUs each), placed all or nothing across nodes, as placement
	// places gangs. false: such a job never fits the owned pool, as
	// lathed's workers, which run no job across nodes, would have it.
	Gangs bool
	// GPUName and GPUMemoryMB describe the owned GPUs.
	GPUName     string
	GPUMemoryMB uint64
	// MaxWait is every job's max_wait, but for a job no cloud backend
	// could take: none (it has nowhere to spill to, simskip.go).
	MaxWait time.Duration
	// CloudStartup, when above 0, is every cloud backend's startup: routing
	// counts it as the backend's wait, and a cloud job starts this long
	// after its dispatch (and pays for it). 0: each backend's startup in
	// Config (none when it gives none).
	CloudStartup time.Duration
	// DatasetBytes, when above 0, is the size of the dataset of every job
	// that gives none (Job.DatasetBytes); a job with a size names a
	// dataset where it would keep its output (outputFor: the file site
	// when it carries the job's tags, else a bucket whose site does), and
	// routing is given its size as admission learns it live. 0 and none
	// given: jobs name no dataset, and nothing is staged.
	DatasetBytes int64
	// StagingMBps, when above 0, is every cloud backend's staging_mbps:
	// a job whose dataset lies outside the backend's site starts its size
	// ÷ this rate later, after the start-up (and pays for it), and routing
	// counts it in the backend's wait. 0: each backend's staging_mbps in
	// Config (none: staging is not timed).
	StagingMBps float64
	// SpotInterruptions is the rate of spot interruptions per instance-hour
	// on the cloud backends that buy spot (spot: prefer or only); 0: none.
	// An interrupted job pays for what its instance ran, loses the work
	// since its last checkpoint (CheckpointEvery) and goes back to the
	// queue as the live store's CloudPreempted puts it (spot.go).
	SpotInterruptions float64
	// CheckpointEvery is how much run time passes between a job's
	// checkpoints; 0: the trainer checkpoints on the interruption notice
	// (SIGTERM), and no work is lost.
	CheckpointEvery time.Duration
	// Seed draws the interruptions.
	Seed uint64
	// exhaustive (tests) runs every round and shows it every pending job,
	// as if no job could spill: what simskip.go leaves out must change no
	// decision.
	exhaustive bool
}

// Outcome is what became of one job.
type Outcome struct {
	ID      string
	Backend string
	Site    string
	Cloud   bool
	// Refused: no backend could take it; Stuck: it never started (held, or
	// no capacity ever came).
	Refused, Stuck bool
	Wait           time.Duration // first start − submit
	Start, End     time.Duration
	CostUSD        float64 // cloud jobs: instance hours × price; owned: 0 (owned GPUs are paid by the hour, see Result)
	Preemptions    int
	Reason         string // refused or stuck: why
}

// Result is one simulation's outcome.
type Result struct {
	Jobs []Outcome
	// Horizon runs from the first submit to the latest end any job would
	// have with no queueing (submit + duration): the same for every policy
	// and pool size, so owned costs compare.
	Horizon time.Duration
	// OwnedUSDPerGPUHour is the owned GPUs' price per hour of ownership.
	OwnedUSDPerGPUHour float64
	OwnedCostUSD       float64 // Owned × horizon hours × price
	CloudCostUSD       float64
	OwnedBusyGPUHours  float64
	// Makespan runs from the first submit to the last end of this run.
	Makespan      time.Duration
	CloudGPUHours float64
	Violations    []string // residency violations the simulator found (must be none)
	Rounds        int      // placement rounds run
	// RoundJobs is the pending jobs the rounds gave the policy to decide,
	// summed over rounds: what a run's placement costs grows with it.
	RoundJobs              int
	Decisions              int // routing decisions made (submit and reroutes)
	ConfigDefaultResidency []string

	// Interruptions are the spot interruptions, in the order they came.
	Interruptions []Interruption
}

// errSim wraps a simulation's setup errors.
var errSim = errors.New("simulate")

// simJob is a job during the simulation.
type simJob struct {
	in       *Job
	job      jobtype.Job
	ran      time.Duration // run time before its last preemption
	started  bool
	out      Outcome
	insType  string        // the chosen cloud instance type
	runStart time.Duration // when its current run started
	done     bool
	queued   bool   // in sm.pending
	output   string // its output URI (outputFor), fixed by its tags
	// dataBytes is its dataset's size (0: it names no dataset), dataset
	// the dataset's URI and dataSite the site it lies in.
	dataBytes         int64
	dataset, dataSite string
	spot              spotRun
	spill             bool // some cloud backend could take it (spillable)
	shape             int  // its GPU count and model, numbered (setInert)
	held              int  // owned GPUs it holds on all its nodes while it runs there
}

type simEvent struct {
	at   time.Duration
	kind int // 0 end, 1 arrival, 2 wake (spill-over)
	job  int
	seq  int64 // ends: the attempt they end (a preempted run's end is void)
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	if h[i].kind != h[j].kind {
		return h[i].kind < h[j].kind
	}
	return h[i].job < h[j].job
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// simEpoch is the simulation's time zero.
var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Simulate replays jobs (sorted by Submit) through the scheduler's routing
// and placement over setup, and learns run times as they end when a job
// has no Hint. It checks every start against the job's residency itself.
// ctx cancels a long run.
func Simulate(ctx context.Context, setup Setup, jobs []Job) (Result, error) {
	sm, err := newSim(setup, jobs)
	if err != nil {
		return Result{}, err
	}
	if err := sm.run(ctx); err != nil {
		return Result{}, err
	}
	return sm.result(), nil
}

// deployment is the config as the simulator reads it: the owned pool's
// backend, the cloud backends, the sites' tags and the buckets' sites;
// where a job may go and what it pays there.
type deployment struct {
	rs      *policy.RouteState
	local   routecfg.Backend
	clouds  []routecfg.Backend
	tags    map[string][]string // site → tags
	buckets map[string]string   // bucket → site
}

type simulation struct {
	deployment
	setup   Setup
	jobs    []simJob
	events  eventHeap
	now     time.Duration
	pending []int // queued jobs, in queue order
	nodes   []poolstate.NodeStatus
	where   map[string]int          // job id → index
	byID    map[string]*jobtype.Job // every job that arrived: a round's Jobs
	starts  map[string]time.Time    // the last round's estimated starts: the next's Starts
	press   poolstate.PoolPressure
	learn   learner
	price   float64
	res     Result
	seq     int64
	prof    profile // Reference's owned GPUs in use
	stale   bool    // the pool changed since the last round
	// What mayStart reads: no job could spill to a cloud (inert), the
	// pending jobs by GPU count and the urgent ones among them, the owned
	// GPUs held, and a preempted job waits to be re-decided.
	inert      bool
	pendGPUs   map[int]int
	pendUrgent int
	usedGPUs   int
	redecide   bool
	shapes     int        // job shapes numbered (setInert)
	shortest   []shortest // roundPending's, by shape
	ratios     startRatios
}

// startRatios are the start ratios (policy.StartRatio) as the store keeps
// them (jobstore.RecordStartRatio): the newest poolstate.StartRatiosKept
// in order of arrival, and sorted, for routing's odds.
type startRatios struct{ ring, sorted []float64 }

// add keeps start ratio r, dropping the oldest past StartRatiosKept.
func (s *startRatios) add(r float64) {
	if len(s.ring) == poolstate.StartRatiosKept {
		old := s.ring[0]
		s.ring = s.ring[1:]
		if at, found := slices.BinarySearch(s.sorted, old); found {
			s.sorted = slices.Delete(s.sorted, at, at+1)
		}
	}
	s.ring = append(s.ring, r)
	at, _ := slices.BinarySearch(s.sorted, r)
	s.sorted = slices.Insert(s.sorted, at, r)
}

func newSim(setup Setup, jobs []Job) (*simulation, error) {
	cfg, err := routecfg.Compile(withCloud(setup.Config, setup.CloudStartup, setup.StagingMBps))
	if err != nil {
		return nil, fmt.Errorf("%w: config: %w", errSim, err)
	}
	sm := &simulation{setup: setup, where: map[string]int{}, byID: map[string]*jobtype.Job{}, starts: map[string]time.Time{},
		deployment: deployment{rs: policy.NewRouteState(cfg), tags: map[string][]string{}, buckets: map[string]string{}}}
	if err := sm.splitBackends(cfg); err != nil {
		return nil, err
	}
	sm.price = OwnedUSDPerGPUHour(cfg)
	for _, s := range cfg.Sites {
		sm.tags[s.Name] = s.Tags
	}
	for bk, site := range cfg.Datasets.Buckets {
		sm.buckets[bk] = site
	}
	if err := checkSetup(setup); err != nil {
		return nil, err
	}
	if err := checkSpot(setup, cfg); err != nil {
		return nil, err
	}
	sm.nodes = simNodes(setup)
	for _, b := range sm.clouds {
		sm.nodes = append(sm.nodes, poolstate.NodeStatus{Node: poolstate.Node{Name: jobtype.CloudNode(b.Name), Backend: b.Kind}})
	}
	if err := sm.addJobs(jobs); err != nil {
		return nil, err
	}
	sm.setInert()
	sm.res.ConfigDefaultResidency = cfg.DefaultResidency
	return sm, nil
}

// splitBackends takes the config's first local backend as the owned pool's
// and its cloud backends as the clouds; a config without a local backend
// is an error.
func (sm *deployment) splitBackends(cfg routecfg.Config) error {
	found := false
	for _, b := range cfg.Backends {
		switch {
		case b.Kind == routecfg.KindLocal && !found:
			sm.local, found = b, true
		case b.Kind != routecfg.KindLocal:
			sm.clouds = append(sm.clouds, b)
		}
	}
	if !found {
		return fmt.Errorf("%w: config: no local backend (kind: local): the owned pool needs one", errSim)
	}
	return nil
}

// checkSetup refuses an owned pool out of range and a negative max_wait.
func checkSetup(setup Setup) error {
	switch {
	case setup.Owned < 0 || setup.Owned > 1<<20:
		return fmt.Errorf("%w: owned GPUs %d: want 0 to %d", errSim, setup.Owned, 1<<20)
	case setup.NodeGPUs < 0:
		return fmt.Errorf("%w: GPUs per node %d: want 0 (one node) or more", errSim, setup.NodeGPUs)
	case setup.MaxWait < 0:
		return fmt.Errorf("%w: max_wait %s: want 0 or more", errSim, setup.MaxWait)
	}
	return nil
}

// addJobs checks the trace (ids present and distinct, nothing negative,
// sorted by submit time), queues each job's arrival and sets the result's
// horizon: from the first submit to the last expected end.
func (sm *simulation) addJobs(jobs []Job) error {
	sm.jobs = make([]simJob, len(jobs))
	var horizon time.Duration
	for i := range jobs {
		in := &jobs[i]
		if _, dup := sm.where[in.ID]; dup || in.ID == "" {
			return fmt.Errorf("%w: job %d: id %q is empty or repeated", errSim, i, in.ID)
		}
		if in.Duration < 0 || in.Submit < 0 || in.GPUs < 0 || in.DatasetBytes < 0 {
			return fmt.Errorf("%w: job %s: negative submit, duration, gpus or dataset size", errSim, in.ID)
		}
		if i > 0 && in.Submit < jobs[i-1].Submit {
			return fmt.Errorf("%w: job %s: not sorted by submit time", errSim, in.ID)
		}
		sm.where[in.ID] = i
		horizon = max(horizon, in.Submit+in.Duration)
		sm.jobs[i] = simJob{in: in, out: Outcome{ID: in.ID}}
		sm.jobs[i].output = sm.outputFor(&sm.jobs[i])
		sm.placeData(&sm.jobs[i], sm.setup.DatasetBytes)
		sm.push(simEvent{at: in.Submit, kind: 1, job: i})
	}
	if len(jobs) > 0 {
		horizon -= jobs[0].Submit
	}
	sm.res.Horizon = horizon
	return nil
}

// simMaxRuntime is the deployment's default max_runtime in a round, for
// a job that sets none (every simulated job sets one: its estimate).
const simMaxRuntime = 24 * time.Hour

// simCPUSlots is each simulated node's CPU slots: enough for any trace.
const simCPUSlots = 1 << 20

// simNodes is the owned pool: Owned GPUs in nodes of NodeGPUs.
func simNodes(setup Setup) []poolstate.NodeStatus {
	per := setup.NodeGPUs
	if per <= 0 {
		per = setup.Owned
	}
	var out []poolstate.NodeStatus
	for left, n := setup.Owned, 0; left > 0; n++ {
		k := min(per, left)
		left -= k
		// CPU slots are not modelled: a CPU-only job starts at once.
		ns := poolstate.NodeStatus{Node: poolstate.Node{Name: fmt.Sprintf("owned-%03d", n), Backend: "local", Slots: simCPUSlots},
			Reservations: map[string]poolstate.Reservation{}}
		for g := range k {
			ns.GPUs = append(ns.GPUs, jobtype.GPU{Index: g, UUID: fmt.Sprintf("GPU-sim-%d-%d", n, g),
				Name: setup.GPUName, MemoryTotalMB: setup.GPUMemoryMB, Healthy: true})
		}
		out = append(out, ns)
	}
	return out
}

func (sm *simulation) push(e simEvent) { heap.Push(&sm.events, e) }

func (sm *simulation) run(ctx context.Context) error {
	for sm.events.Len() > 0 {
		if sm.res.Rounds%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w: %w", errSim, err)
			}
		}
		sm.now = sm.events[0].at
		if (sm.instant() || (sm.stale && len(sm.pending) > 0)) && sm.mayStart() {
			sm.round()
		}
	}
	markStuck(sm.jobs)
	return nil
}

// instant handles the events at sm.now and says whether they need a round.
// A round runs after the events of one instant when they can change what
// it decides: a job arrived, a job waiting past its max_wait, or GPUs
// freed with jobs waiting. GPUs freed with none waiting only make the
// pool's pressure stale: it is refreshed by a round just before the next
// submit's routing reads it (live, rounds run every place_interval, so
// routing reads a fresh one).
func (sm *simulation) instant() (need bool) {
	for sm.events.Len() > 0 && sm.events[0].at == sm.now {
		e := heap.Pop(&sm.events).(simEvent)
		sj := &sm.jobs[e.job]
		switch e.kind {
		case 0:
			if sj.job.Attempt == int(e.seq) && !sj.done && sj.started {
				sm.finish(e.job)
				sm.stale = true
			}
		case 1:
			if sm.stale && sm.mayStart() {
				sm.round()
			}
			sm.arrive(e.job)
			need = true
		case 2:
			need = need || (!sj.started && !sj.out.Refused && sj.queued)
		}
	}
	return need
}

// markStuck marks the jobs that neither finished nor were refused when the
// events ran out: stuck, with why they never started.
func markStuck(jobs []simJob) {
	for i := range jobs {
		if sj := &jobs[i]; !sj.done && !sj.out.Refused {
			sj.out.Stuck = true
			if sj.out.Reason == "" {
				sj.out.Reason = "never started"
				if sj.job.Held != "" {
					sj.out.Reason = sj.job.Held
				}
			}
		}
	}
}

func (sm *simulation) at() time.Time { return simEpoch.Add(sm.now) }

// spec is the job's spec as the policy sees it now.
func (sm *simulation) spec(sj *simJob) jobspec.Spec {
	in := sj.in
	sp := jobspec.Spec{Name: in.ID, Resources: sm.setup.resources(in), Residency: in.Residency,
		Priority: cmp.Or(in.Priority, jobspec.PriorityNormal), MaxWait: jobspec.Duration(sm.setup.MaxWait),
		Output: jobspec.Output{URI: sj.output}, Dataset: sj.dataset}
	if in.GPUModel != "" {
		sp.Resources.GPUModels = []string{in.GPUModel}
	}
	est := sm.estimate(sj)
	// The policy's estimate is both the routing runtime (expected_runtime)
	// and placement's bound (max_runtime): a simulated job is never
	// stopped at it, it runs its true duration.
	sp.ExpectedRuntime, sp.MaxRuntime = est, est
	return sp
}

// resources is what job in asks for under setup: its GPUs, or with
// Setup.Gangs, as a gang of whole nodes when it has more GPUs than a node.
func (setup Setup) resources(in *Job) jobspec.Resources {
	if g := setup.NodeGPUs; setup.Gangs && g > 0 && in.GPUs > g {
		return jobspec.Resources{GPUs: g, Nodes: (in.GPUs + g - 1) / g}
	}
	return jobspec.Resources{GPUs: in.GPUs}
}

// refresh sets the run time estimate of sj's spec as of now, the only
// part of its spec that changes after it arrived (spec).
func (sm *simulation) refresh(sj *simJob) {
	sj.progress(sm.now, sm.setup.NoProgress)
	est := sm.estimate(sj)
	sj.job.Spec.ExpectedRuntime, sj.job.Spec.MaxRuntime = est, est
}

// simSteps is how many steps a simulated trainer reports for its run.
const simSteps = 1000

// progress sets the progress lines running job sj's trainer has printed
// by now (off: none), as live placement reads them (policy.ProgressEnd): its step of
// simSteps and the attempt's first line (ProgressFrom). A run's steps
// come at an even pace after a start-up of a tenth of its run time, at
// most 5 minutes (loading the model and data), in which it prints none;
// an attempt resumed after a preemption goes on from the step it stopped
// at, without a start-up. With Setup.NoProgress it prints none.
func (sj *simJob) progress(now time.Duration, off bool) {
	sj.job.Progress, sj.job.ProgressFrom = jobtype.Progress{}, nil
	if off || !sj.started || sj.done || sj.in.Hint > 0 {
		return
	}
	d := sj.in.Duration
	su := min(d/10, 5*time.Minute)
	if d <= su {
		return
	}
	per := (d - su) / simSteps            // one step's run time
	stepAt := func(r time.Duration) int { // steps done after r of run time
		return min(int(max(r-su, 0)/per), simSteps)
	}
	ran := now - sj.runStart + sj.ran
	first := stepAt(sj.ran) + 1 // the attempt's first line
	if stepAt(ran) < first {
		return
	}
	firstAt := su + time.Duration(first)*per // in run time
	sj.job.Progress = jobtype.Progress{Step: stepAt(ran), TotalSteps: simSteps}
	sj.job.ProgressFrom = &jobtype.ProgressMark{Attempt: sj.job.Attempt, Step: first,
		At: simEpoch.Add(sj.runStart + firstAt - sj.ran)}
}

// estimate is what the policy is told of the job's run time now (spec).
func (sm *simulation) estimate(sj *simJob) jobspec.Duration {
	in := sj.in
	elapsed := time.Duration(0)
	if sj.started && !sj.done {
		elapsed = sm.now - sj.runStart + sj.ran
	}
	est := in.Hint
	if est <= 0 && !sj.started {
		est = sm.learn.queued(in.GPUs)
	} else if end, ok := policy.ProgressEnd(&sj.job, sm.at()); est <= 0 && ok {
		// What live placement reads from the trainer's progress lines: the
		// spec's estimate (which the simulator also uses as the bound,
		// max_runtime) says the same.
		est = sj.ran + end.Sub(sm.at()) + elapsed - sj.ran
	} else if est <= 0 {
		est = sm.learn.running(in.GPUs, elapsed)
	} else if elapsed >= est {
		// It outlived its hint: expect as much again, not its end now (a
		// pool of overrun jobs would look free, and every job would wait
		// for it).
		est = 2 * elapsed
	}
	return jobspec.Duration(max(est-sj.ran, time.Second))
}

// outputFor is where the job's output goes: file:// when the file site
// carries its tags, else the first bucket (by name) whose site does, else
// file:// (and routing refuses it).
func (sm *deployment) outputFor(sj *simJob) string {
	tags := sm.effective(sj.in)
	if fs := sm.rs.Config.Datasets.FileSite; fs != "" && carriesAll(sm.tags[fs], tags) {
		return "file:///lathe-sim/out"
	}
	names := make([]string, 0, len(sm.buckets))
	for b := range sm.buckets {
		names = append(names, b)
	}
	slices.Sort(names)
	for _, b := range names {
		if carriesAll(sm.tags[sm.buckets[b]], tags) {
			return "s3://" + b + "/lathe-sim/out"
		}
	}
	return "file:///lathe-sim/out"
}

// placeData gives sj its dataset when it has a size (its own, else
// every): beside its output (outputFor), in the same site.
func (sm *deployment) placeData(sj *simJob, every int64) {
	sj.dataBytes = cmp.Or(sj.in.DatasetBytes, every)
	if sj.dataBytes <= 0 {
		sj.dataBytes = 0
		return
	}
	sj.dataset = strings.TrimSuffix(sj.output, "/out") + "/data"
	sj.dataSite = sm.rs.Config.Datasets.FileSite
	if b, ok := routecfg.S3Bucket(sj.dataset); ok {
		sj.dataSite = sm.buckets[b]
	}
}

// effective is job in's residency: its own, else the config's default.
func (sm *deployment) effective(in *Job) []string {
	if len(in.Residency) > 0 {
		return in.Residency
	}
	return sm.rs.Config.DefaultResidency
}

func carriesAll(have, want []string) bool {
	for _, t := range want {
		if !slices.Contains(have, t) {
			return false
		}
	}
	return true
}

func (sm *simulation) arrive(i int) {
	sj := &sm.jobs[i]
	sj.job = jobtype.Job{ID: sj.in.ID, Name: sj.in.ID, State: jobtype.StateQueued, Attempt: 1,
		CreatedAt: sm.at(), UpdatedAt: sm.at()}
	sj.job.Spec = sm.spec(sj)
	if !sj.spill {
		// Nowhere to spill to: a spill-over could only send it back to
		// the owned pool (simskip.go).
		sj.job.Spec.MaxWait = 0
	}
	sj.job.OutputURI = sj.job.Spec.Output.URI
	if sj.dataBytes > 0 {
		// The size admission learns live (a file:// dataset read through
		// the allowed roots), kept on the job's route for every decision.
		n := sj.dataBytes
		sj.job.Route = &jobtype.RouteInfo{DatasetBytes: &n}
	}
	sm.byID[sj.in.ID] = &sj.job
	snap := policy.Snapshot(sm.rs, policy.Assumptions{}, sm.routingInput())
	rp := policy.DecideRoute(&sj.job, "submit", sm.rs, snap, sm.at())
	sm.res.Decisions++
	if rp.Decision.Refused {
		sj.out.Refused, sj.out.Reason = true, strings.Join(rp.Decision.Reasons, "; ")
		return
	}
	sm.setRoute(i, rp)
	sm.enqueue(i)
}

// setRoute stores a decision's route on job i, as applyReroute does.
func (sm *simulation) setRoute(i int, rp policy.Reroute) {
	sj := &sm.jobs[i]
	sj.job.Route, sj.job.Held = rp.Route, rp.Held
	if rp.Held != "" {
		return
	}
	sj.insType = ""
	for _, c := range rp.Decision.Candidates {
		if c.Backend == rp.Decision.Backend {
			sj.insType = c.InstanceType
		}
	}
	if rp.Route != nil && rp.Route.Kind == routecfg.KindLocal && sj.job.Spec.MaxWait > 0 {
		sm.push(simEvent{at: sm.now + sm.setup.MaxWait, kind: 2, job: i}) // re-decided once it has waited max_wait
	}
}

// enqueue puts job i in the pending set in queue order: priority, then
// submit time.
func (sm *simulation) enqueue(i int) {
	at, _ := sm.queuePos(i)
	sm.pending = slices.Insert(sm.pending, at, i)
	sm.jobs[i].queued = true
	sm.countPending(i, 1)
}

// dequeue takes job i out of the pending set.
func (sm *simulation) dequeue(i int) {
	if at, found := sm.queuePos(i); found {
		sm.pending = slices.Delete(sm.pending, at, at+1)
	}
	sm.jobs[i].queued = false
	sm.countPending(i, -1)
}

// queuePos is where job i is, or goes, in the pending set.
func (sm *simulation) queuePos(i int) (int, bool) {
	key := func(k int) (int, time.Duration, int) {
		return sm.jobs[k].job.Spec.Priority.Rank(), sm.jobs[k].in.Submit, k
	}
	pi, si, ii := key(i)
	return slices.BinarySearchFunc(sm.pending, i, func(a, _ int) int {
		pa, sa, ia := key(a)
		return cmp.Or(cmp.Compare(pa, pi), cmp.Compare(sa, si), cmp.Compare(ia, ii))
	})
}

func (sm *simulation) routingInput() policy.RoutingInput {
	return policy.RoutingInput{Now: sm.at(), Nodes: sm.nodes, Pressure: sm.press, Spends: map[string]poolstate.Spend{}, StartRatios: sm.ratios.sorted}
}

// round runs one placement round (policy.DecideRound) and applies its plan.
func (sm *simulation) round() {
	sm.res.Rounds++
	sm.stale = false
	// Jobs holds every job that arrived, not only the pending ones and
	// those holding GPUs: a round looks up no other, and the map is built
	// once, not once a round (a backlog of thousands, rounds by the
	// thousand). The specs the round reads are refreshed.
	in := &policy.RoundInput{Now: sm.at(), Nodes: sm.nodes, Jobs: sm.byID, Starts: sm.starts,
		Routing: sm.routingInput(), Pressure: sm.press, Pending: make([]string, 0, len(sm.pending))}
	in.Pending = sm.roundPending(in.Pending)
	sm.res.RoundJobs += len(in.Pending)
	sm.redecide = false // this round shows every pending job: it re-decides those that need it
	for ni := range sm.nodes {
		for id := range sm.nodes[ni].Reservations {
			sm.refresh(&sm.jobs[sm.where[id]])
		}
	}
	plan := policy.DecideRound(in, sm.rs, policy.RoundOptions{DefaultMaxRuntime: simMaxRuntime})
	sm.press = plan.Pressure
	for _, rp := range plan.Reroutes {
		sm.res.Decisions++
		sm.setRoute(sm.where[rp.Job.ID], rp)
	}
	var started []int
	for _, cd := range plan.Cloud {
		i := sm.where[cd.Job.ID]
		sm.startCloud(i, cd.Backend)
		started = append(started, i)
	}
	for _, a := range plan.Place.Assign {
		i := sm.where[a.JobID]
		members := a.Gang
		if members == nil {
			members = []placement.Member{{Node: a.Node, GPUs: a.GPUs}}
		}
		sm.startLocal(i, members)
		started = append(started, i)
	}
	for _, i := range started {
		sm.dequeue(i)
	}
	for _, pr := range plan.Place.Preempt {
		for _, v := range pr.Victims {
			sm.preempt(sm.where[v])
		}
	}
	keepStarts(sm.starts, plan.Place.Waits)
}

// keepStarts keeps the waiting jobs' estimated starts for the next round,
// as the live placer keeps them (policy.RoundInput.Starts).
func keepStarts(starts map[string]time.Time, waits []placement.Wait) {
	clear(starts)
	for _, w := range waits {
		if !w.EstimatedStart.IsZero() {
			starts[w.JobID] = w.EstimatedStart
		}
	}
}

// nodeNamed is the node of nodes called name; nil when none is.
func nodeNamed(nodes []poolstate.NodeStatus, name string) *poolstate.NodeStatus {
	for ni := range nodes {
		if nodes[ni].Name == name {
			return &nodes[ni]
		}
	}
	return nil
}

// startLocal starts job i on the owned pool, on its GPUs on each node of
// members (one, or a gang's).
func (sm *simulation) startLocal(i int, members []placement.Member) {
	sj := &sm.jobs[i]
	sj.held = 0
	for _, m := range members {
		n := nodeNamed(sm.nodes, m.Node)
		n.Reservations[sj.in.ID] = poolstate.Reservation{Attempt: sj.job.Attempt, GPUs: m.GPUs}
		sj.held += len(m.GPUs)
	}
	sm.usedGPUs += sj.held
	if r, ok := policy.StartRatio(&sj.job, sm.at()); ok {
		sm.ratios.add(r)
	}
	sm.checkResidency(sj, sm.local)
	sm.begin(i, sm.local, 0)
}

func (sm *simulation) startCloud(i int, b routecfg.Backend) {
	sm.checkResidency(&sm.jobs[i], b)
	sm.launch(i, b)
}

// begin starts job i's attempt on b after delay.
func (sm *simulation) begin(i int, b routecfg.Backend, delay time.Duration) {
	sj := &sm.jobs[i]
	start := sm.now + delay
	if !sj.started {
		sj.out.Wait = start - sj.in.Submit
		sj.out.Start = start
	}
	sj.started = true
	sj.out.Backend, sj.out.Site, sj.out.Cloud = b.Name, b.Site, b.Kind != routecfg.KindLocal
	sj.job.State = jobtype.StateRunning
	t := sm.at().Add(delay)
	sj.job.StartedAt, sj.job.UpdatedAt = &t, t
	sj.job.Backend = b.Name
	left := sj.in.Duration - sj.ran
	sj.runStart = start
	sm.push(simEvent{at: sm.spotEnd(i, b, start+left), kind: 0, job: i, seq: int64(sj.job.Attempt)})
}

func (sm *simulation) finish(i int) {
	if sm.interrupt(i) {
		return
	}
	sj := &sm.jobs[i]
	sj.done = true
	sj.out.End = sm.now
	sj.job.State = jobtype.StateSucceeded
	ranHere := sm.now - sj.runStart
	if sj.out.Cloud {
		sm.res.CloudGPUHours += ranHere.Hours() * float64(sj.in.GPUs)
		cost := sj.billed(sm.now).Hours() * sm.instancePrice(sj.out.Backend, sj.insType)
		sj.out.CostUSD += cost
		sm.res.CloudCostUSD += cost
	} else {
		sm.res.OwnedBusyGPUHours += ranHere.Hours() * float64(sj.held)
		sm.release(sj.in.ID)
	}
	if sj.in.Hint <= 0 {
		sm.learn.add(sj.in.GPUs, sj.in.Duration)
	}
}

func (sm *simulation) release(id string) {
	for ni := range sm.nodes {
		if r, ok := sm.nodes[ni].Reservations[id]; ok {
			sm.usedGPUs -= len(r.GPUs)
			delete(sm.nodes[ni].Reservations, id)
		}
	}
}

// preempt stops job i (a batch job an urgent one needs the GPUs of): it
// goes back to the queue and resumes from a checkpoint taken as it stopped
// (the simulation assumes no lost work).
func (sm *simulation) preempt(i int) {
	sj := &sm.jobs[i]
	if sj.done || !sj.started || sj.out.Cloud || sj.job.State != jobtype.StateRunning {
		return // not running on owned GPUs (or stopped already: a gang is a victim on each of its nodes)
	}
	ranHere := sm.now - sj.runStart
	sm.res.OwnedBusyGPUHours += ranHere.Hours() * float64(sj.held)
	sj.ran += ranHere
	sm.release(sj.in.ID)
	sj.job.State = jobtype.StateQueued
	sj.job.UpdatedAt = sm.at() // it joined the queue again now (queuedSince)
	sj.job.Preemptions++
	sj.job.Attempt++ // the pending end event is void
	sj.job.Route.Attempt = sj.job.Attempt
	sj.out.Preemptions++
	sm.redecide = true
	sm.enqueue(i)
}

// instancePrice is the hourly price of cloud backend's instance type typ.
func (sm *deployment) instancePrice(backend, typ string) float64 {
	for _, b := range sm.clouds {
		if b.Name != backend {
			continue
		}
		for _, t := range b.InstanceTypes {
			if t.Name == typ {
				return t.USDPerHour(b.Spot)
			}
		}
	}
	return 0
}

// checkResidency is the simulator's own check of a start: the backend's
// site, its checkpoint location and the job's output location must carry
// every tag of the job. It does not trust routing.
func (sm *simulation) checkResidency(sj *simJob, b routecfg.Backend) {
	tags := sm.effective(sj.in)
	check := func(what, site string) {
		if !carriesAll(sm.tags[site], tags) {
			sm.res.Violations = append(sm.res.Violations, fmt.Sprintf("job %s (residency %v): %s in site %q [%s]",
				sj.in.ID, tags, what, site, strings.Join(sm.tags[site], " ")))
		}
	}
	check("computes on "+b.Name, b.Site)
	if ck := b.CheckpointURI; strings.HasPrefix(ck, "s3://") {
		bucket, _, _ := strings.Cut(strings.TrimPrefix(ck, "s3://"), "/")
		check("checkpoints to "+ck, sm.buckets[bucket])
	} else {
		check("checkpoints on "+b.Name, b.Site)
	}
	if out := sj.job.OutputURI; strings.HasPrefix(out, "s3://") {
		bucket, _, _ := strings.Cut(strings.TrimPrefix(out, "s3://"), "/")
		check("writes output to "+out, sm.buckets[bucket])
	} else {
		check("writes output to "+out, sm.rs.Config.Datasets.FileSite)
	}
	if sj.dataset != "" {
		check("reads its dataset "+sj.dataset, sj.dataSite)
	}
}

func (sm *simulation) result() Result {
	r := sm.res
	r.OwnedUSDPerGPUHour = sm.price
	r.OwnedCostUSD = float64(sm.setup.Owned) * r.Horizon.Hours() * sm.price
	for i := range sm.jobs {
		if o := &sm.jobs[i].out; !o.Refused && !o.Stuck {
			r.Makespan = max(r.Makespan, o.End-sm.jobs[0].in.Submit)
		}
	}
	r.Jobs = make([]Outcome, len(sm.jobs))
	for i := range sm.jobs {
		r.Jobs[i] = sm.jobs[i].out
	}
	return r
}

// learner learns run times from the jobs that ended so far, by GPU count
// (all jobs, while none of that count has ended). docs/simulate.md
// "Estimates".
//
//   - A queued job is expected to run their median. (It was the mean, the
//     right figure for a sum of run times; but a new job's wait is not the
//     sum of the queue ahead of it over the pool's GPUs, it is when the
//     GPUs it needs free up in the placement replay, and the mean of these
//     heavy-tailed distributions, pulled up by a few jobs of days, made
//     every queue look long: the policy over-rented on clusters 03 and
//     08.)
//   - A running job is expected to end at the lowerRunning quantile of the
//     run times of those that ran longer than it has (a job 10 hours in is
//     not expected to end at the median of 2). A low quantile, not the
//     median: a new job starts when the first of the GPUs it needs free up,
//     the earliest of many uncertain ends, and the earliest of n ends comes
//     well before the earliest of their medians (for n independent ends,
//     at about the 1/(n+1) quantile of each). The median made a pool of
//     many running jobs look hours from free, and the policy rented jobs
//     that would have started within max_wait.
//
// Both choices were made on all four shared clusters (01, 02, 03, 08) at
// once; docs/simulate.md has the figures of each candidate.
type learner struct {
	by  map[int][]time.Duration // GPU count → sorted durations
	all []time.Duration
}

const (
	learnDefault = time.Hour
	// lowerRunning is the quantile of a running job's remaining run time
	// that the policy is told (learner).
	lowerRunning = 0.25
)

func (l *learner) add(gpus int, d time.Duration) {
	if l.by == nil {
		l.by = map[int][]time.Duration{}
	}
	ins := func(s []time.Duration) []time.Duration {
		at, _ := slices.BinarySearch(s, d)
		return slices.Insert(s, at, d)
	}
	l.by[gpus] = ins(l.by[gpus])
	l.all = ins(l.all)
}

// of is the sorted run times learned for jobs of gpus GPUs: theirs, else
// all jobs', else none.
func (l *learner) of(gpus int) []time.Duration {
	if s := l.by[gpus]; len(s) > 0 {
		return s
	}
	return l.all
}

// queued is the median run time of finished jobs of gpus GPUs.
func (l *learner) queued(gpus int) time.Duration {
	s := l.of(gpus)
	if len(s) == 0 {
		return learnDefault
	}
	return s[len(s)/2]
}

// running is the lowerRunning quantile of the run times of finished jobs
// of gpus GPUs that ran longer than elapsed; 2 × elapsed once it outlived
// them all (as much again: it is not expected to end now).
func (l *learner) running(gpus int, elapsed time.Duration) time.Duration {
	s := l.of(gpus)
	if len(s) == 0 {
		return max(learnDefault, 2*elapsed)
	}
	at, _ := slices.BinarySearch(s, elapsed+1)
	if at >= len(s) {
		return 2 * elapsed
	}
	return s[at+int(lowerRunning*float64(len(s)-at))]
}

// Quantile returns the q-quantile (0..1) of xs, sorted in place; 0 for none.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	k := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(k, 0), len(xs)-1)]
}

// String is a one-line summary for logs.
func (r Result) String() string {
	return "horizon " + r.Horizon.String() + ", owned $" + strconv.FormatFloat(r.OwnedCostUSD, 'f', 0, 64) +
		", cloud $" + strconv.FormatFloat(r.CloudCostUSD, 'f', 0, 64)
}

// OwnedUSDPerGPUHour is the price of one owned GPU for one hour of
// ownership of cfg's first local backend: its flat usd_per_gpu_hour, or
// its TCO's hardware, operations and power per hour (not divided by
// utilisation: the simulation pays for every hour, used or not); 0 when
// unpriced.
func OwnedUSDPerGPUHour(cfg routecfg.Config) float64 {
	for _, b := range cfg.Backends {
		if b.Kind != routecfg.KindLocal {
			continue
		}
		switch {
		case b.Price == nil:
			return 0
		case b.Price.TCO != nil:
			br := b.Price.TCO.Breakdown()
			return br.HardwarePerHour + br.OpsPerHour + br.PowerPerHour
		}
		return b.Price.USDPerGPUHour
	}
	return 0
}

// WithCloudPriceRatio returns cfg with every cloud instance type priced at
// ratio × the owned GPU-hour (OwnedUSDPerGPUHour) per GPU, on demand and
// spot alike, compiled again. cfg is not modified.
func WithCloudPriceRatio(cfg routecfg.Config, ratio float64) (routecfg.Config, error) {
	if !(ratio > 0) || math.IsInf(ratio, 0) {
		return cfg, fmt.Errorf("%w: --price-ratio %v: want a number above 0", errSim, ratio)
	}
	own := OwnedUSDPerGPUHour(cfg)
	if own <= 0 {
		return cfg, fmt.Errorf("%w: --price-ratio: the local backend has no price (price: {usd_per_gpu_hour: …}) to scale from", errSim)
	}
	out := cfg
	out.Backends = slices.Clone(cfg.Backends)
	for i := range out.Backends {
		b := &out.Backends[i]
		if b.Kind == routecfg.KindLocal {
			continue
		}
		b.InstanceTypes = slices.Clone(b.InstanceTypes)
		for k := range b.InstanceTypes {
			t := &b.InstanceTypes[k]
			t.OnDemandUSDPerHour = ratio * own * float64(t.GPUs)
			if t.SpotUSDPerHour > 0 || b.Spot {
				t.SpotUSDPerHour = t.OnDemandUSDPerHour
			}
		}
	}
	c, err := routecfg.Compile(out)
	if err != nil {
		return cfg, fmt.Errorf("%w: --price-ratio: %w", errSim, err)
	}
	return c, nil
}
