package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// slurmComment marks the Slurm jobs of the deployment called cluster
// (sbatch --comment): only those are ever taken for orphans.
func slurmComment(cluster string) string { return "lathe:cluster=" + cluster }

// parseSlurmJobName is slurmJobName's inverse: the job id and attempt of
// a Slurm job named lathe-JOB-ATTEMPT; ok is false for any other name.
func parseSlurmJobName(name string) (id string, attempt int, ok bool) {
	rest, found := strings.CutPrefix(name, "lathe-")
	i := strings.LastIndexByte(rest, '-')
	if !found || i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 1 || !jobstore.ValidID(rest[:i]) {
		return "", 0, false
	}
	return rest[:i], n, true
}

// sweepOrphans cancels the Slurm jobs of this deployment (its comment) in
// the backend's partition, submitted more than OrphanGrace ago and not
// ended, whose attempt the store no longer holds on this backend: the job
// is gone or ended, has moved on to another attempt (a preemption, a
// retry), or is held by another node. A job this worker watches is never
// one; a failure to read Slurm or the store cancels nothing.
func (s *Slurm) sweepOrphans(ctx context.Context) {
	jobs, err := s.cfg.Slurm.InPartition(ctx, s.b.Partition)
	if err != nil {
		s.log.Debug("orphans: list the partition's jobs", slog.Any("err", err))
		return
	}
	for _, j := range jobs {
		id, attempt, ok := parseSlurmJobName(j.Name)
		if !ok || j.Comment != slurmComment(s.cfg.Cluster) || slurm.Ended(j.State) || s.isWatched(j.ID) ||
			j.SubmitTime.IsZero() || time.Since(j.SubmitTime) < s.cfg.OrphanGrace {
			continue
		}
		why, orphan := s.orphaned(ctx, id, attempt)
		if !orphan {
			continue
		}
		s.log.Warn("cancelling an orphaned Slurm job", slog.String("slurm_job", j.ID), slog.String("job_id", id),
			slog.Int("attempt", attempt), slog.String("why", why))
		if err := s.cfg.Slurm.Cancel(ctx, j.ID); err != nil {
			s.log.Warn("orphans: scancel", slog.String("slurm_job", j.ID), slog.Any("err", err))
		}
	}
}

// orphaned says whether the store no longer holds attempt of job id on
// this backend, and why.
func (s *Slurm) orphaned(ctx context.Context, id string, attempt int) (string, bool) {
	job, err := s.store.Get(ctx, id)
	switch {
	case errors.Is(err, jobstore.ErrNotFound):
		return "the job is not in the store", true
	case err != nil:
		return "", false
	case job.Attempt != attempt:
		return fmt.Sprintf("the job is at attempt %d", job.Attempt), true
	case job.State.Terminal():
		return "the job ended " + string(job.State), true
	case job.Node != s.node:
		return "the attempt is on node " + job.Node, true
	case job.State != jobtype.StateProvisioning && job.State != jobtype.StateRunning:
		return "the attempt is " + string(job.State), true
	}
	return "", false
}

func (s *Slurm) isWatched(id string) bool {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	return s.watched[id]
}
