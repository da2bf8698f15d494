// Package worker runs job attempts: an asynq server consumes the node's
// queue (node:<name>), each handler claims its attempt in the job store,
// runs the trainer through internal/trainer per the trainer contract, mirrors
// its events into the job's stream, copies its artifacts to the job's output
// folder and writes the attempt's end — all through the job store, the only
// authority on a job's state. asynq only carries the attempt: tasks are
// enqueued with MaxRetry(0), and the handler returns nil for every outcome it
// recorded, so asynq never retries, times out or cancels a job on its own.
package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/lathe-ml/lathe/backends/local/nvmlinventory"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/trainer"
)

// Config configures a Worker. Zero values take the defaults stated.
type Config struct {
	// Node is this worker's unique node name; default the host name. A
	// second live worker with the same name is refused at start.
	Node string
	// Slots is how many CPU-only attempts run at once (CPU slots); default
	// 2. GPU jobs take GPUs, not slots; asynq's concurrency is Slots plus
	// the number of GPUs.
	Slots int
	// GPUs is the node's GPU inventory (backends/local/nvmlinventory: real
	// NVML, or go-nvml's mock servers for --gpus simulated:…). Nil: no GPUs,
	// CPU jobs only.
	GPUs nvmlinventory.Source
	// Site is the site this node is in (routing config: its local
	// backend's site) and SiteTags that site's tags. The worker refuses,
	// before anything runs, an attempt of a job whose residency tags are not
	// all in SiteTags (a task put on its queue by hand, or a stale
	// decision): the residency invariant is checked where the data would
	// land. Empty Site: the deployment has no routing config, and the
	// implicit site "local" carries [onprem].
	Site     string
	SiteTags []string
	// AdvertiseAddr is the IP address the other nodes reach this one at:
	// MASTER_ADDR of a gang whose rank 0 runs here (torchrun's rendezvous),
	// and the heartbeat's addr. Default: the host's first non-loopback
	// IPv4 address; loopback only when it has none (a gang across machines
	// then cannot meet). Must be an IP address, not unspecified.
	AdvertiseAddr string
	// CheckpointRoot is where checkpoints live, one folder per job. On a
	// pool of several nodes it must be storage they all mount at the same
	// path, so that another node can resume a job. Default DataDir/checkpoints.
	CheckpointRoot string
	// MonitorInterval is how often a running GPU job's GPUs are sampled
	// (utilisation, memory, power, temperature); default 5s.
	MonitorInterval time.Duration
	// HangTimeout: a GPU job whose GPUs all sit at 0% utilisation with no
	// progress line for this long is stopped and retried; default 15m.
	HangTimeout time.Duration
	// SeriesPoints caps each job's downsampled GPU series: when full,
	// neighbouring points are averaged in pairs and the step doubles;
	// default 360.
	SeriesPoints int
	// DataDir holds work folders, checkpoints and the default artifact
	// folder. Required.
	DataDir string
	// Trainers maps a trainer name (a job's "trainer") to its command.
	// Placeholders: {scripts} is ScriptsDir; {python} is the interpreter
	// for the job's base model (DemoPython for tiny-char, HFPython for
	// any other); {hf_python} is HFPython. Default: reference →
	// [{python} {scripts}/train_lora.py].
	Trainers map[string][]string
	// Launchers says, per trainer name, how a job of N > 1 reserved GPUs
	// runs it (config trainers.NAME.launcher). Default: torchrun for
	// reference, none (one process that sees all N GPUs) for the others.
	Launchers map[string]Launcher
	// DemoPython is {python} for base_model tiny-char: an interpreter with
	// torch (Debian's python3-torch). Default /usr/bin/python3.
	DemoPython string
	// HFPython is {python} for every other base model and {hf_python}: the
	// interpreter of the Hugging Face virtualenv (transformers, peft)
	// that scripts/setup.sh --hf builds. Default DefaultHFPython.
	HFPython string
	// TrainerPassEnv names, per trainer, the variables of the worker's own
	// environment that trainer gets (config trainers.NAME.pass_env), e.g.
	// AWS credentials for a trainer that reads s3:// itself. Every other
	// trainer gets only the base environment of trainer.Config.Env and the
	// contract's LATHE_* variables: never the worker's tokens or cloud
	// credentials. Nil: none for any trainer.
	TrainerPassEnv map[string][]string
	// ScriptsDir is where the reference trainer was written; default
	// DataDir/scripts.
	ScriptsDir string
	// MaxAttempts is how many attempts a job gets before a retryable failure
	// becomes final; default 3. Exit 3, timeouts and cancels never retry.
	MaxAttempts int
	// KillGrace is the SIGTERM → SIGKILL grace for the trainer's process
	// group; default 10s.
	KillGrace time.Duration
	// HeartbeatTTL is the node heartbeat's time to live; it is renewed every
	// third of it. Default 15s.
	HeartbeatTTL time.Duration
	// TaskCheckInterval is how often an idle worker polls its queue; default
	// 10ms. Lower starts jobs sooner and costs one small Lua call per poll.
	TaskCheckInterval time.Duration
	// CancelPoll is how often a running attempt re-reads cancel_requested
	// (the durable cancel path; asynq's CancelProcessing is the fast one).
	// Default 1s.
	CancelPoll time.Duration
	// LeaseTTL is the length of a running attempt's lease in the store. The
	// worker renews it every CancelPoll; a worker that cannot renew it for
	// half of LeaseTTL stops its trainer (self-fencing), and the scheduler
	// requeues an attempt whose lease expired LeaseTTL/2 ago, so the two
	// never overlap. Default 30s.
	LeaseTTL time.Duration
	// ShutdownTimeout bounds Stop: running trainers get SIGTERM, their
	// attempts go back to the queue; default KillGrace + 10s.
	ShutdownTimeout time.Duration
	// AllowedRoots are the folders a job's file:// dataset and output must
	// be under, checked with symbolic links resolved before the trainer
	// starts (a job outside fails, permanently). Nil: no restriction
	// (lathed always sets it).
	AllowedRoots pathpolicy.Roots
	// TeamRoots are the allowed roots of the teams that have their own
	// (teams.<name>.allowed_roots): a job of such a team (jobtype.Job's
	// Team) is checked against its team's roots instead of AllowedRoots,
	// for its dataset, eval dataset, local base model and output. Nil:
	// every job uses AllowedRoots.
	TeamRoots pathpolicy.TeamRoots
	// RunAs (config worker.run_as) is the user every trainer runs as: a
	// user name or uid (its primary group too; lathed must be root,
	// otherwise New refuses the config), or "root" on purpose (Start warns
	// loudly at every start: a root trainer reads lathed's environment,
	// its ledger key and its Redis). Empty: OwnUsers decides. The worker
	// hands the attempt's work, output, data-copy and checkpoint folders
	// to the trainer's user, and takes them back at the attempt's end.
	RunAs string
	// OwnUsers, with RunAs empty, runs each attempt as a uid of
	// TrainerUIDs of its own (trainer_uids.go; lathed must be root):
	// lathed sets it when it runs as root and worker.run_as is unset.
	// False with RunAs empty: trainers run as lathed's user (Start warns:
	// such a trainer can read lathed's files; loudly when that is root).
	OwnUsers bool
	// TrainerUIDs is OwnUsers' range of uids [first, last] (config
	// worker.trainer_uids: "FIRST-LAST"); zero: DefaultTrainerUIDs.
	TrainerUIDs [2]uint32
	// CgroupRoot (config worker.cgroup_root) is the cgroup v2 directory
	// under which every trainer attempt runs in a cgroup of its own,
	// <root>/<node>-<8 hex digits naming DataDir>/<job>-<attempt>: at the
	// attempt's end everything in it is killed, processes that left the
	// trainer's process group (setsid, a double fork) included, and a
	// worker starting kills what a previous incarnation (same node, same
	// DataDir) left there. A trainer cannot leave its cgroup unless it may
	// write another cgroup's cgroup.procs, which a trainer running as root
	// may: with lathed as root, set RunAs for the containment to hold.
	// "" or "auto": a "lathe" child of lathed's own cgroup (or of the
	// cgroup v2 root, see trainer.AutoCgroupRoot); where there is no
	// writable cgroup v2 (or the kernel predates cgroup.kill, 5.14), Start
	// logs a loud warning and trainers run in process groups only. "none":
	// process groups only, on purpose: an escaped process outlives its
	// attempt and keeps its GPU. An absolute path: that directory, made if
	// missing; Start fails when it is not a usable cgroup v2 directory.
	CgroupRoot string
	// Deny lists files and folders no job may read as data or write as
	// output, whatever AllowedRoots say (lathed: its ledger key, tokens
	// and config files, wherever they are). The worker always adds its own
	// files under DataDir; as data, DataDir as a whole and CheckpointRoot
	// are refused too. Nil: only those.
	Deny pathpolicy.Deny
	// Logger; default slog.Default().
	Logger *slog.Logger

	// runAs and runAsHome are RunAs resolved by withDefaults; uids is
	// the pool of TrainerUIDs (lathed as root, RunAs empty); rootTrainers
	// says RunAs is "root", sameUser that trainers run as lathed's own
	// user (not root, RunAs empty).
	runAs        *trainer.Credential
	runAsHome    string
	uids         *uidPool
	rootTrainers bool
	sameUser     bool
}

