package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// SlurmScheduler is what the slurm worker asks of Slurm (backends/slurm's
// CLI is the one adapter).
type SlurmScheduler interface {
	// Submit submits a batch job and returns its Slurm job id.
	Submit(ctx context.Context, r slurm.SubmitRequest) (string, error)
	// Job returns a job in any state Slurm still holds; slurm.ErrNotFound
	// when it holds none.
	Job(ctx context.Context, id string) (slurm.Job, error)
	// Jobs returns those of ids Slurm still holds, by id, in one call.
	Jobs(ctx context.Context, ids []string) (map[string]slurm.Job, error)
	// FindByName returns the jobs of that name Slurm still holds.
	FindByName(ctx context.Context, name string) ([]slurm.Job, error)
	// Cancel cancels a job (scancel); an ended one is not an error.
	Cancel(ctx context.Context, id string) error
	// QueueWait estimates the wait of a new job in a partition, from its
	// pending jobs.
	QueueWait(ctx context.Context, partition string) (time.Duration, error)
	// InPartition returns the jobs of a partition Slurm still holds.
	InPartition(ctx context.Context, partition string) ([]slurm.Job, error)
}

var _ SlurmScheduler = (*slurm.CLI)(nil)

// SlurmConfig configures the slurm worker of one slurm backend. Zero values
// take the defaults stated.
type SlurmConfig struct {
	// Routing is the daemon's routing config: the backend's settings, the
	// sites and their tags, where file:// data lives, Redis's site.
	// Required.
	Routing routecfg.Config
	// Backend names the slurm backend this worker runs. Required.
	Backend string
	// Slurm submits, watches and cancels the attempts' Slurm jobs.
	// Required.
	Slurm SlurmScheduler
	// Trainers, Launchers, DemoPython, HFPython, TrainerPassEnv: as
	// Config's. ScriptsDir is where the reference trainer lies on storage
	// the Slurm nodes share; default WORK_DIR/scripts (the caller writes it).
	Trainers       map[string][]string
	Launchers      map[string]Launcher
	DemoPython     string
	HFPython       string
	ScriptsDir     string
	TrainerPassEnv map[string][]string
	// AllowedRoots are the folders a file:// dataset or output must be
	// under (by their text; the nodes read the data in place). Nil: no
	// restriction. Deny: as Config.Deny, for the output.
	AllowedRoots pathpolicy.Roots
	Deny         pathpolicy.Deny
	// MaxAttempts is how many attempts a job gets before a retryable
	// failure is final; default 3. Preemptions do not count.
	MaxAttempts int
	// DefaultMaxRuntime is used for a job without max_runtime; default 24h.
	// The Slurm job's time limit is the max runtime plus KillGrace and a
	// minute.
	DefaultMaxRuntime time.Duration
	// KillGrace is how long the trainer has after SIGTERM before SIGKILL,
	// in the step; default 30s.
	KillGrace time.Duration
	// LeaseTTL of each watched attempt; default 30s. HeartbeatTTL of the
	// backend's node; default 15s. PollInterval: how often each attempt
	// renews its lease, reads its events and asks Slurm its state; default
	// 5s, at most a third of the lease. TaskCheckInterval: how often an
	// idle worker polls its queue; default 100ms.
	LeaseTTL, HeartbeatTTL, PollInterval, TaskCheckInterval time.Duration
	// SubmitRetry is the wait before submitting again after sbatch failed;
	// default 30s.
	SubmitRetry time.Duration
	// LostGrace is how long a Slurm job may be unknown to Slurm, with no
	// status written, before the attempt counts as lost; default 2m.
	LostGrace time.Duration
	// Cluster names this deployment (the config's cluster): its Slurm jobs
	// carry it in their comment, and only those are taken for orphans;
	// default "lathe". Two deployments sharing a partition must differ.
	Cluster string
	// OrphanGrace: a Slurm job of this deployment whose attempt the store
	// no longer holds on this backend is cancelled once it was submitted
	// this long ago; default 10m.
	OrphanGrace time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// withDefaults checks c for a backend of kind (slurm or kubernetes) and
// returns it with the defaults stated, and the backend it names.
func (c SlurmConfig) withDefaults(kind string) (SlurmConfig, routecfg.Backend, error) {
	b, ok := c.Routing.Backend(c.Backend)
	flag := map[string]string{routecfg.KindSlurm: "--slurm-backend", routecfg.KindKubernetes: "--kube-backend"}[kind]
	switch {
	case c.Backend == "":
		return c, b, fmt.Errorf("worker: %s: %s is required (a %s backend of the config)", kind, flag, kind)
	case !ok:
		return c, b, fmt.Errorf("worker: %s: backend %q is not in the config", kind, c.Backend)
	case b.Kind != kind:
		return c, b, fmt.Errorf("worker: %s: backend %q is kind %q, not %s", kind, c.Backend, b.Kind, kind)
	case c.Slurm == nil:
		return c, b, fmt.Errorf("worker: %s: a %s client is required", kind, kind)
	}
	if c.ScriptsDir == "" {
		c.ScriptsDir = filepath.Join(b.WorkDir, "scripts")
	}
	tc, err := (Config{Trainers: c.Trainers, Launchers: c.Launchers, DemoPython: c.DemoPython, HFPython: c.HFPython,
		ScriptsDir: c.ScriptsDir, TrainerPassEnv: c.TrainerPassEnv, DataDir: b.WorkDir}).trainerDefaults()
	if err != nil {
		return c, b, fmt.Errorf("worker: %s: %w", kind, err)
	}
	c.Trainers, c.Launchers, c.DemoPython, c.HFPython = tc.Trainers, tc.Launchers, tc.DemoPython, tc.HFPython
	c.defaultTimings()
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, b, nil
}

func (c *SlurmConfig) defaultTimings() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.DefaultMaxRuntime, 24*time.Hour)
	def(&c.KillGrace, 30*time.Second)
	def(&c.LeaseTTL, 30*time.Second)
	def(&c.HeartbeatTTL, 15*time.Second)
	def(&c.PollInterval, 5*time.Second)
	def(&c.TaskCheckInterval, 100*time.Millisecond)
	def(&c.SubmitRetry, 30*time.Second)
	def(&c.LostGrace, 2*time.Minute)
	def(&c.OrphanGrace, 10*time.Minute)
	if c.Cluster == "" {
		c.Cluster = "lathe"
	}
	if c.PollInterval > c.LeaseTTL/3 {
		c.PollInterval = c.LeaseTTL / 3
	}
}

