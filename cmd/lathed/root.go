package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/backends/local/nvmlinventory"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/ledger"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/redact"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
	"github.com/lathe-ml/lathe/scripts"
	"github.com/lathe-ml/lathe/worker"
)

// opts are the flags shared by the daemon's commands.
type opts struct {
	configPath string
	listen     string
	dataDir    string
	redisURL   string
	node       string
	slots      int
	gpus       string
	advertise  string
	gpusSet    bool // --gpus was given: it wins over worker.gpus
	backend    string
	awsBackend string
	// slurmBackend and slurmConf: worker --backend slurm's.
	slurmBackend, slurmConf string
	// kubeBackend and kubeconfig: worker --backend kubernetes's.
	kubeBackend, kubeconfig string
	upKube                  []string // up --kube-backend: kubernetes workers run in the same process
	upClouds                []string // up --aws-backend: AWS workers run in the same process
	upSlurm                 []string // up --slurm-backend: slurm workers run in the same process
	endpoint                string
	logLevel                string
	redisWait               time.Duration
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &opts{}
	root := &cobra.Command{
		Use:           "lathed",
		Short:         "Lathe's daemon: runs LoRA fine-tuning jobs on local GPUs and the cloud",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&o.configPath, "config", "", "daemon config file (see configs/lathe.yaml)")
	pf.StringVar(&o.dataDir, "data-dir", "", "data directory (work folders, checkpoints, artifacts, managed Redis); default ./lathe-data")
	pf.StringVar(&o.redisURL, "redis-url", "", "Redis `url`: redis://host:port/db, unix:///path, or Sentinel redis+sentinel://[:password@]host:port,host:port/master[/db][?min_replicas=N&replica_timeout=D] (docs/operations.md); lathed up runs its own when empty")
	pf.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	pf.DurationVar(&o.redisWait, "redis-wait", 30*time.Second, "how long to wait for Redis at start")

	up, sched, wk := upCmd(o, stderr), schedulerCmd(o, stderr), workerCmd(o, stderr)
	for _, c := range []*cobra.Command{up, sched, wk} {
		c.Flags().StringVar(&o.endpoint, "endpoint-url", "", "EC2/S3-compatible endpoint for the aws backends (path-style S3); default AWS (or AWS_ENDPOINT_URL)")
	}
	root.AddCommand(up, sched, wk, agentCmd(stderr, &o.logLevel), slurmStepCmd(stderr, &o.logLevel), ledgerCmd(o, stdout, stderr))
	addVersion(root, stdout)
	return root
}

// upCmd is `lathed up`: the scheduler and a worker in one process.
func upCmd(o *opts, stderr io.Writer) *cobra.Command {
	up := &cobra.Command{
		Use:   "up",
		Short: "Scheduler and local worker in one process, with its own Redis unless --redis-url is given",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.gpusSet = c.Flags().Changed("gpus")
			return run(c.Context(), o, stderr, true, true)
		},
	}
	addListenFlag(up, o)
	addWorkerFlags(up, o)
	up.Flags().StringArrayVar(&o.upClouds, "aws-backend", nil, "also run the AWS worker of this aws backend of the config in this process (repeatable)")
	up.Flags().StringArrayVar(&o.upSlurm, "slurm-backend", nil, "also run the slurm worker of this slurm backend of the config in this process (repeatable)")
	up.Flags().StringVar(&o.slurmConf, "slurm-conf", "", "with --slurm-backend: the slurm.conf Slurm's commands use (default slurm.conf of the config, or Slurm's own)")
	up.Flags().StringArrayVar(&o.upKube, "kube-backend", nil, "also run the kubernetes worker of this kubernetes backend of the config in this process (repeatable)")
	up.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "with --kube-backend: the cluster's kubeconfig (default kubernetes.kubeconfig of the config, or the in-cluster config)")
	return up
}

// schedulerCmd is `lathed scheduler`: the scheduler alone.
func schedulerCmd(o *opts, stderr io.Writer) *cobra.Command {
	sched := &cobra.Command{
		Use:   "scheduler",
		Short: "HTTP API and placement (needs --redis-url or redis.url)",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return run(c.Context(), o, stderr, true, false) },
	}
	addListenFlag(sched, o)
	return sched
}