// geteuid is os.Geteuid (a test may replace it, see export_test.go).
var geteuid = os.Geteuid

// resolveRunAs looks up the user of worker.run_as (a name or a uid).
func resolveRunAs(name string) (*trainer.Credential, string, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if _, nerr := strconv.Atoi(name); nerr == nil {
			u, err = user.LookupId(name)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("worker.run_as = %q: no such user: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, "", fmt.Errorf("worker.run_as = %q: uid %q gid %q are not numbers", name, u.Uid, u.Gid)
	}
	if uid == 0 {
		return nil, "", fmt.Errorf("worker.run_as = %q: is uid 0; write run_as: root to run trainers as root on purpose, or name an unprivileged user", name)
	}
	if euid := geteuid(); euid != 0 {
		return nil, "", fmt.Errorf("worker.run_as = %q: lathed runs as uid %d, not root, so it cannot start trainers as another user: run lathed as root or remove worker.run_as", name, euid)
	}
	return &trainer.Credential{UID: uint32(uid), GID: uint32(gid)}, u.HomeDir, nil
}

// The special values of Config.CgroupRoot.
const (
	// CgroupAuto finds a cgroup v2 directory (the default).
	CgroupAuto = "auto"
	// CgroupNone runs trainers in process groups only.
	CgroupNone = "none"
)

var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// withDefaults returns c with its defaults applied, or the first field
// that is not usable.
func (c Config) withDefaults() (Config, error) {
	if err := c.identity(); err != nil {
		return c, err
	}
	c.defaultPlaces()
	if err := c.checkTrainers(); err != nil {
		return c, err
	}
	c.defaultTimings()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// identity checks the node name (the host name by default) and makes the
// data dir absolute.
func (c *Config) identity() error {
	if c.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("worker: node name: %w", err)
		}
		c.Node = h
	}
	if !nodeNameRE.MatchString(c.Node) {
		return fmt.Errorf("worker: node name %q: must match %s", c.Node, nodeNameRE)
	}
	if c.DataDir == "" {
		return errors.New("worker: data dir is required")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("worker: data dir %q: %w", c.DataDir, err)
	}
	c.DataDir = abs
	return c.advertise()
}

