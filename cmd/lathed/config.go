package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/backends/local/nvmlinventory"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/trainer"
	"github.com/lathe-ml/lathe/scheduler/cron"
	"github.com/lathe-ml/lathe/scheduler/plane"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
	"github.com/lathe-ml/lathe/worker"
)

// fileConfig is the daemon's config file (configs/lathe.yaml documents
// every key). Flags given on the command line win over the file.
type fileConfig struct {
	// DataDir is data_dir as routecfg.ReadDaemon reads it (relative to the
	// file's folder).
	DataDir   string           `yaml:"data_dir"`
	Redis     redisSection     `yaml:"redis"`
	Scheduler schedulerSection `yaml:"scheduler"`
	Worker    workerSection    `yaml:"worker"`
	Jobs      jobsSection      `yaml:"jobs"`
	// Teams holds what is set per team: teams.<name>.allowed_roots
	// (loadConfig validates them into teamRoots).
	Teams    map[string]teamSection  `yaml:"teams"`
	Routing  yaml.Node               `yaml:"routing"`
	Trainers map[string]trainerEntry `yaml:"trainers"`
	Auth     authSection             `yaml:"auth"`
	Ledger   ledgerSection           `yaml:"ledger"`
	// Cluster is this deployment's name: the lathe:cluster tag of its cloud
	// instances (the reconciler terminates orphans of its own cluster
	// only). Default "lathe"; two deployments sharing an AWS account must
	// differ.
	Cluster string       `yaml:"cluster"`
	AWS     awsSection   `yaml:"aws"`
	Slurm   slurmSection `yaml:"slurm"`
	Kube    kubeSection  `yaml:"kubernetes"`
	// The routing sections (and routing: above): routecfg.ParseConfig
	// reads and validates them (strictly, every bad field at once); here
	// they are only allowed.
	Sites     yaml.Node `yaml:"sites"`
	RedisSite yaml.Node `yaml:"redis_site"`
	Backends  yaml.Node `yaml:"backends"`
	Datasets  yaml.Node `yaml:"datasets"`
	Budgets   yaml.Node `yaml:"budgets"`
	// Schedules are the schedules the leader runs (docs/sweeps.md
	// "Schedules"); loadConfig validates them into schedules.
	Schedules []cron.Entry `yaml:"schedules"`

	// schedules is Schedules validated, their files resolved against the
	// config file's folder.
	schedules []cron.Schedule
	// teamRoots is the teams' allowed_roots validated (nil: none has its
	// own).
	teamRoots pathpolicy.TeamRoots

	// daemon is what routecfg.ReadDaemon read of the file: the routing
	// config (the implicit one without a file) and the job defaults, as the
	// CLI's offline lathe route --explain --config reads them.
	daemon routecfg.Daemon
	// path is the file read ("" without one).
	path string
}

// daemonDeny lists the daemon's secret files that no job may read as data
// or write as output wherever they are, allowed roots or not: the config
// file (it may hold tokens), auth.tokens_file, ledger.key_file and
// ledger.anchor_file. The workers add their own data dir's files
// (worker.Config.Deny).
func daemonDeny(fc *fileConfig) pathpolicy.Deny {
	var d pathpolicy.Deny
	for _, e := range []pathpolicy.DenyEntry{
		{Path: fc.path, Why: "the daemon's config file"},
		{Path: fc.Auth.TokensFile, Why: "auth.tokens_file"},
		{Path: fc.Ledger.KeyFile, Why: "ledger.key_file"},
		{Path: fc.Ledger.AnchorFile, Why: "ledger.anchor_file"},
		{Path: lockOf(fc.Ledger.AnchorFile), Why: "ledger.anchor_file's lock"},
	} {
		if e.Path == "" {
			continue
		}
		if abs, err := filepath.Abs(e.Path); err == nil {
			e.Path = abs
		}
		d = append(d, e)
	}
	return d
}

