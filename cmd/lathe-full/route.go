package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/cost"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/routing"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// offlineNote is said by every offline explanation: lathe cannot see the
// local pool's GPUs, so it assumes the job fits there.
const offlineNote = "offline: local GPU capacity assumed to fit"

// routeFlags are the flags `lathe route --explain` and `lathe cost FILE`
// share.
type routeFlags struct {
	// config is lathed's config file: decide offline with its routing
	// sections instead of asking the scheduler.
	config string
	// waits and spents are what-ifs as written: BACKEND=DURATION and
	// BACKEND=USD.
	waits, spents []string
}

// addRouteFlags adds --config, --assume-wait and --assume-spent to cmd.
func addRouteFlags(cmd *cobra.Command) *routeFlags {
	rf := &routeFlags{}
	f := cmd.Flags()
	f.StringVar(&rf.config, "config", "", "decide offline, with the routing sections of this lathed config file (no scheduler needed)")
	f.StringArrayVar(&rf.waits, "assume-wait", nil, "what-if: a local backend's queue wait, BACKEND=DURATION (like local=3h); repeatable")
	f.StringArrayVar(&rf.spents, "assume-spent", nil, "what-if: a backend's spend this month, BACKEND=USD (like aws-eu=5000); repeatable")
	return rf
}

