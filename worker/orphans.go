package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// pidfile records a running trainer so that the next incarnation of this
// worker can kill it if this one dies without stopping it (kill -9: the
// trainer's leader gets Pdeathsig, its children do not).
type pidfile struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	PGID    int    `json:"pgid"`
	// StartTime is the leader's start time in clock ticks since boot
	// (/proc/<pid>/stat field 22), so a recycled pid is never mistaken for it.
	StartTime uint64 `json:"start_time"`
	// Incarnation is the worker incarnation that ran the trainer ("" in
	// pidfiles written before it was recorded).
	Incarnation string `json:"incarnation,omitempty"`
}

func pidfileName(dir, id string, attempt int) string {
	return filepath.Join(dir, id+"-"+strconv.Itoa(attempt)+".json")
}

func (w *Worker) writePidfile(dir, id string, attempt, pid int, log *slog.Logger) {
	st, err := procStartTime(pid)
	if err != nil {
		log.Warn("pidfile: read start time", slog.Int("pid", pid), slog.Any("err", err))
		return
	}
	b, _ := json.Marshal(pidfile{JobID: id, Attempt: attempt, PGID: pid, StartTime: st, Incarnation: w.incarnation})
	if err := os.MkdirAll(dir, 0o755); err == nil {
		tmp := pidfileName(dir, id, attempt) + ".tmp"
		if err = os.WriteFile(tmp, b, 0o644); err == nil {
			err = os.Rename(tmp, pidfileName(dir, id, attempt))
		}
	}
	if err != nil {
		log.Warn("pidfile: write", slog.Any("err", err))
	}
}

func removePidfile(dir, id string, attempt int) { _ = os.Remove(pidfileName(dir, id, attempt)) }

// killOrphans kills the process groups of trainers that a previous
// incarnation of this worker left running, and waits until they are gone.
// It returns the pidfiles of the groups it saw gone: their attempts are
// dead (releaseDead). The cgroups left under this worker's own go first:
// they hold those trainers and whatever escaped their process groups.
func (w *Worker) killOrphans() ([]pidfile, error) {
	if err := w.killOrphanCgroups(); err != nil {
		return nil, err
	}
	dir := filepath.Join(w.cfg.DataDir, "pids")
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worker: read %s: %w", dir, err)
	}
	var gone []pidfile
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !strings.HasSuffix(e.Name(), ".json") {
			_ = os.Remove(p)
			continue
		}
		b, err := os.ReadFile(p)
		var pf pidfile
		if err != nil || json.Unmarshal(b, &pf) != nil || pf.PGID <= 1 {
			w.log.Warn("orphans: unreadable pidfile; removing", slog.String("file", p))
			_ = os.Remove(p)
			continue
		}
		st, err := procStartTime(pf.PGID)
		if err == nil && st == pf.StartTime && trainer.GroupAlive(pf.PGID) {
			w.log.Warn("killing a trainer orphaned by a previous incarnation of this worker",
				slog.String("job_id", pf.JobID), slog.Int("attempt", pf.Attempt), slog.Int("pgid", pf.PGID))
			if err := trainer.KillGroup(pf.PGID, syscall.SIGKILL); err != nil {
				w.log.Warn("orphans: kill", slog.Int("pgid", pf.PGID), slog.Any("err", err))
			}
		} else if trainer.GroupAlive(pf.PGID) && err != nil {
			// The leader is gone but members of its group may remain.
			_ = trainer.KillGroup(pf.PGID, syscall.SIGKILL)
		}
		for deadline := time.Now().Add(10 * time.Second); trainer.GroupAlive(pf.PGID) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if trainer.GroupAlive(pf.PGID) {
			return gone, fmt.Errorf("worker: orphaned trainer group %d of job %s will not die", pf.PGID, pf.JobID)
		}
		_ = os.Remove(p)
		gone = append(gone, pf)
	}
	return gone, nil
}

