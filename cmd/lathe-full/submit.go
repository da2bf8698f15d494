package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

func (a *app) submitCmd() *cobra.Command {
	var (
		wait, dryRun bool
		key          string
	)
	cmd := &cobra.Command{
		Use:   "submit FILE...",
		Short: "Submit job specs (YAML or JSON; - reads stdin)",
		Long: `Submit a job spec. The spec is checked locally first: every bad field is
printed and nothing is sent. Relative paths in dataset, eval_dataset and
output.uri ("data/train.jsonl" or "file:data/train.jsonl") are made absolute
file:// URIs relative to FILE's directory.

With --wait, lathe follows the job until it ends and exits 0 only if it
succeeded; with --wait -o json, stdout holds only the final Job.

With several FILEs (up to 1000), all are checked first and sent in one
request, all or nothing (POST /api/v1/jobs/batch): a sweep submits at once
or not at all. --wait and --dry-run take one FILE.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s needs at least one FILE\nRun '%s --help' for usage.", cmd.CommandPath(), cmd.CommandPath())
			}
			if len(args) > 1 && (wait || dryRun) {
				return usageErrorf("--wait and --dry-run take one FILE, got %d", len(args))
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if key == "" && !dryRun {
				// Always a key: a submit that got no answer is sent again
				// with it, and cannot make a second job.
				key = apiclient.NewIdempotencyKey()
			}
			if len(args) > 1 {
				return a.submitBatch(cmd.Context(), cmd.InOrStdin(), args, key)
			}
			return a.submit(cmd.Context(), cmd.InOrStdin(), args[0], key, wait, dryRun)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&wait, "wait", false, "follow the job until it ends; exit 1 unless it succeeded")
	f.BoolVar(&dryRun, "dry-run", false, "validate and normalise on the scheduler, store nothing, print the spec")
	f.StringVar(&key, "idempotency-key", "", "submitting again with the same key returns the same job (default: a fresh key, with which a submit that got no answer is sent again)")
	return cmd
}

// readSpec reads and locally validates the spec in file ("-": stdin) and
// returns it as the JSON to send.
func (a *app) readSpec(stdin io.Reader, file string) ([]byte, error) {
	spec, err := a.parseSpec(stdin, file)
	if err != nil {
		return nil, err
	}
	return spec.JSON(), nil
}

// parseSpec reads and locally validates the spec in file ("-": stdin),
// relative local paths resolved against file's folder; every bad field is
// printed on stderr and the error exits with exitUsage.
func (a *app) parseSpec(stdin io.Reader, file string) (*jobspec.Spec, error) {
	var (
		data []byte
		err  error
		dir  string
	)
	if file == "-" {
		data, err = readBounded(stdin, "stdin")
		dir, _ = os.Getwd()
	} else {
		var f *os.File
		if f, err = os.Open(file); err == nil {
			data, err = readBounded(f, file)
			f.Close()
		}
		dir = filepath.Dir(file)
	}
	if err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return nil, err
		}
		return nil, usageErrorf("read job spec: %w", err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, usageErrorf("resolve %s: %w", file, err)
	}
	spec, err := jobspec.Parse(rewriteLocalPaths(data, dir))
	if err != nil {
		var ve *jobspec.ValidationError
		if errors.As(err, &ve) {
			printFieldErrors(a.stderr, ve.Errors)
			return nil, usageErrorf("%s: %d problem(s) in the job spec; nothing was submitted", file, len(ve.Errors))
		}
		return nil, usageErrorf("%s: %w; nothing was submitted", file, err)
	}
	return spec, nil
}

// readBounded reads a job spec from r (named name), at most
// jobspec.MaxSpecBytes: the scheduler's body limit and the parser's. A
// longer one (a huge file, /dev/zero) is a usage error naming the file and
// the limit, after reading one byte past the limit and no more.
func readBounded(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, jobspec.MaxSpecBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > jobspec.MaxSpecBytes {
		return nil, usageErrorf("%s: over %d bytes (1 MiB, the most a job spec may hold): not read further; nothing was submitted", name, jobspec.MaxSpecBytes)
	}
	return data, nil
}

func (a *app) submit(ctx context.Context, stdin io.Reader, file, key string, wait, dryRun bool) error {
	body, err := a.readSpec(stdin, file)
	if err != nil {
		return err
	}
	c := a.client()
	job, err := c.Submit(ctx, body, key, dryRun)
	if err != nil {
		return err
	}
	if dryRun {
		// The normalised spec, in both output formats: it is what would run.
		return writeJSON(a.stdout, job.Spec)
	}
	if !wait {
		if a.output == outJSON {
			return writeJSON(a.stdout, job)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE")
		fmt.Fprintf(tw, "%s\t%s\n", job.ID, job.State)
		return tw.Flush()
	}
	return a.wait(ctx, c, job)
}

// submitBatch checks every file locally (printing every problem of every
// file) and, if all are good, sends them in one all-or-nothing request.
func (a *app) submitBatch(ctx context.Context, stdin io.Reader, files []string, key string) error {
	if len(files) > maxBatchFiles {
		return usageErrorf("%d files; one submit takes at most %d", len(files), maxBatchFiles)
	}
	specs := make([][]byte, 0, len(files))
	bad := 0
	for _, f := range files {
		body, err := a.readSpec(stdin, f)
		if err != nil {
			fmt.Fprintln(a.stderr, "error:", err)
			bad++
			continue
		}
		specs = append(specs, body)
	}
	if bad > 0 {
		return usageErrorf("%d of %d files have problems; nothing was submitted", bad, len(files))
	}
	resp, err := a.client().SubmitBatch(ctx, specs, key)
	if err != nil {
		return err
	}
	if a.output == outJSON {
		return writeJSON(a.stdout, resp)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tID\tNAME\tSTATE")
	for i, j := range resp.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", files[i], j.ID, j.Name, j.State)
	}
	return tw.Flush()
}

// maxBatchFiles matches the scheduler's batch limit (jobstore.MaxCreateBatch).
const maxBatchFiles = 1000

// wait follows job until it is terminal, showing progress, then prints the
// final record and maps its state to the exit code. With -o json progress
// goes to stderr, so stdout holds only the final Job.
func (a *app) wait(ctx context.Context, c *apiclient.Client, job *jobtype.Job) error {
	progressOut := a.stdout
	if a.output == outJSON {
		progressOut = a.stderr
	}
	p := newProgressPrinter(progressOut, isTerminal(progressOut), a.now)
	p.linef("submitted %s (%s); waiting for it to end (Ctrl-C stops waiting, not the job)", job.ID, job.State)
	if err := followToEnd(ctx, c, job, p); err != nil {
		p.finish()
		return err
	}
	final, err := c.Get(ctx, job.ID)
	p.end(final)
	if err != nil {
		return err
	}
	if a.output == outJSON {
		if err := writeJSON(a.stdout, final); err != nil {
			return err
		}
	} else if err := printJob(a.stdout, final, a.now()); err != nil {
		return err
	}
	return endStateError(final)
}

// followToEnd shows job's events on p until its state is terminal. When a
// stream ends without a terminal state it asks for the record and follows
// again, after a pause (growing to 5s) when nothing new came. Interrupted,
// it returns an exitInterrupted error that says the job keeps running.
func followToEnd(ctx context.Context, c *apiclient.Client, job *jobtype.Job, p *progressPrinter) error {
	last := ""
	state := job.State
	idle := 0
	for !state.Terminal() {
		seen := 0
		err := c.Follow(ctx, job.ID, last, func(ev jobtype.Event) error {
			seen++
			last = ev.ID
			if s := p.event(ev); s != "" {
				state = s
			}
			return nil
		})
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return stoppedWaiting(job.ID)
			}
			return err
		}
		if state.Terminal() {
			break
		}
		cur, err := c.Get(ctx, job.ID)
		if err != nil {
			return err
		}
		state = cur.State
		if seen == 0 && !state.Terminal() {
			idle++
			if err := pause(ctx, time.Duration(min(idle, 5))*time.Second); err != nil {
				return stoppedWaiting(job.ID)
			}
		} else {
			idle = 0
		}
	}
	return nil
}

// stoppedWaiting is the error of a wait interrupted: the job itself goes on.
func stoppedWaiting(id string) error {
	return &exitError{code: exitInterrupted,
		err: fmt.Errorf("stopped waiting; job %s keeps running (lathe logs -f %s)", id, id)}
}

// endStateError maps a terminal job to the command's result: nil if it
// succeeded, else a failure that says how it ended and why.
func endStateError(final *jobtype.Job) error {
	switch final.State {
	case jobtype.StateSucceeded:
		return nil
	case jobtype.StateCancelled:
		return failedErrorf("job %s was cancelled", final.ID)
	default:
		msg := final.Error
		if msg == "" {
			msg = final.Reason
		}
		if msg == "" {
			return failedErrorf("job %s ended %s", final.ID, final.State)
		}
		return failedErrorf("job %s ended %s: %s", final.ID, final.State, msg)
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