// trainerEntry is one trainer of trainers: either its command, a list
// (`reference: ["{python}", "{scripts}/train_lora.py"]`), or a mapping
// with the command, the variables of lathed's environment it gets
// (`pass_env: [AWS_ACCESS_KEY_ID, ...]`) and how a job of several GPUs
// runs it (`launcher: torchrun | none | [argv...]`).
type trainerEntry struct {
	Command  []string
	PassEnv  []string
	Launcher *worker.Launcher // nil: the worker's default
}

// decodeLauncher reads a trainer's launcher: torchrun, none, or a command
// list for jobs of several GPUs ({gpus} is their count).
func decodeLauncher(v *yaml.Node) (*worker.Launcher, error) {
	if v.Kind == yaml.SequenceNode {
		var argv []string
		if err := v.Decode(&argv); err != nil {
			return nil, err
		}
		if len(argv) == 0 || argv[0] == "" {
			return nil, fmt.Errorf("line %d: launcher: an empty command", v.Line)
		}
		return &worker.Launcher{Argv: argv}, nil
	}
	switch v.Value {
	case "torchrun":
		return &worker.Launcher{Torchrun: true}, nil
	case "none":
		return &worker.Launcher{}, nil
	}
	return nil, fmt.Errorf("line %d: launcher %q: want torchrun, none or a command list", v.Line, v.Value)
}

func (t *trainerEntry) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		return n.Decode(&t.Command)
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a trainer is a command list or {command: [...], pass_env: [...], launcher: ...}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k, v := n.Content[i], n.Content[i+1]; k.Value {
		case "command":
			if err := v.Decode(&t.Command); err != nil {
				return err
			}
		case "pass_env":
			if err := v.Decode(&t.PassEnv); err != nil {
				return err
			}
		case "launcher":
			l, err := decodeLauncher(v)
			if err != nil {
				return err
			}
			t.Launcher = l
		default:
			return fmt.Errorf("line %d: field %s not found in a trainer (want command, pass_env, launcher)", k.Line, k.Value)
		}
	}
	return nil
}

type ledgerSection struct {
	// KeyFile holds the ledger's HMAC key (hex, mode 0600), outside Redis;
	// default <data_dir>/ledger.key, made on first start.
	KeyFile string `yaml:"key_file"`
	// AnchorFile keeps the ledger's head outside Redis (mode 0600), so
	// lathe audit verify fails after Redis is wiped or rolled back; default
	// <data_dir>/ledger.anchor. The scheduler writes it; an embedded
	// (ephemeral) Redis gets none.
	AnchorFile string `yaml:"anchor_file"`
}

type authSection struct {
	// Tokens are listed here, or in TokensFile (a YAML file with a tokens: list).
	Tokens     []tokenEntry `yaml:"tokens"`
	TokensFile string       `yaml:"tokens_file"`
}

type tokenEntry struct {
	Name     string `yaml:"name"`
	Token    string `yaml:"token"`
	TokenEnv string `yaml:"token_env"` // read the token from this environment variable instead
	Role     string `yaml:"role"`
	Team     string `yaml:"team"`
	// AllTeams lets a viewer or submitter read every team's jobs.
	AllTeams bool `yaml:"all_teams"`
}

// The sections are named types so an unknown key reads "field X not found
// in type main.workerSection".
type redisSection struct {
	URL       string `yaml:"url"`
	KeyPrefix string `yaml:"key_prefix"`
}

