package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/simplot"
	"github.com/lathe-ml/lathe/internal/trace"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
	"github.com/lathe-ml/lathe/scheduler/sim"
)

// simFlags are lathe simulate's flags.
type simFlags struct {
	trace, config, owned, residencyMix, priorityMix, estimates, plot, gpuModel string
	maxWait, cloudStartup, checkpointEvery                                     time.Duration
	priceRatio, gpuMemGB, spotRate, arrivals, datasetGB, stagingMBps           float64
	seed                                                                       uint64
	nodeGPUs, bootstrap                                                        int
	reference, gangs, progress                                                 bool
}

func (a *app) simulateCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "simulate --trace FILE --config lathe.yaml",
		Short: "Replay a job trace through Lathe's routing and placement: own more GPUs, or rent?",
		Long: `lathe simulate replays a trace (CSV: submit_s,duration_s,gpus; lathe export jobs writes
one from your own history) in virtual time through the scheduler's own routing and placement
functions, over an owned pool of --owned GPUs and the cloud backends of --config (lathed's
config file: its sites, backends, prices and datasets). A job's true run time is hidden from
the policy until it ends (--estimates). It needs no scheduler and no Redis.

It reports total cost (owned GPUs every hour of the horizon at the local backend's price,
plus cloud instance hours at theirs), cost per job GPU-hour, the share rented, owned
utilisation, waits (mean, p50, p95, p99; per priority), jobs refused and residency
violations (the simulator checks every start against the job's tags itself: must be 0).
With a range of --owned (32..256/32) it also runs all-cloud (0 owned) and names the
cost-optimal pool and the break-even; --plot writes an SVG of cost and waits against owned GPUs;
--bootstrap N resamples the trace N times by week and gives the optimum with its uncertainty.
--cloud-startup D makes every cloud backend take D to start a job (routing counts it as the
backend's wait); --dataset-gb X gives every job a dataset of X GB, staged into a cloud site at
--staging-mbps (else each backend's staging_mbps) after the start-up; --spot-interruptions RATE interrupts spot instances RATE times per
instance-hour, losing the work since the last checkpoint (--checkpoint-every D). Running jobs
print progress lines, and placement paces their ends from them (--progress=false: none).
See docs/simulate.md.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.simulate(cmd, f)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.trace, "trace", "", "the trace: CSV with submit_s,duration_s,gpus (other columns: see docs/simulate.md)")
	fl.StringVar(&f.config, "config", "", "lathed's config file: its routing sections (sites, backends, prices) are the simulated deployment")
	fl.StringVar(&f.owned, "owned", "64", "owned GPUs: N, or a range FROM..TO/STEP (32..256/32)")
	fl.DurationVar(&f.maxWait, "max-wait", 2*time.Hour, "every job's max_wait: how long it may wait for owned GPUs before it bursts (0: never bursts for waiting)")
	fl.Float64Var(&f.priceRatio, "price-ratio", 0, "price every cloud GPU-hour at this many owned GPU-hours (0: the config's instance prices)")
	fl.StringVar(&f.residencyMix, "residency-mix", "", "draw residency for jobs the trace gives none: onprem=0.6,eu=0.3,us=0.1 (tags joined by +: eu+de=0.2); default: the config's default_residency")
	fl.StringVar(&f.priorityMix, "priority-mix", "", "draw priority for jobs the trace gives none: urgent=0.1,normal=0.6,batch=0.3; default: all normal")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of every draw (residency, priority, hint noise)")
	fl.StringVar(&f.estimates, "estimates", "learned", "how the policy estimates run times: learned, hint:SIGMA, oracle; several, comma-separated, run side by side")
	fl.BoolVar(&f.reference, "reference", false, "also run the clairvoyant reference (conservative backfill that knows every duration)")
	fl.StringVar(&f.plot, "plot", "", "write an SVG plot of cost and waits against owned GPUs here (with a range of --owned)")
	fl.IntVar(&f.nodeGPUs, "node-gpus", 0, "GPUs per owned node; 0: one node of all owned GPUs")
	fl.BoolVar(&f.gangs, "gangs", false, "with --node-gpus: run a job of more GPUs than a node as a gang of whole nodes, placed all or nothing, as lathed's workers run them; without it such a job never fits the owned pool")
	fl.BoolVar(&f.progress, "progress", true, "running jobs print progress lines (step of total_steps, as the trainer contract's reference trainer does) and placement paces their ends from them; false: they print none, and a running job's end is estimated from run times alone")
	fl.StringVar(&f.gpuModel, "gpu-model", "NVIDIA H100 80GB HBM3", "the owned GPUs' model, as NVML names it")
	fl.Float64Var(&f.gpuMemGB, "gpu-memory-gb", 80, "the owned GPUs' memory")
	fl.Float64Var(&f.arrivals, "arrivals", 1, "arrivals ×X: every submit time divided by X (1.5: the same jobs, 1.5× as often; durations unchanged)")
	fl.IntVar(&f.bootstrap, "bootstrap", 0, "with a range of --owned: resample the trace this many times by week and report where the optimum falls in 90% of them (0: none)")
	fl.DurationVar(&f.cloudStartup, "cloud-startup", 0, "every cloud backend's startup: routing counts it as the backend's wait, and a cloud job starts (and is billed) this long after it is sent; 0: each backend's startup in --config")
	fl.Float64Var(&f.datasetGB, "dataset-gb", 0, "every job's dataset size in GB (10^9 bytes): a cloud job whose dataset lies in another site starts (and is billed) its size ÷ the staging rate later, and routing counts it; 0: jobs name no dataset")
	fl.Float64Var(&f.stagingMBps, "staging-mbps", 0, "every cloud backend's staging_mbps: how fast a dataset reaches its site, MB/s; 0: each backend's staging_mbps in --config (none: staging not timed)")
	fl.Float64Var(&f.spotRate, "spot-interruptions", 0, "spot interruptions per instance-hour on the cloud backends that buy spot (spot: prefer or only); drawn with --seed; 0: none")
	fl.DurationVar(&f.checkpointEvery, "checkpoint-every", 0, "with --spot-interruptions: a job checkpoints every this much run time, and an interruption loses the work since; 0: the trainer checkpoints on the interruption notice, losing none")
	return cmd
}

// simReport is lathe simulate -o json.
type simReport struct {
	Trace     string             `json:"trace"`
	Config    string             `json:"config"`
	Jobs      int                `json:"jobs"`
	MaxWait   string             `json:"max_wait"`
	Seed      uint64             `json:"seed"`
	OwnedUSD  float64            `json:"owned_usd_per_gpu_hour"`
	Draws     sim.DrawReport     `json:"draws"`
	Runs      []sim.Summary      `json:"runs"`
	AllCloud  map[string]float64 `json:"all_cloud_cost_usd,omitempty"`
	Optimum   map[string]int     `json:"cost_optimal_owned_gpus,omitempty"`
	BreakEven map[string]float64 `json:"break_even_owned_gpus,omitempty"`
	// BreakEvenExtrapolated: past the largest pool run (sim.BreakEven).
	BreakEvenExtrapolated map[string]bool `json:"break_even_extrapolated,omitempty"`
	// OptimumInterval is, per estimates label, where the cost-optimal
	// pool fell in 90% of Bootstrap resamples of the trace by week.
	OptimumInterval map[string][2]int `json:"cost_optimal_owned_gpus_90pct,omitempty"`
	Bootstrap       int               `json:"bootstrap_resamples,omitempty"`
	// CloudStartup, SpotInterruptions and CheckpointEvery are the
	// what-ifs of start-up and spot interruptions, when given.
	CloudStartup string `json:"cloud_startup,omitempty"`
	// DatasetGB and StagingMBps are the what-if of data staging, when given.
	DatasetGB         float64 `json:"dataset_gb,omitempty"`
	StagingMBps       float64 `json:"staging_mbps,omitempty"`
	SpotInterruptions float64 `json:"spot_interruptions_per_instance_hour,omitempty"`
	CheckpointEvery   string  `json:"checkpoint_every,omitempty"`
	// Warnings are what makes the figures less than an answer: a config
	// with no cloud backend or no prices (said before the run too), jobs
	// refused, an all-cloud run that could not do the same work.
	Warnings []string `json:"warnings,omitempty"`
	Elapsed  string   `json:"elapsed"`
}

// configWarnings says, before a run, what in cfg makes its figures less
// than an answer to "own or rent?": no cloud backend (nothing can be
// rented: jobs the owned pool cannot take wait for it, and renting
// everything is no alternative), or no price on any backend (every cost
// is $0).
func configWarnings(cfg routecfg.Config) []string {
	var out []string
	cloud, priced := false, sim.OwnedUSDPerGPUHour(cfg) > 0
	for _, b := range cfg.Backends {
		if b.Kind == routecfg.KindLocal {
			continue
		}
		cloud = true
		for _, t := range b.InstanceTypes {
			priced = priced || t.OnDemandUSDPerHour > 0 || t.SpotUSDPerHour > 0
		}
	}
	if !cloud {
		out = append(out, "the config has no cloud backend: nothing can be rented, jobs the owned pool cannot take wait for it, and renting everything is no alternative")
	}
	if !priced {
		out = append(out, "no backend of the config has a price (price: {usd_per_gpu_hour: …} on the local backend, instance prices on a cloud one): every cost is $0")
	}
	return out
}

func (a *app) simulate(cmd *cobra.Command, f simFlags) error {
	start := time.Now()
	in, err := parseSimFlags(f)
	if err != nil {
		return err
	}
	dc, err := a.readDaemon(f.config)
	if err != nil {
		return err
	}
	cfg := dc.Routing
	if f.priceRatio != 0 {
		if cfg, err = sim.WithCloudPriceRatio(cfg, f.priceRatio); err != nil {
			return usageErrorf("%w", err)
		}
	}
	jobs, drawn, err := readSimTrace(f.trace, in.draws)
	if err != nil {
		return err
	}
	jobs = sim.ScaleArrivals(jobs, f.arrivals)
	if err := checkSpotFlags(cfg, f); err != nil {
		return err
	}
	warnings := configWarnings(cfg)
	if w := stagingWarning(cfg, f); w != "" {
		warnings = append(warnings, w)
	}
	for _, w := range warnings {
		fmt.Fprintf(a.stderr, "lathe simulate: WARNING: %s\n", w)
	}
	setup := sim.Setup{Config: cfg, NodeGPUs: f.nodeGPUs, Gangs: f.gangs, NoProgress: !f.progress, GPUName: f.gpuModel,
		GPUMemoryMB: uint64(f.gpuMemGB * 1024), MaxWait: f.maxWait, CloudStartup: f.cloudStartup,
		DatasetBytes: int64(math.Round(f.datasetGB * 1e9)), StagingMBps: f.stagingMBps,
		SpotInterruptions: f.spotRate, CheckpointEvery: f.checkpointEvery, Seed: f.seed}
	runs, allCloudRun := simRuns(jobs, in, f)
	sums, err := runSims(cmd.Context(), setup, runs, simProgress(a.stderr, start, len(runs)))
	if err != nil {
		return err
	}
	rep := simReport{Trace: filepath.Base(f.trace), Config: filepath.Base(f.config), Jobs: len(jobs),
		MaxWait: f.maxWait.String(), Seed: f.seed, OwnedUSD: sim.OwnedUSDPerGPUHour(cfg), Draws: drawn}
	rep.reality(f)
	rep.Runs = append(rep.Runs, sums...)
	groups, labels, allCloud := groupRuns(sums, allCloudRun)
	rep.Warnings = append(warnings, refusedWarnings(sums)...)
	if len(in.sizes) > 1 {
		rep.compare(groups, labels, allCloud, allCloudRefused(sums, allCloudRun))
		if f.bootstrap > 0 {
			if err := rep.bootstrap(cmd.Context(), setup, jobs, in, f, labels); err != nil {
				return err
			}
		}
	}
	rep.Elapsed = time.Since(start).Round(time.Millisecond).String()
	if f.plot != "" {
		if err := writePlot(f.plot, rep, groups, labels, f); err != nil {
			return err
		}
	}
	if a.output == outJSON {
		return writeJSON(a.stdout, rep)
	}
	return writeSimTable(a.stdout, rep, labels, groups, f)
}

// simProgressAfter is how long `lathe simulate` runs before it writes
// a progress line per run ended (simProgress); a variable for the tests.
var simProgressAfter = 2 * time.Second

// simProgress writes a line to w as each of total runs ends, once
// simProgressAfter has passed since start, so that a long sweep shows
// it is alive and how far it got.
func simProgress(w io.Writer, start time.Time, total int) func(int, sim.Summary) {
	n := 0
	return func(_ int, s sim.Summary) {
		n++
		if el := time.Since(start); el >= simProgressAfter {
			fmt.Fprintf(w, "lathe simulate: %d of %d runs done (last: %d owned GPUs, %s) after %s\n",
				n, total, s.Owned, s.Estimates, el.Round(100*time.Millisecond))
		}
	}
}

// runSims runs the simulations, calling done (when not nil) as each ends.
// Its error is a failure when ctx ended (Ctrl-C), else a usage error.
func runSims(ctx context.Context, setup sim.Setup, runs []sim.Run, done func(int, sim.Summary)) ([]sim.Summary, error) {
	sums, err := sim.RunAllNotify(ctx, setup, runs, done)
	if err != nil {
		if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
			return nil, failedErrorf("%w", err)
		}
		return nil, usageErrorf("%w", err)
	}
	return sums, nil
}

// simInputs are the parts of simFlags that need parsing: the owned pool
// sizes, the run-time estimators and the draws for what the trace leaves out.
type simInputs struct {
	sizes []int
	ests  []sim.Estimator
	draws sim.Draws
}

// parseSimFlags checks lathe simulate's flags and parses those that need it;
// every error it returns is a usage error.
func parseSimFlags(f simFlags) (simInputs, error) {
	var in simInputs
	if f.trace == "" || f.config == "" {
		return in, usageErrorf("lathe simulate needs --trace FILE and --config FILE")
	}
	var err error
	if in.sizes, err = parseOwned(f.owned); err != nil {
		return in, usageErrorf("%w", err)
	}
	for s := range strings.SplitSeq(f.estimates, ",") {
		e, err := sim.ParseEstimator(s)
		if err != nil {
			return in, usageErrorf("%w", err)
		}
		in.ests = append(in.ests, e)
	}
	if err := checkSimRanges(f); err != nil {
		return in, err
	}
	in.draws = sim.Draws{Seed: f.seed}
	if f.residencyMix != "" {
		if in.draws.Residency, err = sim.ParseMix("--residency-mix", f.residencyMix, sim.ValidResidency); err != nil {
			return in, usageErrorf("%w", err)
		}
	}
	if f.priorityMix != "" {
		if in.draws.Priority, err = sim.ParseMix("--priority-mix", f.priorityMix, sim.ValidPriority); err != nil {
			return in, usageErrorf("%w", err)
		}
	}
	return in, nil
}

// checkSimRanges rejects numeric flags out of their range.
func checkSimRanges(f simFlags) error {
	if f.maxWait < 0 {
		return usageErrorf("--max-wait %s: want 0 or more", f.maxWait)
	}
	if f.nodeGPUs < 0 || f.nodeGPUs > 4096 {
		return usageErrorf("--node-gpus %d: want 0 (one node) to 4096", f.nodeGPUs)
	}
	if f.gangs && f.nodeGPUs == 0 {
		return usageErrorf("--gangs needs --node-gpus: in one node of every owned GPU no job spans nodes")
	}
	if !(f.gpuMemGB > 0) || f.gpuMemGB > 1e6 {
		return usageErrorf("--gpu-memory-gb %v: want a number above 0", f.gpuMemGB)
	}
	if f.cloudStartup < 0 || f.cloudStartup > routecfg.MaxStartup {
		return usageErrorf("--cloud-startup %s: want 0 to %s", f.cloudStartup, routecfg.MaxStartup)
	}
	if !(f.datasetGB >= 0) || f.datasetGB > 1e6 {
		return usageErrorf("--dataset-gb %v: want a size from 0 to 1000000 GB", f.datasetGB)
	}
	if !(f.stagingMBps >= 0) || f.stagingMBps > routecfg.MaxStagingMBps {
		return usageErrorf("--staging-mbps %v: want 0 (each backend's staging_mbps) to %v MB/s", f.stagingMBps, routecfg.MaxStagingMBps)
	}
	if f.stagingMBps > 0 && f.datasetGB == 0 {
		return usageErrorf("--staging-mbps %v without --dataset-gb: the trace's jobs name no dataset, so nothing is staged", f.stagingMBps)
	}
	if !(f.spotRate >= 0) || f.spotRate > sim.MaxSpotInterruptions {
		return usageErrorf("--spot-interruptions %v: want a rate per instance-hour from 0 to %v", f.spotRate, sim.MaxSpotInterruptions)
	}
	if f.checkpointEvery < 0 {
		return usageErrorf("--checkpoint-every %s: want 0 (on the interruption notice) or more", f.checkpointEvery)
	}
	if !(f.arrivals >= 0.01) || f.arrivals > 100 {
		return usageErrorf("--arrivals %v: want a factor from 0.01 to 100 (1: the trace's own rate)", f.arrivals)
	}
	if f.bootstrap < 0 || f.bootstrap > 1000 {
		return usageErrorf("--bootstrap %d: want 0 (none) to 1000 resamples", f.bootstrap)
	}
	return nil
}

// readSimTrace reads the trace at path (at most 1 GiB) into jobs, drawing
// what the trace leaves out.
func readSimTrace(path string, draws sim.Draws) ([]sim.Job, sim.DrawReport, error) {
	tf, err := os.Open(path)
	if err != nil {
		return nil, sim.DrawReport{}, usageErrorf("--trace: %w", err)
	}
	tj, err := trace.Read(io.LimitReader(tf, 1<<30))
	tf.Close()
	if err != nil {
		return nil, sim.DrawReport{}, usageErrorf("--trace %s: %w", path, err)
	}
	jobs, drawn := sim.JobsFromTrace(tj, draws)
	return jobs, drawn, nil
}

// simRuns lists the runs to simulate: every pool size under every estimator,
// then the reference runs if asked for. A range of pool sizes that does not
// start at 0 gets an all-cloud run first; allCloudRun says so.
func simRuns(jobs []sim.Job, in simInputs, f simFlags) (runs []sim.Run, allCloudRun bool) {
	add := func(owned int, label string, js []sim.Job, ref bool) {
		runs = append(runs, sim.Run{Owned: owned, Estimates: label, Jobs: js, Reference: ref})
	}
	allCloudRun = len(in.sizes) > 1 && in.sizes[0] > 0
	if allCloudRun {
		// All-cloud: no owned GPU, so no estimate matters; run once.
		add(0, "all-cloud", jobs, false)
	}
	for _, e := range in.ests {
		js := sim.WithEstimates(jobs, e, f.seed)
		for _, n := range in.sizes {
			add(n, e.String(), js, false)
		}
	}
	if f.reference {
		for _, n := range in.sizes {
			add(n, "reference", jobs, true)
		}
	}
	return runs, allCloudRun
}

// groupRuns groups the summaries by their estimates label, labels in the order
// first seen, leaving out the all-cloud run (the first, if allCloudRun). The
// all-cloud cost is that run's, or that of the last run with 0 owned GPUs.
func groupRuns(sums []sim.Summary, allCloudRun bool) (groups map[string][]sim.Summary, labels []string, allCloud float64) {
	groups = map[string][]sim.Summary{}
	for i, s := range sums {
		if allCloudRun && i == 0 {
			allCloud = s.TotalCostUSD
			continue
		}
		if s.Owned == 0 {
			allCloud = s.TotalCostUSD // a range from 0: its runs are all-cloud
		}
		if _, ok := groups[s.Estimates]; !ok {
			labels = append(labels, s.Estimates)
		}
		groups[s.Estimates] = append(groups[s.Estimates], s)
	}
	return groups, labels, allCloud
}

// compare fills in, for each label of a sweep of pool sizes, the all-cloud
// cost, the cost-optimal pool and the break-even. Renting everything is
// always a candidate (0 owned GPUs), unless the all-cloud run refused
// jobs that a pool run ran (allCloudRefused above a run's refused: it did
// less work, so its cost is no alternative); a run that refused more jobs
// than another of the candidates is none either.
func (rep *simReport) compare(groups map[string][]sim.Summary, labels []string, allCloud float64, allCloudRefused int) {
	rep.AllCloud = map[string]float64{}
	for _, l := range labels {
		rep.AllCloud[l] = allCloud
	}
	rep.Optimum, rep.BreakEven, rep.BreakEvenExtrapolated = map[string]int{}, map[string]float64{}, map[string]bool{}
	for _, l := range labels {
		g := groups[l]
		best := optimum(g)
		rep.Optimum[l] = g[best].Owned
		if allCloudRefused <= g[best].Refused && allCloud < g[best].TotalCostUSD {
			rep.Optimum[l] = 0 // renting everything is cheaper than any pool run
		}
		rep.BreakEven[l], rep.BreakEvenExtrapolated[l] = sim.BreakEven(g, rep.AllCloud[l])
	}
}

// bootstrap fills OptimumInterval for the first label that is not the
// reference: the trace resampled f.bootstrap times by week
// (sim.ResampleWeeks), each resample swept over the same pool sizes and
// all-cloud under that label's estimates, its optimum taken as compare
// takes it.
func (rep *simReport) bootstrap(ctx context.Context, setup sim.Setup, jobs []sim.Job, in simInputs, f simFlags, labels []string) error {
	var est sim.Estimator
	label := ""
	for _, e := range in.ests {
		if slices.Contains(labels, e.String()) {
			est, label = e, e.String()
			break
		}
	}
	if label == "" {
		return nil
	}
	var runs []sim.Run
	for b := range f.bootstrap {
		rj := sim.ResampleWeeks(jobs, f.seed, b)
		runs = append(runs, sim.Run{Owned: 0, Estimates: "all-cloud", Jobs: rj})
		ej := sim.WithEstimates(rj, est, f.seed)
		for _, n := range in.sizes {
			runs = append(runs, sim.Run{Owned: n, Estimates: label, Jobs: ej})
		}
	}
	sums, err := runSims(ctx, setup, runs, nil)
	if err != nil {
		return err
	}
	per := len(in.sizes) + 1
	optima := make([]int, 0, f.bootstrap)
	for b := range f.bootstrap {
		ac, g := sums[b*per], sums[b*per+1:(b+1)*per]
		best := optimum(g)
		opt := g[best].Owned
		if ac.Refused <= g[best].Refused && ac.TotalCostUSD < g[best].TotalCostUSD {
			opt = 0
		}
		optima = append(optima, opt)
	}
	lo, hi := sim.OptimumInterval(optima, 0.9)
	rep.OptimumInterval, rep.Bootstrap = map[string][2]int{label: {lo, hi}}, f.bootstrap
	return nil
}

// optimum is the index of the cheapest run of g among those that refused
// the fewest jobs (a run that left more work out is not cheaper for it).
func optimum(g []sim.Summary) int {
	least := -1
	for _, s := range g {
		if least < 0 || s.Refused < least {
			least = s.Refused
		}
	}
	best := -1
	for i, s := range g {
		if s.Refused == least && (best < 0 || s.TotalCostUSD < g[best].TotalCostUSD) {
			best = i
		}
	}
	return best
}

// allCloudRefused is how many jobs the all-cloud run refused (the first
// run when allCloudRun, else a run with 0 owned GPUs; 0 when none).
func allCloudRefused(sums []sim.Summary, allCloudRun bool) int {
	for i, s := range sums {
		if (allCloudRun && i == 0) || s.Owned == 0 {
			return s.Refused
		}
	}
	return 0
}

// refusedWarnings says how many jobs each run refused, when any did: they
// are in no cost and no wait of that run.
func refusedWarnings(sums []sim.Summary) []string {
	var out []string
	for _, s := range sums {
		if s.Refused > 0 {
			label := fmt.Sprintf("%d owned, %s", s.Owned, s.Estimates)
			out = append(out, fmt.Sprintf("%s: %d jobs refused (no backend of the config may run them) are in none of its costs or waits", label, s.Refused))
		}
	}
	return out
}

// parseOwned reads N or FROM..TO/STEP.
func parseOwned(s string) ([]int, error) {
	bad := func(why string) error { return fmt.Errorf("--owned %q: %s", s, why) }
	num := func(v string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > 1<<16 {
			return 0, bad("want a whole number of GPUs from 0 to 65536, or FROM..TO/STEP")
		}
		return n, nil
	}
	from, rest, isRange := strings.Cut(s, "..")
	if !isRange {
		n, err := num(s)
		if err != nil {
			return nil, err
		}
		return []int{n}, nil
	}
	to, step, hasStep := strings.Cut(rest, "/")
	a, err := num(from)
	if err != nil {
		return nil, err
	}
	b, err := num(to)
	if err != nil {
		return nil, err
	}
	st := 1
	if hasStep {
		if st, err = num(step); err != nil || st == 0 {
			return nil, bad("STEP must be at least 1")
		}
	}
	if b < a {
		return nil, bad("TO is below FROM")
	}
	if (b-a)/st+1 > 64 {
		return nil, bad("more than 64 pool sizes")
	}
	var out []int
	for n := a; n <= b; n += st {
		out = append(out, n)
	}
	return out, nil
}

func hours(s float64) string {
	switch {
	case s < 60:
		return strconv.FormatFloat(s, 'f', 0, 64) + "s"
	case s < 3600:
		return strconv.FormatFloat(s/60, 'f', 1, 64) + "m"
	}
	return strconv.FormatFloat(s/3600, 'f', 2, 64) + "h"
}

func dollars(x float64) string {
	s := strconv.FormatFloat(math.Round(x), 'f', 0, 64)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && c != '-' && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return "$" + b.String()
}

func writeSimTable(w io.Writer, rep simReport, labels []string, groups map[string][]sim.Summary, f simFlags) error {
	writeSimHeader(w, rep)
	if err := writeSimRuns(w, rep.Runs); err != nil {
		return err
	}
	multiPrio := len(rep.Draws.Priority) > 1 || rep.Draws.FromTrace["priority"] > 0
	if multiPrio {
		writePriorityWaits(w, rep.Runs)
	}
	writeViolations(w, rep.Runs)
	writeInterruptions(w, rep)
	if len(rep.Warnings) > 0 {
		fmt.Fprintln(w)
		for _, warn := range rep.Warnings {
			fmt.Fprintf(w, "WARNING: %s\n", warn)
		}
	}
	if len(rep.Optimum) > 0 {
		fmt.Fprintln(w)
		for _, l := range labels {
			writeOptimum(w, rep, l, groups[l])
		}
	}
	if f.plot != "" {
		fmt.Fprintf(w, "Plot: %s\n", termSafe(f.plot))
	}
	fmt.Fprintf(w, "Simulated in %s.\n", rep.Elapsed)
	return nil
}

// writeSimHeader writes what was simulated: the trace, the config and the draws.
func writeSimHeader(w io.Writer, rep simReport) {
	fmt.Fprintf(w, "Trace %s: %d jobs; config %s; owned GPUs at $%.2f per GPU-hour, every hour; max_wait %s; seed %d\n",
		termSafe(rep.Trace), rep.Jobs, termSafe(rep.Config), rep.OwnedUSD, rep.MaxWait, rep.Seed)
	if line := rep.realityLine(); line != "" {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "Drawn: residency %s; priority %s\n", counts(rep.Draws.Residency), counts(rep.Draws.Priority))
	if len(rep.Draws.FromTrace) > 0 {
		fmt.Fprintf(w, "From the trace: %s\n", counts(rep.Draws.FromTrace))
	}
	fmt.Fprintln(w)
}

// writeSimRuns writes the table of runs, one row each.
func writeSimRuns(w io.Writer, runs []sim.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OWNED\tESTIMATES\tTOTAL\tOWNED $\tCLOUD $\t$/JOB-GPU-H\tRENTED\tOWNED UTIL\tWAIT MEAN\tP50\tP95\tP99\tCLOUD JOBS\tREFUSED\tSTUCK\tVIOLATIONS\t")
	for _, s := range runs {
		owned := strconv.Itoa(s.Owned)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%.1f%%\t%.1f%%\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t\n", owned, s.Estimates,
			dollars(s.TotalCostUSD), dollars(s.OwnedCostUSD), dollars(s.CloudCostUSD), s.CostPerJobGPUHour,
			100*s.RentedShare, 100*s.OwnedUtilisation, hours(s.Wait.MeanS), hours(s.Wait.P50S), hours(s.Wait.P95S),
			hours(s.Wait.P99S), s.CloudJobs, s.Refused, s.Stuck, len(s.Violations))
	}
	return tw.Flush()
}

// writePriorityWaits writes each run's mean and p95 wait per priority.
func writePriorityWaits(w io.Writer, runs []sim.Summary) {
	fmt.Fprintln(w, "\nWaits by priority (mean / p95):")
	for _, s := range runs {
		var parts []string
		for _, p := range []string{"urgent", "normal", "batch"} {
			if ws, ok := s.ByPriority[p]; ok {
				parts = append(parts, fmt.Sprintf("%s %d jobs %s / %s", p, ws.Jobs, hours(ws.MeanS), hours(ws.P95S)))
			}
		}
		fmt.Fprintf(w, "  %d owned, %s: %s\n", s.Owned, s.Estimates, strings.Join(parts, "; "))
	}
}

// writeViolations writes the first five residency violations of each run.
func writeViolations(w io.Writer, runs []sim.Summary) {
	for _, s := range runs {
		for i, v := range s.Violations {
			if i == 5 {
				fmt.Fprintf(w, "  … %d more\n", len(s.Violations)-5)
				break
			}
			fmt.Fprintf(w, "RESIDENCY VIOLATION (%d owned, %s): %s\n", s.Owned, s.Estimates, termSafe(v))
		}
	}
}

// writeOptimum writes the cost-optimal pool of the runs labelled l, g, and
// their break-even against all-cloud.
func writeOptimum(w io.Writer, rep simReport, l string, g []sim.Summary) {
	be := "no break-even in range"
	if x := rep.BreakEven[l]; x > 0 {
		be = fmt.Sprintf("break-even at %.0f owned GPUs (beyond it, owning costs more than renting everything)", x)
		if rep.BreakEvenExtrapolated[l] {
			be = fmt.Sprintf("break-even at about %.0f owned GPUs, extrapolated past the largest pool run: at least that many", x)
		}
	}
	best := g[optimum(g)]
	if iv, ok := rep.OptimumInterval[l]; ok {
		be += fmt.Sprintf("; the optimum %d–%d GPUs in 90%% of %d resamples of the trace by week", iv[0], iv[1], rep.Bootstrap)
	}
	refused := ""
	if best.Refused > 0 {
		refused = fmt.Sprintf("; over the jobs not refused: %d refused left out", best.Refused)
	}
	if rep.Optimum[l] == 0 && best.Owned != 0 {
		fmt.Fprintf(w, "Cost-optimal pool (%s): 0 GPUs, rent everything: all-cloud %s, below every pool run (the cheapest, %d GPUs, %s; %s%s)\n", l,
			dollars(rep.AllCloud[l]), best.Owned, dollars(best.TotalCostUSD), be, refused)
		return
	}
	fmt.Fprintf(w, "Cost-optimal pool (%s): %d GPUs, %s (all-cloud %s; %s%s)\n", l, best.Owned,
		dollars(best.TotalCostUSD), dollars(rep.AllCloud[l]), be, refused)
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", termSafe(k), m[k]))
	}
	return strings.Join(parts, ", ")
}

func writePlot(path string, rep simReport, groups map[string][]sim.Summary, labels []string, f simFlags) error {
	if len(rep.Optimum) == 0 {
		return usageErrorf("--plot needs a range of --owned (e.g. 32..256/32)")
	}
	var main string
	for _, l := range labels {
		if l != "reference" {
			main = l
			break
		}
	}
	if main == "" {
		main = labels[0]
	}
	pts := func(l string) []simplot.Point {
		var out []simplot.Point
		for _, s := range groups[l] {
			out = append(out, simplot.Point{Owned: s.Owned, CostUSD: s.TotalCostUSD, P95WaitS: s.Wait.P95S, MeanWaitS: s.Wait.MeanS})
		}
		return out
	}
	points := pts(main)
	if rep.Optimum[main] == 0 && points[0].Owned != 0 {
		// Renting everything is the optimum: its run is a point too.
		for _, s := range rep.Runs {
			if s.Owned == 0 {
				points = append([]simplot.Point{{Owned: 0, CostUSD: s.TotalCostUSD, P95WaitS: s.Wait.P95S, MeanWaitS: s.Wait.MeanS}}, points...)
				break
			}
		}
	}
	in := simplot.Input{
		Title: fmt.Sprintf("%s: owned $%.2f/GPU-h, max_wait %s, estimates %s%s", rep.Trace, rep.OwnedUSD, rep.MaxWait, main,
			map[bool]string{true: "; break-even extrapolated"}[rep.BreakEvenExtrapolated[main]]),
		Points: points, AllCloudCostUSD: rep.AllCloud[main], BreakEvenOwned: rep.BreakEven[main], OptimalOwned: rep.Optimum[main],
	}
	if iv, ok := rep.OptimumInterval[main]; ok {
		in.OptimalRange, in.OptimalRangeLabel = iv, fmt.Sprintf("optimum in 90%% of %d resamples", rep.Bootstrap)
	}
	if _, ok := groups["reference"]; ok && main != "reference" {
		in.Reference = pts("reference")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".lathe-plot-*.svg")
	if err != nil {
		return failedErrorf("--plot: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := simplot.SVG(tmp, in); err != nil {
		tmp.Close()
		return failedErrorf("--plot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return failedErrorf("--plot: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return failedErrorf("--plot: %w", err)
	}
	return nil
}
