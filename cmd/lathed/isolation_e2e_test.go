package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/trainer"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// hostileTrainer is a trainer that attacks what it should not reach and
// prints one line per probe: "PROBE <name> refused <why>" or "PROBE <name>
// LEAKED <what>". Its targets: lathed's environment and memory (its pid
// found by name, as any local process can), the data dir's ledger key,
// the managed Redis's password, socket (a FLUSHALL) and folder, another
// team's data (a root-only folder), an earlier job's published artifact,
// working folder and checkpoint folder, and a signal to lathed. Controls:
// its own job file must be readable, and it says which uid it runs as.
const hostileTrainer = `import json, os, socket, sys
targets = json.load(open(sys.argv[1]))
data = os.path.normpath(os.path.join(os.getcwd(), "..", "..", ".."))
def probe(name, f):
    try:
        got = f()
        print("PROBE %s LEAKED %r" % (name, got)[:200], flush=True)
    except Exception as e:
        print("PROBE %s refused %s" % (name, type(e).__name__), flush=True)
def lathed_pid():
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmd = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"/lathed") and b"up" in cmd and targets["data"].encode() in cmd:
                return int(p)
    raise LookupError("no lathed")
pid = lathed_pid()
def flushall():
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.path.join(data, "redis", "redis.sock"))
    s.sendall(b"FLUSHALL\r\n")
    return s.recv(100)
def write_into(d):
    with open(os.path.join(d, "planted"), "w") as f:
        f.write("x")
    return "wrote"
probe("lathed_environ", lambda: open("/proc/%d/environ" % pid, "rb").read())
probe("lathed_mem", lambda: open("/proc/%d/mem" % pid, "rb").read(1))
probe("signal_lathed", lambda: os.kill(pid, 0) or "signalled")
probe("ledger_key", lambda: open(os.path.join(data, "ledger.key"), "rb").read())
probe("redis_password", lambda: open(os.path.join(data, "redis", "password")).read())
probe("redis_folder", lambda: os.listdir(os.path.join(data, "redis")))
probe("redis_flushall", flushall)
probe("other_team_data", lambda: open(targets["alpha"]).read())
probe("earlier_artifact", lambda: open(targets["artifact"], "rb").read())
probe("earlier_output_folder", lambda: os.listdir(targets["output"]))
probe("earlier_work_folder", lambda: os.listdir(targets["work"]))
probe("earlier_checkpoint_write", lambda: write_into(targets["ckpt"]))
print("CONTROL own_job_file %d" % len(open(os.environ["LATHE_JOB_FILE"]).read()), flush=True)
print("CONTROL uid %d" % os.getuid(), flush=True)
`

