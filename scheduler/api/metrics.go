package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// activeScan caps how many jobs of each live state (queued, dispatched,
// provisioning, running, paused) a scrape reads for its per-backend and
// per-priority breakdown; lathe_jobs (from the state indexes) is exact
// whatever the cap.
const activeScan = 10000

// liveStates are the states whose jobs a scrape reads one by one.
var liveStates = []jobtype.State{jobtype.StateQueued, jobtype.StateDispatched,
	jobtype.StateProvisioning, jobtype.StateRunning, jobtype.StatePaused}

// metricsHandler serves the registry in Prometheus' text format.
func (s opsView) metricsHandler() http.HandlerFunc {
	h := promhttp.HandlerFor(prometheus.Gatherers{s.plane.Metrics(), s.reg}, promhttp.HandlerOpts{ErrorLog: slogPrinter{s.log}})
	return h.ServeHTTP
}

// slogPrinter adapts promhttp's error log to slog.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", slog.Any("err", v)) }

// desc builds a metric description without constant labels.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The store collector's descriptions.
var (
	descLeader     = desc("lathe_scheduler_leader", "1 while this scheduler holds the leader lease, else 0. Every scheduler exports the cluster-wide gauges (read from the store, the same on each); deduplicate with max by (...).")
	descStoreUp    = desc("lathe_store_up", "1 when this scrape read the job store (Redis); 0 when it could not, and the cluster-wide gauges are absent from this scrape.")
	descScrape     = desc("lathe_store_scrape_duration_seconds", "Time this scrape spent reading the store and asynq's queues.")
	descJobs       = desc("lathe_jobs", "Jobs in the store by state (the state indexes; GET /api/v1/queues by_state).", "state")
	descLiveJobs   = desc("lathe_jobs_live", "Jobs in a live state (queued, dispatched, provisioning, running, paused) by backend (the routed one while queued) and priority.", "state", "backend", "priority")
	descPending    = desc("lathe_queue_pending_jobs", "Jobs in the pending set, waiting for placement (GET /api/v1/queues pending).")
	descOldestWait = desc("lathe_queue_oldest_wait_seconds", "Age (now - created_at) of the oldest queued job, by priority (0 when none is queued).", "priority")
	descPastWait   = desc("lathe_queue_past_max_wait_jobs", "Queued jobs waiting longer (now - created_at) than their spec's max_wait, by priority.", "priority")
	descSlots      = desc("lathe_node_slots", "A live node's CPU slots: how many CPU-only jobs (gpus: 0) it runs at once (GET /api/v1/queues queues[].slots).", "node")
	descReserved   = desc("lathe_node_slots_reserved", "A live node's CPU slots held by a CPU-only job (GPU jobs hold GPUs, not slots; GET /api/v1/queues queues[].reserved).", "node")
	descHBAge      = desc("lathe_node_heartbeat_age_seconds", "Seconds since a live node's last heartbeat; a node whose heartbeat expired leaves the scrape (alert on both: configs/prometheus/alerts.yml).", "node")
	descAsynq      = desc("lathe_asynq_queue_size", "Tasks in a node's asynq queue by asynq task state (asynq Inspector GetQueueInfo; GET /api/v1/queues queues[]).", "queue", "state")
	descAsynqLat   = desc("lathe_asynq_queue_latency_seconds", "Age of the oldest pending task of a node's asynq queue (asynq QueueInfo.Latency; asynq x/metrics' asynq_queue_latency_seconds).", "queue")
	descAsynqDone  = desc("lathe_asynq_tasks_processed_total", "Tasks asynq processed from a node's queue since the queue was created (QueueInfo.ProcessedTotal; asynq_tasks_processed_total).", "queue")
	descGPUUtil    = desc("lathe_gpu_utilization_ratio", "GPU utilisation, 0-1, from the node's last heartbeat (NVML; DCGM_FI_DEV_GPU_UTIL / 100).", "node", "gpu", "model")
	descGPUUsed    = desc("lathe_gpu_memory_used_bytes", "GPU framebuffer memory used, from the node's last heartbeat (NVML; DCGM_FI_DEV_FB_USED, which is in MiB).", "node", "gpu", "model")
	descGPUTotal   = desc("lathe_gpu_memory_total_bytes", "GPU framebuffer memory total (NVML; DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE, in MiB there).", "node", "gpu", "model")
	descGPUTemp    = desc("lathe_gpu_temperature_celsius", "GPU temperature (NVML; DCGM_FI_DEV_GPU_TEMP).", "node", "gpu", "model")
	descGPUPower   = desc("lathe_gpu_power_watts", "GPU power draw (NVML; DCGM_FI_DEV_POWER_USAGE).", "node", "gpu", "model")
	descGPUECC     = desc("lathe_gpu_ecc_uncorrected_errors_total", "Uncorrected ECC errors the node reports for the GPU (NVML; DCGM_FI_DEV_ECC_DBE_VOL_TOTAL).", "node", "gpu", "model")
	descGPUHealthy = desc("lathe_gpu_healthy", "1 when the GPU takes new work, 0 when the worker marked it unhealthy (XID, ECC, lost; DCGM's health watches).", "node", "gpu", "model")
	descGPUHeld    = desc("lathe_gpu_allocated", "1 when a job holds the GPU, else 0.", "node", "gpu", "model")
	descGPUXID     = desc("lathe_gpu_xid_error", "1 when the worker marked the GPU unhealthy for an XID critical error (the mark holds until the worker restarts), else 0.", "node", "gpu", "model")
	descGPUSim     = desc("lathe_gpu_simulated", "1 for a simulated GPU (go-nvml mock, --gpus simulated:...), 0 for real hardware.", "node", "gpu", "model")
	descInstances  = desc("lathe_cloud_instances", "Cloud instances of live jobs not yet seen terminated, by backend and market.", "backend", "market")
	descPrice      = desc("lathe_cloud_price_dollars_per_hour", "Summed configured price of those instances, by backend.", "backend")
	descLimit      = desc("lathe_budget_limit_dollars", "Monthly budget limit of a scope (0: no limit; GET /api/v1/budgets limit_usd).", "scope", "kind")
	descSpent      = desc("lathe_budget_spent_dollars", "Settled spend of a scope this month (GET /api/v1/budgets spent_usd).", "scope", "kind")
	descReservedD  = desc("lathe_budget_reserved_dollars", "Open reservations against a scope this month (GET /api/v1/budgets reserved_usd).", "scope", "kind")
	descSweeps     = desc("lathe_sweeps_running", "Sweeps in the store's running set.")
	descFinished   = desc("lathe_jobs_finished_total", "Job endings since the store was created, by final state, reason, backend and priority: counted once by the store's script that wrote the ending (the same on every scheduler; deduplicate with max by (...)).", "state", "reason", "backend", "priority")
	descDuration   = desc("lathe_job_duration_seconds", "Run time of ended jobs (their attempts' time running, summed; 0 for a job that never ran), by backend and final state: every ending, counted by the store's script that wrote it.", "backend", "state")
	descCost       = desc("lathe_cost_dollars_total", "What jobs have cost since the store was created, by backend and team: the settled cost (the settle script's figure) plus the cost so far of jobs not settled yet (running ones accrue GPU-seconds x price).", "backend", "team")
	descRecPasses  = desc("lathe_reconciler_passes_total", "Reconciler passes this scheduler ran (as leader).")
	descRecActions = desc("lathe_reconciler_actions_total", "Reconciler actions this scheduler took: terminated (orphaned instances), cancelled (attempts ended, worker gone), failed (backend passes that could not list or read).", "action")
)

