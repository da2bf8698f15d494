package api

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// OverviewMaxJobs bounds how many jobs of each active state one overview
// reads (oldest first); past it the answer says Truncated.
const OverviewMaxJobs = 5000

// The overview lists the first OverviewWaitingDefault waiting jobs in line
// (?waiting_limit= asks for 0 to OverviewWaitingMax); its counts cover them
// all, and WaitingTotal says how many there are.
const (
	OverviewWaitingDefault = 100
	OverviewWaitingMax     = 1000
)

// activeStates are the states an overview reads the jobs of: every state
// that is not terminal.
var activeStates = []jobtype.State{jobtype.StateQueued, jobtype.StateDispatched,
	jobtype.StateProvisioning, jobtype.StateRunning, jobtype.StatePaused}

// overviewInput is what one overview reads from the store.
type overviewInput struct {
	now       time.Time
	month     string
	counts    map[jobtype.State]int64
	pending   int64
	queued    []jobstore.Tally // the queued jobs, oldest first
	jobs      []*jobtype.Job   // the other active jobs, by state then oldest first
	truncated bool
	waits     map[string]string // job id → its WaitInfo's JSON (jobstore.RawWaits)
	// waitingLimit is how many waiting rows the answer lists.
	waitingLimit int
	nodes        []jobstore.NodeStatus
	queues       []wire.QueueInfo
	budgets      []wire.BudgetRow
	routing      routecfg.Config // prices, for running jobs' cost so far
	// running holds the running jobs' whole records, by id, when a local
	// backend is priced: what their cost so far is computed from (a brief
	// record lacks the GPU count and the earlier attempts' run times).
	running map[string]*jobtype.Job
}

// runningWhole reads the whole records of the running jobs of brief when
// cfg prices a local backend (their cost accrues by the second); nil
// otherwise. It reads as many records as jobs run, not the queue.
func (s opsView) runningWhole(ctx context.Context, cfg routecfg.Config, brief []*jobtype.Job) (map[string]*jobtype.Job, error) {
	priced := false
	for _, b := range cfg.Backends {
		priced = priced || (b.Kind == routecfg.KindLocal && b.Priced())
	}
	var ids []string
	for _, j := range brief {
		if priced && j.State == jobtype.StateRunning {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	whole, err := s.store.GetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*jobtype.Job, len(whole))
	for _, j := range whole {
		if j != nil {
			out[j.ID] = j
		}
	}
	return out, nil
}

// overview answers GET /api/v1/overview (wire.Overview). A token that
// reads only its team's jobs gets only those: every count and list over
// jobs is over its team's, and asynq's per-queue task counts (every
// team's) are left out.
//
// It lists the first ?waiting_limit= waiting jobs in line
// (OverviewWaitingDefault, at most OverviewWaitingMax); every count is
// over all of them.
//
// Redis round trips: 13 (CountByState, PendingCount, one id range per
// active state (5), one pipeline reading the queued jobs' tallies, one
// reading the other active jobs brief, the waits (not read for
// waiting_limit=0, the dashboard's poll: 12), the node set and one
// pipeline of their heartbeats and reservations, one pipeline of the
// budget scopes), plus one pipeline of asynq's task counts of every local
// node's queue for an all-teams token (asynqCounts), plus one pipeline of
// an LRANGE (≤ 32 entries) per running job answered for the loss series
// (none without one). The queued jobs, most of the active ones in a busy
// queue, are read as tallies (jobstore.GetTallies: ten small fields, no
// JSON), the others brief (jobstore.GetManyBrief: their rows show more).
func (s opsView) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	p := principalOf(r)
	limit := OverviewWaitingDefault
	if v := r.URL.Query().Get("waiting_limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > OverviewWaitingMax {
			writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad waiting_limit", Code: "invalid",
				Fields: []jobspec.FieldError{{Field: "waiting_limit", Value: v, Message: "must be 0–" + strconv.Itoa(OverviewWaitingMax)}}})
			return
		}
		limit = n
	}
	in, err := s.readOverview(ctx, allTeams(p), limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ov := buildOverview(in, p)
	if err := s.addLossSeries(ctx, ov.Running); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ov)
}

// addLossSeries fills in the running jobs' loss series: one pipeline of an
// LRANGE per job (none without running jobs), over the jobs the answer
// holds, so a team's token reads its team's series only.
func (s opsView) addLossSeries(ctx context.Context, running []wire.RunningJob) error {
	ids := make([]string, len(running))
	for i, r := range running {
		ids[i] = r.ID
	}
	series, err := s.store.LossSeries(ctx, ids)
	if err != nil {
		return err
	}
	for i := range running {
		running[i].LossSeries = withLatest(series[running[i].ID], running[i].Step, running[i].Loss)
	}
	return nil
}

