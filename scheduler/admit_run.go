package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/policy"
	"github.com/lathe-ml/lathe/scheduler/routing"
)

// Admission without a request: what a schedule's tick does to start a
// job (schedules.go). It follows the submit path of api.go (admissible,
// admit, CreateLogged, reserveBudget) with the id given, not drawn, and
// errors instead of HTTP answers.

// RefusedError is a run that routing refused: no backend may run it. The
// refusal is in the ledger, as a refused submit's is.
type RefusedError struct{ Reasons []string }

func (e *RefusedError) Error() string {
	return "no backend may run this job: " + strings.Join(e.Reasons, "; ")
}

// admitRun routes spec (parsed and normalised) for principal p under job id
// id and stores it, as a submit does. A job stored under id already (a
// second scheduler, a pass resumed after a crash) is returned with
// existed=true and nothing is stored or reserved.
func (s *Scheduler) admitRun(ctx context.Context, p principal, id string, spec *jobspec.Spec) (*jobtype.Job, bool, error) {
	if j, err := s.store.Get(ctx, id); err == nil {
		return j, true, nil
	} else if !errors.Is(err, jobstore.ErrNotFound) {
		return nil, false, err
	}
	if fe := s.admissible(spec); len(fe) > 0 {
		return nil, false, &jobspec.ValidationError{Errors: fe}
	}
	rs := s.routing()
	snap, err := s.snapshotFor(ctx, rs, Assumptions{})
	if err != nil {
		return nil, false, err
	}
	out := strings.TrimRight(spec.Output.URI, "/")
	rj := routingJob(spec, id, p.Team, out+"/"+id)
	d := routing.Decide(rj, snap)
	if d.Refused {
		rj.ID = ""
		if _, err := s.record(ctx, rs, p, "submit", spec.Name, 0, rj, snap, d); err != nil {
			return nil, false, err
		}
		return nil, false, &RefusedError{Reasons: d.Reasons}
	}
	nj := jobstore.NewJob{ID: id, Spec: spec, OutputURI: out + "/{id}", Submitter: p.Name, Team: p.Team,
		Route: policy.RouteInfo(d, rs, "submit", 1, 0, snap.Now)}
	if s.cfg.Ledger != nil {
		if nj.Records, err = decisionRecords(rs, p, "submit", spec.Name, 1, rj, snap, d); err != nil {
			return nil, false, err
		}
	}
	job, existed, err := s.store.CreateLogged(ctx, s.cfg.Ledger, nj)
	if err != nil {
		// Stored meanwhile by another scheduler: the id is taken.
		if j, gerr := s.store.Get(ctx, id); gerr == nil {
			return j, true, nil
		}
		return nil, false, err
	}
	if !existed {
		s.reserveBudget(ctx, rs, job, d)
	}
	s.Wake()
	return job, existed, nil
}

// cancelRun cancels job id as POST /cancel does (the store's cancel, then
// the fast paths: a task still queued is deleted, a running one is told),
// and returns the state the job was found in.
func (s *Scheduler) cancelRun(ctx context.Context, id string) (jobtype.State, error) {
	st, err := s.store.Cancel(ctx, id)
	if err != nil {
		return st, fmt.Errorf("scheduler: cancel %s: %w", id, err)
	}
	job, err := s.store.Get(ctx, id)
	if err != nil {
		return st, fmt.Errorf("scheduler: cancel %s: %w", id, err)
	}
	tid := jobtype.TaskID(job.ID, job.Attempt)
	switch st {
	case jobtype.StateDispatched:
		if err := s.insp.DeleteTask(jobtype.NodeQueue(job.Node), tid); err == nil {
			if err := s.store.CancelDispatched(ctx, job.ID, job.Attempt); err != nil {
				s.log.Debug("cancel dispatched", slog.String("job_id", id), slog.Any("err", err))
			}
		} else {
			_ = s.insp.CancelProcessing(tid)
		}
	case jobtype.StateRunning:
		_ = s.insp.CancelProcessing(tid)
	}
	return st, nil
}
