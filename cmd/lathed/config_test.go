package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/worker"
)

// The shipped example config must load, and say what the defaults are.
func TestExampleConfigLoads(t *testing.T) {
	c, err := loadConfig(filepath.Join("..", "..", "configs", "lathe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Scheduler.Listen != "127.0.0.1:8080" || c.Worker.Slots != 2 || c.Worker.KillGrace.D() != 10*time.Second ||
		c.daemon.MaxRuntime != 24*time.Hour || len(c.daemon.Routing.DefaultResidency) != 1 || c.daemon.Routing.DefaultResidency[0] != "onprem" {
		t.Fatalf("example config: %+v", c)
	}
	if sc := c.Scheduler; sc.HTTPReadHeaderTimeout.D() != 10*time.Second || sc.HTTPReadTimeout.D() != 30*time.Second ||
		sc.HTTPWriteTimeout.D() != time.Minute || sc.HTTPIdleTimeout.D() != time.Minute {
		t.Fatalf("example config's API timeouts: %+v", sc)
	}
	if sc := c.Scheduler; sc.HTTPMaxConns != 4096 || sc.HTTPReservedConns != 1024 || sc.maxConnsPerPrefix() != 256 {
		t.Fatalf("example config's API connection caps: %+v", sc)
	}
	if tr := c.Trainers["reference"]; len(tr.Command) != 2 || tr.Command[0] != "{python}" || tr.Launcher == nil || !tr.Launcher.Torchrun {
		t.Fatalf("reference trainer %+v", tr)
	}
	if c.Worker.HFPython != worker.DefaultHFPython || c.Worker.DemoPython != "/usr/bin/python3" {
		t.Fatalf("example config's interpreters: hf_python %q, demo_python %q", c.Worker.HFPython, c.Worker.DemoPython)
	}
	if w := c.Worker; w.GPUs != "auto" || w.CheckpointRoot != "" || w.MonitorInterval.D() != 5*time.Second || w.HangTimeout.D() != 15*time.Minute {
		t.Fatalf("example config's GPU keys: %+v", w)
	}
	if c.Worker.CgroupRoot != "auto" {
		t.Fatalf("example config's worker.cgroup_root = %q, want auto", c.Worker.CgroupRoot)
	}
}

func TestConfigGPUKeys(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lathe.yaml")
	body := "worker:\n  gpus: simulated:dgxh100\n  checkpoint_root: shared/ckpt\n  monitor_interval: 250ms\n  hang_timeout: 1h30m\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	w := c.Worker
	if w.GPUs != "simulated:dgxh100" || w.CheckpointRoot != filepath.Join(dir, "shared", "ckpt") ||
		w.MonitorInterval.D() != 250*time.Millisecond || w.HangTimeout.D() != 90*time.Minute {
		t.Fatalf("worker section %+v", w)
	}
	for _, v := range []string{"auto", "none", "simulated:dgxa100", "simulated:dgxh200", "simulated:dgxb200"} {
		os.WriteFile(p, []byte("worker:\n  gpus: "+v+"\n  checkpoint_root: /mnt/shared/ckpt\n"), 0o644)
		if c, err := loadConfig(p); err != nil || c.Worker.GPUs != v || c.Worker.CheckpointRoot != "/mnt/shared/ckpt" {
			t.Errorf("gpus: %s: %+v, %v", v, c, err)
		}
	}
}

// Bad worker GPU values: the error names the key and the value.
func TestConfigGPUKeyErrors(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]string{
		"worker:\n  gpus: all\n":                  `worker.gpus = "all"`,
		"worker:\n  gpus: simulated:dgx1\n":       `worker.gpus = "simulated:dgx1"`,
		"worker:\n  gpus: simulated\n":            `worker.gpus = "simulated"`,
		"worker:\n  gpus: \"simulated:\"\n":       `worker.gpus = "simulated:"`,
		"worker:\n  monitor_interval: often\n":    `worker.monitor_interval = "often"`,
		"worker:\n  monitor_interval: -5s\n":      `worker.monitor_interval = "-5s"`,
		"worker:\n  hang_timeout: 15\n":           `worker.hang_timeout = "15"`,
		"worker: {slots: 2, hang_timeout: never}": `worker.hang_timeout = "never"`,
		"worker:\n  gpu: auto\n":                  "field gpu not found",
		"worker:\n  checkpoint_root: [a, b]\n":    "line 2",
	} {
		p := filepath.Join(dir, "bad.yaml")
		os.WriteFile(p, []byte(body), 0o644)
		_, err := loadConfig(p)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %s", body, err, want)
		}
	}
}

