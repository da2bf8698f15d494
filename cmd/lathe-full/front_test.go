package main

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// The CLI's front (cmd/lathe) run as a process beside this package's
// lathe-full, and held to printing what lathe-full prints.

var updateHelp = flag.Bool("update", false, "rewrite ../lathe/help.txt (the front's root help) from lathe-full's")

var (
	frontOnce             sync.Once
	frontAlone, frontBoth string // folders: the front alone; the front and lathe-full
	frontErr              error
)

// frontBinaries builds the front alone into one folder and the front with
// lathe-full into another, once per test run, without cgo as they ship.
func frontBinaries(t *testing.T) (alone, both string) {
	t.Helper()
	frontOnce.Do(func() {
		build := func(dir string, pkgs ...string) {
			if frontErr != nil {
				return
			}
			cmd := exec.Command("go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				frontErr = err
				t.Logf("go build %v: %s", pkgs, out)
			}
		}
		if frontAlone, frontErr = os.MkdirTemp("", "lathe-front-"); frontErr != nil {
			return
		}
		if frontBoth, frontErr = os.MkdirTemp("", "lathe-front-full-"); frontErr != nil {
			return
		}
		build(frontAlone, "../lathe")
		build(frontBoth, "../lathe", ".")
	})
	if frontErr != nil {
		t.Fatal(frontErr)
	}
	return filepath.Join(frontAlone, "lathe"), filepath.Join(frontBoth, "lathe")
}

// runFront runs the front binary bin with LATHE_SERVER server (empty:
// unset), no LATHE_TOKEN, PATH an empty folder (so lathe-full is found
// beside bin or not at all), and stdin.
func runFront(t *testing.T, bin, server, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + t.TempDir(), "HOME=" + t.TempDir()}
	if server != "" {
		cmd.Env = append(cmd.Env, "LATHE_SERVER="+server)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errOut.String()}
}

