package apiclient

import (
	"context"
	"net/http"

	"github.com/lathe-ml/lathe/internal/wire"
)

// ScheduleList is the answer of GET /api/v1/schedules (wire.ScheduleList).
type ScheduleList = wire.ScheduleList

// ScheduleInfo is one schedule (wire.ScheduleInfo).
type ScheduleInfo = wire.ScheduleInfo

// Schedules returns the schedules the scheduler runs, with their next and
// last ticks.
func (c *Client) Schedules(ctx context.Context) (*ScheduleList, error) {
	var l ScheduleList
	if err := c.call(ctx, http.MethodGet, "/api/v1/schedules", nil, nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}