// storeCollector reads the cluster's numbers from the store at scrape
// time; docs/metrics.md counts its Redis calls.
type storeCollector struct{ s opsView }

// Describe sends every description the collector may emit.
func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descStoreUp, descScrape, descJobs, descLiveJobs, descPending,
		descOldestWait, descPastWait, descSlots, descReserved, descHBAge, descAsynq, descAsynqLat, descAsynqDone, descGPUUtil, descGPUUsed, descGPUTotal, descGPUTemp,
		descGPUPower, descGPUECC, descGPUHealthy, descGPUHeld, descGPUXID, descGPUSim, descInstances, descPrice, descLimit,
		descSpent, descReservedD, descSweeps, descFinished, descDuration, descCost, descRecPasses, descRecActions} {
		ch <- d
	}
}

// Collect emits the process's own gauges, then the store's; a store read
// that fails leaves the store's out and sets lathe_store_up 0.
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	// Must is safe here: these label values are constants of this file.
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	gauge(descLeader, b2f(s.plane.IsLeader()))
	rs := s.plane.ReconcileStats()
	ch <- prometheus.MustNewConstMetric(descRecPasses, prometheus.CounterValue, float64(rs.Passes))
	for action, v := range map[string]int64{"terminated": rs.Terminated, "cancelled": rs.Cancelled, "failed": rs.Failures} {
		ch <- prometheus.MustNewConstMetric(descRecActions, prometheus.CounterValue, float64(v), action)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.RedisTimeout)
	defer cancel()
	start := time.Now()
	var buf []prometheus.Metric
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, lv ...string) {
		// A label value from a heartbeat that is not UTF-8 (a node's or
		// GPU's name) drops that one series, logged, rather than the scrape.
		m, err := prometheus.NewConstMetric(d, t, v, lv...)
		if err != nil {
			s.log.Warn("metrics: series dropped", slog.String("desc", d.String()), slog.Any("labels", lv), slog.Any("err", err))
			return
		}
		buf = append(buf, m)
	}
	put := func(m prometheus.Metric) { buf = append(buf, m) }
	if err := c.read(ctx, emit, put); err != nil {
		s.log.Warn("metrics: store read", slog.Any("err", err))
		gauge(descStoreUp, 0)
		gauge(descScrape, time.Since(start).Seconds())
		return
	}
	for _, m := range buf {
		ch <- m
	}
	gauge(descStoreUp, 1)
	gauge(descScrape, time.Since(start).Seconds())
}

