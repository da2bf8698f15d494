package wire

import (
	"encoding/json"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// DryRun is the answer of POST /api/v1/jobs?dry_run=true: the spec as the
// scheduler normalised it and the route it would take; nothing is stored.
type DryRun struct {
	DryRun bool               `json:"dry_run"` // always true
	Route  *jobtype.RouteInfo `json:"route"`
	Spec   *jobspec.Spec      `json:"spec"`
}

// BatchRequest is the body of POST /api/v1/jobs/batch: 1 to 1000 job specs,
// each a JSON object.
type BatchRequest struct {
	Jobs []json.RawMessage `json:"jobs"`
}

// BatchDryRun is the answer of POST /api/v1/jobs/batch?dry_run=true: the
// specs normalised, in the request's order; nothing is stored.
type BatchDryRun struct {
	DryRun bool            `json:"dry_run"` // always true
	Specs  []*jobspec.Spec `json:"specs"`
}

// BatchResponse is the answer of POST /api/v1/jobs/batch: the jobs in the
// order of the request, and how many of them an idempotency key named
// already (stored before; nothing new was stored for those).
type BatchResponse struct {
	Jobs     []*jobtype.Job `json:"jobs"`
	Existing int            `json:"existing"`
}

// JobList is one page of GET /api/v1/jobs, newest first. NextCursor is
// empty on the last page.
type JobList struct {
	Jobs       []*jobtype.Job `json:"jobs"`
	NextCursor string         `json:"next_cursor"`
	// LossSeries, with ?loss_series=true only, is the downsampled loss
	// series of each listed job that has made progress, by id, as the
	// overview's running jobs carry it (RunningJob.LossSeries).
	LossSeries map[string][]jobtype.LossPoint `json:"loss_series,omitempty"`
}

// EventList is the answer of GET /api/v1/jobs/{id}/events without follow:
// the job's stored events after the asked id, oldest first. With follow
// each event is one server-sent event whose data is the jobtype.Event.
type EventList struct {
	Events []jobtype.Event `json:"events"`
}
