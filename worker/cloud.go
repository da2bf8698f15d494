package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/internal/cloud"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// CloudConfig configures the AWS worker of one cloud backend. Zero values
// take the defaults stated.
type CloudConfig struct {
	// Routing is the daemon's routing config: the backend's settings, the
	// sites and their tags, where buckets and file:// data live, Redis's
	// site. Required.
	Routing routecfg.Config
	// Backend names the aws backend this worker runs. Required; it must be
	// ready to launch (routecfg.Backend.LaunchReady).
	Backend string
	// EC2 launches, watches, terminates and prices the backend's
	// instances (backends/aws's Backend.Cloud). Required.
	EC2 cloud.Backend
	// S3 reads and writes the backend's work bucket (job.json, staged
	// data, events, status, artifacts) and s3:// outputs. Required.
	S3 agent.ObjectStore
	// Ledger records each dataset copy before it is made. Nil: a file://
	// dataset cannot be staged (the attempt fails with the reason; fail
	// closed).
	Ledger *ledger.Ledger
	// DataDir holds temporary downloads (artifacts on their way to a
	// file:// output). Required.
	DataDir string
	// AllowedRoots are the folders a file:// dataset or output must be
	// under (symbolic links resolved). Nil: no restriction.
	AllowedRoots pathpolicy.Roots
	// TeamRoots: as Config.TeamRoots.
	TeamRoots pathpolicy.TeamRoots
	// Deny: as Config.Deny. A file:// dataset under DataDir or a Deny
	// entry is never staged.
	Deny pathpolicy.Deny
	// MaxAttempts is how many attempts a job gets before a retryable
	// failure is final; default 3. Spot interruptions do not count.
	MaxAttempts int
	// DefaultMaxRuntime is used for a job without max_runtime; default 24h.
	DefaultMaxRuntime time.Duration
	// LeaseTTL is the length of the lease on each watched attempt; default
	// 30s. An attempt whose lease lapsed is adopted by the backend's next
	// worker; it is never reaped (its instance may be running fine).
	LeaseTTL time.Duration
	// HeartbeatTTL of the backend's node (CloudNode); default 15s.
	HeartbeatTTL time.Duration
	// PollInterval is how often each attempt renews its lease, reads its new
	// events and status from S3 and describes its instance; default 5s.
	PollInterval time.Duration
	// LaunchRetry is the wait before launching again after every choice in
	// every subnet was refused for capacity (or the API failed); default
	// 1m. The job waits in its backend's site meanwhile; it never changes
	// site on its own.
	LaunchRetry time.Duration
	// StatusGrace is how long an instance may be gone without a status.json
	// before the attempt counts as lost; default 2m.
	StatusGrace time.Duration
	// ShutdownMargin is the agent's (agent.DefaultShutdownMargin): with no
	// status by launch + max_runtime + ShutdownMargin + StatusGrace, the
	// worker terminates the instance and the job fails (timeout).
	ShutdownMargin time.Duration
	// TaskCheckInterval is how often an idle worker polls its queue;
	// default 100ms.
	TaskCheckInterval time.Duration
	// TrainerPassEnv: as Config.TrainerPassEnv (config trainers.NAME.pass_env).
	// job.json names the job's trainer's list, and the agent passes those
	// variables of its own environment on the instance to the trainer,
	// which otherwise gets only the base environment and the contract's
	// LATHE_*. Nil: none for any trainer.
	TrainerPassEnv map[string][]string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// withDefaults checks c and returns it with the defaults stated, and the
// backend it names.
func (c CloudConfig) withDefaults() (CloudConfig, routecfg.Backend, error) {
	b, err := c.checkBackend()
	if err != nil {
		return c, b, err
	}
	if c.EC2 == nil || c.S3 == nil {
		return c, b, errors.New("worker: aws: EC2 and S3 clients are required")
	}
	if c.DataDir == "" {
		return c, b, errors.New("worker: aws: data dir is required")
	}
	c.defaultTimings()
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, b, nil
}

// checkBackend checks the trainers' pass_env names and returns the aws
// backend c names, ready to launch, with s3:// work and checkpoint URIs.
// On an error it returns what it found of the backend.
func (c CloudConfig) checkBackend() (routecfg.Backend, error) {
	b, ok := c.Routing.Backend(c.Backend)
	if err := checkPassEnv(c.TrainerPassEnv); err != nil {
		return b, fmt.Errorf("worker: aws: %w", err)
	}
	switch {
	case c.Backend == "":
		return b, errors.New("worker: aws: --aws-backend is required (an aws backend of the config)")
	case !ok:
		return b, fmt.Errorf("worker: aws: backend %q is not in the config", c.Backend)
	case b.Kind != routecfg.KindAWS:
		return b, fmt.Errorf("worker: aws: backend %q is kind %q, not aws", c.Backend, b.Kind)
	}
	if err := b.LaunchReady(); err != nil {
		return b, fmt.Errorf("worker: aws: %w", err)
	}
	if _, err := agent.ParseS3URI(b.WorkURI); err != nil {
		return b, fmt.Errorf("worker: aws: backends.%s.work_uri %q: %w", b.Name, b.WorkURI, err)
	}
	if _, err := agent.ParseS3URI(b.CheckpointURI); err != nil {
		return b, fmt.Errorf("worker: aws: backends.%s.checkpoint_uri %q: an attempt on an instance resumes from S3, so it must be s3://: %w",
			b.Name, b.CheckpointURI, err)
	}
	return b, nil
}

// defaultTimings fills the durations left zero (PollInterval at most a
// third of the lease).
func (c *CloudConfig) defaultTimings() {
	if c.DefaultMaxRuntime <= 0 {
		c.DefaultMaxRuntime = 24 * time.Hour
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.HeartbeatTTL <= 0 {
		c.HeartbeatTTL = 15 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.PollInterval > c.LeaseTTL/3 {
		c.PollInterval = c.LeaseTTL / 3
	}
	if c.LaunchRetry <= 0 {
		c.LaunchRetry = time.Minute
	}
	if c.StatusGrace <= 0 {
		c.StatusGrace = 2 * time.Minute
	}
	if c.ShutdownMargin <= 0 {
		c.ShutdownMargin = agent.DefaultShutdownMargin
	}
	if c.TaskCheckInterval <= 0 {
		c.TaskCheckInterval = 100 * time.Millisecond
	}
}

// Cloud is the AWS worker of one cloud backend (`lathed worker --backend
// aws`). It heartbeats as the backend's node (jobtype.CloudNode), consumes
// its queue, and for each attempt: claims it (the attempt record in Redis,
// before anything is launched), re-checks residency, stages a file://
// dataset to the backend's bucket (recorded in the ledger first), writes
// job.json, launches the instance through backends/aws (found by its tags
// first, so a second run launches nothing), and watches it: lease renewal
// (and cancel), the agent's events mirrored into the job, status.json, the
// instance's state. It brings the artifacts to the job's output, terminates
// the instance on every ending, records the instance's cost on the job, and
// writes the attempt's end. Stopped, it detaches (instances keep running);
// started again, it adopts its backend's attempts and re-attaches to their
// instances by id or tags.
type Cloud struct {
	remoteNode
	cfg CloudConfig
	b   routecfg.Backend

	// The backend's instances as the last Find (own, ended too) saw them, shared
	// by every watched attempt: one DescribeInstances per poll for all.
	instMu  sync.Mutex
	instAt  time.Time
	instErr error
	insts   map[string]cloud.Instance
}

// NewCloud returns the AWS worker of cfg.Backend; Start runs it.
func NewCloud(rdb redis.UniversalClient, store *jobstore.Store, cfg CloudConfig) (*Cloud, error) {
	cfg, b, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Cloud{cfg: cfg, b: b, remoteNode: remoteNode{label: "aws", backend: b.Name, eventType: EventCloud, rdb: rdb, store: store,
		log:     cfg.Logger,
		timings: remoteTimings{HeartbeatTTL: cfg.HeartbeatTTL, LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval, TaskCheckInterval: cfg.TaskCheckInterval}}}
	c.init()
	c.run = func(ctx context.Context, job *jobtype.Job) endFunc { return newCloudAttempt(c, job).run(ctx) }
	return c, nil
}

// Start registers the backend's node (failing if another live AWS worker
// runs it), adopts the attempts a previous worker left, and starts taking
// the backend's queue.
func (c *Cloud) Start(ctx context.Context) error {
	if err := c.start(ctx, c.b.MaxInstances); err != nil {
		return err
	}
	c.log.Info("aws worker started", slog.String("node", c.node), slog.String("site", c.b.Site),
		slog.String("region", c.b.Region), slog.Int("max_instances", c.b.MaxInstances), slog.String("incarnation", c.incarnation))
	return nil
}

// tmpDir is where an attempt's downloads go.
func (c *Cloud) tmpDir(id string, attempt int) string {
	return filepath.Join(c.cfg.DataDir, "cloud", c.b.Name, id, fmt.Sprint(attempt))
}

// instance returns what EC2 says of instance id. The backend's instances
// are described in one call at most once per PollInterval and shared by
// every watched attempt; an instance that call did not list (a tag filter
// not seeing it yet) is described on its own. An error says nothing about
// the instance.
func (c *Cloud) instance(ctx context.Context, id string) (cloud.Instance, error) {
	c.instMu.Lock()
	if time.Since(c.instAt) >= c.cfg.PollInterval {
		all, err := c.cfg.EC2.Find(ctx, cloud.Query{OwnOnly: true, Ended: true})
		c.instAt, c.instErr = time.Now(), err
		if err == nil {
			c.insts = make(map[string]cloud.Instance, len(all))
			for _, in := range all {
				c.insts[in.ID] = in
			}
		}
	}
	in, ok := c.insts[id]
	err := c.instErr
	c.instMu.Unlock()
	switch {
	case err != nil:
		return cloud.Instance{}, err
	case ok:
		return in, nil
	}
	return c.cfg.EC2.Describe(ctx, id)
}