// advertise checks AdvertiseAddr, or picks the default.
func (c *Config) advertise() error {
	if c.AdvertiseAddr == "" {
		c.AdvertiseAddr = firstIPv4()
		return nil
	}
	ip := net.ParseIP(c.AdvertiseAddr)
	if ip == nil || ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("worker: advertise address %q: must be a unicast IP address the other nodes reach this one at", c.AdvertiseAddr)
	}
	return nil
}

// firstIPv4 is the host's first non-loopback IPv4 address (by interface
// order), or 127.0.0.1 when it has none.
func firstIPv4() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, in := range ifs {
		if in.Flags&net.FlagUp == 0 || in.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := in.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// defaultPlaces fills the slots, the site, the GPU source, the folders
// under the data dir, the GPU monitor's settings and the reference trainer.
func (c *Config) defaultPlaces() {
	if c.Slots <= 0 {
		c.Slots = 2
	}
	if c.Site == "" {
		c.Site, c.SiteTags = "local", []string{"onprem"}
	}
	if c.GPUs == nil {
		c.GPUs = nvmlinventory.None()
	}
	if c.CheckpointRoot == "" {
		c.CheckpointRoot = filepath.Join(c.DataDir, "checkpoints")
	}
	if c.MonitorInterval <= 0 {
		c.MonitorInterval = 5 * time.Second
	}
	if c.HangTimeout <= 0 {
		c.HangTimeout = 15 * time.Minute
	}
	if c.SeriesPoints <= 1 {
		c.SeriesPoints = 360
	}
	if c.ScriptsDir == "" {
		c.ScriptsDir = filepath.Join(c.DataDir, "scripts")
	}
	c.defaultTrainers()
}

// DefaultHFPython is Config.HFPython's default: the interpreter of the
// virtualenv scripts/setup.sh --hf builds (LATHE_HF_VENV, default
// /opt/lathe/hf-venv).
const DefaultHFPython = "/opt/lathe/hf-venv/bin/python"

// Launcher says how a trainer runs a job of several GPUs. The zero value
// runs one process, which sees every reserved GPU in CUDA_VISIBLE_DEVICES
// (a trainer that launches its own ranks: accelerate, deepspeed).
type Launcher struct {
	// Torchrun runs the command under torchrun: its first word must be a
	// Python interpreter with torch, and the command becomes
	// `PY -m torch.distributed.run --standalone --nnodes=1
	// --nproc_per_node=N REST...`, one rank a GPU. The ranks are in the
	// attempt's cgroup; torchrun ends them all when one fails.
	Torchrun bool
	// Argv, when not empty, replaces the trainer's command for N > 1 GPUs,
	// with the command's placeholders and {gpus} (N).
	Argv []string
}

// checkTrainers resolves worker.run_as and checks worker.cgroup_root and
// each trainer's pass_env.
func (c *Config) checkTrainers() error {
	switch {
	case c.RunAs == "root":
		if euid := geteuid(); euid != 0 {
			return fmt.Errorf("worker: worker.run_as = root: lathed runs as uid %d, not root, so it cannot start trainers as root", euid)
		}
		c.rootTrainers = true
	case c.RunAs != "":
		var err error
		if c.runAs, c.runAsHome, err = resolveRunAs(c.RunAs); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	case c.OwnUsers:
		if euid := geteuid(); euid != 0 {
			return fmt.Errorf("worker: trainers on users of their own: lathed runs as uid %d, not root, so it cannot start trainers as other users", euid)
		}
		r := c.TrainerUIDs
		if r == ([2]uint32{}) {
			r = DefaultTrainerUIDs
		}
		var err error
		if c.uids, err = newUIDPool(r[0], r[1], uidLockDir); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	case geteuid() == 0:
		c.rootTrainers = true // not asked for: Start warns as loudly
	default:
		c.sameUser = true
	}
	switch r := c.CgroupRoot; {
	case r == "", r == CgroupAuto, r == CgroupNone:
	case !filepath.IsAbs(r) || filepath.Clean(r) != r || r == "/":
		return fmt.Errorf("worker: worker.cgroup_root = %q: must be %q, %q or a clean absolute path to a cgroup v2 directory", r, CgroupAuto, CgroupNone)
	}
	if err := checkPassEnv(c.TrainerPassEnv); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// defaultTimings fills the retry, kill, heartbeat, lease and shutdown
// durations (CancelPoll at most a quarter of the lease).
func (c *Config) defaultTimings() {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.KillGrace <= 0 {
		c.KillGrace = 10 * time.Second
	}
	if c.HeartbeatTTL <= 0 {
		c.HeartbeatTTL = 15 * time.Second
	}
	if c.TaskCheckInterval <= 0 {
		c.TaskCheckInterval = 10 * time.Millisecond
	}
	if c.CancelPoll <= 0 {
		c.CancelPoll = time.Second
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.CancelPoll > c.LeaseTTL/4 {
		c.CancelPoll = c.LeaseTTL / 4
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = c.KillGrace + 10*time.Second
	}
}

// defaultTrainers adds the reference trainer (and its torchrun launcher)
// and the interpreters' defaults.
func (c *Config) defaultTrainers() {
	if c.Trainers == nil {
		c.Trainers = map[string][]string{}
	}
	if _, ok := c.Trainers["reference"]; !ok {
		c.Trainers["reference"] = []string{"{python}", "{scripts}/train_lora.py"}
	}
	if _, ok := c.Launchers["reference"]; !ok {
		if c.Launchers == nil {
			c.Launchers = map[string]Launcher{}
		}
		c.Launchers["reference"] = Launcher{Torchrun: true}
	}
	if c.DemoPython == "" {
		c.DemoPython = "/usr/bin/python3"
	}
	if c.HFPython == "" {
		c.HFPython = DefaultHFPython
	}
}

// trainerDefaults is c with defaultTrainers applied and its pass_env
// names checked.
func (c Config) trainerDefaults() (Config, error) {
	c.defaultTrainers()
	return c, checkPassEnv(c.TrainerPassEnv)
}

// checkPassEnv checks every trainer's pass_env names.
func checkPassEnv(m map[string][]string) error {
	for name, keys := range m {
		for i, k := range keys {
			if err := trainer.CheckPassEnvName(k); err != nil {
				return fmt.Errorf("trainers.%s.pass_env[%d]: %w", name, i, err)
			}
		}
	}
	return nil
}