// workerCmd is `lathed worker`: a local or an AWS worker alone.
func workerCmd(o *opts, stderr io.Writer) *cobra.Command {
	wk := &cobra.Command{
		Use:   "worker",
		Short: "Runs attempts on this machine (needs --redis-url or redis.url)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			switch o.backend {
			case "local":
			case "aws":
				if o.awsBackend == "" {
					return fmt.Errorf("--backend aws needs --aws-backend NAME (an aws backend of the config)")
				}
			case "slurm":
				if o.slurmBackend == "" {
					return fmt.Errorf("--backend slurm needs --slurm-backend NAME (a slurm backend of the config)")
				}
			case "kubernetes":
				if o.kubeBackend == "" {
					return fmt.Errorf("--backend kubernetes needs --kube-backend NAME (a kubernetes backend of the config)")
				}
			default:
				return fmt.Errorf("--backend %q: must be local, aws, slurm or kubernetes", o.backend)
			}
			o.gpusSet = c.Flags().Changed("gpus")
			return run(c.Context(), o, stderr, false, true)
		},
	}
	wk.Flags().StringVar(&o.backend, "backend", "local", "worker backend: local (this machine's GPUs), aws (launches EC2 instances for one aws backend), slurm (submits to Slurm for one slurm backend) or kubernetes (makes Kubernetes Jobs for one kubernetes backend)")
	wk.Flags().StringVar(&o.awsBackend, "aws-backend", "", "with --backend aws: the aws backend of the config this worker runs")
	wk.Flags().StringVar(&o.slurmBackend, "slurm-backend", "", "with --backend slurm: the slurm backend of the config this worker runs")
	wk.Flags().StringVar(&o.slurmConf, "slurm-conf", "", "with --backend slurm: the slurm.conf Slurm's commands use (default slurm.conf of the config, or Slurm's own)")
	wk.Flags().StringVar(&o.kubeBackend, "kube-backend", "", "with --backend kubernetes: the kubernetes backend of the config this worker runs")
	wk.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "with --backend kubernetes: the cluster's kubeconfig (default kubernetes.kubeconfig of the config, or the in-cluster config)")
	addWorkerFlags(wk, o)
	return wk
}

// addListenFlag adds --listen, the API's address, to c.
func addListenFlag(c *cobra.Command, o *opts) {
	c.Flags().StringVar(&o.listen, "listen", "", "API address (default 127.0.0.1:8080)")
}