type schedulerSection struct {
	Listen        string   `yaml:"listen"`
	PlaceInterval duration `yaml:"place_interval"`
	RepairAfter   duration `yaml:"repair_after"`
	ReapGrace     duration `yaml:"reap_grace"`
	LeaderTTL     duration `yaml:"leader_ttl"`
	// The cloud reconciler (leader only): how often, and the age below
	// which an instance is never an orphan.
	ReconcileEvery duration `yaml:"reconcile_every"`
	ReconcileGrace duration `yaml:"reconcile_grace"`
	// The API's connection timeouts (api.Config's ReadHeaderTimeout,
	// ReadTimeout, WriteTimeout, IdleTimeout); 0 = their defaults.
	HTTPReadHeaderTimeout duration `yaml:"http_read_header_timeout"`
	HTTPReadTimeout       duration `yaml:"http_read_timeout"`
	HTTPWriteTimeout      duration `yaml:"http_write_timeout"`
	HTTPIdleTimeout       duration `yaml:"http_idle_timeout"`
	// The API's connection caps (api.Config's MaxConns, ReservedConns,
	// MaxConnsPerPrefix); 0 = their defaults, negative = no cap.
	HTTPMaxConns          int `yaml:"http_max_conns"`
	HTTPReservedConns     int `yaml:"http_reserved_conns"`
	HTTPMaxConnsPerPrefix int `yaml:"http_max_conns_per_prefix"`
	// HTTPMaxConnsPerIP is http_max_conns_per_prefix's old name, still
	// read: it caps a client's /24 (IPv4) or /64 (IPv6) now, not one IP.
	HTTPMaxConnsPerIP int `yaml:"http_max_conns_per_ip"`
}

// maxConnsPerPrefix is http_max_conns_per_prefix, or its old name.
func (s schedulerSection) maxConnsPerPrefix() int {
	if s.HTTPMaxConnsPerPrefix != 0 {
		return s.HTTPMaxConnsPerPrefix
	}
	return s.HTTPMaxConnsPerIP
}

// check rejects connection caps that contradict each other.
func (s schedulerSection) check() error {
	if s.HTTPMaxConnsPerPrefix != 0 && s.HTTPMaxConnsPerIP != 0 {
		return errors.New("scheduler: give http_max_conns_per_prefix or its old name http_max_conns_per_ip, not both")
	}
	maxConns := cmp.Or(s.HTTPMaxConns, 4096) // api.Config's default
	if maxConns > 0 && s.HTTPReservedConns >= maxConns {
		return fmt.Errorf("scheduler.http_reserved_conns %d: must be below http_max_conns (%d), or the API takes no connection before its token", s.HTTPReservedConns, maxConns)
	}
	return nil
}

type workerSection struct {
	Node              string   `yaml:"node"`
	Slots             int      `yaml:"slots"`
	MaxAttempts       int      `yaml:"max_attempts"`
	KillGrace         duration `yaml:"kill_grace"`
	HeartbeatTTL      duration `yaml:"heartbeat_ttl"`
	TaskCheckInterval duration `yaml:"task_check_interval"`
	LeaseTTL          duration `yaml:"lease_ttl"`
	// GPUs is a --gpus value: auto, none or simulated:<server>; "" = auto.
	GPUs string `yaml:"gpus"`
	// CheckpointRoot: a relative path is relative to the config file.
	CheckpointRoot  string   `yaml:"checkpoint_root"`
	MonitorInterval duration `yaml:"monitor_interval"`
	HangTimeout     duration `yaml:"hang_timeout"`
	// RunAs: the user trainers run as (lathed must be root), or root on
	// purpose; "" = with lathed as root, a user of its own per attempt
	// (TrainerUIDs), else lathed's user.
	RunAs string `yaml:"run_as"`
	// TrainerUIDs: "FIRST-LAST", the uids of those users; "" =
	// worker.DefaultTrainerUIDs.
	TrainerUIDs string `yaml:"trainer_uids"`
	// CgroupRoot: auto, none or a cgroup v2 directory (worker.Config.CgroupRoot); "" = auto.
	CgroupRoot string `yaml:"cgroup_root"`
	// HFPython: the Hugging Face virtualenv's interpreter, {python} for a
	// base_model other than tiny-char; "" = worker.DefaultHFPython.
	HFPython string `yaml:"hf_python"`
	// DemoPython: {python} for tiny-char; "" = /usr/bin/python3.
	DemoPython string `yaml:"demo_python"`
}