// releaseDead hands the attempts of the trainers killOrphans saw gone back
// to the queue at once (jobstore.ReleaseDead: a compare-and-set on the
// attempt, this node and the dead incarnation), instead of leaving them to
// the reaper, which waits for the lease to expire. An attempt already
// reaped or ended is left alone; one that cannot be written now is the
// reaper's, after its lease.
func (w *Worker) releaseDead(ctx context.Context, gone []pidfile) {
	for _, pf := range gone {
		err := w.store.ReleaseDead(ctx, jobstore.ReleaseDeadParams{ID: pf.JobID, Attempt: pf.Attempt, Node: w.cfg.Node, Dead: pf.Incarnation, Live: w.incarnation})
		switch {
		case err == nil:
			w.log.Warn("released an attempt of this node's previous incarnation: its trainer is gone; the job is queued again",
				slog.String("job_id", pf.JobID), slog.Int("attempt", pf.Attempt), slog.String("dead_incarnation", pf.Incarnation))
		case errors.Is(err, jobstore.ErrConflict), errors.Is(err, jobstore.ErrNotFound):
		default:
			w.log.Warn("release an attempt of this node's previous incarnation; the reaper will, after its lease",
				slog.String("job_id", pf.JobID), slog.Int("attempt", pf.Attempt), slog.Any("err", err))
		}
	}
}

// procState reads field 3 (state: R, S, D, Z, X, …) of /proc/<pid>/stat.
func procState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return s[i+2], nil
}

// killOrphanCgroups kills every process left in the cgroups under this
// worker's cgroup (a previous incarnation's trainers, and what escaped
// their process groups), waits until none is left and removes them.
func (w *Worker) killOrphanCgroups() error {
	if w.cgroupDir == "" {
		return nil
	}
	entries, err := os.ReadDir(w.cgroupDir)
	if err != nil {
		return fmt.Errorf("worker: read cgroup %s: %w", w.cgroupDir, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue // the cgroup's own control files
		}
		cg := filepath.Join(w.cgroupDir, e.Name())
		if populated, _ := trainer.CgroupPopulated(cg); populated {
			w.log.Warn("killing the cgroup of a trainer orphaned by a previous incarnation of this worker", slog.String("cgroup", cg))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := trainer.KillCgroup(ctx, cg)
		cancel()
		if err != nil {
			return fmt.Errorf("worker: orphaned trainer cgroup will not die: %w", err)
		}
	}
	return nil
}

// procStartTime reads field 22 (starttime) of /proc/<pid>/stat.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	// After ")" come fields 3.. ; starttime is field 22 → index 19.
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// purgeStaleTasks removes, from this node's queue, tasks whose attempt the
// store no longer has dispatched to this node (a previous incarnation's
// leftovers, tasks queued by hand for finished jobs) and archived tasks
// (asynq never retries them: MaxRetry 0). Pending tasks that are still
// current stay. A task the store still wants is never removed.
func (w *Worker) purgeStaleTasks(ctx context.Context) {
	purgeStaleTasks(ctx, w.rdb, w.store, w.cfg.Node, w.log)
}

// taskCurrent reports whether task p on node's queue is still one the
// store wants run: its attempt dispatched to node, or, for a gang's rank,
// that rank of the current attempt (dispatched, or running once rank 0
// claimed) placed on node.
func taskCurrent(j *jobtype.Job, p jobtype.TaskPayload, node string) bool {
	if j.Attempt != p.Attempt {
		return false
	}
	if p.Rank == nil {
		return j.State == jobtype.StateDispatched && j.Node == node
	}
	r, g := *p.Rank, j.Gang
	return (j.State == jobtype.StateDispatched || j.State == jobtype.StateRunning) &&
		g != nil && g.Attempt == p.Attempt && r >= 0 && r < len(g.Ranks) && g.Ranks[r].Node == node
}

// purgeStaleTasks deletes the tasks of node's queue whose attempt is no
// longer dispatched to node, and its archived tasks (local and cloud workers).
func purgeStaleTasks(ctx context.Context, rdb redis.UniversalClient, store *jobstore.Store, node string, log *slog.Logger) {
	insp := asynq.NewInspectorFromRedisClient(rdb)
	q := jobtype.NodeQueue(node)
	purged := 0
	pending, err := insp.ListPendingTasks(q, asynq.PageSize(1000))
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		log.Warn("purge: list pending tasks", slog.Any("err", err))
	}
	for _, ti := range pending {
		var p jobtype.TaskPayload
		if json.Unmarshal(ti.Payload, &p) != nil || !jobstore.ValidID(p.JobID) {
			continue // malformed: the handler drops it with a log line
		}
		j, err := store.Get(ctx, p.JobID)
		stale := errors.Is(err, jobstore.ErrNotFound) || (err == nil && !taskCurrent(j, p, node))
		if stale && insp.DeleteTask(q, ti.ID) == nil {
			purged++
		}
	}
	if n, err := insp.DeleteAllArchivedTasks(q); err == nil {
		purged += n
	}
	if purged > 0 {
		log.Info("purged stale tasks from the node's queue", slog.Int("tasks", purged))
	}
}