// addWorkerFlags adds the local worker's flags to c: --node, --slots, --gpus.
func addWorkerFlags(c *cobra.Command, o *opts) {
	c.Flags().StringVar(&o.node, "node", "", "unique node name (default the host name)")
	c.Flags().StringVar(&o.advertise, "advertise-addr", "", "IP address the other nodes reach this one at: MASTER_ADDR of a job spanning nodes whose rank 0 runs here (default the first non-loopback IPv4 address)")
	c.Flags().IntVar(&o.slots, "slots", 0, "attempts run at once (CPU slots; default 2)")
	c.Flags().StringVar(&o.gpus, "gpus", "auto", "GPUs: auto (NVML; 0 GPUs without the driver), none, or simulated:"+
		strings.Join(nvmlinventory.SimulatedServers(), "|")+" (fake GPUs, jobs run on the CPU)")
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// run wires and runs the scheduler and/or the worker until ctx ends: the
// config, Redis and the store (openWiring), then the workers and the
// scheduler; on the way out, what it started stops in reverse.
func run(ctx context.Context, o *opts, stderr io.Writer, withScheduler, withWorker bool) error {
	d, err := openWiring(ctx, o, stderr, withScheduler && withWorker)
	if err != nil {
		return err
	}
	defer d.close()
	if withWorker && o.backend == "aws" {
		if err := d.startCloudWorker(ctx, o.awsBackend); err != nil {
			return err
		}
	} else if withWorker && o.backend == "slurm" {
		if err := d.startSlurmWorker(ctx, o.slurmBackend); err != nil {
			return err
		}
	} else if withWorker && o.backend == "kubernetes" {
		if err := d.startKubeWorker(ctx, o.kubeBackend); err != nil {
			return err
		}
	} else if withWorker {
		if err := d.startLocalWorker(ctx); err != nil {
			return err
		}
	}
	if withScheduler {
		if err := d.startScheduler(ctx); err != nil {
			return err
		}
	}
	<-ctx.Done()
	d.log.Info("shutting down")
	return nil
}

// wiring is what run wires: the config in force, Redis, the store, and
// what it started, stopped in reverse by close.
type wiring struct {
	o        *opts
	log      *slog.Logger
	fc       *fileConfig
	dataDir  string
	url      string       // Redis
	lock     *dataDirLock // lathed up's hold on the data dir
	managed  *managedRedis
	target   redisTarget // url taken apart: Sentinel, min_replicas
	rdb      *redis.Client
	store    *jobstore.Store
	roots    pathpolicy.Roots
	teams    pathpolicy.TeamRoots // teams.<name>.allowed_roots
	endpoint string               // EC2/S3 endpoint of the aws backends
	stops    []func(context.Context) error
}

// openWiring reads the config, makes the data folder, connects to Redis
// (starting a managed one when ownRedis and none is configured) and checks
// it keeps every key. With ownRedis (lathed up) it first locks the data
// folder: one lathed up per folder (lockDataDir). On error, what it opened
// is closed.
func openWiring(ctx context.Context, o *opts, stderr io.Writer, ownRedis bool) (_ *wiring, err error) {
	log, err := newLogger(stderr, o.logLevel)
	if err != nil {
		return nil, err
	}
	if o.gpusSet {
		if _, err := nvmlinventory.ParseGPUsFlag(o.gpus); err != nil {
			return nil, err
		}
	}
	fc, err := loadConfig(o.configPath)
	if err != nil {
		return nil, err
	}
	d := &wiring{o: o, log: log, fc: fc}
	warnReadableSecrets(o.configPath, fc, log)
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	if d.dataDir, err = filepath.Abs(firstNonEmpty(o.dataDir, fc.DataDir, routecfg.DefaultDataDir)); err != nil {
		return nil, fmt.Errorf("--data-dir: %w", err)
	}
	if err := os.MkdirAll(d.dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", d.dataDir, err)
	}
	if ownRedis {
		// Before anything else there: a second lathed up would start a
		// second redis-server on the same socket and remove the first
		// one's socket file when it stops.
		if d.lock, err = lockDataDir(d.dataDir); err != nil {
			return nil, err
		}
	}
	if err := d.openRedis(ctx, ownRedis); err != nil {
		return nil, err
	}
	d.store = jobstore.New(d.rdb, jobstore.Config{Prefix: fc.Redis.KeyPrefix, EventsMaxLen: fc.Jobs.EventsMaxLen,
		MinReplicas: d.target.minReplicas, ReplicaTimeout: d.target.replicaTimeout})
	if d.roots, err = allowedRoots(fc, d.dataDir); err != nil {
		return nil, err
	}
	log.Info("file:// datasets and outputs allowed under", slog.Any("allowed_roots", []string(d.roots)))
	d.teams = fc.teamRoots
	for _, team := range slices.Sorted(maps.Keys(d.teams)) {
		log.Info("team's own allowed roots (its jobs and schedule files may use only these)", slog.String("team", team),
			slog.Any("allowed_roots", []string(d.teams[team])))
	}
	d.endpoint = firstNonEmpty(o.endpoint, fc.AWS.EndpointURL)
	return d, nil
}

// openRedis connects to the configured Redis, or starts a managed one when
// none is configured and ownRedis (lathed up), then waits for it and checks
// its eviction policy (an embedded managed Redis needs no check).
func (d *wiring) openRedis(ctx context.Context, ownRedis bool) error {
	d.url = firstNonEmpty(d.o.redisURL, d.fc.Redis.URL)
	if d.url == "" {
		if !ownRedis {
			return fmt.Errorf("--redis-url (or redis.url in the config) is required: only `lathed up` runs its own Redis")
		}
		m, err := startManagedRedis(ctx, d.dataDir, d.lock.file(), d.log)
		if err != nil {
			return err
		}
		d.managed, d.url = m, m.URL
	}
	rdb, err := newRedisClient(d.url)
	if err != nil {
		return err
	}
	d.rdb = rdb
	d.target, _ = parseRedisURL(d.url) // newRedisClient parsed it
	if err := waitRedis(ctx, rdb, d.o.redisWait, d.log); err != nil {
		return err
	}
	if d.managed != nil && d.managed.Embedded {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := checkNoEviction(cctx, rdb); err != nil {
		return err
	}
	warnNoAOF(cctx, rdb, d.log)
	if err := checkAOFTruncation(cctx, rdb, d.log); err != nil {
		return err
	}
	warnFewReplicas(cctx, rdb, d.target, d.log)
	return nil
}

// allowedRoots is jobs.allowed_roots, or the data folder and the working
// folder when the config names none.
func allowedRoots(fc *fileConfig, dataDir string) (pathpolicy.Roots, error) {
	rootList := fc.Jobs.AllowedRoots
	if len(rootList) == 0 {
		cwd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
		rootList = []string{dataDir, cwd}
	}
	roots, err := pathpolicy.New(rootList)
	if err != nil {
		return nil, fmt.Errorf("jobs.%w", err)
	}
	return roots, nil
}

// close stops what the daemon started, in reverse (the worker before its
// GPUs close, the scheduler before the workers), then closes Redis, stops
// a managed one and, last, releases the data dir.
func (d *wiring) close() {
	sctx, cancel := context.WithTimeout(context.Background(), d.fc.Worker.KillGrace.D()+20*time.Second)
	defer cancel()
	for i := len(d.stops) - 1; i >= 0; i-- {
		_ = d.stops[i](sctx)
	}
	if d.rdb != nil {
		_ = d.rdb.Close()
	}
	if d.managed != nil {
		d.managed.Stop()
	}
	d.lock.Release()
}

// startCloudWorker starts the AWS worker of backend name.
func (d *wiring) startCloudWorker(ctx context.Context, name string) error {
	c, err := startCloudWorker(ctx, d.rdb, d.store, d.fc, name, d.endpoint, d.dataDir, d.roots, d.teams, d.log)
	if err != nil {
		return err
	}
	d.stops = append(d.stops, c.Stop)
	return nil
}

// startLocalWorker starts the worker of this machine's GPUs, and the AWS
// workers `lathed up --cloud` asks for.
func (d *wiring) startLocalWorker(ctx context.Context) error {
	o, fc := d.o, d.fc
	scriptsDir := filepath.Join(d.dataDir, "scripts")
	if err := writeScripts(scriptsDir); err != nil {
		return err
	}
	node, err := nodeName(o, fc)
	if err != nil {
		return err
	}
	gpus, err := nvmlinventory.Open(ctx, gpusValue(o, fc), node, d.log)
	if err != nil {
		return err
	}
	// stops run in reverse: the worker stops before its GPUs close.
	d.stops = append(d.stops, func(context.Context) error { return gpus.Close() })
	site, siteTags := localSite(fc.daemon.Routing)
	uids, err := uidRange(fc.Worker.TrainerUIDs)
	if err != nil {
		return err
	}
	w, err := worker.New(d.rdb, d.store, worker.Config{
		OwnUsers: fc.Worker.RunAs == "" && os.Geteuid() == 0, TrainerUIDs: uids,
		Site: site, SiteTags: siteTags,
		Node: node, AdvertiseAddr: o.advertise, Slots: firstPositive(o.slots, fc.Worker.Slots), GPUs: gpus,
		CheckpointRoot: fc.Worker.CheckpointRoot, MonitorInterval: fc.Worker.MonitorInterval.D(), HangTimeout: fc.Worker.HangTimeout.D(),
		DataDir: d.dataDir, ScriptsDir: scriptsDir, Trainers: trainerCommands(fc.Trainers), TrainerPassEnv: trainerPassEnv(fc.Trainers),
		Launchers: trainerLaunchers(fc.Trainers), HFPython: fc.Worker.HFPython, DemoPython: fc.Worker.DemoPython,
		MaxAttempts: fc.Worker.MaxAttempts, KillGrace: fc.Worker.KillGrace.D(), HeartbeatTTL: fc.Worker.HeartbeatTTL.D(),
		TaskCheckInterval: fc.Worker.TaskCheckInterval.D(), LeaseTTL: fc.Worker.LeaseTTL.D(), AllowedRoots: d.roots, TeamRoots: d.teams, Deny: daemonDeny(fc), RunAs: fc.Worker.RunAs,
		CgroupRoot: fc.Worker.CgroupRoot, Logger: d.log,
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	d.stops = append(d.stops, w.Stop)
	return d.startUpClouds(ctx)
}

// nodeName is this worker's node name: --node, worker.node, or the host name.
func nodeName(o *opts, fc *fileConfig) (string, error) {
	node := firstNonEmpty(o.node, fc.Worker.Node)
	if node == "" {
		var err error
		if node, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("--node not given and no host name: %w", err)
		}
	}
	return node, nil
}

// startUpClouds starts the AWS workers of `lathed up --aws-backend`, if any,
// making the ledger's key first.
func (d *wiring) startUpClouds(ctx context.Context) error {
	if len(d.o.upClouds) > 0 {
		// The AWS workers record staging in the ledger: make sure the
		// key exists before the scheduler part would make it.
		if _, err := openLedger(d.rdb, d.fc, d.dataDir, d.log); err != nil {
			return err
		}
	}
	for _, name := range d.o.upClouds {
		if err := d.startCloudWorker(ctx, name); err != nil {
			return err
		}
	}
	for _, name := range d.o.upSlurm {
		if err := d.startSlurmWorker(ctx, name); err != nil {
			return err
		}
	}
	for _, name := range d.o.upKube {
		if err := d.startKubeWorker(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// warnUnknownTeams logs each team of teams: that no token and no schedule
// names: a misspelt name leaves the real team on jobs.allowed_roots.
func warnUnknownTeams(fc *fileConfig, tokens []plane.Token, log *slog.Logger) {
	known := map[string]bool{}
	for _, t := range tokens {
		known[t.Team] = true
	}
	for _, s := range fc.schedules {
		known[s.Team] = true
	}
	for _, team := range slices.Sorted(maps.Keys(fc.teamRoots)) {
		if !known[team] {
			log.Warn("teams: no token and no schedule has this team; check its name (a team without an entry uses jobs.allowed_roots)",
				slog.String("team", team))
		}
	}
}

// startScheduler starts the API, the placer and the other leader duties,
// and reloads the routing config, the schedules and the API tokens on
// SIGHUP (reloader).
func (d *wiring) startScheduler(ctx context.Context) error {
	o, fc, log := d.o, d.fc, d.log
	// Event follows block on XREAD: give them their own, larger pool.
	followRDB, err := newRedisClientPool(d.url, 512)
	if err != nil {
		return err
	}
	d.stops = append(d.stops, func(context.Context) error { return followRDB.Close() })
	tokens, err := loadTokens(fc.Auth, os.Getenv)
	if err != nil {
		return err
	}
	warnUnknownTeams(fc, tokens, log)
	listen := firstNonEmpty(o.listen, fc.Scheduler.Listen, "127.0.0.1:8080")
	if len(tokens) == 0 && !loopbackOnly(listen) {
		return fmt.Errorf("--listen %s reaches beyond loopback and no API tokens are configured: refusing to run an open API there. Add auth.tokens to the config (see configs/lathe.yaml), or listen on 127.0.0.1", listen)
	}
	led, err := openLedger(d.rdb, fc, d.dataDir, log, d.anchorOptions()...)
	if err != nil {
		return err
	}
	if err := d.startAnchorKeeper(ctx, led); err != nil {
		return err
	}
	s := scheduler.New(d.rdb, d.store, d.schedulerConfig(ctx, led))
	if err := s.Start(ctx); err != nil {
		return err
	}
	d.stops = append(d.stops, s.Stop)
	a := api.New(s, d.rdb, d.store, d.apiConfig(listen, tokens, led, followRDB))
	if err := a.Start(ctx); err != nil {
		return err
	}
	d.stops = append(d.stops, a.Stop)
	go reloader{path: o.configPath, sched: s, api: a, getenv: os.Getenv, log: log}.run(ctx)
	log.Info("lathe is up", slog.String("api", "http://"+a.Addr()), slog.String("data_dir", d.dataDir),
		slog.String("redis", redactURL(d.url)))
	return nil
}

// schedulerConfig is the control plane's Config from the config file in
// force; the ledger led is opened by startScheduler.
func (d *wiring) schedulerConfig(ctx context.Context, led *ledger.Ledger) scheduler.Config {
	fc := d.fc
	return scheduler.Config{
		AllowedRoots: d.roots, TeamRoots: d.teams, DataDeny: pathpolicy.DataDeny(d.dataDir, fc.Worker.CheckpointRoot, filepath.Join(d.dataDir, "scripts"), daemonDeny(fc)),
		KeepFinished: fc.Jobs.KeepFinished, FinishedTTL: fc.Jobs.FinishedTTL.D(),
		Defaults: fc.daemon.Defaults(d.dataDir), Routing: fc.daemon.Routing, Ledger: led,
		Trainers: trainerNames(fc.Trainers), KillGrace: fc.Worker.KillGrace.D(), PlaceInterval: fc.Scheduler.PlaceInterval.D(),
		RepairAfter: fc.Scheduler.RepairAfter.D(), ReapGrace: fc.Scheduler.ReapGrace.D(), LeaderTTL: fc.Scheduler.LeaderTTL.D(),
		LeaseTTL: fc.Worker.LeaseTTL.D(), Logger: d.log,
		Clouds:         cloudReconcilers(ctx, fc.daemon.Routing, firstNonEmpty(fc.Cluster, defaultCluster), d.endpoint, d.log),
		ReconcileEvery: fc.Scheduler.ReconcileEvery.D(), ReconcileGrace: fc.Scheduler.ReconcileGrace.D(),
		Schedules: fc.schedules,
		// A test hook, named so: cmd/lathed's sweep schedule test kills the
		// leader while it holds an expanded sweep.
		TestHoldScheduledSweep: testHoldScheduledSweep(),
	}
}

// apiConfig is the API's Config from the config file in force: listen,
// tokens, the ledger led and the Redis pool for event follows followRDB
// are made by startScheduler.
func (d *wiring) apiConfig(listen string, tokens []plane.Token, led *ledger.Ledger, followRDB *redis.Client) api.Config {
	fc := d.fc
	return api.Config{
		Listen: listen, Tokens: tokens, Defaults: fc.daemon.Defaults(d.dataDir), Ledger: led, FollowRedis: followRDB, Logger: d.log,
		ReadHeaderTimeout: fc.Scheduler.HTTPReadHeaderTimeout.D(), ReadTimeout: fc.Scheduler.HTTPReadTimeout.D(),
		WriteTimeout: fc.Scheduler.HTTPWriteTimeout.D(), IdleTimeout: fc.Scheduler.HTTPIdleTimeout.D(),
		MaxConns: fc.Scheduler.HTTPMaxConns, ReservedConns: fc.Scheduler.HTTPReservedConns, MaxConnsPerPrefix: fc.Scheduler.maxConnsPerPrefix(),
		NoEvictionCheck: d.managed != nil && d.managed.Embedded,
	}
}

// trainerNames are the trainers the scheduler accepts: reference first, then
// those of the config.
func trainerNames(m map[string]trainerEntry) []string {
	names := []string{"reference"}
	for n := range m {
		if n != "reference" {
			names = append(names, n)
		}
	}
	return names
}

// gpusValue is the --gpus value in force: the flag when given, else
// worker.gpus from the file, else the flag's default (auto).
func gpusValue(o *opts, fc *fileConfig) string {
	if o.gpusSet {
		return o.gpus
	}
	return firstNonEmpty(fc.Worker.GPUs, o.gpus)
}

func writeScripts(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("scripts dir: %w", err)
	}
	files := map[string][]byte{"train_lora.py": scripts.TrainLoRA, "eval_adapter.py": scripts.EvalAdapter}
	err := fs.WalkDir(scripts.Python, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := scripts.Python.ReadFile(p)
		files[filepath.FromSlash(p)] = b
		return err
	})
	if err != nil {
		return fmt.Errorf("scripts: %w", err)
	}
	for name, body := range files {
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(name)+".tmp")
		if err := os.WriteFile(tmp, body, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// trainerCommands is each trainer's command (a copy).
func trainerCommands(m map[string]trainerEntry) map[string][]string {
	out := make(map[string][]string, len(m))
	for k, v := range m {
		out[k] = append([]string(nil), v.Command...)
	}
	return out
}

// trainerLaunchers is each trainer's launcher, for those that name one.
func trainerLaunchers(m map[string]trainerEntry) map[string]worker.Launcher {
	out := map[string]worker.Launcher{}
	for k, v := range m {
		if v.Launcher != nil {
			out[k] = *v.Launcher
		}
	}
	return out
}

// trainerPassEnv is each trainer's pass_env, for those that have one.
func trainerPassEnv(m map[string]trainerEntry) map[string][]string {
	out := map[string][]string{}
	for k, v := range m {
		if len(v.PassEnv) > 0 {
			out[k] = append([]string(nil), v.PassEnv...)
		}
	}
	return out
}

// redactURL is u fit to print (redact.URL).
func redactURL(u string) string { return redact.URL(u) }

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func firstPositive(ns ...int) int {
	for _, n := range ns {
		if n > 0 {
			return n
		}
	}
	return 0
}

// loopbackOnly reports whether a listen address binds only loopback
// (127.0.0.0/8, ::1, localhost). An empty host or 0.0.0.0 is not.
func loopbackOnly(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// localSite is the site of the routing config's first local backend (the
// pool this deployment's workers form) and its tags.
func localSite(rc routecfg.Config) (string, []string) {
	for _, b := range rc.Backends {
		if b.Kind == routecfg.KindLocal {
			if st, ok := rc.Site(b.Site); ok {
				return st.Name, st.Tags
			}
		}
	}
	return "", nil
}

// openLedger loads (or, the first time, makes) the ledger's HMAC key: a
// file outside Redis, ledger.key_file or <data_dir>/ledger.key.
func openLedger(rdb redis.UniversalClient, fc *fileConfig, dataDir string, log *slog.Logger, opts ...ledger.Option) (*ledger.Ledger, error) {
	keyFile := fc.Ledger.KeyFile
	if keyFile == "" {
		keyFile = filepath.Join(dataDir, "ledger.key")
	}
	if _, err := os.Stat(keyFile); errors.Is(err, os.ErrNotExist) {
		if err := ledger.GenerateKey(keyFile); err != nil {
			return nil, fmt.Errorf("ledger.key_file: %w", err)
		}
		log.Warn("made a new ledger key: keep it safe and outside Redis; without it the ledger cannot be verified",
			slog.String("key_file", keyFile))
	}
	key, err := ledger.LoadKey(keyFile)
	if err != nil {
		return nil, fmt.Errorf("ledger.key_file: %w", err)
	}
	return ledger.New(rdb, key, firstNonEmpty(fc.Redis.KeyPrefix, "lathe:"), opts...), nil
}

// reloader re-reads the config file at path on SIGHUP: the schedules,
// the routing sections (handed to the scheduler; jobs no longer feasible
// are held, never moved) and the API tokens (swapped at once in the
// running API). A bad section keeps its old version and logs why. Other
// sections, and the worker, need a restart.
type reloader struct {
	path   string
	sched  *scheduler.Scheduler
	api    *api.Server
	getenv func(string) string
	log    *slog.Logger
}

// run reloads on each SIGHUP until ctx ends.
func (r reloader) run(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		r.reload(ctx)
	}
}

// reload reloads each section in turn; one that fails does not stop the
// others.
func (r reloader) reload(ctx context.Context) {
	log := r.log
	if ss, err := loadSchedules(r.path); err != nil {
		log.Error("SIGHUP: schedules not reloaded; the old schedules stay", slog.Any("err", err))
	} else {
		r.sched.SetSchedules(ss)
	}
	r.reloadTokens()
	rc, err := loadRouting(r.path)
	if err != nil {
		log.Error("SIGHUP: config not reloaded; the old routing config stays", slog.Any("err", err))
		return
	}
	if err := r.sched.SetRouting(ctx, rc); err != nil {
		log.Error("SIGHUP: re-checking jobs against the new routing config", slog.Any("err", err))
		return
	}
	log.Info("SIGHUP: routing config reloaded", slog.String("config_hash", rc.Hash()))
}

// reloadTokens swaps the API's tokens for those the config names now (no
// config file: nothing to reload). Tokens that fail to load, or none left
// where there were some, keep the old tokens.
func (r reloader) reloadTokens() {
	if r.path == "" {
		return
	}
	ts, err := loadAuth(r.path, r.getenv)
	if err == nil {
		err = r.api.SetTokens(ts)
	}
	if err != nil {
		r.log.Error("SIGHUP: API tokens not reloaded; the old tokens stay", slog.Any("err", err))
		return
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	r.log.Info("SIGHUP: API tokens reloaded", slog.Int("tokens", len(ts)), slog.Any("names", names))
}

// testHoldScheduledSweep reads LATHE_TEST_HOLD_SCHEDULED_SWEEP (a Go
// duration): the test hook scheduler.Config.TestHoldScheduledSweep. Unset
// or bad: 0.
func testHoldScheduledSweep() time.Duration {
	d, err := time.ParseDuration(os.Getenv("LATHE_TEST_HOLD_SCHEDULED_SWEEP"))
	if err != nil || d < 0 {
		return 0
	}
	return d
}
