package main

// End-to-end tests: the real lathed and lathe binaries (built here), a real
// redis-server, the real reference trainer under /usr/bin/python3 with
// torch. Nothing is faked. These are the "Must show" checks of issue #2.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// TestMain removes the binaries' folder (binaries) after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds lathed and lathe (the CLI's front and lathe-full beside
// it, as they are installed) once per test run.
func binaries(t testing.TB) (lathed, lathe string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "lathe-e2e-bin-")
		if buildErr != nil {
			return
		}
		for _, p := range []string{"lathed", "lathe", "lathe-full"} {
			args := []string{"build", "-o", filepath.Join(binDir, p)}
			if os.Getenv("LATHE_E2E_RACE") == "1" {
				// Binaries with the race detector: a daemon that reports a
				// race fails its test (startDaemonEnv). Slow; not in CI.
				args = append(args, "-race")
			}
			build := exec.Command("go", append(args, "github.com/lathe-ml/lathe/cmd/"+p)...)
			build.Env = quietCgoEnv()
			if p != "lathed" && os.Getenv("LATHE_E2E_RACE") != "1" {
				// The CLI is built without cgo, as docs/running.md builds it:
				// a static binary, spared the dynamic loader's start-up (the
				// race detector needs cgo).
				build.Env = append(build.Env, "CGO_ENABLED=0")
			}
			out, err := build.CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", p, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "lathed"), filepath.Join(binDir, "lathe")
}

// quietCgoEnv is this process's environment for a go build, with
// -Wno-deprecated-declarations appended to the CGO_CFLAGS in force (go env
// CGO_CFLAGS: the user's, else Go's -O2 -g), as scripts/cgoflags.sh does:
// go-nvml's cgo header marks NVML calls deprecated, and a fresh build of it
// would print hundreds of warnings.
func quietCgoEnv() []string {
	const quiet = "-Wno-deprecated-declarations"
	out, err := exec.Command("go", "env", "CGO_CFLAGS").Output()
	flags := strings.TrimSpace(string(out))
	if err != nil || flags == "" {
		flags = cmp.Or(os.Getenv("CGO_CFLAGS"), "-O2 -g")
	}
	if !slices.Contains(strings.Fields(flags), quiet) {
		flags = strings.TrimSpace(flags + " " + quiet)
	}
	return append(os.Environ(), "CGO_CFLAGS="+flags)
}

func requireTorch(t *testing.T) {
	t.Helper()
	out, err := exec.Command("/usr/bin/python3", "-c", "import torch").CombinedOutput()
	if err != nil {
		t.Fatalf("/usr/bin/python3 with torch is required (apt-get install -y python3-torch): %v\n%s", err, out)
	}
}

func repoRoot(t testing.TB) string {
	t.Helper()
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// daemon is a running lathed process.
type daemon struct {
	cmd  *exec.Cmd
	logs *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
}

type syncBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (s syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }

func startDaemon(t testing.TB, bin string, args ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, nil, bin, args...)
}

// startDaemonEnv starts bin with extra environment entries (nil: inherit).
// A --data-dir under the test's temp folders is made reachable by the
// trainers' own users (reachableByTrainers).
func startDaemonEnv(t testing.TB, env []string, bin string, args ...string) *daemon {
	t.Helper()
	return startDaemonAs(t, env, nil, bin, args...)
}

// startDaemonAs is startDaemonEnv run as user cred (nil: this process's).
func startDaemonAs(t testing.TB, env []string, cred *syscall.Credential, bin string, args ...string) *daemon {
	t.Helper()
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) {
			reachableByTrainers(t, args[i+1])
		} else if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			reachableByTrainers(t, v)
		}
	}
	d := &daemon{logs: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Dir = repoRoot(t) // as a user runs it: the repo's examples are under the default allowed roots
	if env != nil {
		d.cmd.Env = append(os.Environ(), env...)
	}
	d.cmd.Stdout = syncBuf{d.mu, d.logs}
	d.cmd.Stderr = syncBuf{d.mu, d.logs}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if strings.Contains(d.output(), "WARNING: DATA RACE") {
			t.Errorf("%s %v reported a data race", filepath.Base(bin), args)
		}
		if t.Failed() {
			t.Logf("%s %v logs:\n%s", filepath.Base(bin), args, d.output())
		}
	})
	return d
}

