package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/internal/wire"
)

// sweepCmd is `lathe sweep …` (docs/sweeps.md).
func (a *app) sweepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Hyperparameter sweeps: submit, status (leaderboard), cancel, pull the best adapter",
	}
	cmd.AddCommand(a.sweepSubmitCmd(), a.sweepStatusCmd(), a.sweepCancelCmd(), a.sweepPullCmd(), a.sweepListCmd())
	return cmd
}

func (a *app) sweepSubmitCmd() *cobra.Command {
	var (
		key    string
		wait   bool
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "submit FILE",
		Short: "Submit a sweep spec (YAML or JSON); --wait shows it live until every trial ended",
		Long: `Submit a sweep spec. A base job given as a path (job: tiny-lora.yaml) is read
here, relative to the sweep file, with its local data paths made absolute,
and sent inline. Every trial is validated and routed before anything is
stored; a bad field is named with its trial.`,
		Args: exactArgs("FILE"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if key == "" && !dryRun {
				key = apiclient.NewIdempotencyKey() // as lathe submit: resent safely
			}
			return a.sweepSubmit(cmd.Context(), args[0], key, wait, dryRun)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&key, "idempotency-key", "", "submitting again with this key returns the same sweep (default: a fresh key, with which a submit that got no answer is sent again)")
	f.BoolVar(&wait, "wait", false, "show the sweep live (trials by state, best so far) until it ends")
	f.BoolVar(&dryRun, "dry-run", false, "expand and route the trials; store nothing")
	return cmd
}

// readSweep reads a sweep file with its base job inline.
func (a *app) readSweep(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, usageErrorf("read sweep spec: %w", err)
	}
	data, err := readBounded(f, file) // the API's limit; /dev/zero is read no further
	f.Close()
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(file)
	body, err := sweepspec.Inline(data, func(path string) ([]byte, error) {
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		spec, err := a.parseSpec(nil, path)
		if err != nil {
			return nil, err
		}
		return spec.JSON(), nil
	})
	if err != nil {
		var ve *jobspec.ValidationError
		if errors.As(err, &ve) {
			printFieldErrors(a.stderr, ve.Errors)
			return nil, usageErrorf("%s: %d problem(s) in the sweep spec; nothing was submitted", file, len(ve.Errors))
		}
		if typed(err) {
			return nil, err
		}
		return nil, usageErrorf("%s: %w; nothing was submitted", file, err)
	}
	return body, nil
}

func (a *app) sweepSubmit(ctx context.Context, file, key string, wait, dryRun bool) error {
	body, err := a.readSweep(file)
	if err != nil {
		return err
	}
	c := a.client()
	if dryRun {
		out, err := c.DryRunSweep(ctx, body)
		if err != nil {
			return err
		}
		return writeJSON(a.stdout, out)
	}
	st, err := c.SubmitSweep(ctx, body, key)
	if err != nil {
		return err
	}
	if st, err = a.followAdmission(ctx, c, st); err != nil {
		return err
	}
	if !wait {
		if a.output == outJSON {
			return writeJSON(a.stdout, st)
		}
		fmt.Fprintf(a.stdout, "%s\t%s\t%d trials\n", st.Sweep.ID, st.Sweep.State, st.Sweep.Trials)
		return nil
	}
	return a.sweepWait(ctx, c, st)
}

