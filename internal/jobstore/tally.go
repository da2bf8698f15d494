package jobstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// A tally is the little of a job that a count over every queued job needs
// (the overview's queue numbers and its page of waiting rows, the /metrics
// breakdown), read as plain hash fields: no JSON decoded. The spec's
// priority and the route's kind and backend live inside the spec's and the
// route's JSON, so the writers of those two also store them as fields of
// their own (tallyPriority, tallyRouteKind, tallyRouteBackend): the job's
// creation (Create, CreateMany, a sweep's trials) and SetRoute, the only
// writers of the route. A record stored before those fields existed (no
// priority field) is read brief instead (GetManyBrief), once per read.
// One case reads stale: while a scheduler of a build before these fields
// still leads (a rolling upgrade), a route it rewrites (spill-over, retry,
// reload) leaves route_kind and route_backend as they were, until the job
// is routed again by a newer one.

// The fields only a tally reads: copies of the spec's priority and the
// route's kind and backend, written with the spec and the route.
const (
	tallyPriority     = "priority"
	tallyRouteKind    = "route_kind"
	tallyRouteBackend = "route_backend"
	tallyMaxWait      = "max_wait_ms"
)

// tallyFields are the fields GetTallies reads, in the order tallyOf takes them.
var tallyFields = []string{"state", "name", "team", "backend", "created_at", "gate", "instance",
	tallyPriority, tallyRouteKind, tallyRouteBackend, tallyMaxWait}

// tallyArgs is an HMGET of tallyFields, its key (args[1]) to be set.
var tallyArgs = hmgetArgs(tallyFields)

// Tally is what a count over many active jobs shows of each (GetTallies).
type Tally struct {
	ID    string
	State jobtype.State
	Name  string
	Team  string
	// Backend is the backend of the attempt ("" before it is dispatched);
	// RouteKind and RouteBackend are the route's ("" without a route).
	Backend      string
	RouteKind    string
	RouteBackend string
	// Priority is the spec's, as stored ("" when the spec names none:
	// read it as normal).
	Priority  jobspec.Priority
	CreatedAt time.Time
	// Gate is a sweep trial's admission gate ("" for a job that is not
	// held back by one).
	Gate string
	// Instance is the job's cloud instance (nil for none).
	Instance *jobtype.Instance
	// MaxWait is the spec's max_wait (0: none, or a record stored before
	// the field was).
	MaxWait time.Duration
}

// TallyOf is the tally of a job read whole or brief.
func TallyOf(j *jobtype.Job) Tally {
	t := Tally{ID: j.ID, State: j.State, Name: j.Name, Team: j.Team, Backend: j.Backend, Priority: j.Spec.Priority,
		CreatedAt: j.CreatedAt, Instance: j.Instance, MaxWait: j.Spec.MaxWait.D()}
	if j.Route != nil {
		t.RouteKind, t.RouteBackend = j.Route.Kind, j.Route.Backend
	}
	if j.Trial != nil {
		t.Gate = j.Trial.Gate
	}
	return t
}

// tallyFieldsOf are the tally's own fields of a record with spec and route
// (route nil: none), for the writers that store the spec or the route.
func tallyFieldsOf(spec *jobspec.Spec, route *jobtype.RouteInfo) []any {
	out := []any{tallyPriority, string(spec.Priority), tallyMaxWait, spec.MaxWait.D().Milliseconds()}
	if route != nil {
		out = append(out, tallyRouteKind, route.Kind, tallyRouteBackend, route.Backend)
	}
	return out
}

// GetTallies is each job's tally, in one pipeline of an HMGET of eleven small
// fields a job, in the order of ids; a job that is gone is left out. A
// record written before the tally's own fields existed is read brief
// (GetManyBrief: one more round trip, only when there is one).
func (s *Store) GetTallies(ctx context.Context, ids []string) ([]Tally, error) {
	if len(ids) == 0 {
		return []Tally{}, nil
	}
	cmds, err := s.hmgetMany(ctx, ids, tallyArgs, "get tallies")
	if err != nil {
		return nil, err
	}
	out := make([]Tally, 0, len(ids))
	var old []string // records without the tally's fields
	for i, id := range ids {
		t, ok, err := tallyOf(id, cmds[i].Val())
		switch {
		case err != nil:
			return nil, err
		case !ok:
			continue // gone
		case t == nil:
			old = append(old, id)
		default:
			out = append(out, *t)
		}
	}
	if len(old) > 0 {
		jobs, err := s.GetManyBrief(ctx, old)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			out = append(out, TallyOf(j))
		}
	}
	return out, nil
}

// tallyOf is the tally of the values of tallyFields: ok false for a record
// that is gone, a nil tally for one without the tally's own fields.
func tallyOf(id string, vals []any) (t *Tally, ok bool, err error) {
	str := func(i int) string { v, _ := vals[i].(string); return v }
	if str(0) == "" {
		return nil, false, nil
	}
	if _, stored := vals[7].(string); !stored {
		return nil, true, nil
	}
	t = &Tally{ID: id, State: jobtype.State(str(0)), Name: str(1), Team: str(2), Backend: str(3), CreatedAt: msTime(str(4)),
		Gate: str(5), Priority: jobspec.Priority(str(7)), RouteKind: str(8), RouteBackend: str(9)}
	if ms, err := strconv.ParseInt(str(10), 10, 64); err == nil {
		t.MaxWait = time.Duration(ms) * time.Millisecond
	}
	if raw := str(6); raw != "" {
		t.Instance = &jobtype.Instance{}
		if err := json.Unmarshal([]byte(raw), t.Instance); err != nil {
			return nil, true, fmt.Errorf("jobstore: get %s: corrupt record: field instance: %w", id, err)
		}
	}
	return t, true, nil
}