// trainerConfig is the Config trainerArgvOf reads.
func (c SlurmConfig) trainerConfig() Config {
	return Config{Trainers: c.Trainers, Launchers: c.Launchers, DemoPython: c.DemoPython, HFPython: c.HFPython, ScriptsDir: c.ScriptsDir}
}

// Slurm is the slurm worker of one slurm backend (`lathed worker --backend
// slurm`). It heartbeats as the backend's node (jobtype.CloudNode),
// consumes its queue, and for each attempt: claims it (dispatched →
// provisioning, in the store before anything is submitted), re-checks
// residency, writes the attempt's folder under the backend's work_dir
// (the job file, the step file, the batch script), submits the batch job
// with sbatch (found by its name first, so a second run submits nothing),
// records the Slurm job id on the job, and watches it: lease renewal (and
// cancel: scancel), the step's events mirrored into the job, Slurm's
// state. The batch script runs `lathed slurm-step`, which runs the trainer
// under the trainer contract (RunSlurmStep) and writes events and a
// status to the attempt's folder. The worker publishes the artifacts to
// the job's output, records the cost (GPUs × price × Slurm's run time) and
// writes the attempt's end. Stopped, it detaches (Slurm jobs keep
// running); started again, it adopts its backend's attempts and
// re-attaches to their Slurm jobs by the recorded id or by name.
type Slurm struct {
	remoteNode
	cfg SlurmConfig
	b   routecfg.Backend
	w   poolWords
	// logTail, when set, is the tail of the batch job's output (a pod's log
	// from the API server); nil: the Slurm job's output file.
	logTail func(ctx context.Context, id string) string

	// The Slurm jobs of the watched attempts as the last squeue saw them,
	// shared by every watched attempt: one squeue per poll for all.
	jobsMu  sync.Mutex
	jobsAt  time.Time
	jobsErr error
	jobs    map[string]slurm.Job
	watched map[string]bool // Slurm job ids
}

// NewSlurm returns the slurm worker of cfg.Backend; Start runs it.
func NewSlurm(rdb redis.UniversalClient, store *jobstore.Store, cfg SlurmConfig) (*Slurm, error) {
	cfg, b, err := cfg.withDefaults(routecfg.KindSlurm)
	if err != nil {
		return nil, err
	}
	return newBatchWorker(rdb, store, cfg, b, slurmWords(b)), nil
}