// reachableByTrainers makes dir (made if missing) and the folders above it
// up to the system's temp folder searchable by others (o+x), as an
// operator's data dir is: a root lathed runs each trainer as a user of its
// own, which must reach its working folder under the data dir, and
// t.TempDir's folders are 0700.
func reachableByTrainers(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Clean(os.TempDir())
	for p := filepath.Clean(dir); strings.HasPrefix(p, tmp+string(filepath.Separator)); p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, st.Mode().Perm()|0o001); err != nil {
			t.Fatal(err)
		}
	}
}

func (d *daemon) output() string { d.mu.Lock(); defer d.mu.Unlock(); return d.logs.String() }

// waitHTTP waits until the API answers /healthz.
func waitHTTP(t testing.TB, base string, d *daemon) {
	t.Helper()
	waitfor.Value(t, 60*time.Second, "the API at "+base+" healthy", func() string {
		select {
		case <-d.done:
			t.Fatalf("daemon exited:\n%s", d.output())
		default:
		}
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		return resp.Status
	}, func(status string) bool { return strings.HasPrefix(status, "200 ") })
}

// cli runs lathe and returns stdout, stderr and the exit code.
func cli(t testing.TB, bin, server string, args ...string) (string, string, int) {
	t.Helper()
	return runLathe(t, bin, append(os.Environ(), "LATHE_SERVER="+server), args...)
}

// runLathe runs the lathe binary bin with env from the repository root and
// returns stdout, stderr and the exit code.
func runLathe(t testing.TB, bin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Dir = repoRoot(t)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run lathe %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func decodeJob(t *testing.T, s string) jobtype.Job {
	t.Helper()
	var j jobtype.Job
	if err := json.Unmarshal([]byte(s), &j); err != nil {
		t.Fatalf("not a job JSON: %v\n%s", err, s)
	}
	return j
}

func getJob(t *testing.T, base, id string) jobtype.Job {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/jobs/" + id)
	if err != nil {
		t.Fatalf("get job: %v", err)
	}
	defer resp.Body.Close()
	var j jobtype.Job
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		t.Fatalf("decode job: %v", err)
	}
	return j
}

// waitJob polls the API until cond holds; on timeout it fails with the
// job's last state, progress and error.
func waitJob(t *testing.T, base, id string, within time.Duration, what string, cond func(jobtype.Job) bool) jobtype.Job {
	t.Helper()
	j := waitfor.Value(t, within, "job "+id+": "+what, func() polledJob { return polledJob(getJob(t, base, id)) },
		func(j polledJob) bool { return cond(jobtype.Job(j)) })
	return jobtype.Job(j)
}

// polledJob is a job as a failed waitJob prints it.
type polledJob jobtype.Job

func (j polledJob) String() string {
	return fmt.Sprintf("state=%s progress=%+v error=%q", j.State, j.Progress, j.Error)
}

// safetensorsHeader reads the JSON header of a safetensors file.
func safetensorsHeader(t *testing.T, path string) map[string]json.RawMessage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 8 {
		t.Fatalf("%s: too short", path)
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if uint64(len(b)) < 8+n {
		t.Fatalf("%s: header length %d beyond file", path, n)
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &h); err != nil {
		t.Fatalf("%s: header: %v", path, err)
	}
	return h
}