// --gpus wins over worker.gpus; the file's value wins over the flag's default.
func TestConfigGPUsValue(t *testing.T) {
	file := &fileConfig{Worker: workerSection{GPUs: "none"}}
	for _, c := range []struct {
		o    opts
		fc   *fileConfig
		want string
	}{
		{opts{gpus: "auto"}, &fileConfig{}, "auto"},
		{opts{gpus: "auto"}, file, "none"},
		{opts{gpus: "simulated:dgxh100", gpusSet: true}, file, "simulated:dgxh100"},
		{opts{gpus: "auto", gpusSet: true}, file, "auto"},
	} {
		if got := gpusValue(&c.o, c.fc); got != c.want {
			t.Errorf("gpusValue(%+v, %+v) = %q, want %q", c.o, c.fc.Worker, got, c.want)
		}
	}
}

// A bad --gpus stops lathed before it does anything (no Redis is needed to
// see it), with an error naming the flag and the value.
func TestConfigGPUsFlagValidatedAtStart(t *testing.T) {
	for _, args := range [][]string{
		{"worker", "--gpus", "simulated:dgx1", "--redis-url", "redis://127.0.0.1:1/0", "--data-dir", t.TempDir()},
		{"up", "--gpus", "gpu0", "--data-dir", t.TempDir()},
		{"worker", "--gpus", "", "--redis-url", "redis://127.0.0.1:1/0", "--data-dir", t.TempDir()},
	} {
		var out, errb bytes.Buffer
		cmd := newRootCmd(&out, &errb)
		cmd.SetArgs(args)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := cmd.ExecuteContext(ctx)
		cancel()
		want := fmt.Sprintf("--gpus %q", args[2])
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want one containing %s", args, err, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown key":           "worker:\n  slotz: 3\n",
		"bad duration":          "worker:\n  kill_grace: soon\n",
		"empty trainer":         "trainers:\n  mine: []\n",
		"bad residency":         "routing:\n  default_residency: [OnPrem]\n",
		"s3 output":             "jobs:\n  default_output_uri: s3://b/p\n",
		"both per-prefix names": "scheduler:\n  http_max_conns_per_prefix: 8\n  http_max_conns_per_ip: 8\n",
		"reserve over the cap":  "scheduler:\n  http_max_conns: 64\n  http_reserved_conns: 64\n",
		"reserve over default":  "scheduler:\n  http_reserved_conns: 5000\n",
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := loadConfig(p); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	p := filepath.Join(dir, "empty.yaml")
	os.WriteFile(p, nil, 0o644)
	if _, err := loadConfig(p); err != nil {
		t.Errorf("empty config: %v", err)
	}
}

// TestConfigConnCaps: http_max_conns_per_ip, the old name, still sets the
// per-prefix cap; the reserve and the per-prefix cap reach the API's Config.
func TestConfigConnCaps(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string][3]int{
		"scheduler:\n  http_max_conns_per_ip: 8\n":                                                      {0, 0, 8},
		"scheduler:\n  http_max_conns: 64\n  http_reserved_conns: 16\n  http_max_conns_per_prefix: 4\n": {64, 16, 4},
		"scheduler:\n  http_max_conns: -1\n  http_reserved_conns: 99999\n":                              {-1, 99999, 0},
	} {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(body), 0o644)
		fc, err := loadConfig(p)
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		ac := (&wiring{fc: fc}).apiConfig("127.0.0.1:0", nil, nil, nil)
		if got := [3]int{ac.MaxConns, ac.ReservedConns, ac.MaxConnsPerPrefix}; got != want {
			t.Errorf("%q: max, reserved, per prefix = %v, want %v", body, got, want)
		}
	}
}

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(f, []byte("tokens:\n  - {name: bob, token: bob-secret-0123456789, role: submitter, team: b}\n"), 0o600)
	env := map[string]string{"ALICE_TOKEN": "alice-secret-0123456789"}
	toks, err := loadTokens(authSection{
		Tokens:     []tokenEntry{{Name: "alice", TokenEnv: "ALICE_TOKEN", Role: "admin", Team: "a"}},
		TokensFile: f,
	}, func(k string) string { return env[k] })
	if err != nil || len(toks) != 2 || toks[0].Secret != "alice-secret-0123456789" || toks[1].Name != "bob" {
		t.Fatalf("tokens %+v, %v", toks, err)
	}
	if _, err := loadTokens(authSection{Tokens: []tokenEntry{{Name: "x", TokenEnv: "UNSET_VAR", Role: "admin", Team: "a"}}}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "UNSET_VAR") {
		t.Fatalf("unset token_env: %v", err)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "[::1]:80": true, "localhost:1": true, "127.0.0.2:9": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:80": false, "example.com:80": false, "bad": false} {
		if got := loopbackOnly(addr); got != want {
			t.Errorf("loopbackOnly(%q) = %v", addr, got)
		}
	}
}