type jobsSection struct {
	// The job defaults: routecfg.ReadDaemon reads them (fileConfig.daemon);
	// here they are only allowed.
	DefaultMaxRuntime yaml.Node `yaml:"default_max_runtime"`
	DefaultOutputURI  yaml.Node `yaml:"default_output_uri"`
	EventsMaxLen      int64     `yaml:"events_max_len"`
	AllowedRoots      []string  `yaml:"allowed_roots"`
	KeepFinished      int       `yaml:"keep_finished"`
	FinishedTTL       duration  `yaml:"finished_ttl"`
}

// teamSection is one team's entry of teams:.
type teamSection struct {
	// AllowedRoots, when given, are the only folders the team's jobs may
	// read (dataset, eval_dataset, a local base_model) and write
	// (output.uri), and where its schedules' files must lie, instead of
	// jobs.allowed_roots; each must lie under jobs.allowed_roots when that
	// is set. Required, and not empty, for a team listed here.
	AllowedRoots []string `yaml:"allowed_roots"`
}

// checkTeams validates teams: into c.teamRoots: each team's allowed_roots
// absolute, not empty, and under jobs.allowed_roots when that is set.
func (c *fileConfig) checkTeams() error {
	var deployment pathpolicy.Roots
	if len(c.Jobs.AllowedRoots) > 0 {
		var err error
		if deployment, err = pathpolicy.New(c.Jobs.AllowedRoots); err != nil {
			return fmt.Errorf("config %s: jobs.%w", c.path, err)
		}
	}
	lists := make(map[string][]string, len(c.Teams))
	for name, t := range c.Teams {
		lists[name] = t.AllowedRoots
	}
	trs, err := pathpolicy.NewTeamRoots(lists, deployment)
	if err != nil {
		return fmt.Errorf("config %s: %w", c.path, err)
	}
	c.teamRoots = trs
	return nil
}

// loadRouting parses the routing sections of the config file at path (""
// = routing's implicit config: one site "local" [onprem]), as a SIGHUP
// reloads them: the job defaults are not reloaded, nor read.
func loadRouting(path string) (routecfg.Config, error) {
	var b []byte
	if path != "" {
		var err error
		if b, err = routecfg.ReadFile(path); err != nil {
			return routecfg.Config{}, configError(path, err)
		}
	}
	rc, err := routecfg.ParseConfig(b)
	if err != nil {
		return routecfg.Config{}, configError(path, err)
	}
	return rc, nil
}