// TestFrontHelp: the front's root help is lathe-full's, byte for byte,
// with LATHE_SERVER unset and set, in every form that asks for it.
func TestFrontHelp(t *testing.T) {
	want := lathe(t, "", "--help")
	if want.code != 0 {
		t.Fatalf("lathe-full --help: %+v", want)
	}
	path := "../lathe/help.txt"
	if *updateHelp {
		if err := os.WriteFile(path, []byte(want.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want.stdout {
		t.Fatalf("%s is not lathe-full's --help: go test ./cmd/lathe-full -run TestFrontHelp -update\n--- lathe-full:\n%s", path, want.stdout)
	}
	alone, _ := frontBinaries(t)
	for _, server := range []string{"", "http://sched.example:9000", `http://h/"q"`} {
		want := lathe(t, server, "--help")
		for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, nil} {
			if got := runFront(t, alone, server, "", args...); got != want {
				t.Errorf("LATHE_SERVER %q, lathe %q:\n%+v\nwant (lathe-full)\n%+v", server, args, got, want)
			}
		}
	}
}

// ids and times that differ between two submits of one spec.
var unequal = regexp.MustCompile(`j-[0-9a-z]{16}|"\d{4}-\d\d-\d\dT[^"]*"|"ledger_seq": \d+`)

// TestFrontSubmitsAsFull: against the real scheduler, the front alone (no
// lathe-full beside it, so it cannot have handed over) submits a spec and
// prints what lathe-full prints for the same command line, as a table and
// as JSON, with the flags before or after the command; a key of the
// command line makes one job of two submits.
func TestFrontSubmitsAsFull(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	alone, _ := frontBinaries(t)
	spec := writeFile(t, t.TempDir(), "job.yaml", routableSpec)
	for _, args := range [][]string{
		{"submit", spec},
		{"-o", "json", "submit", spec},
		{"submit", spec, "--output=json"},
		{"--server", d.url, "submit", spec},
	} {
		got := runFront(t, alone, d.url, "", args...)
		want := lathe(t, d.url, args...)
		if got.code != 0 || want.code != 0 {
			t.Fatalf("lathe %q: front %+v, lathe-full %+v", args, got, want)
		}
		if g, w := unequal.ReplaceAllString(got.stdout, "X"), unequal.ReplaceAllString(want.stdout, "X"); g != w || got.stderr != want.stderr {
			t.Errorf("lathe %q: front printed\n%s%s\nlathe-full\n%s%s", args, got.stdout, got.stderr, want.stdout, want.stderr)
		}
	}
	first := runFront(t, alone, d.url, "", "submit", spec, "--idempotency-key", "front-k1")
	again := runFront(t, alone, d.url, "", "--idempotency-key=front-k1", "submit", spec)
	if first.code != 0 || first != again {
		t.Errorf("the same key twice: %+v then %+v, want one job", first, again)
	}
}

// TestFrontHandsOver: whatever the front does not do itself reaches
// lathe-full with the command line unchanged, and prints what lathe-full
// prints: a spec with problems, other commands and flags, stdin, usage
// errors.
func TestFrontHandsOver(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	_, both := frontBinaries(t)
	dir := t.TempDir()
	spec := writeFile(t, dir, "job.yaml", routableSpec)
	bad := writeFile(t, dir, "bad.yaml", "name: x\nbase_model: tiny-char\nlearning_rate: lots\n")
	for _, c := range []struct {
		args  []string
		stdin string
	}{
		{args: []string{"submit", bad}},
		{args: []string{"submit", filepath.Join(dir, "missing.yaml")}},
		{args: []string{"submit", "--dry-run", spec}},
		{args: []string{"submit", "-"}, stdin: routableSpec},
		{args: []string{"submit", spec, "-o", "yaml"}},
		{args: []string{"status", "j-nope"}},
		{args: []string{"frobnicate"}},
		{args: []string{"submit"}},
		{args: []string{"--server", "ftp://x", "submit", spec}},
	} {
		got := runFront(t, both, d.url, c.stdin, c.args...)
		cmd := exec.Command(filepath.Join(filepath.Dir(both), "lathe-full"), c.args...)
		cmd.Env = []string{"PATH=" + t.TempDir(), "LATHE_SERVER=" + d.url}
		cmd.Stdin = strings.NewReader(c.stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		code := 0
		if err := cmd.Run(); err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatal(err)
			}
			code = ee.ExitCode()
		}
		want := result{code, out.String(), errOut.String()}
		if g, w := unequal.ReplaceAllString(got.stdout, "X"), unequal.ReplaceAllString(want.stdout, "X"); got.code != want.code || g != w || got.stderr != want.stderr {
			t.Errorf("lathe %q: front\n%+v\nlathe-full\n%+v", c.args, got, want)
		}
	}
	// Without lathe-full, the front says what is missing and how to build it.
	alone, _ := frontBinaries(t)
	r := runFront(t, alone, d.url, "", "status", "j-nope")
	if r.code != 2 || !strings.Contains(r.stderr, "lathe-full") || !strings.Contains(r.stderr, "go build") {
		t.Errorf("no lathe-full: %+v", r)
	}
}

// TestFrontResendsWithItsKey: a submit the front sent and got no answer to
// is sent again by lathe-full with the same Idempotency-Key (so it cannot
// make a second job), and the job it answers is printed. The scheduler is
// a stand-in here (httptest, named as such): the real one cannot be made
// to drop one answer.
func TestFrontResendsWithItsKey(t *testing.T) {
	var (
		mu   sync.Mutex
		keys []string
	)
	standIn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n == 1 { // the front's send: taken, then no answer
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"j-0000000000000001","name":"tiny-lora","state":"queued","attempt":1}`)
	}))
	defer standIn.Close()
	_, both := frontBinaries(t)
	spec := writeFile(t, t.TempDir(), "job.yaml", validSpec)
	r := runFront(t, both, standIn.URL, "", "submit", spec)
	if r.code != 0 || !strings.Contains(r.stdout, "j-0000000000000001") {
		t.Fatalf("front: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] != keys[1] || !regexp.MustCompile(`^cli-[0-9a-f]{24}$`).MatchString(keys[0]) {
		t.Errorf("keys sent: %q, want one cli-<24 hex> key sent twice", keys)
	}
}

// TestFrontOneRequestPerSubmit: a submit the front sent and got an answer
// it does not print itself (a refusal, invalid fields, a 2xx that is not a
// job) is one request: lathe-full takes the front's answer as its own and
// prints what it prints for it, without sending the job again (a refusal
// sent twice is recorded twice in the routing ledger). The scheduler is a
// stand-in here (httptest, named as such), answering each POST as told.
func TestFrontOneRequestPerSubmit(t *testing.T) {
	_, both := frontBinaries(t)
	spec := writeFile(t, t.TempDir(), "job.yaml", validSpec)
	for _, c := range []struct {
		name   string
		status int
		body   string
	}{
		{"refused", http.StatusUnprocessableEntity, `{"error":"refused","message":"no backend may run this job as written","reasons":["local: residency [us]: site dc-frankfurt lacks us"]}`},
		{"invalid", http.StatusBadRequest, `{"error":"invalid","message":"invalid job spec","fields":[{"field":"lora.rank","value":"0","problem":"must be 1 to 256"}]}`},
		{"not a job", http.StatusCreated, `{"hello":"world"}`},
		{"conflict", http.StatusConflict, `{"error":"conflict","message":"idempotency key reused with another spec"}`},
	} {
		var (
			mu    sync.Mutex
			posts int
		)
		standIn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			posts++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(c.status)
			io.WriteString(w, c.body)
		}))
		got := runFront(t, both, standIn.URL, "", "submit", spec)
		mu.Lock()
		frontPosts := posts
		posts = 0
		mu.Unlock()
		want := lathe(t, standIn.URL, "submit", spec)
		standIn.Close()
		if frontPosts != 1 {
			t.Errorf("%s: the front's submit sent %d requests, want 1", c.name, frontPosts)
		}
		if got != want || (got.code == 0) != (c.status == http.StatusCreated) {
			t.Errorf("%s: front\n%+v\nlathe-full\n%+v", c.name, got, want)
		}
	}
}

// TestFrontAnswered: lathe-full reads only a well-formed answer from the
// front, and gives it to one job submit.
func TestFrontAnswered(t *testing.T) {
	for _, env := range []string{"", "422", "abc {}", "99 {}", "1000 {}", "-1 {}"} {
		if frontAnswered(env) != nil {
			t.Errorf("%q: read as an answer", env)
		}
	}
	hc := frontAnswered(`503 {"error":"unavailable"}`)
	if hc == nil {
		t.Fatal("a well-formed answer not read")
	}
	sent := 0
	standIn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent++
		w.WriteHeader(http.StatusCreated)
	}))
	defer standIn.Close()
	for i, want := range []int{503, 201, 201} {
		resp, err := hc.Post(standIn.URL+"/api/v1/jobs", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("send %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	if sent != 2 {
		t.Errorf("%d sends reached the server, want 2 (the first is the front's answer)", sent)
	}
}
