package apiclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/wire"
)

// ErrExportIncomplete is wrapped by AuditExport's error when the export
// ended without its trailers (X-Lathe-Ledger-Records, and
// X-Lathe-Ledger-Head unless the ledger is empty): the scheduler stopped
// part-way (or something between cut the answer), so what was written is
// not the whole ledger and must not be trusted or published.
var ErrExportIncomplete = errors.New("ledger export incomplete: no X-Lathe-Ledger-Head trailer")

// AuditQuery selects ledger records for Audit. The zero value asks for the
// scheduler's first page of every record.
type AuditQuery struct {
	// JobID selects one job's records; "" means every record.
	JobID string
	// After skips records with Seq ≤ After.
	After int64
	// Limit caps the records returned; ≤ 0 means the scheduler's default
	// (1000). The scheduler accepts at most 100000.
	Limit int
}

// Audit returns ledger records, oldest first (GET /api/v1/audit; admin
// role). A scheduler that keeps no ledger answers 501.
func (c *Client) Audit(ctx context.Context, q AuditQuery) ([]ledger.Record, error) {
	v := url.Values{}
	if q.JobID != "" {
		v.Set("job", q.JobID)
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out wire.AuditRecords
	if err := c.call(ctx, http.MethodGet, "/api/v1/audit", v, nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Records == nil {
		out.Records = []ledger.Record{}
	}
	return out.Records, nil
}

// AuditVerify asks the scheduler to check the whole ledger chain with its
// key (GET /api/v1/audit/verify), and, when head is not "", that head (a
// MAC published earlier) is one of its records. A ledger that fails the
// check is not an error: the scheduler answers 409 and the Report lists
// the problems; the ledger is intact exactly when Problems is empty.
func (c *Client) AuditVerify(ctx context.Context, head string) (ledger.Report, error) {
	var q url.Values
	if head != "" {
		q = url.Values{"head": {head}}
	}
	var rep ledger.Report
	status, err := c.callStatus(ctx, http.MethodGet, "/api/v1/audit/verify", q, nil, nil, []int{http.StatusConflict}, &rep)
	if err != nil {
		return ledger.Report{}, err
	}
	if status == http.StatusConflict && len(rep.Problems) == 0 {
		// A 409 always lists a problem; never report a refused check as intact.
		rep.Problems = []ledger.Problem{{What: "the scheduler answered 409 (verification failed) without naming a problem"}}
	}
	return rep, nil
}

// AuditExport streams the whole ledger, as JSON lines (one ledger.Record
// each, in order; ledger.VerifyExport reads them), into w (GET
// /api/v1/audit/export). It returns the head MAC the export ends at (the
// one to publish) and the record count, from the answer's trailers. The
// answer's headers must arrive within RequestTimeout; the body may take as
// long as it takes. Without the trailers the error wraps
// ErrExportIncomplete: what was written is not the whole ledger. An empty
// ledger gives head "" and n 0.
func (c *Client) AuditExport(ctx context.Context, w io.Writer) (head string, n int64, err error) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := c.newRequest(hctx, http.MethodGet, "/api/v1/audit/export", nil, nil)
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	timer := time.AfterFunc(c.requestTimeout, cancel)
	resp, err := c.send(ctx, req)
	timer.Stop()
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		if ctx.Err() != nil {
			return "", 0, fmt.Errorf("apiclient: audit export: %w", ctx.Err())
		}
		return "", 0, fmt.Errorf("apiclient: audit export: %w: %w", ErrExportIncomplete, err)
	}
	// Trailers arrive after the body; a declared trailer never sent reads
	// as no values. An empty ledger's head is "" with 0 records.
	head = strings.TrimSpace(resp.Trailer.Get("X-Lathe-Ledger-Head"))
	counts := resp.Trailer.Values("X-Lathe-Ledger-Records")
	if len(counts) == 0 {
		return "", 0, fmt.Errorf("apiclient: audit export: %w", ErrExportIncomplete)
	}
	n, err = strconv.ParseInt(strings.TrimSpace(counts[0]), 10, 64)
	if err != nil || n < 0 {
		return "", 0, fmt.Errorf("apiclient: audit export: %w: X-Lathe-Ledger-Records %q is not a count", ErrExportIncomplete, counts[0])
	}
	if head == "" && n > 0 {
		return "", 0, fmt.Errorf("apiclient: audit export: %w", ErrExportIncomplete)
	}
	return head, n, nil
}