// loadSchedules reads the schedules: section of the config file at path
// ("" = none), as a SIGHUP reloads it; an unknown key of a schedule, a bad
// field or a file that is not there is an error.
func loadSchedules(path string) ([]cron.Schedule, error) {
	if path == "" {
		return nil, nil
	}
	var f struct {
		Schedules []cron.Entry         `yaml:"schedules"`
		Rest      map[string]yaml.Node `yaml:",inline"` // the other sections: not reloaded here
	}
	if err := readSections(path, &f); err != nil {
		return nil, err
	}
	ss, err := parseSchedules(f.Schedules, path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return ss, nil
}

// readSections decodes the config file at path into f, a struct of the
// sections a SIGHUP reloads and an inline map that takes the others; an
// unknown key inside a section is an error.
func readSections(path string, f any) error {
	b, err := routecfg.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// loadAuth reads the API tokens of the config file at path as a SIGHUP
// reloads them: the auth: section (inline tokens, auth.tokens_file relative
// to the config file's folder, token_env variables from getenv), validated
// as at start. path "" has none.
func loadAuth(path string, getenv func(string) string) ([]plane.Token, error) {
	if path == "" {
		return nil, nil
	}
	var f struct {
		Auth authSection          `yaml:"auth"`
		Rest map[string]yaml.Node `yaml:",inline"` // the other sections: not reloaded here
	}
	if err := readSections(path, &f); err != nil {
		return nil, err
	}
	c := &fileConfig{path: path, Auth: f.Auth}
	c.resolvePaths()
	ts, err := loadTokens(c.Auth, getenv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return ts, nil
}

// parseSchedules validates the schedules of the config file at path (their
// relative files are relative to its folder) and checks that each one's
// job or sweep file is a regular file lathed can read.
func parseSchedules(entries []cron.Entry, path string) ([]cron.Schedule, error) {
	dir := ""
	if path != "" {
		dir = filepath.Dir(path)
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
	}
	ss, err := cron.Parse(entries, dir)
	if err != nil {
		return nil, err
	}
	var bad []string
	for i, s := range ss {
		if fi, err := os.Stat(s.File); err != nil {
			bad = append(bad, fmt.Sprintf("schedules[%d].%s: %q: %v", i, s.Kind, s.File, err))
		} else if !fi.Mode().IsRegular() {
			bad = append(bad, fmt.Sprintf("schedules[%d].%s: %q: not a regular file", i, s.Kind, s.File))
		}
	}
	if len(bad) > 0 {
		return nil, errors.New("schedules: " + strings.Join(bad, "; "))
	}
	return ss, nil
}

// configError names the config file in an error of routecfg's: "config:
// open …" when it cannot be read, else "config PATH: …".
func configError(path string, err error) error {
	if routecfg.IsReadError(err) {
		return fmt.Errorf("config: %w", err)
	}
	return fmt.Errorf("config %s: %w", path, err)
}

// duration reads "10s", "2h" from YAML.
type duration time.Duration

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := jobspec.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return &durationError{line: n.Line, column: n.Column, value: n.Value}
	}
	*d = duration(v)
	return nil
}

// durationError is a value that is not a duration; loadConfig names its key.
type durationError struct {
	line, column int
	value        string
}

func (e *durationError) Error() string {
	return fmt.Sprintf("line %d: %q is not a duration like 10s or 2h", e.line, e.value)
}

// keyAt returns the dotted key ("worker.kill_grace") whose value starts at
// line:column of doc, or "" when there is none.
func keyAt(doc []byte, line, column int) string {
	var root yaml.Node
	if yaml.Unmarshal(doc, &root) != nil {
		return ""
	}
	var walk func(n *yaml.Node, path string) string
	walk = func(n *yaml.Node, path string) string {
		if n.Kind != yaml.MappingNode {
			return ""
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if v.Line == line && v.Column == column {
				return p
			}
			if found := walk(v, p); found != "" {
				return found
			}
		}
		return ""
	}
	if len(root.Content) == 0 {
		return ""
	}
	return walk(root.Content[0], "")
}

func (d duration) D() time.Duration { return time.Duration(d) }

// loadConfig reads path ("" = no file: all defaults). Unknown keys are errors.
func loadConfig(path string) (*fileConfig, error) {
	c := &fileConfig{}
	d, err := routecfg.ReadDaemon(path)
	if err != nil {
		return nil, configError(path, err)
	}
	c.daemon = d
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c.path = path
	if err := decodeConfig(c, b, path); err != nil {
		return nil, err
	}
	c.DataDir = d.DataDir
	if g := c.Worker.GPUs; g != "" {
		if _, err := nvmlinventory.ParseGPUsFlag(g); err != nil {
			return nil, fmt.Errorf("config %s: worker.gpus = %q: want auto, none or simulated:<server>, the server one of %s",
				path, g, strings.Join(nvmlinventory.SimulatedServers(), ", "))
		}
	}
	if err := c.Scheduler.check(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c.resolvePaths()
	if err := c.checkTeams(); err != nil {
		return nil, err
	}
	if c.schedules, err = parseSchedules(c.Schedules, path); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if err := checkTrainers(c.Trainers, path); err != nil {
		return nil, err
	}
	return c, nil
}

// decodeConfig decodes b, the config file at path, into c; an unknown key is
// an error, and a bad duration is named by its key and line.
func decodeConfig(c *fileConfig, b []byte, path string) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		var de *durationError
		if errors.As(err, &de) {
			if key := keyAt(b, de.line, de.column); key != "" {
				return fmt.Errorf("config %s: %s = %q: not a duration like 10s or 2h (line %d)", path, key, de.value, de.line)
			}
		}
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// lockOf is the lock file beside an anchor file (ledger.Anchor), "" for
// none.
func lockOf(anchorFile string) string {
	if anchorFile == "" {
		return ""
	}
	return anchorFile + ".lock"
}

// resolvePaths makes the relative file paths of the config
// (worker.checkpoint_root, ledger.key_file, ledger.anchor_file,
// auth.tokens_file) relative to the config file's folder.
func (c *fileConfig) resolvePaths() {
	if r := c.Worker.CheckpointRoot; r != "" && !filepath.IsAbs(r) {
		c.Worker.CheckpointRoot = filepath.Join(filepath.Dir(c.path), r)
	}
	if f := c.Ledger.KeyFile; f != "" && !filepath.IsAbs(f) {
		c.Ledger.KeyFile = filepath.Join(filepath.Dir(c.path), f)
	}
	if f := c.Ledger.AnchorFile; f != "" && !filepath.IsAbs(f) {
		c.Ledger.AnchorFile = filepath.Join(filepath.Dir(c.path), f)
	}
	if f := c.Auth.TokensFile; f != "" && !filepath.IsAbs(f) {
		c.Auth.TokensFile = filepath.Join(filepath.Dir(c.path), f)
	}
}

// checkTrainers rejects a trainer of the config at path with no command or
// a pass_env name a trainer may not be given.
func checkTrainers(trainers map[string]trainerEntry, path string) error {
	for name, tr := range trainers {
		if len(tr.Command) == 0 {
			return fmt.Errorf("config %s: trainers.%s: empty command", path, name)
		}
		for i, k := range tr.PassEnv {
			if err := trainer.CheckPassEnvName(k); err != nil {
				return fmt.Errorf("config %s: trainers.%s.pass_env[%d] = %q: %w", path, name, i, k, err)
			}
		}
	}
	return nil
}

// loadTokens gathers the API tokens of the config (inline, from
// tokens_file, and token_env variables) and validates them.
func loadTokens(a authSection, getenv func(string) string) ([]plane.Token, error) {
	entries := append([]tokenEntry(nil), a.Tokens...)
	if a.TokensFile != "" {
		b, err := os.ReadFile(a.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("auth.tokens_file: %w", err)
		}
		var f struct {
			Tokens []tokenEntry `yaml:"tokens"`
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("auth.tokens_file %s: %w", a.TokensFile, err)
		}
		entries = append(entries, f.Tokens...)
	}
	out := make([]plane.Token, 0, len(entries))
	for i, e := range entries {
		secret := e.Token
		if e.TokenEnv != "" {
			if secret != "" {
				return nil, fmt.Errorf("auth.tokens[%d] (%s): give token or token_env, not both", i, e.Name)
			}
			secret = getenv(e.TokenEnv)
			if secret == "" {
				return nil, fmt.Errorf("auth.tokens[%d] (%s): environment variable %s is empty or unset", i, e.Name, e.TokenEnv)
			}
		}
		out = append(out, plane.Token{Name: e.Name, Secret: secret, Role: plane.Role(e.Role), Team: e.Team, AllTeams: e.AllTeams})
	}
	if err := plane.ValidateTokens(out); err != nil {
		return nil, err
	}
	return out, nil
}

// uidRange reads worker.trainer_uids ("FIRST-LAST"; "" = zero, the
// worker's default).
func uidRange(v string) ([2]uint32, error) {
	if v == "" {
		return [2]uint32{}, nil
	}
	a, b, ok := strings.Cut(v, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil || first == 0 || last < first {
		return [2]uint32{}, fmt.Errorf("worker.trainer_uids = %q: must be FIRST-LAST, two uids with 0 < FIRST ≤ LAST < 2^32", v)
	}
	return [2]uint32{uint32(first), uint32(last)}, nil
}
