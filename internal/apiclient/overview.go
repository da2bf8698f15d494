package apiclient

import (
	"context"
	"net/http"

	"github.com/lathe-ml/lathe/internal/wire"
)

// Overview is the answer of GET /api/v1/overview (wire.Overview).
type Overview = wire.Overview

// Overview returns the scheduler's ops view: queues, running jobs, GPUs
// per node, cloud cost and waiting jobs, limited to the token's team when
// it reads only its team's jobs.
func (c *Client) Overview(ctx context.Context) (*Overview, error) {
	var ov Overview
	if err := c.call(ctx, http.MethodGet, "/api/v1/overview", nil, nil, nil, &ov); err != nil {
		return nil, err
	}
	return &ov, nil
}