// checkRun submits the tiny example, waits, and checks the adapter.
func checkRun(t *testing.T, lathe, base string) {
	t.Helper()
	root := repoRoot(t)
	out, errOut, code := cli(t, lathe, base, "submit", "configs/examples/tiny-lora.yaml", "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("submit --wait exited %d\nstdout:%s\nstderr:%s", code, out, errOut)
	}
	j := decodeJob(t, out)
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("submit --wait printed state %s", j.State)
	}
	out, _, code = cli(t, lathe, base, "status", j.ID, "-o", "json")
	if code != 0 || !strings.Contains(out, `"state": "succeeded"`) {
		t.Fatalf("status exited %d:\n%s", code, out)
	}
	st := decodeJob(t, out)
	for _, k := range []string{"id", "name", "state", "backend", "node", "gpus", "attempt", "progress", "metrics", "artifacts"} {
		if !strings.Contains(out, `"`+k+`"`) {
			t.Errorf("status -o json lacks %q", k)
		}
	}
	if st.Progress.Step == 0 || st.Progress.Step != st.Progress.TotalSteps {
		t.Errorf("progress %+v: want the last step", st.Progress)
	}
	dir := t.TempDir()
	if _, e, code := cli(t, lathe, base, "pull", j.ID, "--to", dir); code != 0 {
		t.Fatalf("pull exited %d: %s", code, e)
	}
	var cfg struct {
		R             int      `json:"r"`
		TargetModules []string `json:"target_modules"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "adapter_config.json"))
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.R != st.Spec.LoRA.Rank {
		t.Fatalf("adapter_config r=%d, spec rank %d", cfg.R, st.Spec.LoRA.Rank)
	}
	h := safetensorsHeader(t, filepath.Join(dir, "adapter_model.safetensors"))
	nA, nB := 0, 0
	for k, v := range h {
		if k == "__metadata__" {
			continue
		}
		var ti struct {
			Shape []int `json:"shape"`
		}
		_ = json.Unmarshal(v, &ti)
		switch {
		case strings.HasSuffix(k, "lora_A.weight"):
			nA++
			if len(ti.Shape) != 2 || ti.Shape[0] != cfg.R {
				t.Errorf("%s shape %v: want [r=%d, in]", k, ti.Shape, cfg.R)
			}
		case strings.HasSuffix(k, "lora_B.weight"):
			nB++
			if len(ti.Shape) != 2 || ti.Shape[1] != cfg.R {
				t.Errorf("%s shape %v: want [out, r=%d]", k, ti.Shape, cfg.R)
			}
		}
	}
	if nA == 0 || nA != nB {
		t.Fatalf("safetensors has %d lora_A and %d lora_B tensors", nA, nB)
	}
	ev := exec.Command("/usr/bin/python3", filepath.Join(root, "scripts", "eval_adapter.py"), "--adapter", dir,
		"--eval-dataset", strings.TrimPrefix(st.Spec.EvalDataset, "file://"), "-o", "json")
	evOut, err := ev.Output()
	if err != nil {
		t.Fatalf("eval_adapter.py: %v\n%s", err, evOut)
	}
	var res struct {
		Base    float64 `json:"base_eval_loss"`
		Adapter float64 `json:"adapter_eval_loss"`
	}
	if err := json.Unmarshal(lastLine(evOut), &res); err != nil {
		t.Fatalf("eval_adapter.py output: %v\n%s", err, evOut)
	}
	reported := st.Metrics["eval_loss"]
	if math.Abs(res.Adapter-reported) > 1e-3 {
		t.Errorf("eval_adapter.py gives %.6f, the job reported eval_loss %.6f", res.Adapter, reported)
	}
	if !(res.Adapter < res.Base) {
		t.Errorf("adapter eval loss %.4f is not lower than the base model's %.4f", res.Adapter, res.Base)
	}
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

// TestUpEndToEnd: `lathed up` with nothing else running (it starts its own
// redis-server in the data dir), then the tiny example end to end.
func TestUpEndToEnd(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", t.TempDir())
	waitHTTP(t, base, d)
	if !strings.Contains(d.output(), "started redis-server inside the data dir") {
		t.Errorf("lathed up did not say it started its own redis-server:\n%s", d.output())
	}
	checkRun(t, lathe, base)
}

// TestUpEmbeddedRedis: with no redis-server on PATH, `lathed up` runs an
// embedded miniredis, says it is ephemeral, and still runs a job.
func TestUpEmbeddedRedis(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemonEnv(t, []string{"PATH=/nonexistent"}, lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", t.TempDir())
	waitHTTP(t, base, d)
	if !strings.Contains(d.output(), "EPHEMERAL") {
		t.Errorf("lathed up did not say its embedded Redis is ephemeral:\n%s", d.output())
	}
	out, errOut, code := cli(t, lathe, base, "submit", "configs/examples/tiny-lora.yaml", "--wait", "-o", "json")
	if code != 0 || decodeJob(t, out).State != jobtype.StateSucceeded {
		t.Fatalf("submit --wait on embedded Redis exited %d\n%s\n%s", code, out, errOut)
	}

	// Several files go in one all-or-nothing batch: one bad file and nothing
	// is stored; all good and every job runs.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nbase_model: tiny-char\ndataset: file:///d.jsonl\nlora: {rank: -4}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = cli(t, lathe, base, "submit", "configs/examples/tiny-lora.yaml", bad)
	if code != 2 || !strings.Contains(errOut, "lora.rank") || !strings.Contains(errOut, "nothing was submitted") {
		t.Fatalf("batch with a bad file: exit %d\n%s", code, errOut)
	}
	out, errOut, code = cli(t, lathe, base, "list", "-o", "json")
	if code != 0 || strings.Count(out, `"id"`) != 1 {
		t.Fatalf("after a refused batch, list shows other than the one earlier job (exit %d):\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = cli(t, lathe, base, "submit", "configs/examples/tiny-lora.yaml", "configs/examples/tiny-lora.yaml", "-o", "json")
	if code != 0 {
		t.Fatalf("batch submit exited %d\n%s\n%s", code, out, errOut)
	}
	var br wire.BatchResponse
	if err := json.Unmarshal([]byte(out), &br); err != nil || len(br.Jobs) != 2 || br.Jobs[0].ID == br.Jobs[1].ID {
		t.Fatalf("batch submit output: %v\n%s", err, out)
	}
	for _, j := range br.Jobs {
		waitJob(t, base, j.ID, 2*time.Minute, "batch job succeeded", func(j jobtype.Job) bool { return j.State == jobtype.StateSucceeded })
	}
}

// TestRefusesEvictingRedis: a Redis whose maxmemory-policy is not
// noeviction is refused with a message that says how to fix it.
func TestRefusesEvictingRedis(t *testing.T) {
	lathed, _ := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{Policy: "allkeys-lru"})
	cmd := exec.Command(lathed, "scheduler", "--redis-url", rs.URL(), "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("lathed scheduler accepted an allkeys-lru Redis:\n%s", out)
	}
	if !strings.Contains(string(out), "noeviction") || !strings.Contains(string(out), "CONFIG SET maxmemory-policy noeviction") {
		t.Fatalf("refusal does not say how to fix it:\n%s", out)
	}
}

// TestRefusesTruncatedAOFLoading: a Redis that keeps an AOF with
// aof-load-truncated yes (Redis's default) is refused, saying how to fix
// it; the same Redis with it set to no is accepted.
func TestRefusesTruncatedAOFLoading(t *testing.T) {
	lathed, _ := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{AOF: true, LoadTruncated: true})
	out, err := exec.Command(lathed, "scheduler", "--redis-url", rs.URL(), "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "aof-load-truncated is yes") || !strings.Contains(string(out), "CONFIG SET aof-load-truncated no") {
		t.Fatalf("a Redis loading truncated AOFs was not refused (err %v):\n%s", err, out)
	}
	if err := rs.Client().ConfigSet(context.Background(), "aof-load-truncated", "no").Err(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lathed, "scheduler", "--redis-url", rs.URL(), "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	log := &logBuf{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitfor.True(t, 30*time.Second, "lathed scheduler up with aof-load-truncated no", func() bool { return strings.Contains(log.String(), "API listening") })
}

// TestRefusesOpenAPIBeyondLoopback: with no API tokens, lathed refuses to
// listen on anything but loopback.
func TestRefusesOpenAPIBeyondLoopback(t *testing.T) {
	lathed, _ := binaries(t)
	rs := redistest.Start(t)
	out, err := exec.Command(lathed, "scheduler", "--redis-url", rs.URL(), "--listen", "0.0.0.0:0", "--data-dir", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no API tokens") {
		t.Fatalf("an open API on 0.0.0.0 was not refused (err %v):\n%s", err, out)
	}
}

// TestTwoProcesses: `lathed scheduler` and `lathed worker` as two processes
// on a real redis-server; the same run, then the fault checks.
func TestTwoProcesses(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	sd := startDaemon(t, lathed, "scheduler", "--redis-url", rs.URL(), "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
	wd := startDaemon(t, lathed, "worker", "--backend", "local", "--redis-url", rs.URL(), "--data-dir", data, "--node", "e2e-node")
	waitHTTP(t, base, sd)
	checkRun(t, lathe, base)

	t.Run("bad spec is refused and nothing is stored", func(t *testing.T) {
		before := countKeys(t, rs)
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		os.WriteFile(bad, []byte("name: bad\nbase_model: tiny-char\ndataset: file:///tmp/x.jsonl\nlora: {rank: -4}\npriority: sometimes\ncolour: blue\n"), 0o644)
		_, errOut, code := cli(t, lathe, base, "submit", bad)
		if code != 2 {
			t.Fatalf("bad spec exited %d, want 2:\n%s", code, errOut)
		}
		for _, f := range []string{"lora.rank", "priority", "colour", "-4", "sometimes"} {
			if !strings.Contains(errOut, f) {
				t.Errorf("error output does not name %q:\n%s", f, errOut)
			}
		}
		// The server refuses the same spec on its own (a client that skips local checks).
		body := `{"name":"bad","base_model":"tiny-char","dataset":"file:///tmp/x.jsonl","lora":{"rank":-4},"priority":"sometimes","colour":"blue"}`
		resp, err := http.Post(base+"/api/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var ae struct {
			Fields []struct{ Field, Value string }
		}
		json.NewDecoder(resp.Body).Decode(&ae)
		resp.Body.Close()
		if resp.StatusCode != 400 || len(ae.Fields) < 3 {
			t.Fatalf("server answered %d with %d field errors", resp.StatusCode, len(ae.Fields))
		}
		if after := countKeys(t, rs); after != before {
			t.Fatalf("Redis keys %d → %d: something was stored", before, after)
		}
	})

	t.Run("cancel a running job", func(t *testing.T) {
		spec := longSpec(t)
		out, e, code := cli(t, lathe, base, "submit", spec, "-o", "json")
		if code != 0 {
			t.Fatalf("submit: %d %s", code, e)
		}
		id := decodeJob(t, out).ID
		waitJob(t, base, id, 60*time.Second, "running with progress", func(j jobtype.Job) bool {
			return j.State == jobtype.StateRunning && j.Progress.Step > 0
		})
		pid := trainerPID(t, base, id)
		if _, e, code := cli(t, lathe, base, "cancel", id); code != 0 {
			t.Fatalf("cancel exited %d: %s", code, e)
		}
		// Liveness bound from the issue: the group ends within 10 s.
		j := waitJob(t, base, id, 10*time.Second, "cancelled", func(j jobtype.Job) bool { return j.State == jobtype.StateCancelled })
		if syscall.Kill(-pid, 0) != syscall.ESRCH {
			t.Fatalf("trainer process group %d still alive after cancelled was written", pid)
		}
		if j.Attempt != 1 {
			t.Fatalf("attempt %d after cancel", j.Attempt)
		}
		// No new attempt: the job is terminal and its events hold one start.
		if n := countEvents(t, base, id, "started"); n != 1 {
			t.Fatalf("%d trainer starts for a cancelled job", n)
		}
		// lathe retry: a new attempt of the cancelled job runs, from its checkpoint.
		if out, e, code := cli(t, lathe, base, "retry", id); code != 0 || !strings.Contains(out, "attempt 2") {
			t.Fatalf("retry exited %d: %s %s", code, out, e)
		}
		waitJob(t, base, id, 60*time.Second, "attempt 2 running", func(j jobtype.Job) bool {
			return j.State == jobtype.StateRunning && j.Attempt == 2
		})
		if _, e, code := cli(t, lathe, base, "cancel", id); code != 0 {
			t.Fatalf("cancel after retry: %s", e)
		}
		waitJob(t, base, id, 10*time.Second, "cancelled again", func(j jobtype.Job) bool { return j.State == jobtype.StateCancelled })
	})

	t.Run("worker restart: the next attempt resumes from the checkpoint", func(t *testing.T) {
		out, e, code := cli(t, lathe, base, "submit", longSpec(t), "-o", "json")
		if code != 0 {
			t.Fatalf("submit: %d %s", code, e)
		}
		id := decodeJob(t, out).ID
		waitJob(t, base, id, 60*time.Second, "a checkpoint", func(j jobtype.Job) bool {
			return j.State == jobtype.StateRunning && countEvents(t, base, id, "checkpoint") > 0
		})
		pid := trainerPID(t, base, id)
		// A clean worker stop: SIGTERM → the trainer checkpoints → a new attempt is queued.
		_ = wd.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-wd.done:
		case <-time.After(60 * time.Second):
			t.Fatal("worker did not stop")
		}
		j := getJob(t, base, id)
		if j.State != jobtype.StateQueued || j.Attempt != 2 {
			t.Fatalf("after the worker stopped: %s attempt %d, want queued attempt 2", j.State, j.Attempt)
		}
		if syscall.Kill(-pid, 0) != syscall.ESRCH {
			t.Fatalf("trainer group %d outlived its worker", pid)
		}
		lastCkpt := 0
		for _, e := range events(t, base, id) {
			if e.Type == "checkpoint" {
				var c struct{ Step int }
				json.Unmarshal(e.Data, &c)
				lastCkpt = c.Step
			}
		}
		wd = startDaemon(t, lathed, "worker", "--backend", "local", "--redis-url", rs.URL(), "--data-dir", data, "--node", "e2e-node")
		// The record keeps attempt 1's progress until attempt 2 prints its own,
		// so wait for a progress event of attempt 2 itself.
		first := 0
		waitJob(t, base, id, 60*time.Second, "a progress event of attempt 2", func(j jobtype.Job) bool {
			for _, e := range events(t, base, id) {
				if e.Type == "progress" && e.Attempt == 2 {
					var p struct{ Step int }
					json.Unmarshal(e.Data, &p)
					first = p.Step
					return true
				}
			}
			return false
		})
		if lastCkpt == 0 || first <= lastCkpt {
			t.Fatalf("attempt 2 started at step %d; the last checkpoint was step %d", first, lastCkpt)
		}
		if _, e, code := cli(t, lathe, base, "cancel", id); code != 0 {
			t.Fatalf("cancel: %s", e)
		}
		waitJob(t, base, id, 10*time.Second, "cancelled", func(j jobtype.Job) bool { return j.State == jobtype.StateCancelled })
	})

	t.Run("redis down: 503 within 2s and exit 3", func(t *testing.T) {
		out, _, _ := cli(t, lathe, base, "list", "-o", "json")
		var l struct{ Jobs []jobtype.Job }
		json.Unmarshal([]byte(out), &l)
		if len(l.Jobs) == 0 {
			t.Fatal("no jobs listed")
		}
		rs.Kill()
		c := &http.Client{Timeout: 2 * time.Second}
		for _, path := range []string{"/api/v1/jobs/" + l.Jobs[0].ID, "/healthz", "/api/v1/jobs", "/api/v1/queues"} {
			resp, err := c.Get(base + path)
			if err != nil {
				t.Fatalf("GET %s with Redis down: no answer within 2 s: %v", path, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 {
				t.Fatalf("GET %s with Redis down: %d, want 503", path, resp.StatusCode)
			}
		}
		_, errOut, code := cli(t, lathe, base, "status", l.Jobs[0].ID)
		if code != 3 || !strings.Contains(errOut, "Redis") {
			t.Fatalf("status with Redis down exited %d (want 3): %s", code, errOut)
		}
		rs.Restart()
	})
}

// longSpec writes a spec that trains long enough to be cancelled mid-run.
func longSpec(t *testing.T) string {
	root := repoRoot(t)
	p := filepath.Join(t.TempDir(), "long.yaml")
	spec := fmt.Sprintf(`name: long-run
base_model: tiny-char
dataset: file://%s/configs/examples/data/tiny-train.jsonl
eval_dataset: file://%s/configs/examples/data/tiny-eval.jsonl
lora: {rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}
training: {max_steps: 100000, batch_size: 4, learning_rate: 0.001, checkpoint_every: 20, eval_every: 50000}
resources: {gpus: 0}
`, root, root)
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func trainerPID(t *testing.T, base, id string) int {
	t.Helper()
	for _, e := range events(t, base, id) {
		if e.Type == "started" {
			var d struct{ PID int }
			json.Unmarshal(e.Data, &d)
			return d.PID
		}
	}
	t.Fatalf("no started event for %s", id)
	return 0
}

func events(t *testing.T, base, id string) []jobtype.Event {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/jobs/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var evs struct{ Events []jobtype.Event }
	if err := json.NewDecoder(resp.Body).Decode(&evs); err != nil {
		t.Fatal(err)
	}
	return evs.Events
}

func countEvents(t *testing.T, base, id, typ string) int {
	n := 0
	for _, e := range events(t, base, id) {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// countKeys counts Lathe's job keys and the members of its pending set
// (node heartbeats and asynq's own keys change by themselves, so not those).
func countKeys(t *testing.T, rs *redistest.Server) int64 {
	t.Helper()
	ctx := context.Background()
	c := rs.Client()
	keys, err := c.Keys(ctx, "lathe:job*").Result()
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.ZCard(ctx, "lathe:pending").Result()
	if err != nil {
		t.Fatal(err)
	}
	return int64(len(keys)) + p
}

// TestKillWorkerResumes: `kill -9` of the worker process during a job, then
// a restart of the worker, ten times in a row. Each time the job must end
// succeeded exactly once, its second attempt must resume from a step > 0,
// and /proc, sampled every 100 ms through the whole run, must never show two
// trainers of that job at once. Short leases make it quick (config below).
func TestKillWorkerResumes(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	cfg := filepath.Join(data, "lathe.yaml")
	os.WriteFile(cfg, []byte("worker:\n  lease_ttl: 3s\n  heartbeat_ttl: 3s\n  kill_grace: 2s\nscheduler:\n  reap_grace: 1s\n  place_interval: 100ms\n"), 0o644)
	sd := startDaemon(t, lathed, "scheduler", "--config", cfg, "--redis-url", rs.URL(), "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
	waitHTTP(t, base, sd)
	root := repoRoot(t)
	spec := filepath.Join(data, "resume.yaml")
	os.WriteFile(spec, []byte(fmt.Sprintf(`name: resume
base_model: tiny-char
dataset: file://%s/configs/examples/data/tiny-train.jsonl
lora: {rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}
training: {max_steps: 60, batch_size: 4, learning_rate: 0.01, checkpoint_every: 10, eval_every: 1000}
resources: {gpus: 0}
`, root)), 0o644)

	worker := func() *daemon {
		return startDaemon(t, lathed, "worker", "--config", cfg, "--backend", "local", "--redis-url", rs.URL(), "--data-dir", data, "--node", "kill-node")
	}
	wd := worker()
	for round := 1; round <= 10; round++ {
		out, e, code := cli(t, lathe, base, "submit", spec, "-o", "json")
		if code != 0 {
			t.Fatalf("round %d: submit: %d %s", round, code, e)
		}
		id := decodeJob(t, out).ID
		watch := watchTrainers(id)
		waitJob(t, base, id, 60*time.Second, "a checkpoint", func(j jobtype.Job) bool {
			return j.State == jobtype.StateRunning && countEvents(t, base, id, "checkpoint") > 0
		})
		select {
		case <-wd.done:
			t.Fatalf("round %d: the worker had exited before the kill:\n%s", round, wd.output())
		default:
		}
		_ = wd.cmd.Process.Kill() // SIGKILL: no cleanup of any kind
		<-wd.done
		wd = worker()
		j := waitJob(t, base, id, 90*time.Second, "terminal", func(j jobtype.Job) bool { return j.State.Terminal() })
		most := watch.stop()
		if j.State != jobtype.StateSucceeded {
			t.Fatalf("round %d: job ended %s (%s)", round, j.State, j.Error)
		}
		if most > 1 {
			t.Fatalf("round %d: /proc showed %d trainers of %s at once", round, most, id)
		}
		first, succeeded := 0, 0
		for _, e := range events(t, base, id) {
			var d struct {
				Step int
				To   string
			}
			json.Unmarshal(e.Data, &d)
			if e.Type == "progress" && e.Attempt >= 2 && first == 0 {
				first = d.Step
			}
			if e.Type == "state" && d.To == "succeeded" {
				succeeded++
			}
		}
		if j.Attempt < 2 || first <= 1 || succeeded != 1 {
			t.Fatalf("round %d: attempt %d, first step after the kill %d, succeeded %d times", round, j.Attempt, first, succeeded)
		}
		t.Logf("round %d: %s succeeded at attempt %d, resumed at step %d", round, id, j.Attempt, first)
	}
}

// trainerWatch samples /proc every 100 ms for processes of one job (their
// environment holds LATHE_JOB_ID=<id>) and keeps the most seen at once.
type trainerWatch struct {
	done chan struct{}
	most chan int
}

func watchTrainers(id string) *trainerWatch {
	w := &trainerWatch{done: make(chan struct{}), most: make(chan int, 1)}
	needle := []byte("LATHE_JOB_ID=" + id + "\x00")
	go func() {
		most := 0
		for {
			n := 0
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				if e.Name()[0] < '0' || e.Name()[0] > '9' {
					continue
				}
				b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
				if err == nil && bytes.Contains(b, needle) {
					n++
				}
			}
			most = max(most, n)
			select {
			case <-w.done:
				w.most <- most
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *trainerWatch) stop() int { close(w.done); return <-w.most }