// newBatchWorker is the worker of batch pool b (slurm or kubernetes), cfg
// with its defaults, speaking of it in w's words.
func newBatchWorker(rdb redis.UniversalClient, store *jobstore.Store, cfg SlurmConfig, b routecfg.Backend, w poolWords) *Slurm {
	s := &Slurm{cfg: cfg, b: b, w: w, remoteNode: remoteNode{label: b.Kind, backend: b.Name, eventType: w.EventType, rdb: rdb, store: store,
		log:     cfg.Logger,
		timings: remoteTimings{HeartbeatTTL: cfg.HeartbeatTTL, LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval, TaskCheckInterval: cfg.TaskCheckInterval}}}
	s.init()
	s.run = func(ctx context.Context, job *jobtype.Job) endFunc { return newSlurmAttempt(s, job).run(ctx) }
	s.refresh = s.queueWait
	s.sweep = s.sweepOrphans
	return s
}

// Start registers the backend's node (failing if another live slurm
// worker runs it), adopts the attempts a previous worker left, and starts
// taking the backend's queue.
func (s *Slurm) Start(ctx context.Context) error {
	if err := os.MkdirAll(s.b.WorkDir, 0o755); err != nil {
		return fmt.Errorf("worker: %s: backends.%s.work_dir: %w", s.b.Kind, s.b.Name, err)
	}
	if err := s.start(ctx, s.b.MaxInstances); err != nil {
		return err
	}
	s.log.Info(s.b.Kind+" worker started", slog.String("node", s.node), slog.String("site", s.b.Site),
		slog.String("where", s.w.Region), slog.Int("max_jobs", s.b.MaxInstances), slog.String("incarnation", s.incarnation))
	return nil
}

// queueWait puts Slurm's estimate of the partition's queue into the
// node's heartbeat (routing adds it to the backend's wait); when Slurm
// cannot say, the last estimate stays.
func (s *Slurm) queueWait(ctx context.Context, n *jobstore.Node) {
	w, err := s.cfg.Slurm.QueueWait(ctx, s.b.Partition)
	if err != nil {
		s.log.Debug("queue wait of the partition unknown", slog.Any("err", err))
		return
	}
	n.QueueWaitS = w.Seconds()
}

// job returns what Slurm says of Slurm job id (slurm.ErrNotFound when it
// holds none). The watched attempts' jobs are asked in one squeue at most
// once per PollInterval; a job that call did not list is asked on its own.
func (s *Slurm) job(ctx context.Context, id string) (slurm.Job, error) {
	s.jobsMu.Lock()
	if s.watched == nil {
		s.watched = map[string]bool{}
	}
	if !s.watched[id] {
		s.watched[id], s.jobsAt = true, time.Time{}
	}
	if time.Since(s.jobsAt) >= s.cfg.PollInterval {
		ids := make([]string, 0, len(s.watched))
		for w := range s.watched {
			ids = append(ids, w)
		}
		s.jobs, s.jobsErr = s.cfg.Slurm.Jobs(ctx, ids)
		s.jobsAt = time.Now()
	}
	j, ok := s.jobs[id]
	err := s.jobsErr
	s.jobsMu.Unlock()
	switch {
	case err != nil:
		return slurm.Job{}, err
	case ok:
		return j, nil
	}
	return s.cfg.Slurm.Job(ctx, id)
}

// forget stops asking Slurm of job id (its attempt ended or detached).
func (s *Slurm) forget(id string) {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	delete(s.watched, id)
}

// poolWords are how a batch pool's worker speaks of its system in notes,
// errors and the job's instance record.
type poolWords struct {
	System    string // "Slurm", "Kubernetes"
	Job       string // "Slurm job", "Kubernetes Job"
	Cancel    string // "scancel", "delete"
	Type      string // the instance type's prefix, before the GPU count
	Region    string // where in the system: the partition, the namespace
	EventType string // of the worker's notes (EventSlurm, EventKube)
}

func slurmWords(b routecfg.Backend) poolWords {
	return poolWords{System: "Slurm", Job: "Slurm job", Cancel: "scancel", Type: "slurm gpu:", Region: b.Partition, EventType: EventSlurm}
}

// submitted is the note of a batch job submitted (verb) for request r in
// folder dir.
func (w poolWords) submitted(id, verb string, r slurm.SubmitRequest, dir string) string {
	if w.System == "Slurm" {
		return fmt.Sprintf("Slurm job %s %s: %s, partition %s, account %q, --gres=%s, folder %s",
			id, verb, r.Name, r.Partition, r.Account, r.GRES(), dir)
	}
	return fmt.Sprintf("%s %s %s: namespace %s, nvidia.com/gpu %d, folder %s", w.Job, id, verb, w.Region, r.GPUs, dir)
}

// jobNoun is "job ID" for Slurm's preemption notes (Slurm PREEMPTED job
// 12), "Job ID" otherwise.
func (w poolWords) jobNoun(id string) string {
	if w.System == "Slurm" {
		return "job " + id
	}
	return "Job " + id
}