// followAdmission follows a sweep answered admitting (a big sweep: the
// server stores its trials in chunks after answering) until every trial
// is stored, one progress line on stderr when it changes (each poll reads
// the sweep's record alone); the sweep's record as it is then. Ctrl-C stops following, not the admission.
func (a *app) followAdmission(ctx context.Context, c *apiclient.Client, st *wire.SweepStatus) (*wire.SweepStatus, error) {
	if st.Sweep.State != jobtype.SweepAdmitting {
		return st, nil
	}
	p := newProgressPrinter(a.stderr, isTerminal(a.stderr), a.now)
	defer p.finish()
	last := -1
	for st.Sweep.State == jobtype.SweepAdmitting {
		if st.Sweep.Stored != last {
			p.linef("sweep %s: storing its trials: %d of %d stored", st.Sweep.ID, st.Sweep.Stored, st.Sweep.Trials)
			last = st.Sweep.Stored
		}
		if err := pause(ctx, 200*time.Millisecond); err != nil {
			return nil, &exitError{code: exitInterrupted, err: fmt.Errorf("stopped following; sweep %s goes on being stored (lathe sweep status %s)", st.Sweep.ID, st.Sweep.ID)}
		}
		next, err := c.SweepRecord(ctx, st.Sweep.ID)
		if err != nil {
			return nil, err
		}
		st = next
	}
	if st.Sweep.Message != "" {
		p.linef("sweep %s: %s", st.Sweep.ID, st.Sweep.Message)
	}
	return st, nil
}

// sweepWait shows the sweep live until it is no longer running: one line
// whenever the trials' states or the best so far change (in place on a
// terminal), then the leaderboard.
func (a *app) sweepWait(ctx context.Context, c *apiclient.Client, st *wire.SweepStatus) error {
	progressOut := a.stdout
	if a.output == outJSON {
		progressOut = a.stderr
	}
	p := newProgressPrinter(progressOut, isTerminal(progressOut), a.now)
	p.linef("submitted sweep %s (%d trials); waiting for it to end (Ctrl-C stops waiting, not the sweep)", st.Sweep.ID, st.Sweep.Trials)
	last := ""
	for st.Sweep.State == jobtype.SweepRunning {
		if line := sweepLine(st); line != last {
			p.linef("%s", line)
			last = line
		}
		if err := pause(ctx, time.Second); err != nil {
			p.finish()
			return &exitError{code: exitInterrupted, err: fmt.Errorf("stopped waiting; sweep %s keeps running (lathe sweep status %s)", st.Sweep.ID, st.Sweep.ID)}
		}
		next, err := c.Sweep(ctx, st.Sweep.ID)
		if err != nil {
			p.finish()
			return err
		}
		st = next
	}
	p.linef("%s", sweepLine(st))
	p.finish()
	if err := a.printSweep(st); err != nil {
		return err
	}
	if st.Sweep.State == jobtype.SweepCancelled {
		return failedErrorf("sweep %s was cancelled", st.Sweep.ID)
	}
	return nil
}

// sweepLine is the live view's line: trials by state and the best so far.
func sweepLine(st *wire.SweepStatus) string {
	var parts []string
	for _, s := range jobtype.States {
		if n := st.Sweep.Counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	line := fmt.Sprintf("sweep %s: %s", st.Sweep.State, strings.Join(parts, ", "))
	if len(st.Leaderboard) > 0 && st.Leaderboard[0].Objective != nil {
		b := st.Leaderboard[0]
		line += fmt.Sprintf("; best %s %s=%s (%s)", b.ID, st.Sweep.Metric, fmtFloat(*b.Objective), fmtParams(b.Params))
	}
	if st.Sweep.Stalled != "" {
		line += "; " + st.Sweep.Stalled
	}
	return termSafe(line)
}

// fmtParams writes a trial's parameters as path=value, in order.
func fmtParams(ps []jobtype.Param) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("%s=%v", p.Path, p.Value)
	}
	return strings.Join(out, " ")
}

func (a *app) sweepStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status ID",
		Short: "A sweep's leaderboard, best first: params, state, rung, objective, GPU-hours, cost",
		Args:  exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			st, err := a.client().Sweep(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printSweep(st)
		}),
	}
}