// TestLoadTokensAllTeams: all_teams reaches the scheduler's token, and is
// refused where it is not a boolean or not for a viewer or submitter.
func TestLoadTokensAllTeams(t *testing.T) {
	dir := t.TempDir()
	load := func(line string) ([]tokenEntry, error) {
		f := filepath.Join(dir, "tokens.yaml")
		os.WriteFile(f, []byte("tokens:\n  - "+line+"\n"), 0o600)
		toks, err := loadTokens(authSection{TokensFile: f}, func(string) string { return "" })
		if err != nil {
			return nil, err
		}
		out := make([]tokenEntry, len(toks))
		for i, tk := range toks {
			out[i] = tokenEntry{Name: tk.Name, Role: string(tk.Role), Team: tk.Team, AllTeams: tk.AllTeams}
		}
		return out, nil
	}
	toks, err := load("{name: audit, token: audit-secret-0123456789, role: viewer, team: compliance, all_teams: true}")
	if err != nil || len(toks) != 1 || !toks[0].AllTeams {
		t.Fatalf("all_teams viewer: %+v, %v", toks, err)
	}
	if toks, err := load("{name: v, token: view-secret-0123456789, role: viewer, team: a}"); err != nil || toks[0].AllTeams {
		t.Fatalf("a viewer without all_teams: %+v, %v", toks, err)
	}
	for line, want := range map[string]string{
		"{name: root, token: root-secret-0123456789, role: admin, team: ops, all_teams: true}": "all_teams",
		"{name: v, token: view-secret-0123456789, role: viewer, team: a, all_teams: everyone}": "everyone",
	} {
		if _, err := load(line); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", line, err, want)
		}
	}
}