// TestHostileTrainerDefaultIsolation: lathed up as root with no security
// setting at all (its config names two trainers and nothing else) runs a
// hostile trainer as a user of its own, and every probe of it is refused:
// lathed's environment and memory, a signal to lathed, the ledger key,
// the managed Redis (password, folder, socket: no FLUSHALL), another
// team's root-only data, and an earlier job's artifact, output, working
// and checkpoint folders. Controls show the probes could succeed: the
// trainer reads its own job file, runs as a uid of the default range, and
// the store still holds both jobs afterwards.
func TestHostileTrainerDefaultIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs lathed as root, as the isolation it shows needs: run it as root")
	}
	lathed, lathe := binaries(t)
	dir := t.TempDir()
	reachableByTrainers(t, dir)
	data := filepath.Join(dir, "data")
	script := filepath.Join(dir, "hostile.py")
	targets := filepath.Join(dir, "targets.json")
	if err := os.WriteFile(script, []byte(hostileTrainer), 0o644); err != nil {
		t.Fatal(err)
	}
	alpha := filepath.Join(dir, "alpha")
	if err := os.Mkdir(alpha, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alpha, "secret.jsonl"), []byte("ALPHA-PRIVATE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "lathe.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`trainers:
  hostile: [/usr/bin/python3, %q, %q]
  quick: ["/bin/sh", "-c", "printf ARTIFACT-SECRET > \"$LATHE_OUTPUT_DIR/a.bin\""]
`, script, targets)), 0o644); err != nil {
		t.Fatal(err)
	}
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemonEnv(t, []string{"LATHE_TEST_ENV_SECRET=env-secret-1234"}, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port),
		"--data-dir", data, "--config", cfg, "--gpus", "none")
	waitHTTP(t, base, d)

	submit := func(name, trainer string) string {
		t.Helper()
		spec := filepath.Join(dir, name+".yaml")
		_ = os.WriteFile(spec, []byte(fmt.Sprintf("name: %s\nbase_model: tiny-char\ntrainer: %s\ndataset: file://%s/configs/examples/data/tiny-train.jsonl\nresources: {gpus: 0}\nmax_runtime: 5m\n",
			name, trainer, repoRoot(t))), 0o644)
		out, errOut, code := cli(t, lathe, base, "submit", spec, "-o", "json")
		if code != 0 {
			t.Fatalf("submit %s: exit %d\n%s\n%s", name, code, out, errOut)
		}
		return decodeJob(t, out).ID
	}
	ended := func(j jobtype.Job) bool { return j.State.Terminal() }

	first := submit("earlier", "quick")
	j1 := waitJob(t, base, first, 2*time.Minute, "the earlier job ended", ended)
	if j1.State != jobtype.StateSucceeded || len(j1.Artifacts) == 0 {
		t.Fatalf("the earlier job: %s (%s: %s), %d artifacts", j1.State, j1.Reason, j1.Error, len(j1.Artifacts))
	}
	out, err := fileuri.Path(j1.OutputURI)
	if err != nil {
		t.Fatal(err)
	}
	tj, _ := json.Marshal(map[string]string{
		"data": data, "alpha": filepath.Join(alpha, "secret.jsonl"), "artifact": filepath.Join(out, j1.Artifacts[0].Path), "output": out,
		"work": filepath.Join(data, "work", first, "1"), "ckpt": filepath.Join(data, "checkpoints", first),
	})
	if err := os.WriteFile(targets, tj, 0o644); err != nil {
		t.Fatal(err)
	}

	hostile := submit("hostile", "hostile")
	j2 := waitJob(t, base, hostile, 2*time.Minute, "the hostile job ended", ended)
	logs, errOut, code := cli(t, lathe, base, "logs", hostile)
	if code != 0 {
		t.Fatalf("lathe logs: exit %d: %s", code, errOut)
	}
	probes, controls := map[string]string{}, map[string]string{}
	for _, line := range strings.Split(logs, "\n") {
		if i := strings.Index(line, "PROBE "); i >= 0 {
			f := strings.SplitN(line[i+len("PROBE "):], " ", 2)
			if len(f) == 2 {
				probes[f[0]] = f[1]
			}
		}
		if i := strings.Index(line, "CONTROL "); i >= 0 {
			f := strings.SplitN(line[i+len("CONTROL "):], " ", 2)
			if len(f) == 2 {
				controls[f[0]] = f[1]
			}
		}
	}
	want := []string{"lathed_environ", "lathed_mem", "signal_lathed", "ledger_key", "redis_password", "redis_folder", "redis_flushall",
		"other_team_data", "earlier_artifact", "earlier_output_folder", "earlier_work_folder", "earlier_checkpoint_write"}
	for _, name := range want {
		got, ok := probes[name]
		switch {
		case !ok:
			t.Errorf("probe %s did not run (job %s %s: %s)", name, j2.State, j2.Reason, j2.Error)
		case !strings.HasPrefix(got, "refused "):
			t.Errorf("probe %s: %s", name, got)
		default:
			t.Logf("probe %s: %s", name, got)
		}
	}
	uid, _ := strconv.ParseUint(controls["uid"], 10, 32)
	if n, _ := strconv.Atoi(controls["own_job_file"]); n == 0 || uid < 2_000_000_000 || uid > 2_000_065_535 {
		t.Errorf("controls %v: want the trainer's own job file read, and a uid of the default range", controls)
	}
	if strings.Contains(logs, "env-secret-1234") || strings.Contains(logs, "ARTIFACT-SECRET") || strings.Contains(logs, "ALPHA-PRIVATE") {
		t.Errorf("a secret reached the hostile job's log:\n%s", logs)
	}
	if j := getJob(t, base, first); j.ID != first {
		t.Errorf("the earlier job is gone from the store after the hostile job (a FLUSHALL?)")
	}
	if !strings.Contains(d.output(), "trainers run as users of their own") {
		t.Errorf("lathed did not say that trainers run as users of their own")
	}
}

// TestNonRootLathedFallsBackFromRootCgroup: once a root lathed has made
// the "lathe" cgroup, a lathed run as another user (nobody) with
// cgroup_root auto cannot use it; it still starts, says loudly that
// trainers run in process groups only (the documented fallback), and says
// that its trainers run as its own user. It used to refuse to start.
func TestNonRootLathedFallsBackFromRootCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes the root lathed's cgroup and runs lathed as nobody: run it as root")
	}
	if _, err := trainer.AutoCgroupRoot(); err != nil {
		t.Fatalf("no cgroup v2 a root lathed could use here: %v", err)
	}
	lathed, _ := binaries(t)
	dir := t.TempDir()
	reachableByTrainers(t, dir)
	// nobody's own copy of the binary and its own data dir.
	bin := filepath.Join(dir, "lathed")
	b, err := os.ReadFile(lathed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	if err := os.Chown(data, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemonAs(t, []string{"HOME=" + data}, &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}, bin,
		"up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data, "--gpus", "none")
	waitHTTP(t, base, d)
	waitfor.Value(t, 30*time.Second, "lathed's start-up warnings", d.output, func(out string) bool {
		return strings.Contains(out, "NO USABLE CGROUP V2") && strings.Contains(out, "trainers run as lathed's own user")
	})
}
