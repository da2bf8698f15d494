package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// The tests below run the CLI against the real scheduler's API in process
// (newTestDaemon, daemon_test.go) where it can serve what they need, and
// against fakeScheduler (fake_test.go) for jobs that ran (a worker's events,
// progress and artifacts), canned failures and answers.

// routableSpec is a spec the routing config of the real-scheduler tests
// (routeConfig) places on its local backend.
const routableSpec = "name: tiny-lora\nbase_model: tiny-char\ndataset: file:///data/support/train.jsonl\ntraining: {max_steps: 20}\n"

const validSpec = `name: tiny-lora
base_model: tiny-char
dataset: file:///data/train.jsonl
training: {max_steps: 20}
`

type result struct {
	code           int
	stdout, stderr string
}

// lathe runs the CLI with LATHE_SERVER set to server.
func lathe(t *testing.T, server string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	env := func(k string) string {
		if k == "LATHE_SERVER" {
			return server
		}
		return ""
	}
	code := run(context.Background(), args, &out, &errOut, env)
	return result{code, out.String(), errOut.String()}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// closedURL returns the URL of a local port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestSubmitInvalidSpecSendsNothing(t *testing.T) {
	f := newFakeScheduler(t)
	spec := writeFile(t, t.TempDir(), "job.yaml", `name: Bad_Name
base_model: tiny-char
dataset: file:///data/train.jsonl
lora: {rank: -4}
priority: sometimes
bogus: 1
`)
	r := lathe(t, f.srv.URL, "submit", spec)
	if r.code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, exitUsage, r.stderr)
	}
	for _, want := range []string{
		`error: lora.rank = "-4": must be between 1 and`,
		`error: name = "Bad_Name"`,
		`error: priority = "sometimes"`,
		`error: bogus`,
		"nothing was submitted",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if n := f.requestCount(); n != 0 {
		t.Errorf("%d requests sent for an invalid spec", n)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
}

func TestSubmitServerValidationError(t *testing.T) {
	f := newFakeScheduler(t)
	f.fail = &failure{400, `{"error":"validation failed","code":"invalid","fields":[` +
		`{"field":"residency[0]","value":"mars","message":"no site carries this tag"},` +
		`{"field":"resources.gpus","value":"64","message":"no node has 64 GPUs"}]}`}
	r := lathe(t, f.srv.URL, "submit", writeFile(t, t.TempDir(), "job.yaml", validSpec))
	if r.code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, exitUsage, r.stderr)
	}
	for _, want := range []string{
		`error: residency[0] = "mars": no site carries this tag`,
		`error: resources.gpus = "64": no node has 64 GPUs`,
		"rejected",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

func TestUnreachableServer(t *testing.T) {
	url := closedURL(t)
	spec := writeFile(t, t.TempDir(), "job.yaml", validSpec)
	for _, args := range [][]string{{"status", "j-1"}, {"submit", spec}, {"queues"}, {"logs", "-f", "j-1"}} {
		r := lathe(t, url, args...)
		if r.code != exitUnreachable {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", args, r.code, exitUnreachable, r.stderr)
		}
		// A new user with no daemon running is told how to start one.
		want := "lathe: no Lathe scheduler at " + url + " (connection refused). Start one with: lathed up   (or set --server / LATHE_SERVER)\n"
		if r.stderr != want {
			t.Errorf("%v: stderr\n%q\nwant\n%q", args, r.stderr, want)
		}
	}
	// Another transport failure (a loopback listener that hangs up at once)
	// says what it was, and the same way out.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hangUp := "http://" + l.Addr().String()
	r := lathe(t, hangUp, "queues")
	if r.code != exitUnreachable || !strings.HasPrefix(r.stderr, "lathe: no Lathe scheduler answered at "+hangUp+" (") ||
		!strings.Contains(r.stderr, "). Start one with: lathed up   (or set --server / LATHE_SERVER)\n") {
		t.Errorf("hang-up: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestRedisDown(t *testing.T) {
	f := newFakeScheduler(t)
	f.fail = &failure{503, `{"error":"redis: dial tcp 10.0.0.5:6379: i/o timeout","code":"unavailable"}`}
	spec := writeFile(t, t.TempDir(), "job.yaml", validSpec)
	for _, args := range [][]string{{"status", "j-1"}, {"submit", spec}, {"list"}} {
		r := lathe(t, f.srv.URL, args...)
		if r.code != exitUnreachable {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", args, r.code, exitUnreachable, r.stderr)
		}
		if !strings.Contains(r.stderr, "Redis is down") || !strings.Contains(r.stderr, "i/o timeout") {
			t.Errorf("%v: stderr does not say Redis is down:\n%s", args, r.stderr)
		}
	}
}

func TestSubmitWaitJSON(t *testing.T) {
	for _, tc := range []struct {
		final jobtype.State
		code  int
	}{
		{jobtype.StateSucceeded, exitOK},
		{jobtype.StateFailed, exitFailed},
		{jobtype.StateCancelled, exitFailed},
	} {
		t.Run(string(tc.final), func(t *testing.T) {
			f := newFakeScheduler(t)
			f.finalState = tc.final
			r := lathe(t, f.srv.URL, "submit", "--wait", "-o", "json", writeFile(t, t.TempDir(), "job.yaml", validSpec))
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			var job jobtype.Job
			if err := dec.Decode(&job); err != nil {
				t.Fatalf("stdout is not a JSON Job: %v\n%s", err, r.stdout)
			}
			if _, err := dec.Token(); err != io.EOF {
				t.Fatalf("stdout holds more than one JSON value:\n%s", r.stdout)
			}
			if job.ID != "j-1" || job.State != tc.final {
				t.Errorf("job = %s %s, want j-1 %s", job.ID, job.State, tc.final)
			}
			// Progress went to stderr.
			if !strings.Contains(r.stderr, "state: queued -> running") || !strings.Contains(r.stderr, "progress: step 20/20") {
				t.Errorf("stderr lacks the progress:\n%s", r.stderr)
			}
			if tc.code != exitOK && !strings.Contains(r.stderr, "lathe: job j-1 ") {
				t.Errorf("stderr does not say how the job ended:\n%s", r.stderr)
			}
		})
	}
}

func TestSubmitWaitPlainProgress(t *testing.T) {
	f := newFakeScheduler(t)
	f.steps = 100
	r := lathe(t, f.srv.URL, "submit", "--wait", writeFile(t, t.TempDir(), "job.yaml", validSpec))
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if strings.ContainsAny(r.stdout, "\r\x1b") {
		t.Errorf("non-terminal output has terminal controls:\n%q", r.stdout)
	}
	// The first step, then one line per 10% mark (steps 10, 20, …, 100),
	// not one per step, then the line with the final eval loss (the done
	// event's). The fake's events carry their own times, so the ETA is
	// deterministic.
	if n := strings.Count(r.stdout, "progress: "); n != 12 {
		t.Errorf("%d progress lines, want 12:\n%s", n, r.stdout)
	}
	for _, want := range []string{
		"submitted j-1 (queued)",
		"state: queued -> running (node host1)",
		"progress: step 50/100 loss 2 eta 50s",
		"progress: step 100/100 loss 1 eval 1.25\nstate: running -> succeeded\n",
		"State:      succeeded",
		"adapter_model.safetensors",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestProgressBarOnTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := newProgressPrinter(&buf, true, time.Now)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(sec int, typ string, data string) jobtype.Event {
		return jobtype.Event{Time: t0.Add(time.Duration(sec) * time.Second), Type: typ, Attempt: 1, Data: json.RawMessage(data)}
	}
	p.event(mk(0, "progress", `{"step":10,"total_steps":120,"loss":2.5}`))
	p.event(mk(3, "progress", `{"step":40,"total_steps":120,"loss":1.93}`))
	if st := p.event(mk(4, "state", `{"from":"running","to":"succeeded"}`)); st != jobtype.StateSucceeded {
		t.Errorf("state = %q", st)
	}
	p.finish()
	out := buf.String()
	for _, want := range []string{
		"\r[######..............] step 40/120 loss 1.93 eta 8s\x1b[K",
		"\x1b[K\nstate: running -> succeeded\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%q", want, out)
		}
	}
	if !strings.HasSuffix(out, "state: running -> succeeded\n") {
		t.Errorf("bar redrawn after the job ended: %q", out)
	}
}

func TestSubmitRewritesRelativePaths(t *testing.T) {
	f := newFakeScheduler(t)
	dir := t.TempDir()
	spec := writeFile(t, dir, "jobs/job.yaml", `name: tiny-lora
base_model: tiny-char
dataset: data/train.jsonl
eval_dataset: file:../eval/eval.jsonl
training: {max_steps: 20}
output: {uri: out}
`)
	r := lathe(t, f.srv.URL, "submit", spec)
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if len(f.bodies) != 1 {
		t.Fatalf("%d submits", len(f.bodies))
	}
	var got jobspec.Spec
	if err := json.Unmarshal(f.bodies[0], &got); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	want := map[string]string{
		"dataset":      "file://" + filepath.Join(abs, "jobs/data/train.jsonl"),
		"eval_dataset": "file://" + filepath.Join(abs, "eval/eval.jsonl"),
		"output.uri":   "file://" + filepath.Join(abs, "jobs/out"),
	}
	have := map[string]string{"dataset": got.Dataset, "eval_dataset": got.EvalDataset, "output.uri": got.Output.URI}
	for k, w := range want {
		if have[k] != w {
			t.Errorf("%s = %q, want %q", k, have[k], w)
		}
	}
	if !strings.Contains(r.stdout, "j-1") || !strings.Contains(r.stdout, "queued") {
		t.Errorf("stdout lacks the id and state:\n%s", r.stdout)
	}
}

func TestLocalPathURI(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"data/x.jsonl", "file:///spec/dir/data/x.jsonl", true},
		{"./data/../x.jsonl", "file:///spec/dir/x.jsonl", true},
		{"file:data/x.jsonl", "file:///spec/dir/data/x.jsonl", true},
		{"/abs/x.jsonl", "file:///abs/x.jsonl", true},
		{"file:/abs/x.jsonl", "file:///abs/x.jsonl", true},
		// A path is a name, not a URI: a '%' in it stays a '%' (escaped in
		// the URI), as do '#', '?' and spaces.
		{"r%65l.jsonl", "file:///spec/dir/r%2565l.jsonl", true},
		{"my data/a#1?.jsonl", "file:///spec/dir/my%20data/a%231%3F.jsonl", true},
		{"/abs/100%.jsonl", "file:///abs/100%25.jsonl", true},
		// A file: URI is a URI: its escapes mean what they say.
		{"file:r%65l.jsonl", "file:///spec/dir/rel.jsonl", true},
		{"file:a%2.jsonl", "", false},
		{"file:///abs/x.jsonl", "", false},
		{"file://host/x.jsonl", "", false},
		{"s3://bucket/x.jsonl", "", false},
		{"https://example.com/x", "", false},
		{"", "", false},
	} {
		got, ok := localPathURI(tc.in, "/spec/dir")
		if got != tc.want || ok != tc.ok {
			t.Errorf("localPathURI(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	// Only the three keys are touched, and s3:// stays as it is.
	in := "name: data/x\ndataset: s3://b/k.jsonl\nbase_model: a/b\n"
	if out := rewriteLocalPaths([]byte(in), "/d"); string(out) != in {
		t.Errorf("rewrite changed a spec with nothing to rewrite:\n%s", out)
	}
	// JSON input works too.
	out := rewriteLocalPaths([]byte(`{"name":"x","dataset":"d.jsonl","output":{"uri":"o"}}`), "/d")
	if !bytes.Contains(out, []byte(`"file:///d/d.jsonl"`)) || !bytes.Contains(out, []byte(`"file:///d/o"`)) {
		t.Errorf("JSON spec not rewritten:\n%s", out)
	}
}

// TestSubmitDryRun: against the real scheduler, --dry-run prints the spec
// as the scheduler normalised it and stores nothing.
func TestSubmitDryRun(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	r := lathe(t, d.url, "submit", "--dry-run", writeFile(t, t.TempDir(), "job.yaml", routableSpec))
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	var spec jobspec.Spec
	if err := json.Unmarshal([]byte(r.stdout), &spec); err != nil {
		t.Fatalf("stdout is not a spec: %v\n%s", err, r.stdout)
	}
	if spec.Name != "tiny-lora" || spec.LoRA.Rank != 8 {
		t.Errorf("spec = %+v, want the normalised tiny-lora", spec)
	}
	if ids, err := d.store.IDsInState(d.ctx, jobtype.StateQueued, 10); err != nil || len(ids) != 0 {
		t.Errorf("dry run stored jobs %v (%v)", ids, err)
	}
}

func TestSubmitUsageErrors(t *testing.T) {
	f := newFakeScheduler(t)
	for _, args := range [][]string{
		{"submit"},
		{"submit", "--wait", "a", "b"},
		{"submit", "--dry-run", "a", "b"},
		{"submit", "/nonexistent/job.yaml"},
		{"-o", "yaml", "list"},
		{"list", "--state", "bogus"},
		{"list", "--nope"},
		{"frobnicate"},
	} {
		r := lathe(t, f.srv.URL, args...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
		if !strings.HasPrefix(r.stderr, "lathe: ") {
			t.Errorf("%v: stderr = %q, want a lathe: error", args, r.stderr)
		}
	}
	// Several files: each file's problem is named, nothing is sent.
	r := lathe(t, f.srv.URL, "submit", "/nonexistent/a.yaml", "/nonexistent/b.yaml")
	if r.code != exitUsage || !strings.Contains(r.stderr, "a.yaml") || !strings.Contains(r.stderr, "b.yaml") ||
		!strings.Contains(r.stderr, "lathe: 2 of 2 files have problems; nothing was submitted") {
		t.Errorf("submit of two missing files: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if n := f.requestCount(); n != 0 {
		t.Errorf("%d requests sent for usage errors", n)
	}
}

// addSucceededJob stores one finished job with one artifact.
func addSucceededJob(f *fakeScheduler, id string, files map[string][]byte, artifacts ...jobtype.Artifact) {
	f.addJob(&jobtype.Job{ID: id, Name: "tiny-lora", State: jobtype.StateSucceeded, Attempt: 1,
		Artifacts: artifacts, CreatedAt: time.Now()}, nil, files)
}

func TestPull(t *testing.T) {
	f := newFakeScheduler(t)
	addSucceededJob(f, "j-1", map[string][]byte{"adapter_model.safetensors": []byte("weights"), "adapter_config.json": []byte("{}")})
	dir := filepath.Join(t.TempDir(), "out")
	r := lathe(t, f.srv.URL, "pull", "j-1", "--to", dir)
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	for name, want := range map[string]string{"adapter_model.safetensors": "weights", "adapter_config.json": "{}"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
		if !strings.Contains(r.stdout, filepath.Join(dir, name)) {
			t.Errorf("stdout lacks %s:\n%s", name, r.stdout)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries, want 2 (no temporary files left)", len(entries))
	}
}

func TestPullDefaultDir(t *testing.T) {
	f := newFakeScheduler(t)
	addSucceededJob(f, "j-7", map[string][]byte{"a.bin": []byte("x")})
	t.Chdir(t.TempDir())
	r := lathe(t, f.srv.URL, "pull", "j-7")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join("tiny-lora-j-7", "a.bin")); err != nil || string(b) != "x" {
		t.Errorf("tiny-lora-j-7/a.bin = %q, %v", b, err)
	}
}

func TestPullChecksumMismatch(t *testing.T) {
	f := newFakeScheduler(t)
	addSucceededJob(f, "j-1", map[string][]byte{"adapter_model.safetensors": []byte("tampered")},
		jobtype.Artifact{Path: "adapter_model.safetensors", Bytes: 7, SHA256: sha256Hex([]byte("weights"))})
	dir := t.TempDir()
	r := lathe(t, f.srv.URL, "pull", "j-1", "--to", dir)
	if r.code != exitFailed {
		t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, exitFailed, r.stderr)
	}
	if !strings.Contains(r.stderr, "sha256 mismatch") {
		t.Errorf("stderr does not name the mismatch:\n%s", r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left after a mismatch: %v", entries)
	}
}

func TestPullRefusesUnsafeNames(t *testing.T) {
	for _, name := range []string{"../evil", "sub/file", "a..b", "bad\x1bname", `back\slash`} {
		f := newFakeScheduler(t)
		addSucceededJob(f, "j-1", map[string][]byte{"good.bin": []byte("ok"), name: []byte("x")})
		dir := t.TempDir()
		r := lathe(t, f.srv.URL, "pull", "j-1", "--to", dir)
		if r.code != exitFailed || !strings.Contains(r.stderr, "refusing artifact") {
			t.Errorf("%q: exit %d, stderr:\n%s", name, r.code, r.stderr)
		}
		if slices.ContainsFunc(f.requests, func(s string) bool { return strings.Contains(s, "/artifacts/") }) {
			t.Errorf("%q: an artifact was fetched before the names were checked: %v", name, f.requests)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%q: files written: %v", name, entries)
		}
	}
}

func TestStatus(t *testing.T) {
	f := newFakeScheduler(t)
	f.addJob(&jobtype.Job{ID: "j-1", Name: "tiny-lora", State: jobtype.StateRunning, Attempt: 2,
		Backend: "local", Node: "host1", GPUs: []int{0, 3},
		Progress: jobtype.Progress{Step: 40, TotalSteps: 120, Loss: 1.93},
		Metrics:  map[string]float64{"eval_loss": 1.88}}, nil, nil)
	r := lathe(t, f.srv.URL, "status", "j-1")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"j-1", "tiny-lora", "running", "Attempt:    2", "host1 (local)", "0,3", "40/120", "1.93", "1.88"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	r = lathe(t, f.srv.URL, "status", "-o", "json", "j-1")
	var job jobtype.Job
	if err := json.Unmarshal([]byte(r.stdout), &job); err != nil || job.Progress.Step != 40 {
		t.Errorf("-o json: %v\n%s", err, r.stdout)
	}
	r = lathe(t, f.srv.URL, "status", "j-404")
	if r.code != exitFailed || r.stderr != "lathe: job j-404 not found\n" {
		t.Errorf("missing job: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

func TestListFollowsCursor(t *testing.T) {
	f := newFakeScheduler(t)
	f.pageSize = 2
	for i := 1; i <= 5; i++ {
		f.addJob(&jobtype.Job{ID: "j-" + string(rune('0'+i)), Name: "job", State: jobtype.StateQueued,
			CreatedAt: time.Now().Add(-90 * time.Minute)}, nil, nil)
	}
	r := lathe(t, f.srv.URL, "list", "--limit", "3")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") || !strings.HasPrefix(lines[1], "j-5") || !strings.HasPrefix(lines[3], "j-3") {
		t.Errorf("list output:\n%s", r.stdout)
	}
	if !strings.Contains(lines[1], "1h") {
		t.Errorf("age missing: %s", lines[1])
	}
	if len(f.requests) != 2 || !strings.Contains(f.requests[1], "cursor=2") {
		t.Errorf("requests = %v, want two pages", f.requests)
	}
	r = lathe(t, f.srv.URL, "list", "-o", "json")
	var out struct {
		Jobs []jobtype.Job `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Jobs) != 5 {
		t.Errorf("-o json: %v, %d jobs\n%s", err, len(out.Jobs), r.stdout)
	}
}

func TestLogs(t *testing.T) {
	f := newFakeScheduler(t)
	r := lathe(t, f.srv.URL, "submit", writeFile(t, t.TempDir(), "job.yaml", validSpec))
	if r.code != exitOK {
		t.Fatalf("submit: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, args := range [][]string{{"logs", "j-1"}, {"logs", "-f", "j-1"}} {
		r := lathe(t, f.srv.URL, args...)
		if r.code != exitOK {
			t.Fatalf("%v: exit %d; stderr:\n%s", args, r.code, r.stderr)
		}
		for _, want := range []string{
			"[state] queued -> running (node host1)\n",
			"loading tiny-char\n",
			"[progress] step 10/20 loss 2\n",
			"[state] running -> succeeded\n",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%v: stdout lacks %q:\n%s", args, want, r.stdout)
			}
		}
	}
}

// TestCancel: against the real scheduler, cancelling a running job asks
// for the cancel; cancelling one that succeeded exits 1 naming its state.
func TestCancel(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	d.heartbeat(t, jobstore.Node{Name: "host1", Incarnation: "i-host1", Backend: "local", Slots: 2})
	running, done := d.submit(t, routableSpec), d.submit(t, routableSpec)
	d.start(t, running.ID, "host1", 2)
	d.start(t, done.ID, "host1", 2)
	if err := d.store.Finish(d.ctx, done.ID, 1, jobstore.Ending{State: jobtype.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	r := lathe(t, d.url, "cancel", running.ID)
	if r.code != exitOK || r.stdout != "cancel requested for "+running.ID+" (state running)\n" {
		t.Errorf("cancel running: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = lathe(t, d.url, "cancel", done.ID)
	if r.code != exitFailed || !strings.Contains(r.stderr, "already ended (state succeeded)") {
		t.Errorf("cancel succeeded: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestQueues: against the real scheduler, with one live node and two
// queued jobs.
func TestQueues(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	d.heartbeat(t, jobstore.Node{Name: "host1", Incarnation: "i1", Backend: "local", Slots: 1, GPUs: h100s(1)})
	spec := writeFile(t, t.TempDir(), "job.yaml", routableSpec)
	for range 2 {
		if r := lathe(t, d.url, "submit", spec); r.code != exitOK {
			t.Fatalf("submit: exit %d; stderr:\n%s", r.code, r.stderr)
		}
	}
	r := lathe(t, d.url, "queues")
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"Pending", "queued:", "node:host1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	r = lathe(t, d.url, "queues", "-o", "json")
	var q struct {
		Pending int `json:"pending"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &q); err != nil || q.Pending != 2 {
		t.Errorf("-o json: %v\n%s", err, r.stdout)
	}
}

// TestSubmitRelativePathWithPercent: a dataset named r%65l.jsonl beside the
// spec reaches the scheduler as a URI that fileuri (what the worker opens
// through) reads back as that very file, not as rel.jsonl.
func TestSubmitRelativePathWithPercent(t *testing.T) {
	f := newFakeScheduler(t)
	dir := t.TempDir()
	spec := writeFile(t, dir, "job.yaml", "name: tiny-lora\nbase_model: tiny-char\ndataset: r%65l.jsonl\ntraining: {max_steps: 20}\n")
	if r := lathe(t, f.srv.URL, "submit", spec); r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	var got jobspec.Spec
	if len(f.bodies) != 1 || json.Unmarshal(f.bodies[0], &got) != nil {
		t.Fatalf("bodies %q", f.bodies)
	}
	p, err := fileuri.Path(got.Dataset)
	abs, _ := filepath.Abs(filepath.Join(dir, "r%65l.jsonl"))
	if err != nil || p != abs {
		t.Errorf("dataset %q opens %q (%v), want %q", got.Dataset, p, err, abs)
	}
}

// TestSubmitBoundsSpecRead: a spec file that never ends (/dev/zero) or is
// over the API's body limit is refused after reading at most the limit,
// naming the file and the limit; nothing is sent.
func TestSubmitBoundsSpecRead(t *testing.T) {
	f := newFakeScheduler(t)
	big := writeFile(t, t.TempDir(), "big.yaml", "name: x\n# "+strings.Repeat("a", jobspec.MaxSpecBytes)+"\n")
	for _, file := range []string{"/dev/zero", big} {
		done := make(chan result, 1)
		go func() { done <- lathe(t, f.srv.URL, "submit", file) }()
		var r result
		select {
		case r = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("lathe submit %s still reading after a minute", file)
		}
		want := file + ": over 1048576 bytes (1 MiB, the most a job spec may hold): not read further; nothing was submitted"
		if r.code != exitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("submit %s: exit %d, stderr %q; want exit %d and %q", file, r.code, r.stderr, exitUsage, want)
		}
	}
	r := lathe(t, f.srv.URL, "route", "--explain", "/dev/zero", "--config", "/nonexistent")
	if r.code != exitUsage || !strings.Contains(r.stderr, "/dev/zero: over 1048576 bytes") {
		t.Errorf("route --explain /dev/zero: exit %d, stderr %q", r.code, r.stderr)
	}
	// So is stdin.
	var out, errOut bytes.Buffer
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	root := newRootCmd(&out, &errOut, func(k string) string {
		if k == "LATHE_SERVER" {
			return f.srv.URL
		}
		return ""
	})
	root.SetIn(zero)
	root.SetArgs([]string{"submit", "-"})
	code := report(&errOut, f.srv.URL, root.ExecuteContext(context.Background()))
	if code != exitUsage || !strings.Contains(errOut.String(), "stdin: over 1048576 bytes") {
		t.Errorf("submit - < /dev/zero: exit %d, stderr %q", code, errOut.String())
	}
	// lathed's config file, read by route --explain --config, is bounded too.
	spec := writeFile(t, t.TempDir(), "job.yaml", validSpec)
	r = lathe(t, f.srv.URL, "route", "--explain", spec, "--config", "/dev/zero")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--config /dev/zero: over 4194304 bytes") {
		t.Errorf("route --explain --config /dev/zero: exit %d, stderr %q", r.code, r.stderr)
	}
	if len(f.bodies) != 0 {
		t.Errorf("%d specs sent", len(f.bodies))
	}
}

// TestUnreachableServerRedactsPassword: a --server URL with a password in
// its userinfo is printed redacted when the scheduler cannot be reached.
func TestUnreachableServerRedactsPassword(t *testing.T) {
	url := strings.Replace(closedURL(t), "http://", "http://ops:hunter2-secret@", 1)
	r := lathe(t, url, "queues")
	if r.code != exitUnreachable || strings.Contains(r.stderr, "hunter2") || !strings.Contains(r.stderr, "ops:xxxxx@") {
		t.Fatalf("exit %d, stderr %q: want exit %d and the password redacted", r.code, r.stderr, exitUnreachable)
	}
}

// TestProgressShowsFinalEvalLoss: the last progress line, plain or the
// bar on a terminal, shows the final eval loss (the done event's metrics),
// not the last periodic eval; when the stream brought no done event, the
// ended job's record's metrics are shown after it; nothing is printed
// twice.
func TestProgressShowsFinalEvalLoss(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(sec int, typ string, data string) jobtype.Event {
		return jobtype.Event{Time: t0.Add(time.Duration(sec) * time.Second), Type: typ, Attempt: 1, Data: json.RawMessage(data)}
	}
	run := func(tty, withDone bool) string {
		var buf bytes.Buffer
		p := newProgressPrinter(&buf, tty, func() time.Time { return t0 })
		p.event(mk(0, "progress", `{"step":1,"total_steps":84,"loss":5.6}`))
		p.event(mk(5, "eval", `{"event":"eval","step":80,"eval_loss":2.21}`))
		p.event(mk(6, "progress", `{"step":84,"total_steps":84,"loss":2.341}`))
		p.event(mk(6, "eval", `{"event":"eval","step":84,"eval_loss":2.187}`))
		if withDone {
			p.event(mk(6, "done", `{"event":"done","metrics":{"eval_loss":2.187,"train_loss":2.341}}`))
		}
		p.event(mk(7, "state", `{"from":"running","to":"succeeded"}`))
		p.end(&jobtype.Job{Metrics: map[string]float64{"eval_loss": 2.187}}) // as wait does with the ended job's record
		return buf.String()
	}
	plain := run(false, true)
	if want := "progress: step 84/84 loss 2.341 eval 2.21\nprogress: step 84/84 loss 2.341 eval 2.187\nstate: running -> succeeded\n"; !strings.HasSuffix(plain, want) {
		t.Errorf("plain output ends\n%q\nwant\n%q", plain, want)
	}
	bar := run(true, true)
	if want := "\r[####################] step 84/84 loss 2.341 eval 2.187\x1b[K\nstate: running -> succeeded\n"; !strings.HasSuffix(bar, want) {
		t.Errorf("terminal output ends\n%q\nwant\n%q", bar, want)
	}
	missed := run(false, false)
	if want := "progress: step 84/84 loss 2.341 eval 2.21\nstate: running -> succeeded\nprogress: step 84/84 loss 2.341 eval 2.187\n"; !strings.HasSuffix(missed, want) {
		t.Errorf("without a done event, plain output ends\n%q\nwant\n%q", missed, want)
	}
}
