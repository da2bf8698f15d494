package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/ledger"
)

func (a *app) auditCmd() *cobra.Command {
	var q apiclient.AuditQuery
	cmd := &cobra.Command{
		Use:   "audit [--job ID] [--after N] [--limit N]",
		Short: "List the routing ledger's records (admin)",
		Long: `lathe audit lists the records of the scheduler's routing ledger, oldest
first: every routing decision and refusal, with the inputs it saw, and every
staging of data between sites (GET /api/v1/audit; the token needs the admin
role). The table shows SEQ TIME KIND JOB TEAM TOKEN BACKEND PATH; -o json
prints the records whole, bodies included.

lathe audit verify checks the ledger's chain; lathe audit export writes it
out, to be checked offline with the key (lathe audit verify --export).`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if q.After < 0 || q.Limit < 0 {
				return usageErrorf("--after and --limit must be ≥ 0, got %d and %d", q.After, q.Limit)
			}
			recs, err := a.client().Audit(cmd.Context(), q)
			if err != nil {
				return err
			}
			if a.output == outJSON {
				return writeJSON(a.stdout, recs)
			}
			return printAudit(a, recs)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&q.JobID, "job", "", "only this job's records")
	f.Int64Var(&q.After, "after", 0, "only records after this sequence number")
	f.IntVar(&q.Limit, "limit", 0, "at most this many records (default: the scheduler's, 1000)")
	cmd.AddCommand(a.auditVerifyCmd(), a.auditExportCmd())
	return cmd
}

// auditBody is what the table shows of a record's body: decision records
// hold the path and the decision, staging records the backend.
type auditBody struct {
	Path     string `json:"path"`
	Backend  string `json:"backend"`
	Decision *struct {
		Backend string `json:"backend"`
	} `json:"decision"`
}