func (a *app) routeCmd() *cobra.Command {
	var explain bool
	var rf *routeFlags
	cmd := &cobra.Command{
		Use:   "route --explain FILE",
		Short: "Explain where a job spec would run and why, without submitting it",
		Long: `lathe route --explain FILE shows where the scheduler would route the job
spec in FILE now, and why: the choice, the reasons, every backend with
whether it is feasible, its estimated wait and cost and why it was refused,
and the data that would be staged between sites. Nothing is submitted,
stored or recorded. The spec is read and checked as 'lathe submit' does.

--assume-wait BACKEND=DURATION and --assume-spent BACKEND=USD state a
what-if in place of the scheduler's own figure (a local pool's queue wait;
a backend's spend this month), for example to see where a job would go
when the local queue is 3h deep.

With --config FILE (lathed's config file), the decision is made here,
offline, with the routing sections of that file and no scheduler: the
local pool's GPUs are then unknown and assumed to fit the job, its queue is
taken as empty and every backend's spend as $0, unless --assume-wait and
--assume-spent say otherwise.

Exit codes: 0 a backend is chosen (also when the job would wait for the
local pool); 1 refused: no backend may run the job as written; 2 usage
error, invalid spec, config or what-if.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if !explain {
				return usageErrorf("%s only explains for now: lathe route --explain FILE", cmd.CommandPath())
			}
			if len(args) != 1 {
				return usageErrorf("%s --explain takes one job spec FILE, got %d", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.routeExplain(cmd.Context(), cmd.InOrStdin(), args[0], rf, false)
		}),
	}
	cmd.Flags().BoolVar(&explain, "explain", false, "show the routing decision for FILE and why (required)")
	rf = addRouteFlags(cmd)
	return cmd
}

// explanation is what route --explain and cost print with -o json: the
// routing decision, the config it was made under and, offline, what was
// assumed.
type explanation struct {
	wire.Decision
	ConfigHash string `json:"config_hash"`
	// Offline: decided here from a config file (--config), not by the
	// scheduler.
	Offline bool `json:"offline,omitempty"`
	// Notes say what an offline decision assumed.
	Notes []string `json:"notes,omitempty"`
}

// routeExplain decides where the spec in file would go (online, or offline
// with --config), prints it as a route explanation or, asCost, as costs,
// and exits 1 when the job is refused.
func (a *app) routeExplain(ctx context.Context, stdin io.Reader, file string, rf *routeFlags, asCost bool) error {
	wi, err := parseWhatIf(rf.waits, rf.spents)
	if err != nil {
		return err
	}
	spec, err := a.parseSpec(stdin, file)
	if err != nil {
		return err
	}
	var ex *explanation
	if rf.config != "" {
		ex, err = a.explainOffline(spec, rf.config, wi)
	} else {
		var e *apiclient.Explanation
		if e, err = a.client().Explain(ctx, spec.JSON(), wi); err == nil {
			ex = &explanation{Decision: e.Decision, ConfigHash: e.ConfigHash}
		}
	}
	if err != nil {
		return err
	}
	switch {
	case a.output == outJSON:
		err = writeJSON(a.stdout, ex)
	case asCost:
		err = printCost(a.stdout, ex, spec)
	default:
		err = printRoute(a.stdout, ex, spec)
	}
	if err != nil {
		return err
	}
	if ex.Refused {
		return failedErrorf("refused: no backend may run this job as written")
	}
	return nil
}

// parseWhatIf reads --assume-wait BACKEND=DURATION and --assume-spent
// BACKEND=USD values by the scheduler's own rules (routing.ParseWhatIf: a
// duration ≥ 0 like 3h or 1d, a finite USD amount ≥ 0); a bad one is a
// usage error naming the flag and the value. A backend given twice keeps
// the last value.
func parseWhatIf(waits, spents []string) (apiclient.WhatIf, error) {
	wi, fe := routing.ParseWhatIf(waits, spents)
	if len(fe) > 0 {
		flag := "--" + strings.ReplaceAll(fe[0].Field, "_", "-")
		return apiclient.WhatIf{}, usageErrorf("%s %q: %s", flag, fe[0].Value, fe[0].Message)
	}
	return apiclient.WhatIf{Wait: wi.Wait, Spent: wi.Spent}, nil
}

// explainOffline decides with the routing sections of lathed's config file
// at path, as the scheduler would, except that what only the scheduler
// knows is assumed (see offlineNote and Notes). The spec gets the daemon's
// defaults first, from the same file.
func (a *app) explainOffline(spec *jobspec.Spec, path string, wi apiclient.WhatIf) (*explanation, error) {
	dc, err := a.readDaemon(path)
	if err != nil {
		return nil, err
	}
	def, err := offlineDefaults(dc, path)
	if err != nil {
		return nil, err
	}
	cfg := dc.Routing
	spec.Normalize(jobspec.DeploymentDefaults(def)) // as the scheduler does (its Config.Defaults)
	if err := checkWhatIfBackends(cfg, path, wi); err != nil {
		return nil, err
	}
	snap, anyLocal := offlineSnapshot(a.now(), cfg, spec, wi)
	// The scheduler's explain decides on the same routing job (no id, and
	// here no team) with the same function.
	job := routing.JobFromSpec(spec, "", "", spec.JobOutputURI("<id>"))
	return &explanation{Decision: routing.Decide(job, snap).Wire(), ConfigHash: cfg.Hash(), Offline: true,
		Notes: offlineNotes(anyLocal, wi)}, nil
}

// checkWhatIfBackends says, as a usage error, when a what-if names no backend
// of the config at path, or a wait names one that is not local.
func checkWhatIfBackends(cfg routecfg.Config, path string, wi apiclient.WhatIf) error {
	for _, b := range slices.Sorted(maps.Keys(wi.Wait)) {
		be, ok := cfg.Backend(b)
		switch {
		case !ok:
			return usageErrorf("--assume-wait %s=%s: %s has no backend %q (backends: %s)", b, wi.Wait[b], path, b, backendNames(cfg))
		case be.Kind != routecfg.KindLocal:
			return usageErrorf("--assume-wait %s=%s: %s is a %s backend; only a local backend has a queue to wait in (a cloud backend's wait is its startup from the config)", b, wi.Wait[b], b, be.Kind)
		}
	}
	for _, b := range slices.Sorted(maps.Keys(wi.Spent)) {
		if _, ok := cfg.Backend(b); !ok {
			return usageErrorf("--assume-spent %s=%g: %s has no backend %q (backends: %s)", b, wi.Spent[b], path, b, backendNames(cfg))
		}
	}
	return nil
}

// offlineSnapshot is the routing snapshot an offline decision sees: the
// first local backend's pool is assumedPool(spec), every backend's spend is
// its what-if or $0, and a local wait is its what-if or none. anyLocal says
// whether cfg has a local backend.
func offlineSnapshot(now time.Time, cfg routecfg.Config, spec *jobspec.Spec, wi apiclient.WhatIf) (snap routing.Snapshot, anyLocal bool) {
	snap = routing.Snapshot{Now: now, Config: cfg, Pools: map[string]routing.Pool{},
		BackendSpend: map[string]routing.Spend{}, TeamSpend: map[string]routing.Spend{}}
	for _, b := range cfg.Backends {
		// As the scheduler: this deployment's workers form its first local
		// backend's pool (scheduler/route.go snapshotFor).
		if b.Kind == routecfg.KindLocal && !anyLocal {
			anyLocal = true
			pool := assumedPool(spec)
			if d, ok := wi.Wait[b.Name]; ok {
				pool.AssumeWait = &d
			}
			snap.Pools[b.Name] = pool
		}
		sp := routing.Spend{LimitUSD: b.BudgetUSDPerMonth}
		if v, ok := wi.Spent[b.Name]; ok {
			sp.SpentUSD = v
		}
		snap.BackendSpend[b.Name] = sp
	}
	return snap, anyLocal
}

// offlineNotes are what an offline explanation says it assumed.
func offlineNotes(anyLocal bool, wi apiclient.WhatIf) []string {
	notes := []string{offlineNote}
	if anyLocal && len(wi.Wait) == 0 {
		notes = append(notes, "offline: the local queue is taken as empty (wait 0); --assume-wait states one")
	}
	if len(wi.Spent) == 0 {
		notes = append(notes, "offline: every backend's spend this month is taken as $0; --assume-spent states one")
	}
	return append(notes, "offline: run times are the spec's expected_runtime or max_runtime; none is learned from finished jobs")
}

// readDaemon reads lathed's config file at path as lathed reads it
// (routecfg.ReadDaemon: the routing sections and the job defaults, at most
// routecfg.MaxConfigBytes); every problem is a usage error naming the file:
// the routing config's problems one per line on stderr, a file over the
// limit (or /dev/zero) with the limit.
func (a *app) readDaemon(path string) (routecfg.Daemon, error) {
	dc, err := routecfg.ReadDaemon(path)
	var ce *routecfg.ConfigError
	switch {
	case err == nil:
		return dc, nil
	case routecfg.IsReadError(err):
		return routecfg.Daemon{}, usageErrorf("--config: %w", err)
	case errors.Is(err, routecfg.ErrTooLarge):
		return routecfg.Daemon{}, usageErrorf("--config %s: over %d bytes (4 MiB, the most a config file may hold): not read further", path, routecfg.MaxConfigBytes)
	case errors.As(err, &ce):
		for _, fe := range ce.Errors {
			fmt.Fprintf(a.stderr, "error: %s\n", fe.Error())
		}
		return routecfg.Daemon{}, usageErrorf("--config %s: %d problem(s) in the routing config", path, len(ce.Errors))
	}
	return routecfg.Daemon{}, usageErrorf("--config %s: %w", path, err)
}

// assumedPool is a local pool of synthetic nodes whose GPUs match the
// job's request exactly (the first of gpu_models, or "any"; gpu_memory_gb,
// or 80 GB; as many as it asks for on each of its resources.nodes nodes):
// offline, the real inventory is unknown.
func assumedPool(spec *jobspec.Spec) routing.Pool {
	r := spec.Resources
	if r.GPUs <= 0 {
		return routing.Pool{Nodes: []routing.PoolNode{{Name: "assumed"}}}
	}
	model := "any"
	if len(r.GPUModels) > 0 {
		model = r.GPUModels[0]
	}
	mem := r.GPUMemoryGB
	if mem <= 0 {
		mem = 80
	}
	pool := routing.Pool{HealthyGPUs: r.TotalGPUs()}
	for n := range r.NodeCount() {
		name := "assumed"
		if n > 0 {
			name += "-" + strconv.Itoa(n)
		}
		pool.Nodes = append(pool.Nodes, routing.PoolNode{Name: name, GPUs: []routing.PoolGPU{{Model: model, MemoryGB: mem, Healthy: r.GPUs}}})
	}
	return pool
}

// offlineDefaults are the job defaults lathed would normalise a spec with,
// from its config file dc read at path (dc.Defaults): when the file gives
// no jobs.default_output_uri, the output folder is <data_dir>/artifacts,
// with data_dir (default routecfg.DefaultDataDir) relative to the file's
// folder. lathed resolves its default data_dir against its working folder
// instead, which the CLI cannot know; that only moves the folder within
// the same file:// site, so routing decides alike.
func offlineDefaults(dc routecfg.Daemon, path string) (jobspec.Defaults, error) {
	dir := dc.DataDir
	if dir == "" {
		dir = filepath.Join(filepath.Dir(path), routecfg.DefaultDataDir)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return jobspec.Defaults{}, usageErrorf("--config %s: %v", path, err)
	}
	return dc.Defaults(dir), nil
}

func backendNames(cfg routecfg.Config) string {
	names := make([]string, len(cfg.Backends))
	for i, b := range cfg.Backends {
		names[i] = b.Name
	}
	return strings.Join(names, ", ")
}

// choiceLine is the first line of an explanation: "→ aws-eu (site
// aws-eu-central-1)", "refused: …" or "waits for local (site …): …".
func choiceLine(ex *explanation, spec *jobspec.Spec) string {
	d := &ex.Decision
	switch {
	case d.Refused:
		return "refused: no backend may run this job as written"
	case d.Waiting:
		wait, cloud := "unknown", false
		for _, c := range d.Candidates {
			if c.Backend == d.Backend {
				wait = fmtWaitS(c.EstWaitS)
			}
			cloud = cloud || c.Feasible && c.Kind != routecfg.KindLocal
		}
		why := "no cloud backend takes it now"
		switch {
		case cloud && d.Trade != "":
			why = "waiting costs less than the cloud, time valued (see trade)"
		case cloud:
			why = "it starts there sooner than on a cloud backend (their startup)"
		}
		return fmt.Sprintf("waits for %s (site %s): estimated wait %s exceeds max_wait %s, and %s",
			d.Backend, d.Site, wait, shortDur(spec.MaxWait.D()), why)
	default:
		return fmt.Sprintf("→ %s (site %s)", d.Backend, d.Site)
	}
}

// printRoute writes an explanation: the choice, the offline notes, the
// reasons, every candidate, the staging.
func printRoute(w io.Writer, ex *explanation, spec *jobspec.Spec) error {
	d := &ex.Decision
	fmt.Fprintln(w, choiceLine(ex, spec))
	for _, n := range ex.Notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w, "\nReasons:")
	for _, r := range d.Reasons {
		fmt.Fprintf(w, "  %s\n", r)
	}
	if d.Trade != "" {
		fmt.Fprintf(w, "  trade: %s\n", d.Trade)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tSITE\tFEASIBLE\tEST.WAIT\tEST.COST\tREASON")
	for _, c := range d.Candidates {
		feasible, wait := "yes", fmtWaitS(c.EstWaitS)
		if !c.Feasible {
			feasible = "no"
			if c.EstWaitS == 0 {
				wait = "-"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Backend, c.Site, feasible, wait, fmtCost(c), orDash(c.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Staging) > 0 {
		fmt.Fprintln(w, "\nStaging:")
		for _, s := range d.Staging {
			fmt.Fprintf(w, "  %s %s: %s → %s\n", s.What, s.URI, s.FromSite, s.ToSite)
		}
	}
	if ex.ConfigHash != "" {
		fmt.Fprintf(w, "\nRouting config %s\n", ex.ConfigHash)
	}
	return nil
}

// printCost writes an explanation as costs: the choice with its estimates,
// then every candidate's run time, GPU-hours and cost, feasible ones first
// (cheapest first), then the infeasible ones with their reason.
func printCost(w io.Writer, ex *explanation, spec *jobspec.Spec) error {
	d := &ex.Decision
	line := choiceLine(ex, spec)
	if !d.Refused {
		line += fmt.Sprintf(": est. runtime %s, %s GPU-hours, %s", fmtRuntime(d.EstRuntime.Seconds()),
			fmtGPUHours(d.EstGPUHours), fmtUSD(d.EstCostUSD))
	}
	fmt.Fprintln(w, line)
	for _, n := range ex.Notes {
		fmt.Fprintln(w, n)
	}
	if d.Refused {
		for _, r := range d.Reasons {
			fmt.Fprintf(w, "  %s\n", r)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tSITE\tINSTANCE\tEST.RUNTIME\tGPU-HOURS\tEST.COST\tNOTE")
	for _, c := range byCost(d.Candidates) {
		fmt.Fprintln(tw, costRow(c, d.Backend, spec.Resources.TotalGPUs()))
	}
	return tw.Flush()
}

// byCost is a copy of cands, feasible ones first, cheapest first; otherwise
// in their order.
func byCost(cands []wire.Candidate) []wire.Candidate {
	cands = slices.Clone(cands)
	slices.SortStableFunc(cands, func(x, y wire.Candidate) int {
		switch {
		case x.Feasible != y.Feasible:
			if x.Feasible {
				return -1
			}
			return 1
		case x.Feasible && x.EstCostUSD != y.EstCostUSD:
			if x.EstCostUSD < y.EstCostUSD {
				return -1
			}
			return 1
		}
		return 0
	})
	return cands
}

// costRow is candidate c's row of lathe cost's table (tab-separated) for a
// job of gpus GPUs; chosen is the backend the decision chose.
func costRow(c wire.Candidate, chosen string, gpus int) string {
	inst := orDash(c.InstanceType)
	if c.Spot {
		inst += " (spot)"
	}
	runtime, hours := "-", "-"
	if c.Feasible || c.EstRuntimeS > 0 {
		runtime = fmtRuntime(c.EstRuntimeS)
		if c.EstRuntimeS > 0 {
			hours = fmtGPUHours(cost.GPUHours(time.Duration(c.EstRuntimeS*float64(time.Second)), gpus))
		}
	}
	note := "feasible"
	switch {
	case !c.Feasible:
		note = "infeasible: " + c.Reason
	case c.Backend == chosen:
		note = "chosen"
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", c.Backend, c.Site, inst, runtime, hours, fmtCost(c), note)
}

// fmtCost is a candidate's estimated cost: "$3.72"; "-" when infeasible
// with no estimate.
func fmtCost(c wire.Candidate) string {
	if !c.Feasible && c.EstCostUSD == 0 {
		return "-"
	}
	return fmtUSD(c.EstCostUSD)
}

func fmtUSD(v float64) string { return fmt.Sprintf("$%.2f", v) }

func fmtGPUHours(h float64) string { return strconv.FormatFloat(h, 'f', 2, 64) }

// fmtWaitS is an estimated wait in seconds: "3h", "0s"; "unknown" for -1.
func fmtWaitS(s float64) string {
	if s < 0 || math.IsNaN(s) {
		return "unknown"
	}
	return shortDur(time.Duration(s * float64(time.Second)))
}

// fmtRuntime is an estimated run time in seconds; 0 means unknown.
func fmtRuntime(s float64) string {
	if s <= 0 || math.IsNaN(s) {
		return "unknown"
	}
	return shortDur(time.Duration(s * float64(time.Second)))
}

// shortDur is d to the second without zero tails: "10h", "3h30m", "45s".
func shortDur(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
