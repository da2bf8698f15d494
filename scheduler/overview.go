package scheduler

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// OverviewMaxJobs bounds how many jobs of each active state one overview
// reads (oldest first); past it the answer says Truncated.
const OverviewMaxJobs = 5000

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
	jobs      []*jobtype.Job // the active jobs, by state then oldest first
	truncated bool
	waits     map[string]jobtype.WaitInfo
	nodes     []jobstore.NodeStatus
	queues    []wire.QueueInfo
	budgets   []wire.BudgetRow
}

// overview answers GET /api/v1/overview (wire.Overview). A token that
// reads only its team's jobs gets only those: every count and list over
// jobs is over its team's, and asynq's per-queue task counts (every
// team's) are left out.
//
// Redis round trips: 12 (CountByState, PendingCount, one id range per
// active state (5), one pipeline reading the active jobs, the waits, the
// node set and one pipeline of their heartbeats and reservations, one
// pipeline of the budget scopes), plus one pipeline of asynq's task counts
// of every local node's queue for an all-teams token (asynqCounts), plus
// one pipeline of an LRANGE (≤ 32 entries) per running job answered for
// the loss series (none without one). The active jobs are read brief
// (jobstore.GetManyBrief).
func (s *Scheduler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.rctx(r)
	defer cancel()
	p := principalOf(r)
	in, err := s.readOverview(ctx, allTeams(p))
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
func (s *Scheduler) addLossSeries(ctx context.Context, running []wire.RunningJob) error {
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
func allTeams(p principal) bool { return p.Role == RoleAdmin || p.AllTeams }

// readOverview reads an overview's inputs; withQueues adds asynq's queue
// counts per node.
func (s *Scheduler) readOverview(ctx context.Context, withQueues bool) (overviewInput, error) {
	in := overviewInput{now: time.Now().UTC()}
	in.month = jobstore.Month(in.now)
	var err error
	if in.counts, err = s.store.CountByState(ctx); err != nil {
		return in, err
	}
	if in.pending, err = s.store.PendingCount(ctx); err != nil {
		return in, err
	}
	var ids []string
	for _, st := range activeStates {
		got, err := s.store.IDsInState(ctx, st, OverviewMaxJobs+1)
		if err != nil {
			return in, err
		}
		if len(got) > OverviewMaxJobs {
			got, in.truncated = got[:OverviewMaxJobs], true
		}
		ids = append(ids, got...)
	}
	if in.jobs, err = s.store.GetManyBrief(ctx, ids); err != nil {
		return in, err
	}
	if in.waits, err = s.store.Waits(ctx); err != nil {
		return in, err
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
func (s *Scheduler) queueInfos(ctx context.Context, nodes []jobstore.NodeStatus) ([]wire.QueueInfo, error) {
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
		q := wire.QueueInfo{Name: names[i], Node: n.Name, Slots: n.Slots, Reserved: n.Reserved}
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
func (s *Scheduler) asynqCounts(ctx context.Context, names []string) ([]*asynqCount, error) {
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
	if _, err := pipe.Exec(ctx); err != nil && redisDown(err) {
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
func (s *Scheduler) asynqQueues(names []string) ([]*asynq.QueueInfo, error) {
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
			case !errors.Is(err, asynq.ErrQueueNotFound) && redisDown(err):
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return infos, errors.Join(errs...)
}

// buildOverview makes the answer for p out of what was read: pure.
func buildOverview(in overviewInput, p principal) wire.Overview {
	all := allTeams(p)
	jobs := in.jobs
	if !all {
		jobs = slices.DeleteFunc(slices.Clone(jobs), func(j *jobtype.Job) bool { return !mayRead(p, j) })
	}
	nRunning, nWaiting := 0, 0
	for _, j := range jobs {
		switch j.State {
		case jobtype.StateDispatched, jobtype.StateProvisioning, jobtype.StateRunning:
			nRunning++
		case jobtype.StateQueued:
			nWaiting++
		}
	}
	ov := wire.Overview{At: in.now, Truncated: in.truncated, Running: make([]wire.RunningJob, 0, nRunning),
		Waiting: make([]wire.WaitingJob, 0, nWaiting)}
	if !all {
		ov.Team = p.Team
	}
	ov.Queues = overviewQueues(in, jobs, all)
	var readable map[string]bool // the jobs a team's token may see; every job for all teams
	if !all {
		readable = make(map[string]bool, len(jobs))
	}
	for _, j := range jobs {
		if readable != nil {
			readable[j.ID] = true
		}
		switch j.State {
		case jobtype.StateDispatched, jobtype.StateProvisioning, jobtype.StateRunning:
			ov.Running = append(ov.Running, runningJob(j, in.now))
		case jobtype.StateQueued:
			ov.Waiting = append(ov.Waiting, waitingJob(j, in.waits))
		}
	}
	sortWaiting(ov.Waiting)
	ov.Nodes = nodeGPUs(in.nodes, func(id string) bool { return all || readable[id] })
	ov.Cloud = overviewCloud(in, jobs)
	return ov
}

// overviewQueues counts jobs by state and priority, the oldest queued
// job's wait and the jobs burst to the cloud. An all-teams answer takes
// the counts by state and the pending set's size from the store's indexes;
// a team's counts its jobs read (the active states only), and its pending
// is its queued jobs that no gate holds back (a sweep trial not admitted).
func overviewQueues(in overviewInput, jobs []*jobtype.Job, all bool) wire.OverviewQueues {
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
	var oldest *jobtype.Job
	for _, j := range jobs {
		if !all {
			q.ByState[j.State]++
		}
		if j.State != jobtype.StatePaused && j.Route != nil && j.Route.Kind != "" && j.Route.Kind != routecfg.KindLocal {
			q.Burst++
		}
		if j.State != jobtype.StateQueued {
			continue
		}
		q.ByPriority[string(priorityOf(j))]++
		if !all && (j.Trial == nil || j.Trial.Gate == "") {
			q.Pending++
		}
		if oldest == nil || j.CreatedAt.Before(oldest.CreatedAt) {
			oldest = j
		}
	}
	if oldest != nil {
		q.OldestJob = oldest.ID
		q.OldestWaitS = max(0, in.now.Sub(oldest.CreatedAt).Seconds())
	}
	return q
}

// priorityOf is j's priority, normal when its spec names none.
func priorityOf(j *jobtype.Job) jobspec.Priority {
	if j.Spec.Priority == "" {
		return jobspec.PriorityNormal
	}
	return j.Spec.Priority
}

// runningJob is j's row among the running jobs at now.
func runningJob(j *jobtype.Job, now time.Time) wire.RunningJob {
	gpus := j.GPUs
	if gpus == nil {
		gpus = []int{}
	}
	return wire.RunningJob{ID: j.ID, Name: j.Name, State: j.State, Team: j.Team, Backend: j.Backend, Node: j.Node,
		GPUs: gpus, Step: j.Progress.Step, TotalSteps: j.Progress.TotalSteps, Loss: j.Progress.Loss,
		CostUSD: j.CostUSD + liveInstanceCost(j.Instance, now), StartedAt: j.StartedAt}
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

// waitingJob is queued job j's row, with its place in line when the last
// placement round listed it.
func waitingJob(j *jobtype.Job, waits map[string]jobtype.WaitInfo) wire.WaitingJob {
	wj := wire.WaitingJob{ID: j.ID, Name: j.Name, Team: j.Team, Priority: string(priorityOf(j)), CreatedAt: j.CreatedAt}
	if j.Route != nil {
		wj.Backend = j.Route.Backend
	}
	if w, ok := waits[j.ID]; ok {
		wj.Wait = &w
	}
	return wj
}

// sortWaiting orders waiting jobs by their place in line; those without
// one come last, oldest first.
func sortWaiting(ws []wire.WaitingJob) {
	slices.SortStableFunc(ws, func(a, b wire.WaitingJob) int {
		switch {
		case a.Wait != nil && b.Wait != nil:
			if c := cmp.Compare(a.Wait.Position, b.Wait.Position); c != 0 {
				return c
			}
		case a.Wait != nil:
			return -1
		case b.Wait != nil:
			return 1
		}
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
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
func overviewCloud(in overviewInput, jobs []*jobtype.Job) wire.OverviewCloud {
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
	for _, j := range jobs {
		if !liveInstance(j.Instance) {
			continue
		}
		name := j.Instance.Backend
		i, ok := byName[name]
		if !ok {
			// A backend gone from the config still runs an instance.
			i = len(c.Backends)
			byName[name] = i
			c.Backends = append(c.Backends, wire.CloudBackend{Name: name, Month: in.month})
		}
		c.Backends[i].Instances++
		c.Backends[i].USDPerHour += j.Instance.USDPerHour
		c.USDPerHour += j.Instance.USDPerHour
	}
	return c
}