// TestConfigTrainerPassEnv: a trainer is a command list or a mapping with
// pass_env; a token, a contract variable or a bad name in pass_env, and an
// unknown key, are refused naming the key.
func TestConfigTrainerPassEnv(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lathe.yaml")
	os.WriteFile(p, []byte("trainers:\n  plain: [/bin/true]\n  s3:\n    command: [/usr/bin/python3, x.py]\n    pass_env: [AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY]\n"), 0o644)
	c, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := trainerPassEnv(c.Trainers); len(got) != 1 || strings.Join(got["s3"], ",") != "AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY" {
		t.Fatalf("pass_env %v", got)
	}
	if got := trainerCommands(c.Trainers); strings.Join(got["plain"], " ") != "/bin/true" || strings.Join(got["s3"], " ") != "/usr/bin/python3 x.py" {
		t.Fatalf("commands %v", got)
	}
	for body, want := range map[string]string{
		"trainers:\n  s3: {command: [/bin/true], pass_env: [LATHE_TOKEN]}\n":  `trainers.s3.pass_env[0] = "LATHE_TOKEN": "LATHE_TOKEN": API tokens are never passed`,
		"trainers:\n  s3: {command: [/bin/true], pass_env: [LATHE_JOB_ID]}\n": `trainers.s3.pass_env[0] = "LATHE_JOB_ID"`,
		"trainers:\n  s3: {command: [/bin/true], pass_env: [A, 'B=C']}\n":     `trainers.s3.pass_env[1] = "B=C"`,
		"trainers:\n  s3: {command: [/bin/true], env: [A]}\n":                 "field env not found in a trainer",
		"trainers:\n  s3: {pass_env: [A]}\n":                                  "trainers.s3: empty command",
	} {
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := loadConfig(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

// worker.cgroup_root reaches the worker: a value that is neither auto, none
// nor an absolute path stops `lathed worker` with an error naming the key
// and the value (a real redis-server, since the worker is made after Redis).
func TestConfigCgroupRootReachesTheWorker(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "lathe.yaml")
	if err := os.WriteFile(p, []byte("worker:\n  cgroup_root: lathe/trainers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd := newRootCmd(&out, &errb)
	cmd.SetArgs([]string{"worker", "--config", p, "--redis-url", srv.URL() + "/0", "--data-dir", dir, "--gpus", "none", "--node", "cg1"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	if want := `worker.cgroup_root = "lathe/trainers"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one containing %s", err, want)
	}
}

// TestTrainerLauncherConfig: a trainer's launcher is torchrun, none or a
// command list; anything else is an error naming its line and value.
func TestTrainerLauncherConfig(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want *worker.Launcher
		err  string
	}{
		{"trainers:\n  a: {command: [py, s.py], launcher: torchrun}\n", &worker.Launcher{Torchrun: true}, ""},
		{"trainers:\n  a: {command: [py, s.py], launcher: none}\n", &worker.Launcher{}, ""},
		{"trainers:\n  a: {command: [py, s.py], launcher: [acc, launch, \"{gpus}\"]}\n", &worker.Launcher{Argv: []string{"acc", "launch", "{gpus}"}}, ""},
		{"trainers:\n  a: {command: [py, s.py]}\n", nil, ""},
		{"trainers:\n  a: {command: [py, s.py], launcher: mpirun}\n", nil, `line 2: launcher "mpirun": want torchrun, none or a command list`},
		{"trainers:\n  a: {command: [py, s.py], launcher: []}\n", nil, "launcher: an empty command"},
	} {
		p := filepath.Join(t.TempDir(), "lathe.yaml")
		os.WriteFile(p, []byte(tc.yaml), 0o644)
		c, err := loadConfig(p)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		got := c.Trainers["a"].Launcher
		if (got == nil) != (tc.want == nil) || (got != nil && (got.Torchrun != tc.want.Torchrun || strings.Join(got.Argv, " ") != strings.Join(tc.want.Argv, " "))) {
			t.Errorf("%q: launcher %+v, want %+v", tc.yaml, got, tc.want)
		}
	}
}

// TestConfigTeamRoots: teams.<name>.allowed_roots loads into the teams'
// roots; an unknown key of a team, a root outside jobs.allowed_roots, a
// relative root and an empty list are errors naming the key.
func TestConfigTeamRoots(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "lathe.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := loadConfig(write("jobs:\n  allowed_roots: [/data]\nteams:\n  alpha: {allowed_roots: [/data/alpha]}\n  beta:\n    allowed_roots: [/data/beta/, /data/shared]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.teamRoots) != "map[alpha:[/data/alpha] beta:[/data/beta /data/shared]]" {
		t.Fatalf("teams' roots: %v", c.teamRoots)
	}
	for body, want := range map[string]string{
		"teams:\n  beta: {allowed_roots: [/data/beta], allowed_rootz: [/x]}\n":            "allowed_rootz",
		"jobs:\n  allowed_roots: [/data]\nteams:\n  beta: {allowed_roots: [/srv/beta]}\n": `teams.beta.allowed_roots[0] "/srv/beta": not under jobs.allowed_roots (/data)`,
		"teams:\n  beta: {allowed_roots: [beta]}\n":                                       "teams.beta.allowed_roots[0]",
		"teams:\n  beta: {}\n": "teams.beta.allowed_roots: empty",
	} {
		if _, err := loadConfig(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %q", body, err, want)
		}
	}
}

// TestTrainerUIDsConfig: worker.trainer_uids is FIRST-LAST; anything else
// is an error naming the field and the value.
func TestTrainerUIDsConfig(t *testing.T) {
	if r, err := uidRange("3000000000-3000000099"); err != nil || r != [2]uint32{3_000_000_000, 3_000_000_099} {
		t.Fatalf("uidRange: %v %v", r, err)
	}
	if r, err := uidRange(""); err != nil || r != [2]uint32{} {
		t.Fatalf("uidRange of nothing: %v %v; want the worker's default (zero)", r, err)
	}
	for _, bad := range []string{"5", "0-10", "10-5", "a-b", "1-99999999999"} {
		if _, err := uidRange(bad); err == nil || !strings.Contains(err.Error(), "worker.trainer_uids") || !strings.Contains(err.Error(), bad) {
			t.Errorf("uidRange(%q): %v; want an error naming worker.trainer_uids and the value", bad, err)
		}
	}
}

// TestWarnReadableSecrets: a config holding API tokens, or a tokens file,
// that others may read is named at start; one of mode 0600 is not.
func TestWarnReadableSecrets(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "lathe.yaml")
	if err := os.WriteFile(cfg, []byte("auth:\n  tokens:\n    - {name: ops, token: "+strings.Repeat("s", 32)+", role: admin}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fc, err := loadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	warnReadableSecrets(cfg, fc, slog.New(slog.NewTextHandler(&buf, nil)))
	if !strings.Contains(buf.String(), "API TOKENS READABLE") || !strings.Contains(buf.String(), cfg) {
		t.Fatalf("a 0644 config with tokens: %q; want the warning naming it", buf.String())
	}
	buf.Reset()
	_ = os.Chmod(cfg, 0o600)
	warnReadableSecrets(cfg, fc, slog.New(slog.NewTextHandler(&buf, nil)))
	if buf.Len() != 0 {
		t.Fatalf("a 0600 config: %q; want nothing", buf.String())
	}
}

// The Slurm example config loads, with its slurm backend and worker
// section.
func TestSlurmExampleConfigLoads(t *testing.T) {
	c, err := loadConfig(filepath.Join("..", "..", "configs", "slurm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := c.daemon.Routing.Backend("hpc")
	if !ok || b.Kind != "slurm" || b.Partition != "gpu" || b.WorkDir != "/shared/lathe/slurm" || b.MaxInstances != 8 {
		t.Fatalf("slurm backend %+v", b)
	}
	if c.Slurm.PollInterval.D() != 5*time.Second || c.Slurm.LostGrace.D() != 2*time.Minute {
		t.Fatalf("slurm section %+v", c.Slurm)
	}
}

// The Kubernetes example config loads, with its kubernetes backend and
// worker section.
func TestKubeExampleConfigLoads(t *testing.T) {
	c, err := loadConfig(filepath.Join("..", "..", "configs", "kubernetes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := c.daemon.Routing.Backend("k8s")
	if !ok || b.Kind != "kubernetes" || b.Kube == nil || b.Kube.Namespace != "lathe-jobs" || b.Kube.QueueName != "team-a" ||
		b.WorkDir != "/shared/lathe/k8s" || b.MaxInstances != 8 {
		t.Fatalf("kubernetes backend %+v", b)
	}
	if c.Kube.PollInterval.D() != 5*time.Second || c.Kube.OrphanGrace.D() != 10*time.Minute {
		t.Fatalf("kubernetes section %+v", c.Kube)
	}
}