// printSweep prints a sweep's status: its record, then the leaderboard.
func (a *app) printSweep(st *wire.SweepStatus) error {
	if a.output == outJSON {
		return writeJSON(a.stdout, st)
	}
	sw := st.Sweep
	fmt.Fprintf(a.stdout, "sweep %s (%s): %s, %s search, %d trials, max_parallel %d, objective %s %s\n",
		sw.ID, termSafe(sw.Name), sw.State, sw.Search, sw.Trials, sw.MaxParallel, sw.Goal, termSafe(sw.Metric))
	fmt.Fprintf(a.stdout, "cost: $%.2f spent, $%.2f reserved%s; GPU-hours: %.2f spent, %.2f reserved%s\n",
		sw.SpentUSD, sw.ReservedUSD, budgetOf(sw.BudgetUSD, "$%.2f"), sw.SpentGPUHours, sw.ReservedGPUHours, budgetOf(sw.BudgetGPUHours, "%.2f"))
	if sw.State == jobtype.SweepAdmitting {
		fmt.Fprintf(a.stdout, "storing its trials: %d of %d stored\n", sw.Stored, sw.Trials)
	}
	if sw.Stalled != "" {
		fmt.Fprintf(a.stdout, "admitting stopped: %s\n", termSafe(sw.Stalled))
	}
	if sw.Message != "" {
		fmt.Fprintf(a.stdout, "%s\n", termSafe(sw.Message))
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "RANK\tTRIAL\tPARAMS\tSTATE\tRUNG\t%s\tSTEP\tGPU-H\tCOST\n", strings.ToUpper(sw.Metric))
	for i, r := range st.Leaderboard {
		obj := "-"
		if r.Objective != nil {
			obj = fmtFloat(*r.Objective)
		}
		state := string(r.State)
		if r.Reason != "" {
			state += " (" + r.Reason + ")"
		} else if r.Gate != "" {
			state += " (waits: " + r.Gate + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%d\t%.3f\t$%.2f\n", i+1, r.ID, termSafe(fmtParams(r.Params)), termSafe(state), r.Rung, obj, r.Step, r.GPUHours, r.CostUSD)
	}
	return tw.Flush()
}

func budgetOf(v float64, format string) string {
	if v <= 0 {
		return ""
	}
	return " of " + fmt.Sprintf(format, v)
}

func (a *app) sweepCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a sweep and every trial that has not ended",
		Args:  exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			out, err := a.client().CancelSweep(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, out)
			}
			fmt.Fprintf(a.stdout, "sweep %s %s: %d trials cancelled or asked to stop\n", out.Sweep.ID, out.Sweep.State, out.Trials)
			return nil
		}),
	}
}

func (a *app) sweepPullCmd() *cobra.Command {
	var (
		best bool
		o    pullOptions
	)
	cmd := &cobra.Command{
		Use:   "pull ID --best",
		Short: "Download the adapter of the sweep's best succeeded trial (sha256 checked)",
		Long: `Download the artifacts of the sweep's best succeeded trial, as lathe pull
does for a job: --format, --ollama-from and the Modelfile are lathe pull's.`,
		Args: exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if !best {
				return usageErrorf("say which trial: --best (or pull a trial by its id with lathe pull)")
			}
			if err := o.check(cmd); err != nil {
				return err
			}
			st, err := a.client().Sweep(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if st.BestSucceeded == "" {
				return failedErrorf("sweep %s has no succeeded trial with a %s yet", st.Sweep.ID, st.Sweep.Metric)
			}
			fmt.Fprintf(a.stderr, "best trial: %s\n", st.BestSucceeded)
			return a.pull(cmd.Context(), st.BestSucceeded, o)
		}),
	}
	cmd.Flags().BoolVar(&best, "best", false, "the best succeeded trial by the sweep's objective")
	o.flags(cmd, "trial")
	return cmd
}

func (a *app) sweepListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List sweeps, newest first",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			out, err := a.client().Sweeps(cmd.Context(), "")
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, out)
			}
			return printSweepList(a.stdout, out.Sweeps, a.now())
		}),
	}
}

func printSweepList(w io.Writer, sws []*jobtype.Sweep, now time.Time) error {
	sort.SliceStable(sws, func(i, j int) bool { return sws[i].ID > sws[j].ID })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tSEARCH\tTRIALS\tSPENT\tAGE")
	for _, sw := range sws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t$%.2f\t%s\n", sw.ID, termSafe(sw.Name), sw.State, sw.Search, sw.Trials, sw.SpentUSD, fmtAge(now.Sub(sw.CreatedAt)))
	}
	return tw.Flush()
}
