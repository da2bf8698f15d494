package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

// SubmitSweep sends a sweep spec (JSON, its base job inline: see
// sweepspec.Inline) to POST /api/v1/sweeps and returns its status. A
// non-empty idempotencyKey is sent as the Idempotency-Key header, so
// submitting twice with one key yields one sweep.
func (c *Client) SubmitSweep(ctx context.Context, specJSON []byte, idempotencyKey string) (*wire.SweepStatus, error) {
	var hdr http.Header
	if idempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	var st wire.SweepStatus
	if err := c.keyed(ctx, idempotencyKey, func() error { return c.call(ctx, http.MethodPost, "/api/v1/sweeps", nil, specJSON, hdr, &st) }); err != nil {
		return nil, err
	}
	return &st, nil
}

// DryRunSweep expands and routes a sweep spec without storing anything.
func (c *Client) DryRunSweep(ctx context.Context, specJSON []byte) (*wire.SweepDryRun, error) {
	var out wire.SweepDryRun
	if err := c.call(ctx, http.MethodPost, "/api/v1/sweeps", url.Values{"dry_run": {"true"}}, specJSON, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Sweep returns a sweep's status: its record and its leaderboard, best
// first (an *APIError with Code "not_found" when there is none).
func (c *Client) Sweep(ctx context.Context, id string) (*wire.SweepStatus, error) {
	var st wire.SweepStatus
	if err := c.call(ctx, http.MethodGet, "/api/v1/sweeps/"+url.PathEscape(id), nil, nil, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// SweepRecord is sweep id's record alone (GET …?record_only=true): no
// trial is read, no leaderboard given.
func (c *Client) SweepRecord(ctx context.Context, id string) (*wire.SweepStatus, error) {
	var st wire.SweepStatus
	if err := c.call(ctx, http.MethodGet, "/api/v1/sweeps/"+url.PathEscape(id), url.Values{"record_only": {"true"}}, nil, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Sweeps lists the sweeps the token may read, newest first.
func (c *Client) Sweeps(ctx context.Context, cursor string) (*wire.SweepList, error) {
	var q url.Values
	if cursor != "" {
		q = url.Values{"cursor": {cursor}}
	}
	var out wire.SweepList
	if err := c.call(ctx, http.MethodGet, "/api/v1/sweeps", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelSweep cancels a sweep and every trial that has not ended.
func (c *Client) CancelSweep(ctx context.Context, id string) (*wire.SweepCancelled, error) {
	var out wire.SweepCancelled
	if err := c.call(ctx, http.MethodPost, "/api/v1/sweeps/"+url.PathEscape(id)+"/cancel", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSweep returns one page of a sweep's trials in index order (GET
// /api/v1/jobs?sweep=ID), optionally only those in state.
func (c *Client) ListSweep(ctx context.Context, sweepID, state, cursor string, limit int) (*JobList, error) {
	list, err := c.listJobs(ctx, url.Values{"sweep": {sweepID}}, state, cursor, limit)
	if err == nil && list.Jobs == nil {
		list.Jobs = []*jobtype.Job{}
	}
	return list, err
}