// emitter adds one metric to a scrape.
type emitter func(d *prometheus.Desc, t prometheus.ValueType, v float64, lv ...string)

// read reads the store once for a scrape and emits what it read.
func (c *storeCollector) read(ctx context.Context, emit emitter, put func(prometheus.Metric)) error {
	s := c.s
	counts, err := s.store.CountByState(ctx)
	if err != nil {
		return err
	}
	for _, st := range jobtype.States {
		emit(descJobs, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	pending, err := s.store.PendingCount(ctx)
	if err != nil {
		return err
	}
	emit(descPending, prometheus.GaugeValue, float64(pending))
	if err := c.readLive(ctx, counts, emit); err != nil {
		return err
	}
	nodes, err := s.store.Nodes(ctx)
	if err != nil {
		return err
	}
	if err := c.readNodes(nodes, emit); err != nil {
		return err
	}
	limits, kinds, scopes := s.budgetScopes()
	spends, err := s.store.Spends(ctx, jobstore.Month(time.Now()), scopes)
	if err != nil {
		return err
	}
	for _, sc := range scopes {
		emit(descLimit, prometheus.GaugeValue, limits[sc], sc, kinds[sc])
		emit(descSpent, prometheus.GaugeValue, spends[sc].SpentUSD, sc, kinds[sc])
		emit(descReservedD, prometheus.GaugeValue, spends[sc].ReservedUSD, sc, kinds[sc])
	}
	sweeps, err := s.store.RunningSweeps(ctx)
	if err != nil {
		return err
	}
	emit(descSweeps, prometheus.GaugeValue, float64(len(sweeps)))
	return c.readEndings(ctx, emit, put)
}

// endedStates are the final states, each with a duration series from the
// first scrape.
var endedStates = []jobtype.State{jobtype.StateSucceeded, jobtype.StateFailed, jobtype.StateCancelled, jobtype.StateStopped}

// readEndings emits the store's endings tally (lathe_jobs_finished_total,
// lathe_job_duration_seconds) and the cost totals: settled, plus what the
// jobs not settled yet have cost so far (jobstore.Accruing, priced by the
// routing config in force the way the settler prices them).
func (c *storeCollector) readEndings(ctx context.Context, emit emitter, put func(prometheus.Metric)) error {
	st, err := c.s.store.EndStats(ctx)
	if err != nil {
		return err
	}
	for k, n := range st.Finished {
		emit(descFinished, prometheus.CounterValue, float64(n), k.State, k.Reason, k.Backend, k.Priority)
	}
	// Every configured backend's duration series exist at 0 from the start.
	cfg := c.s.plane.Routing().Config
	durs := st.Durations
	for _, b := range cfg.Backends {
		for _, es := range endedStates {
			k := jobstore.DurationKey{Backend: b.Name, State: string(es)}
			if _, ok := durs[k]; !ok {
				durs[k] = jobstore.DurationCounts{Buckets: make([]uint64, len(jobstore.DurationBuckets))}
			}
		}
	}
	for k, d := range durs {
		buckets := make(map[float64]uint64, len(jobstore.DurationBuckets))
		var cum uint64
		for i, le := range jobstore.DurationBuckets {
			cum += d.Buckets[i]
			buckets[le] = cum
		}
		m, err := prometheus.NewConstHistogram(descDuration, d.Count(), d.Sum.Seconds(), buckets, k.Backend, k.State)
		if err != nil {
			c.s.log.Warn("metrics: series dropped", slog.String("metric", "lathe_job_duration_seconds"), slog.Any("labels", k), slog.Any("err", err))
			continue
		}
		put(m)
	}
	jobs, err := c.s.store.Accruing(ctx)
	if err != nil {
		return err
	}
	cost := st.CostUSD
	now := time.Now()
	for _, j := range jobs {
		usd, _ := policy.JobUsageAt(cfg, j, now)
		if d := usd - j.SettledCostUSD; d > 0 {
			backend := j.Backend
			if backend == "" && j.Route != nil {
				backend = j.Route.Backend
			}
			cost[jobstore.CostKey{Backend: backend, Team: j.Team}] += d
		}
	}
	for k, usd := range cost {
		emit(descCost, prometheus.CounterValue, usd, k.Backend, k.Team)
	}
	return nil
}

// liveKey is one lathe_jobs_live series.
type liveKey struct{ state, backend, priority string }

// instKey is one lathe_cloud_instances series.
type instKey struct{ backend, market string }

// readLive reads the jobs of every live state (up to activeScan each, in
// one pipeline after the id reads) and emits their breakdown, the oldest
// waits and the cloud instances. What it needs of each job is its tally
// (jobstore.GetTallies: eleven small fields, no JSON decoded).
func (c *storeCollector) readLive(ctx context.Context, counts map[jobtype.State]int64, emit emitter) error {
	var ids []string
	for _, st := range liveStates {
		if counts[st] == 0 {
			continue
		}
		got, err := c.s.store.IDsInState(ctx, st, activeScan)
		if err != nil {
			return err
		}
		ids = append(ids, got...)
	}
	jobs, err := c.s.store.GetTallies(ctx, ids)
	if err != nil {
		return err
	}
	now := time.Now()
	live := map[liveKey]int{}
	oldest := map[string]time.Time{}
	past := map[string]int{}
	insts := map[instKey]int{}
	price := map[string]float64{}
	for _, j := range jobs {
		if j.State.Terminal() {
			continue // ended between the reads (one deleted is left out)
		}
		backend := j.Backend
		if backend == "" {
			backend = j.RouteBackend
		}
		prio := string(j.Priority)
		if prio == "" {
			prio = string(jobspec.PriorityNormal) // a spec that names none
		}
		live[liveKey{string(j.State), backend, prio}]++
		if j.State == jobtype.StateQueued {
			if t, ok := oldest[prio]; !ok || j.CreatedAt.Before(t) {
				oldest[prio] = j.CreatedAt
			}
			if j.MaxWait > 0 && now.Sub(j.CreatedAt) > j.MaxWait {
				past[prio]++
			}
		}
		if in := j.Instance; in != nil && in.TerminatedAt == nil {
			insts[instKey{in.Backend, in.Market}]++
			price[in.Backend] += in.USDPerHour
		}
	}
	prios := c.atZero(live, insts, price)
	for k, n := range live {
		emit(descLiveJobs, prometheus.GaugeValue, float64(n), k.state, k.backend, k.priority)
	}
	for _, p := range prios {
		wait := 0.0
		if t, ok := oldest[p]; ok {
			wait = max(0, now.Sub(t).Seconds())
		}
		emit(descOldestWait, prometheus.GaugeValue, wait, p)
		emit(descPastWait, prometheus.GaugeValue, float64(past[p]), p)
	}
	for k, n := range insts {
		emit(descInstances, prometheus.GaugeValue, float64(n), k.backend, k.market)
	}
	for b, p := range price {
		emit(descPrice, prometheus.GaugeValue, p, b)
	}
	return nil
}

// atZero adds the series readLive emits at 0 when idle (a panel shows 0,
// not "No data"): every live state × configured backend × priority, every
// cloud backend's instances and price; and returns the priorities, whose
// oldest waits are emitted for each.
func (c *storeCollector) atZero(live map[liveKey]int, insts map[instKey]int, price map[string]float64) []string {
	prios := []string{string(jobspec.PriorityUrgent), string(jobspec.PriorityNormal), string(jobspec.PriorityBatch)}
	for _, b := range c.s.plane.Routing().Config.Backends {
		for _, st := range liveStates {
			for _, p := range prios {
				live[liveKey{string(st), b.Name, p}] += 0
			}
		}
		if b.Kind != routecfg.KindLocal {
			for _, m := range []string{"spot", "on-demand"} {
				insts[instKey{b.Name, m}] += 0
			}
			price[b.Name] += 0
		}
	}
	return prios
}

// readNodes emits every live node's slots, asynq queue and GPUs.
func (c *storeCollector) readNodes(nodes []jobstore.NodeStatus, emit emitter) error {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = jobtype.NodeQueue(n.Name)
	}
	infos, err := c.s.asynqQueues(names)
	if err != nil {
		return err
	}
	now := time.Now()
	for i, n := range nodes {
		emit(descSlots, prometheus.GaugeValue, float64(n.Slots), n.Name)
		emit(descReserved, prometheus.GaugeValue, float64(n.CPUReserved), n.Name)
		emit(descHBAge, prometheus.GaugeValue, max(0, now.Sub(n.SeenAt).Seconds()), n.Name)
		q := names[i]
		var qi asynq.QueueInfo
		if infos[i] != nil {
			qi = *infos[i]
		}
		for st, v := range map[string]int{"pending": qi.Pending, "active": qi.Active, "scheduled": qi.Scheduled,
			"retry": qi.Retry, "archived": qi.Archived, "completed": qi.Completed} {
			emit(descAsynq, prometheus.GaugeValue, float64(v), q, st)
		}
		emit(descAsynqLat, prometheus.GaugeValue, qi.Latency.Seconds(), q)
		emit(descAsynqDone, prometheus.CounterValue, float64(qi.ProcessedTotal), q)
	}
	for _, g := range gpuRows(nodes) {
		lv := []string{g.Node, strconv.Itoa(g.Index), g.Name}
		const mib = 1 << 20
		emit(descGPUUtil, prometheus.GaugeValue, float64(g.UtilizationPct)/100, lv...)
		emit(descGPUUsed, prometheus.GaugeValue, float64(g.MemoryUsedMB)*mib, lv...)
		emit(descGPUTotal, prometheus.GaugeValue, float64(g.MemoryTotalMB)*mib, lv...)
		emit(descGPUTemp, prometheus.GaugeValue, float64(g.TemperatureC), lv...)
		emit(descGPUPower, prometheus.GaugeValue, g.PowerW, lv...)
		emit(descGPUECC, prometheus.CounterValue, float64(g.ECCUncorrected), lv...)
		emit(descGPUHealthy, prometheus.GaugeValue, b2f(g.Healthy), lv...)
		emit(descGPUHeld, prometheus.GaugeValue, b2f(g.JobID != ""), lv...)
		emit(descGPUXID, prometheus.GaugeValue, b2f(!g.Healthy && strings.HasPrefix(strings.ToLower(g.Unhealthy), "xid")), lv...)
		emit(descGPUSim, prometheus.GaugeValue, b2f(g.Simulated), lv...)
	}
	return nil
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
