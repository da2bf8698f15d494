package main

import (
	"bufio"
	"cmp"
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
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trace"
)

// defaultExportSince is --since's default: a month of jobs.
const defaultExportSince = 30 * 24 * time.Hour

// exportableStates are the states --state accepts: the terminal ones, where
// a job's run is over. defaultExportStates are what ran to an end.
var (
	exportableStates    = []jobtype.State{jobtype.StateSucceeded, jobtype.StateFailed, jobtype.StateCancelled, jobtype.StateStopped}
	defaultExportStates = []jobtype.State{jobtype.StateSucceeded, jobtype.StateFailed}
)

func (a *app) exportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Export what the scheduler holds, for other tools (jobs as a trace)",
	}
	cmd.AddCommand(a.exportJobsCmd())
	return cmd
}

func (a *app) exportJobsCmd() *cobra.Command {
	var since, states, file string
	cmd := &cobra.Command{
		Use:   "jobs [--since 30d] [--state succeeded,failed] [-o FILE]",
		Short: "Write finished jobs as a CSV trace (lathe simulate --trace replays it)",
		Long: `lathe export jobs writes the jobs submitted within --since that ended in one
of --state, one CSV row each, sorted by submit time, in the trace format
of lathe simulate (docs/export.md):

  submit_s,duration_s,gpus,gpu_model,residency,priority,backend,cost_usd,job_id

submit_s counts seconds from the earliest exported job's submit time (the
first row is 0); duration_s is the job's last run, from started to
finished. A job that never started (cancelled while queued, refused) has
no run and is skipped; stderr says how many.

It reads GET /api/v1/jobs with LATHE_TOKEN, so a team's token exports its
own team's jobs only. --since takes days (30d) or a Go duration (36h,
90m). -o FILE writes FILE (through a temporary file renamed into place
when complete) instead of stdout; here -o names a file, not a format.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			window, err := parseSince(since)
			if err != nil {
				return usageErrorf("--since %q: %w", since, err)
			}
			sts, err := parseExportStates(states)
			if err != nil {
				return usageErrorf("--state %q: %w", states, err)
			}
			if file == outJSON || file == outTable {
				return usageErrorf("-o %q: export writes CSV; -o names the file to write (for a file named %s, write ./%s)", file, file, file)
			}
			return a.exportJobs(cmd.Context(), window, sts, file)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "30d", "export jobs submitted within this long before now: Nd (days) or a Go duration (36h)")
	f.StringVar(&states, "state", "succeeded,failed", "comma-separated end states to export: succeeded, failed, cancelled, stopped")
	// -o shadows the global --output (table or json): an export is CSV, and
	// -o names where it goes.
	f.StringVarP(&file, "output", "o", "", "write the CSV to FILE instead of stdout")
	return cmd
}

// parseSince parses --since: "Nd" is N days (a whole number), anything else
// a Go duration ("36h", "90m"). It must be positive and at most ten years
// (a trace's limit).
func parseSince(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, fmt.Errorf("want a whole number of days (30d) or a Go duration (36h): %w", err)
		}
		if days < 1 || float64(days)*86400 > trace.MaxDurationS {
			return 0, fmt.Errorf("want between 1d and %dd", int(trace.MaxDurationS/86400))
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("want days (30d) or a Go duration (36h): %w", err)
		}
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	if d.Seconds() > trace.MaxDurationS {
		return 0, fmt.Errorf("at most %dd", int(trace.MaxDurationS/86400))
	}
	return d, nil
}

// parseExportStates parses --state: end states separated by commas, each
// once, in the order given.
func parseExportStates(s string) ([]jobtype.State, error) {
	var out []jobtype.State
	for _, p := range strings.Split(s, ",") {
		st := jobtype.State(strings.ToLower(strings.TrimSpace(p)))
		if st == "" {
			continue
		}
		if !slices.Contains(exportableStates, st) {
			return nil, fmt.Errorf("%q is not an end state (want some of %v)", st, exportableStates)
		}
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("name at least one of %v", exportableStates)
	}
	return out, nil
}

// exportedJob is one row of an export and the job's submit time, the only
// part of its record kept while the pages are read.
type exportedJob struct {
	created time.Time
	row     trace.Job
}

func (a *app) exportJobs(ctx context.Context, window time.Duration, states []jobtype.State, file string) error {
	c := a.client()
	cutoff := a.now().Add(-window)
	models := &gpuModels{c: c, stderr: a.stderr}
	jobs, skipped, err := collectFinished(ctx, c, states, cutoff, trace.MaxJobs, models.name)
	if err != nil {
		return err
	}
	rows := traceRows(jobs)
	write := func(w io.Writer) error { return trace.Write(w, rows) }
	if file == "" || file == "-" {
		err = write(a.stdout)
	} else {
		err = writeFileAtomic(file, write)
	}
	if err != nil {
		return err
	}
	var what string
	if len(jobs) == 0 {
		what = fmt.Sprintf("exported 0 jobs (none %s submitted since %s)", joinStates(states), cutoff.UTC().Format(time.RFC3339))
	} else {
		what = fmt.Sprintf("exported %d jobs from %s to %s", len(jobs),
			jobs[0].created.UTC().Format(time.RFC3339), jobs[len(jobs)-1].created.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(a.stderr, "%s; skipped %d that never ran\n", what, skipped)
	return nil
}

// collectFinished pages GET /api/v1/jobs once per state (newest first) and
// keeps the rows of the jobs submitted at or after cutoff; paging a state
// stops at its first job submitted before cutoff. Jobs that never ran are
// counted in skipped. More than limit rows is an error: nothing is written.
// The jobs come back sorted by submit time (then id).
func collectFinished(ctx context.Context, c *apiclient.Client, states []jobtype.State, cutoff time.Time, limit int,
	gpuName func(ctx context.Context, node string, index int) string) (jobs []exportedJob, skipped int, err error) {
	seen := map[string]bool{}
	for _, st := range states {
		cursor := ""
		for {
			page, err := c.List(ctx, string(st), cursor, maxPage)
			if err != nil {
				return nil, 0, fmt.Errorf("export: list %s jobs: %w", st, err)
			}
			older := false
			for _, j := range page.Jobs {
				if j.CreatedAt.Before(cutoff) {
					older = true
					break
				}
				// A job retried and ended again while we page can show up
				// under two states: keep it once.
				if seen[j.ID] {
					continue
				}
				seen[j.ID] = true
				row, ok := exportRow(j, func(node string, index int) string { return gpuName(ctx, node, index) })
				if !ok {
					skipped++
					continue
				}
				if len(jobs) >= limit {
					return nil, 0, failedErrorf("export: more than %d jobs since %s: a trace holds at most %d; export a shorter --since",
						limit, cutoff.UTC().Format(time.RFC3339), limit)
				}
				jobs = append(jobs, exportedJob{created: j.CreatedAt, row: row})
			}
			// A page may be empty and still have a next cursor (the
			// scheduler passed over other teams' jobs): follow it, unless
			// the cursor did not move.
			if older || page.NextCursor == "" || page.NextCursor == cursor {
				break
			}
			cursor = page.NextCursor
		}
	}
	slices.SortStableFunc(jobs, func(x, y exportedJob) int {
		return cmp.Or(x.created.Compare(y.created), cmp.Compare(x.row.ID, y.row.ID))
	})
	return jobs, skipped, nil
}

// exportRow maps a finished job to its trace row, all but SubmitS (which
// counts from the export's first job: traceRows). ok is false for a job
// with no run to export: never started (cancelled while queued, refused),
// or with a finish before its start.
//
//   - duration_s: FinishedAt − StartedAt. StartedAt is set each time an
//     attempt starts running, so a retried or preempted job's duration is
//     its last attempt's run.
//   - gpus: the spec's resources.gpus.
//   - gpu_model: for a job that ran on a local node's GPUs, the name that
//     node reports (gpuName: GET /api/v1/gpus, the inventory as it is now)
//     for the first GPU it held; else (a cloud attempt, whose record holds
//     the instance type but not the GPU model; a node gone since) the
//     spec's first resources.gpu_models; else "". "" for a CPU-only job.
//   - residency: the spec's residency tags, which the scheduler filled in
//     with routing.default_residency at submit when the job gave none.
//   - backend: where the job's last attempt was placed (Job.Backend), or
//     its route's backend when the record no longer names one.
func exportRow(j *jobtype.Job, gpuName func(node string, index int) string) (row trace.Job, ok bool) {
	if j.StartedAt == nil || j.FinishedAt == nil || j.FinishedAt.Before(*j.StartedAt) {
		return trace.Job{}, false
	}
	row = trace.Job{
		DurationS: seconds(j.FinishedAt.Sub(*j.StartedAt)),
		GPUs:      j.Spec.Resources.TotalGPUs(),
		Residency: slices.Clone(j.Spec.Residency),
		Priority:  string(j.Spec.Priority),
		Backend:   j.Backend,
		CostUSD:   max(j.CostUSD, 0),
		ID:        j.ID,
	}
	if row.Backend == "" && j.Route != nil {
		row.Backend = j.Route.Backend
	}
	if row.GPUs > 0 {
		if j.Node != "" && !jobtype.IsCloudNode(j.Node) && len(j.GPUs) > 0 && gpuName != nil {
			row.GPUModel = gpuName(j.Node, j.GPUs[0])
		}
		if row.GPUModel == "" && len(j.Spec.Resources.GPUModels) > 0 {
			row.GPUModel = j.Spec.Resources.GPUModels[0]
		}
	}
	return row, true
}

// traceRows are jobs' rows (sorted by submit time) with SubmitS counted
// from the first one's submit time.
func traceRows(jobs []exportedJob) []trace.Job {
	rows := make([]trace.Job, len(jobs))
	for i, j := range jobs {
		rows[i] = j.row
		rows[i].SubmitS = seconds(j.created.Sub(jobs[0].created))
	}
	return rows
}

// seconds is d in seconds, to the millisecond the store keeps times at.
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}

func joinStates(states []jobtype.State) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, " or ")
}

// gpuModels names local nodes' GPUs from GET /api/v1/gpus, asked once, at
// the first job that needs it. When that fails it says so on stderr and
// names none (the rows fall back to the spec's gpu_models).
type gpuModels struct {
	c      *apiclient.Client
	stderr io.Writer
	byGPU  map[string]string // "node/index" → NVML name
	asked  bool
}

func (g *gpuModels) name(ctx context.Context, node string, index int) string {
	if !g.asked {
		g.asked = true
		gpus, err := g.c.GPUs(ctx)
		if err != nil {
			fmt.Fprintf(g.stderr, "lathe: GPU models come from the jobs' specs: the GPU inventory: %v\n", err)
			return ""
		}
		g.byGPU = make(map[string]string, len(gpus))
		for _, x := range gpus {
			g.byGPU[x.Node+"/"+strconv.Itoa(x.Index)] = x.Name
		}
	}
	return g.byGPU[node+"/"+strconv.Itoa(index)]
}

// writeFileAtomic writes path through write, to a temporary file in the
// same folder renamed into place when complete: a failed export leaves no
// half-written file and an older one untouched.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return usageErrorf("-o %q: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	bw := bufio.NewWriter(tmp)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("export: write %s: %w", path, err)
	}
	return nil
}