func printAudit(a *app, recs []ledger.Record) error {
	if len(recs) == 0 {
		fmt.Fprintln(a.stdout, "No records.")
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tJOB\tTEAM\tTOKEN\tBACKEND\tPATH")
	for _, r := range recs {
		var b auditBody
		_ = json.Unmarshal(r.Body, &b) // an unexpected body shows as "-"
		backend := b.Backend
		if b.Decision != nil {
			backend = b.Decision.Backend
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.UTC().Format(time.RFC3339), r.Kind,
			orDash(r.JobID), orDash(r.Team), orDash(r.Token), orDash(backend), orDash(b.Path))
	}
	return tw.Flush()
}

// auditVerifyOptions are lathe audit verify's flags.
type auditVerifyOptions struct {
	head, export, keyFile string
}

func (a *app) auditVerifyCmd() *cobra.Command {
	var o auditVerifyOptions
	cmd := &cobra.Command{
		Use:   "verify [--head MAC] | verify --export FILE --key FILE [--head MAC]",
		Short: "Check the ledger's chain: every MAC, no record missing, the head",
		Long: `lathe audit verify asks the scheduler to check the whole ledger with its key
(GET /api/v1/audit/verify): every record's MAC, the sequence without gaps,
each record linked to the one before, and the head. --head MAC also checks
that a head published earlier (by lathe audit export) is still one of the
records, so a removed tail shows. Where the scheduler keeps the ledger's
head outside Redis too (its anchor file, ledger.anchor in its data dir), it
also checks that Redis still holds the anchored record: after Redis was
wiped (FLUSHALL) or put back to an older copy, the ledger in Redis ends
before the anchor, or holds another record there, and verify fails.

With --export FILE --key FILE the check runs here, offline, over an export
written by lathe audit export, with the ledger's key file (the one named in
lathed's config; it must be readable by its owner only).

Prints "ledger intact: N records, head MAC" (and the anchored record) and
exits 0, or prints every problem and exits 1.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.auditVerify(cmd.Context(), o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.head, "head", "", "a head MAC published earlier that must be one of the records")
	f.StringVar(&o.export, "export", "", "verify this export (lathe audit export) offline, with --key")
	f.StringVar(&o.keyFile, "key", "", "the ledger's key file, for --export")
	return cmd
}

// auditVerify checks the ledger, offline over an export with --export and
// --key (both or neither), else by asking the scheduler, and prints the report.
func (a *app) auditVerify(ctx context.Context, o auditVerifyOptions) error {
	var rep ledger.Report
	var err error
	switch {
	case o.export != "" && o.keyFile == "":
		return usageErrorf("--export needs --key FILE (the ledger's key) to verify with")
	case o.keyFile != "" && o.export == "":
		return usageErrorf("--key is for an offline check: give --export FILE too")
	case o.export != "":
		rep, err = verifyExport(o)
	default:
		rep, err = a.client().AuditVerify(ctx, o.head)
	}
	if err != nil {
		return err
	}
	return a.printVerify(rep)
}

// verifyExport checks the export o.export with the key in o.keyFile, and
// o.head if set.
func verifyExport(o auditVerifyOptions) (ledger.Report, error) {
	key, err := ledger.LoadKey(o.keyFile)
	if err != nil {
		return ledger.Report{}, usageErrorf("--key: %v", err)
	}
	f, err := os.Open(o.export)
	if err != nil {
		return ledger.Report{}, usageErrorf("--export: %w", err)
	}
	defer f.Close()
	rep, err := ledger.VerifyExport(f, key, o.head)
	if err != nil {
		return ledger.Report{}, failedErrorf("read %s: %w", o.export, err)
	}
	return rep, nil
}

// printVerify prints a verification report and exits 1 unless the ledger
// is intact.
func (a *app) printVerify(rep ledger.Report) error {
	if a.output == outJSON {
		if err := writeJSON(a.stdout, rep); err != nil {
			return err
		}
	} else if len(rep.Problems) == 0 {
		fmt.Fprintf(a.stdout, "ledger intact: %d records, head %s\n", rep.Records, orDash(rep.Head))
		switch {
		case rep.Anchor != nil:
			fmt.Fprintf(a.stdout, "anchored outside Redis at record %d in %s\n", rep.Anchor.Seq, rep.AnchorPath)
		case rep.AnchorPath != "":
			fmt.Fprintf(a.stdout, "not anchored yet: %s is not written\n", rep.AnchorPath)
		}
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintf(a.stdout, "problem: %s\n", p.What)
		}
	}
	if n := len(rep.Problems); n > 0 {
		return failedErrorf("ledger NOT intact: %d problem(s) in %d records read", n, rep.Records)
	}
	return nil
}

func (a *app) auditExportCmd() *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "export [--to FILE]",
		Short: "Write the whole ledger as JSON lines, and the head MAC to publish",
		Long: `lathe audit export writes every ledger record, in order, as JSON lines
(GET /api/v1/audit/export), to stdout or to --to FILE (written to a
temporary name and renamed into place only when complete). On stderr it
prints the head MAC the export ends at and the record count: publish that
head (somewhere the scheduler's operators cannot rewrite), so a later
lathe audit verify --head can show that no record was removed since.

Exits 1 when the export was cut short (the scheduler sent no head
trailer): what was written is not the whole ledger.`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.auditExport(cmd.Context(), to)
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", "write the export to FILE instead of stdout")
	return cmd
}

func (a *app) auditExport(ctx context.Context, to string) error {
	c := a.client()
	if to == "" {
		head, n, err := c.AuditExport(ctx, a.stdout)
		return a.exported(head, n, err, "")
	}
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".*.partial")
	if err != nil {
		return usageErrorf("--to: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	head, n, err := c.AuditExport(ctx, tmp)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write %s: %w", to, cerr)
	}
	if err == nil {
		if rerr := os.Rename(tmp.Name(), to); rerr != nil {
			err = fmt.Errorf("write %s: %w", to, rerr)
		}
	}
	return a.exported(head, n, err, to)
}

// exported reports an export's outcome on stderr.
func (a *app) exported(head string, n int64, err error, to string) error {
	if errors.Is(err, apiclient.ErrExportIncomplete) {
		what := "what was written to stdout"
		if to != "" {
			what = "nothing was written to " + to
		}
		return failedErrorf("the export was cut short (%v); %s is not the whole ledger: do not publish or trust it", err, what)
	}
	if err != nil {
		return err
	}
	if to != "" {
		fmt.Fprintf(a.stderr, "wrote %d records to %s\n", n, to)
	}
	fmt.Fprintf(a.stderr, "publish this head: %s (%d records)\n", orDash(head), n)
	return nil
}
