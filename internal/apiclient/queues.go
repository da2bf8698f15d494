package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/lathe-ml/lathe/internal/wire"
)

// QueueStats is the answer of GET /api/v1/queues (wire.QueueStats).
type QueueStats = wire.QueueStats

// QueueInfo is one backend queue (wire.QueueInfo).
type QueueInfo = wire.QueueInfo

// Queues returns the scheduler's queue statistics.
func (c *Client) Queues(ctx context.Context) (*QueueStats, error) {
	var q QueueStats
	if err := c.call(ctx, http.MethodGet, "/api/v1/queues", nil, nil, nil, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// Health is the answer of GET /healthz (wire.Health).
type Health = wire.Health

// Health asks the scheduler whether it and its Redis are up. When Redis is
// down it returns the Health it got together with an *APIError (status 503,
// code "unavailable").
func (c *Client) Health(ctx context.Context) (*Health, error) {
	tctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()
	req, err := c.newRequest(tctx, http.MethodGet, "/healthz", nil, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("apiclient: health: %w", ctx.Err())
		}
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable {
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var h Health
		if err == nil && json.Unmarshal(data, &h) == nil && h.Redis != "" {
			if resp.StatusCode == http.StatusOK {
				return &h, nil
			}
			return &h, &APIError{Status: resp.StatusCode, Code: CodeUnavailable, Message: "redis " + h.Redis}
		}
		if resp.StatusCode == http.StatusOK {
			return nil, fmt.Errorf("apiclient: health: unexpected answer %q", data)
		}
		return nil, &APIError{Status: resp.StatusCode, Message: http.StatusText(resp.StatusCode)}
	}
	return nil, decodeAPIError(resp)
}
