package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

// JobList is one page of GET /api/v1/jobs, newest first (wire.JobList).
// NextCursor is empty on the last page.
type JobList = wire.JobList

// Submit sends specJSON (a job spec as a JSON object) to POST /api/v1/jobs
// and returns the stored Job. A non-empty idempotencyKey is sent as the
// Idempotency-Key header, so submitting twice with one key yields one job;
// with a key, a submit that got no answer or a 503 is sent again (keyed).
//
// With dryRun the scheduler validates and normalises the spec without
// storing anything; the returned Job then has only Spec set (the normalised
// spec) and an empty ID.
func (c *Client) Submit(ctx context.Context, specJSON []byte, idempotencyKey string, dryRun bool) (*jobtype.Job, error) {
	var q url.Values
	if dryRun {
		q = url.Values{"dry_run": {"true"}}
	}
	var hdr http.Header
	if idempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	if specJSON == nil {
		specJSON = []byte{}
	}
	var job jobtype.Job
	if err := c.keyed(ctx, idempotencyKey, func() error { return c.call(ctx, http.MethodPost, "/api/v1/jobs", q, specJSON, hdr, &job) }); err != nil {
		return nil, err
	}
	return &job, nil
}

// SubmitBatch submits several specs (JSON each) in one request, all or
// nothing (POST /api/v1/jobs/batch). With an idempotency key, sending the
// same batch again returns the same jobs.
func (c *Client) SubmitBatch(ctx context.Context, specs [][]byte, idempotencyKey string) (*wire.BatchResponse, error) {
	var hdr http.Header
	if idempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	body := []byte(`{"jobs":[`)
	for i, s := range specs {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, s...)
	}
	body = append(body, "]}"...)
	var resp wire.BatchResponse
	if err := c.keyed(ctx, idempotencyKey, func() error { return c.call(ctx, http.MethodPost, "/api/v1/jobs/batch", nil, body, hdr, &resp) }); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Get returns the job with the given id (an *APIError with Code
// "not_found" when there is none).
func (c *Client) Get(ctx context.Context, id string) (*jobtype.Job, error) {
	var job jobtype.Job
	if err := c.call(ctx, http.MethodGet, jobPath(id, ""), nil, nil, nil, &job); err != nil {
		return nil, err
	}
	return &job, nil
}

// List returns one page of jobs, newest first. An empty state means every
// state; an empty cursor means the first page; limit ≤ 0 means the
// scheduler's default (50). Pass the returned NextCursor to get the next page.
func (c *Client) List(ctx context.Context, state, cursor string, limit int) (*JobList, error) {
	return c.listJobs(ctx, url.Values{}, state, cursor, limit)
}

// listJobs is GET /api/v1/jobs with q and the paging parameters.
func (c *Client) listJobs(ctx context.Context, q url.Values, state, cursor string, limit int) (*JobList, error) {
	if state != "" {
		q.Set("state", state)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var list JobList
	if err := c.call(ctx, http.MethodGet, "/api/v1/jobs", q, nil, nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// Cancel asks the scheduler to cancel the job and returns it as it stands
// after the request (cancel_requested set, or already cancelled). A job
// that already ended otherwise gives an *APIError with Code "conflict" and
// its State.
func (c *Client) Cancel(ctx context.Context, id string) (*jobtype.Job, error) {
	var job jobtype.Job
	if err := c.call(ctx, http.MethodPost, jobPath(id, "/cancel"), nil, nil, nil, &job); err != nil {
		return nil, err
	}
	return &job, nil
}

// Retry makes a new attempt of a failed or cancelled job.
func (c *Client) Retry(ctx context.Context, id string) (*jobtype.Job, error) {
	var job jobtype.Job
	if err := c.call(ctx, http.MethodPost, jobPath(id, "/retry"), nil, nil, nil, &job); err != nil {
		return nil, err
	}
	return &job, nil
}

// Events returns the job's stored events after the stream id after (all of
// them when after is empty), oldest first.
func (c *Client) Events(ctx context.Context, id, after string) ([]jobtype.Event, error) {
	var q url.Values
	if after != "" {
		q = url.Values{"after": {after}}
	}
	var out wire.EventList
	if err := c.call(ctx, http.MethodGet, jobPath(id, "/events"), q, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Events, nil
}