// withLatest is a loss series with the job's latest progress (step, loss)
// added when it is past the series' last point (the series may lag it by
// less than its spacing); [] for none.
func withLatest(series []jobtype.LossPoint, step int, loss float64) []jobtype.LossPoint {
	if step > 0 && (len(series) == 0 || series[len(series)-1].Step() < step) {
		series = append(series, jobtype.LossPoint{float64(step), loss})
	}
	if series == nil {
		series = []jobtype.LossPoint{}
	}
	return series
}

// allTeams reports whether p reads every team's jobs.
func allTeams(p plane.Principal) bool { return p.Role == plane.RoleAdmin || p.AllTeams }

// readOverview reads an overview's inputs for an answer of waitingLimit
// waiting rows (none: the waits are not read); withQueues adds asynq's
// queue counts per node.
func (s opsView) readOverview(ctx context.Context, withQueues bool, waitingLimit int) (overviewInput, error) {
	in := overviewInput{now: time.Now().UTC(), waitingLimit: waitingLimit, routing: s.plane.Routing().Config}
	in.month = jobstore.Month(in.now)
	var err error
	if in.counts, err = s.store.CountByState(ctx); err != nil {
		return in, err
	}
	if in.pending, err = s.store.PendingCount(ctx); err != nil {
		return in, err
	}
	var queued, ids []string
	for _, st := range activeStates {
		got, err := s.store.IDsInState(ctx, st, OverviewMaxJobs+1)
		if err != nil {
			return in, err
		}
		if len(got) > OverviewMaxJobs {
			got, in.truncated = got[:OverviewMaxJobs], true
		}
		if st == jobtype.StateQueued {
			queued = got
		} else {
			ids = append(ids, got...)
		}
	}
	if in.queued, err = s.store.GetTallies(ctx, queued); err != nil {
		return in, err
	}
	if in.jobs, err = s.store.GetManyBrief(ctx, ids); err != nil {
		return in, err
	}
	if in.running, err = s.runningWhole(ctx, in.routing, in.jobs); err != nil {
		return in, err
	}
	if waitingLimit > 0 {
		if in.waits, err = s.store.RawWaits(ctx); err != nil {
			return in, err
		}
	}
	if in.nodes, err = s.store.Nodes(ctx); err != nil {
		return in, err
	}
	if withQueues {
		if in.queues, err = s.queueInfos(ctx, in.nodes); err != nil {
			return in, err
		}
	}
	in.budgets, err = s.budgetRows(ctx, in.month)
	return in, err
}

