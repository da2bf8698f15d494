package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

// GPUs returns every GPU of every live node (GET /api/v1/gpus), sorted by
// node then index, each with the job holding it (JobID "" when free).
func (c *Client) GPUs(ctx context.Context) ([]jobtype.GPU, error) {
	var out wire.GPUList
	if err := c.call(ctx, http.MethodGet, "/api/v1/gpus", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	if out.GPUs == nil {
		out.GPUs = []jobtype.GPU{}
	}
	return out.GPUs, nil
}

// Nodes returns one row per live node (GET /api/v1/nodes), sorted by name.
func (c *Client) Nodes(ctx context.Context) ([]wire.NodeInfo, error) {
	var out wire.NodeList
	if err := c.call(ctx, http.MethodGet, "/api/v1/nodes", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Nodes == nil {
		out.Nodes = []wire.NodeInfo{}
	}
	return out.Nodes, nil
}

// GPUSeries returns the job's downsampled GPU series (GET
// /api/v1/jobs/{id}/gpu): no points when it never ran on GPUs, an
// *APIError with Code "not_found" when there is no such job.
func (c *Client) GPUSeries(ctx context.Context, id string) (*jobtype.GPUSeries, error) {
	var s jobtype.GPUSeries
	if err := c.call(ctx, http.MethodGet, jobPath(id, "/gpu"), nil, nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Budgets returns a month's spend per backend and team (GET
// /api/v1/budgets); month "" is the current one.
func (c *Client) Budgets(ctx context.Context, month string) (wire.Budgets, error) {
	var out wire.Budgets
	q := url.Values{}
	if month != "" {
		q.Set("month", month)
	}
	err := c.call(ctx, http.MethodGet, "/api/v1/budgets", q, nil, nil, &out)
	return out, err
}