// queueInfos is each node's queue as GET /api/v1/queues shows it: the
// node's slots and reservations, and asynq's task counts (asynqCounts: one
// round trip for every node; a queue asynq does not know yet counts
// nothing).
func (s opsView) queueInfos(ctx context.Context, nodes []jobstore.NodeStatus) ([]wire.QueueInfo, error) {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = jobtype.NodeQueue(n.Name)
	}
	counts, err := s.asynqCounts(ctx, names)
	if err != nil {
		return nil, err
	}
	qs := []wire.QueueInfo{}
	for i, n := range nodes {
		q := wire.QueueInfo{Name: names[i], Node: n.Name, Slots: n.Slots, Reserved: n.CPUReserved}
		if c := counts[i]; c != nil {
			q.Pending, q.Active, q.Archived, q.Completed = c.Pending, c.Active, c.Archived, c.Completed
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// asynqCount is a queue's task counts as asynq's Inspector.GetQueueInfo
// has them, of the states the overview and GET /api/v1/queues show.
type asynqCount struct{ Pending, Active, Archived, Completed int }

// asynqCounts is each queue's asynqCount (nil for a queue asynq does not
// know, or one it could not read while Redis is up), in one pipeline for
// every queue: SISMEMBER asynq:queues, LLEN of its pending and active
// lists, ZCARD of its archived and completed sets. GetQueueInfo reads the
// same keys (its first two round trips) but three round trips a queue,
// the third a script sampling MEMORY USAGE of up to 120 of its tasks,
// which neither answer shows. The keys are asynq v0.26's layout
// (internal/base: asynq:{<queue>}:<state>); TestAsynqCountsAgree compares
// the counts with GetQueueInfo on a real Redis with tasks in every state
// read, so an asynq upgrade that moves them fails there. An error only
// when Redis is down.
func (s opsView) asynqCounts(ctx context.Context, names []string) ([]*asynqCount, error) {
	if len(names) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	known := make([]*redis.BoolCmd, len(names))
	sizes := make([][4]*redis.IntCmd, len(names))
	for i, q := range names {
		prefix := "asynq:{" + q + "}:"
		known[i] = pipe.SIsMember(ctx, "asynq:queues", q)
		sizes[i] = [4]*redis.IntCmd{pipe.LLen(ctx, prefix+"pending"), pipe.LLen(ctx, prefix+"active"),
			pipe.ZCard(ctx, prefix+"archived"), pipe.ZCard(ctx, prefix+"completed")}
	}
	if _, err := pipe.Exec(ctx); err != nil && jobstore.Unreachable(err) {
		return nil, err
	}
	out := make([]*asynqCount, len(names))
	for i := range names {
		if !known[i].Val() || known[i].Err() != nil || slices.ContainsFunc(sizes[i][:], func(c *redis.IntCmd) bool { return c.Err() != nil }) {
			continue
		}
		out[i] = &asynqCount{Pending: int(sizes[i][0].Val()), Active: int(sizes[i][1].Val()),
			Archived: int(sizes[i][2].Val()), Completed: int(sizes[i][3].Val())}
	}
	return out, nil
}

// asynqQueueReaders bounds the GetQueueInfo calls asynqQueues makes at once.
const asynqQueueReaders = 8

// asynqQueues (the /metrics scrape, which exports more of a queue than
// asynqCounts reads) is asynq's GetQueueInfo of each queue (nil for a queue asynq
// does not know, or one it could not read while Redis is up), read
// asynqQueueReaders at a time: each is three round trips (SISMEMBER and
// two scripts), so 25 nodes read one after another cost 75 round trips of
// waiting. An error only when Redis is down.
func (s opsView) asynqQueues(names []string) ([]*asynq.QueueInfo, error) {
	infos := make([]*asynq.QueueInfo, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, asynqQueueReaders)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			info, err := s.insp.GetQueueInfo(name)
			switch {
			case err == nil:
				infos[i] = info
			case !errors.Is(err, asynq.ErrQueueNotFound) && jobstore.Unreachable(err):
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return infos, errors.Join(errs...)
}

// buildOverview makes the answer for p out of what was read: pure.
func buildOverview(in overviewInput, p plane.Principal) wire.Overview {
	all := allTeams(p)
	// The jobs p may read. One that changed state between the id reads
	// and the record reads is shown as its record says: a brief record now
	// queued joins the tallies (a tally no longer queued is counted, not
	// listed).
	queued := in.queued
	if !all {
		queued = slices.DeleteFunc(slices.Clone(queued), func(t jobstore.Tally) bool { return !mayReadTeam(p, t.Team) })
	}
	jobs := make([]*jobtype.Job, 0, len(in.jobs))
	for _, j := range in.jobs {
		switch {
		case !mayRead(p, j):
		case j.State == jobtype.StateQueued:
			queued = append(slices.Clip(queued), jobstore.TallyOf(j))
		default:
			jobs = append(jobs, j)
		}
	}
	nRunning := 0
	for _, j := range jobs {
		switch j.State {
		case jobtype.StateDispatched, jobtype.StateProvisioning, jobtype.StateRunning:
			nRunning++
		}
	}
	ov := wire.Overview{At: in.now, Truncated: in.truncated, Running: make([]wire.RunningJob, 0, nRunning)}
	if !all {
		ov.Team = p.Team
	}
	ov.Queues = overviewQueues(in, jobs, queued, all)
	var readable map[string]bool // the jobs a team's token may see; every job for all teams
	if !all {
		readable = make(map[string]bool, len(jobs)+len(queued))
		for _, t := range queued {
			readable[t.ID] = true
		}
	}
	for _, j := range jobs {
		if readable != nil {
			readable[j.ID] = true
		}
		switch j.State {
		case jobtype.StateDispatched, jobtype.StateProvisioning, jobtype.StateRunning:
			ov.Running = append(ov.Running, runningJob(in.routing, j, in.running[j.ID], in.now))
		}
	}
	ov.Waiting, ov.WaitingTotal = waitingRows(queued, in.waits, in.waitingLimit)
	ov.Nodes = nodeGPUs(in.nodes, func(id string) bool { return all || readable[id] })
	ov.Cloud = overviewCloud(in, jobs, queued)
	return ov
}

// overviewQueues counts jobs by state and priority, the oldest queued
// job's wait and the jobs burst to the cloud. An all-teams answer takes
// the counts by state and the pending set's size from the store's indexes;
// a team's counts its jobs read (the active states only), and its pending
// is its queued jobs that no gate holds back (a sweep trial not admitted).
func overviewQueues(in overviewInput, jobs []*jobtype.Job, queued []jobstore.Tally, all bool) wire.OverviewQueues {
	q := wire.OverviewQueues{ByState: map[jobtype.State]int64{}, ByPriority: map[string]int64{}, Queues: []wire.QueueInfo{}}
	if all {
		q.Pending = in.pending
		for st, n := range in.counts {
			q.ByState[st] = n
		}
		if in.queues != nil {
			q.Queues = in.queues
		}
	} else {
		for _, st := range activeStates {
			q.ByState[st] = 0
		}
	}
	burst := func(st jobtype.State, kind string) {
		if st != jobtype.StatePaused && kind != "" && kind != routecfg.KindLocal {
			q.Burst++
		}
	}
	var oldest *jobstore.Tally
	for i := range queued {
		t := &queued[i]
		if !all {
			q.ByState[t.State]++
		}
		burst(t.State, t.RouteKind)
		if t.State != jobtype.StateQueued {
			continue
		}
		q.ByPriority[string(priorityOr(t.Priority))]++
		if !all && t.Gate == "" {
			q.Pending++
		}
		if oldest == nil || t.CreatedAt.Before(oldest.CreatedAt) {
			oldest = t
		}
	}
	for _, j := range jobs {
		if !all {
			q.ByState[j.State]++
		}
		if j.Route != nil {
			burst(j.State, j.Route.Kind)
		}
	}
	if oldest != nil {
		q.OldestJob = oldest.ID
		q.OldestWaitS = max(0, in.now.Sub(oldest.CreatedAt).Seconds())
	}
	return q
}

// priorityOr is a spec's priority p, normal when it names none.
func priorityOr(p jobspec.Priority) jobspec.Priority {
	if p == "" {
		return jobspec.PriorityNormal
	}
	return p
}

// runningJob is j's row among the running jobs at now, its cost so far
// priced by cfg from its whole record (nil: what was settled, and a live
// instance's time).
func runningJob(cfg routecfg.Config, j, whole *jobtype.Job, now time.Time) wire.RunningJob {
	cost := j.CostUSD + liveInstanceCost(j.Instance, now)
	if whole != nil {
		cost = costNow(cfg, whole, now)
	}
	gpus := j.GPUs
	if gpus == nil {
		gpus = []int{}
	}
	return wire.RunningJob{ID: j.ID, Name: j.Name, State: j.State, Team: j.Team, Backend: j.Backend, Node: j.Node,
		GPUs: gpus, Step: j.Progress.Step, TotalSteps: j.Progress.TotalSteps, Loss: j.Progress.Loss,
		CostUSD: cost, StartedAt: j.StartedAt}
}

// costNow is what j has cost by now, priced by cfg: its usage with the
// attempt running now counted to now (policy.JobUsageAt: a local attempt's
// GPU-seconds × price, the cloud attempts that ended), plus a live cloud
// instance's time so far. A running job's cost accrues while it runs,
// where its settled CostUSD stays at what was last settled.
func costNow(cfg routecfg.Config, j *jobtype.Job, now time.Time) float64 {
	usd, _ := policy.JobUsageAt(cfg, j, now)
	return max(usd, j.CostUSD) + liveInstanceCost(j.Instance, now)
}

// liveInstanceCost is what a live cloud instance has cost since its
// launch at now (0 for none, or one already terminated: its cost is in the
// job's CostUSD).
func liveInstanceCost(in *jobtype.Instance, now time.Time) float64 {
	if !liveInstance(in) || in.LaunchTime.IsZero() || now.Before(in.LaunchTime) {
		return 0
	}
	return in.USDPerHour * now.Sub(in.LaunchTime).Hours()
}

// liveInstance reports whether in is an instance not terminated yet.
func liveInstance(in *jobtype.Instance) bool { return in != nil && in.TerminatedAt == nil }

// waitingPick is a queued job and its place in line, for ordering them.
type waitingPick struct {
	t   *jobstore.Tally
	pos int
	has bool // the last placement round listed it
}

// waitingRows are the first limit of the queued jobs among tallies in
// line, and how many are queued: ordered by their place in line from the
// last placement round, those without one last, oldest first. Every job's
// place is read off its wait's JSON (jobstore.WaitPosition); only the rows
// answered have their wait decoded whole. A wait that does not decode is
// none (the waits are hints).
func waitingRows(tallies []jobstore.Tally, waits map[string]string, limit int) ([]wire.WaitingJob, int) {
	picks := make([]waitingPick, 0, len(tallies))
	for i := range tallies {
		t := &tallies[i]
		if t.State != jobtype.StateQueued {
			continue
		}
		wp := waitingPick{t: t}
		if raw, ok := waits[t.ID]; ok {
			wp.pos, wp.has = jobstore.WaitPosition(raw)
		}
		picks = append(picks, wp)
	}
	slices.SortFunc(picks, func(a, b waitingPick) int {
		switch {
		case a.has && b.has:
			if c := cmp.Compare(a.pos, b.pos); c != 0 {
				return c
			}
		case a.has:
			return -1
		case b.has:
			return 1
		}
		if c := a.t.CreatedAt.Compare(b.t.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.t.ID, b.t.ID)
	})
	rows := make([]wire.WaitingJob, 0, min(limit, len(picks)))
	for _, wp := range picks[:min(limit, len(picks))] {
		t := wp.t
		wj := wire.WaitingJob{ID: t.ID, Name: t.Name, Team: t.Team, Priority: string(priorityOr(t.Priority)),
			Backend: t.RouteBackend, CreatedAt: t.CreatedAt}
		if wp.has {
			if w, ok := jobstore.DecodeWait(waits[t.ID]); ok {
				wj.Wait = &w
			}
		}
		rows = append(rows, wj)
	}
	return rows, len(picks)
}

// nodeGPUs is every live node with its GPUs (as gpuRows has them), sorted
// by name; a GPU's job id is shown only when show says the reader may see
// that job (Busy says it is held either way).
func nodeGPUs(nodes []jobstore.NodeStatus, show func(id string) bool) []wire.NodeGPUs {
	rows := gpuRows(nodes)
	out := []wire.NodeGPUs{}
	for _, n := range nodes {
		out = append(out, wire.NodeGPUs{Name: n.Name, Backend: n.Backend, Simulated: n.Simulated, SeenAt: n.SeenAt, GPUs: []wire.OverviewGPU{}})
	}
	slices.SortFunc(out, func(a, b wire.NodeGPUs) int { return strings.Compare(a.Name, b.Name) })
	for _, g := range rows {
		i, ok := slices.BinarySearchFunc(out, g.Node, func(n wire.NodeGPUs, name string) int { return strings.Compare(n.Name, name) })
		if !ok {
			continue
		}
		og := wire.OverviewGPU{GPU: g, Busy: g.JobID != ""}
		if og.Busy && !show(g.JobID) {
			og.JobID = ""
		}
		out[i].GPUs = append(out[i].GPUs, og)
	}
	return out
}

// overviewCloud sums the live instances of the jobs read per cloud
// backend, and adds each cloud backend's month from the budget rows.
func overviewCloud(in overviewInput, jobs []*jobtype.Job, queued []jobstore.Tally) wire.OverviewCloud {
	c := wire.OverviewCloud{Backends: []wire.CloudBackend{}}
	byName := map[string]int{}
	for _, row := range in.budgets {
		name, ok := strings.CutPrefix(row.Scope, "backend:")
		if !ok || row.Kind == routecfg.KindLocal {
			continue
		}
		byName[name] = len(c.Backends)
		c.Backends = append(c.Backends, wire.CloudBackend{Name: name, Month: in.month, SpentUSD: row.SpentUSD,
			ReservedUSD: row.ReservedUSD, LimitUSD: row.LimitUSD})
	}
	insts := make([]*jobtype.Instance, 0, len(jobs))
	for _, t := range queued {
		insts = append(insts, t.Instance)
	}
	for _, j := range jobs {
		insts = append(insts, j.Instance)
	}
	for _, inst := range insts {
		if !liveInstance(inst) {
			continue
		}
		name := inst.Backend
		i, ok := byName[name]
		if !ok {
			// A backend gone from the config still runs an instance.
			i = len(c.Backends)
			byName[name] = i
			c.Backends = append(c.Backends, wire.CloudBackend{Name: name, Month: in.month})
		}
		c.Backends[i].Instances++
		c.Backends[i].USDPerHour += inst.USDPerHour
		c.USDPerHour += inst.USDPerHour
	}
	return c
}
