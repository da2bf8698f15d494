package main

// Crashes during admission (issue #23): kill -9 of redis-server at random
// points while sweeps are being admitted. Real redis-server with an AOF
// (internal/redistest: appendonly yes, appendfsync everysec,
// aof-load-truncated no) restarted on the same port and directory, the real
// lathed scheduler (with its ledger) and the real lathe CLI. Nothing is
// faked; no worker runs, so every trial stays queued and the store holds
// exactly what admission wrote.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
)

// crashSweeps sweeps are submitted by crashClients goroutines at once,
// each of crashMinTrials to crashMaxTrials trials; redis-server is killed
// crashKills times while they are admitted.
const (
	crashSweeps    = 50
	crashClients   = 5
	crashMinTrials = 50
	crashMaxTrials = 300
	crashKills     = 4
)

// crashSubmission is one sweep of the test: its key and how it was sent.
type crashSubmission struct {
	i      int
	key    string // Idempotency-Key
	name   string // the sweep's name (one per key)
	file   string // the sweep spec
	trials int
	cli    bool // sent with `lathe sweep submit`, else POST /api/v1/sweeps
	// The answer to the first submission.
	kind   string // "201", "200", "outcome_unknown", "unavailable", "no answer", "exit N", …
	id     string // the sweep's id when the answer named one
	detail string
}

// known reports whether the answer said the sweep is stored (with its id).
func (s *crashSubmission) known() bool { return s.id != "" }

// TestRedisKillDuringSweepAdmissions: 50 sweeps (50–300 trials each) are
// submitted at once from 5 goroutines, half with `lathe sweep submit
// --idempotency-key K` (which sends a keyed write again itself on no answer
// or a 503) and half as one POST /api/v1/sweeps with an Idempotency-Key
// header; meanwhile redis-server is killed with SIGKILL 4 times at random
// points (when a random number of submissions has started, plus a random
// delay) and started again from its AOF, at once or after a while (long
// enough, once, for the CLI's own tries to run out). A restart refused for a
// truncated AOF is repaired as docs/operations.md says (redis-check-aof
// --fix on the file the log names) and counted. Once every answer is in and
// no sweep is still admitting:
//   - every sweep in the store is whole: its record, its trials zset with
//     every index, every trial's record naming it, every trial in the jobs
//     index; no trial of a sweep that is not there; never partial;
//   - every sweep answered with an id (201, 200, CLI exit 0) is there;
//   - each key names at most one sweep; an answer of "unknown" (503, no
//     answer, CLI exit 3) left its sweep absent or whole;
//   - sending every key again (until an answer other than 503) answers 200
//     with the same sweep, or for a key whose sweep is absent 201 (or 200
//     after a try that got no outcome itself); a third send answers 200
//     with that sweep, through the API and the CLI; the store then holds
//     exactly one whole sweep per key;
//   - `lathe audit verify` passes.
func TestRedisKillDuringSweepAdmissions(t *testing.T) {
	lathed, lathe := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	rdb := rs.Client()
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	cfg := filepath.Join(data, "lathe.yaml")
	if err := os.WriteFile(cfg, []byte("scheduler:\n  leader_ttl: 2s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sd := startDaemon(t, lathed, "scheduler", "--config", cfg, "--redis-url", rs.URL(), "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
	waitHTTP(t, base, sd)

	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("LATHE_CRASH_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (LATHE_CRASH_SEED=%d repeats the choices; Redis's timing does not repeat)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 23))

	root := repoRoot(t)
	subs := make([]*crashSubmission, crashSweeps)
	for i := range subs {
		s := &crashSubmission{i: i, key: fmt.Sprintf("crash-admission-%02d", i), name: fmt.Sprintf("crash-%02d", i),
			trials: crashMinTrials + rng.IntN(crashMaxTrials-crashMinTrials+1), cli: i%2 == 0}
		s.file = filepath.Join(data, s.name+".yaml")
		spec := fmt.Sprintf(`name: %s
job:
  name: crash-trial
  base_model: tiny-char
  dataset: file://%s/configs/examples/data/tiny-train.jsonl
  lora: {rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}
  training: {max_steps: 10, batch_size: 2}
  resources: {gpus: 0}
  max_runtime: 10m
parameters:
  training.learning_rate: {log_uniform: [0.0001, 0.1]}
  lora.rank: {choice: [2, 4, 8]}
search: {kind: random, trials: %d, seed: %d}
max_parallel: 1
`, s.name, root, s.trials, i+1)
		if err := os.WriteFile(s.file, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		subs[i] = s
	}

	// The killer: crashKills points, each when a random number of
	// submissions has started, then a random delay (where in an admission
	// the kill lands); down for no time, a moment, or (once at least) longer
	// than the CLI's own tries last.
	var started atomic.Int64
	points := rng.Perm(crashSweeps - 4)[:crashKills]
	for k := range points {
		points[k] += 2
	}
	slices.Sort(points)
	downs := make([]time.Duration, crashKills)
	for k := range downs {
		downs[k] = []time.Duration{0, 300 * time.Millisecond, 4 * time.Second}[rng.IntN(3)]
	}
	downs[rng.IntN(crashKills)] = 4 * time.Second
	jitters := make([]time.Duration, crashKills)
	for k := range jitters {
		jitters[k] = time.Duration(rng.IntN(400)) * time.Millisecond
	}
	type killRec struct {
		at       int // submissions started when it was triggered
		down     time.Duration
		repaired []string
		loadErr  string
	}
	kills := make([]killRec, 0, crashKills)
	killerDone := make(chan error, 1)
	go func() {
		for k, p := range points {
			if !waitfor.Poll(3*time.Minute, func() bool { return started.Load() >= int64(p) }) {
				killerDone <- fmt.Errorf("kill %d: %d submissions never started", k, p)
				return
			}
			time.Sleep(jitters[k]) // a random point inside the admissions under way; not a wait for anything
			rec := killRec{at: int(started.Load()), down: downs[k]}
			rs.Kill()
			time.Sleep(downs[k]) // how long Redis stays away: the fault's length, not a wait for anything
			repaired, err := restartRepairing(rs, k)
			rec.repaired = repaired
			if err != nil {
				rec.loadErr = err.Error()
				kills = append(kills, rec)
				killerDone <- fmt.Errorf("kill %d: redis-server did not come back: %v", k, err)
				return
			}
			kills = append(kills, rec)
		}
		killerDone <- nil
	}()

	hc := &http.Client{Timeout: 60 * time.Second}
	var wg sync.WaitGroup
	for g := 0; g < crashClients; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < crashSweeps; i += crashClients {
				s := subs[i]
				started.Add(1)
				if s.cli {
					s.kind, s.id, s.detail = cliSweepSubmit(lathe, root, base, s)
				} else {
					s.kind, s.id, s.detail = httpSweepSubmit(hc, base, s)
				}
			}
		}(g)
	}
	wg.Wait()
	if err := <-killerDone; err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, base, 30*time.Second)

	repairs := 0
	for k, r := range kills {
		t.Logf("kill %d: after %d submissions had started, down %s; AOF repaired: %v", k, r.at, r.down, r.repaired)
		repairs += len(r.repaired)
	}
	byKind := map[string]int{}
	for _, s := range subs {
		via := "http"
		if s.cli {
			via = "cli"
		}
		byKind[via+" "+s.kind]++
		if !s.known() {
			t.Logf("%s (%s, %d trials): %s %s", s.key, via, s.trials, s.kind, s.detail)
		}
	}
	t.Logf("first answers by kind: %v", byKind)

	// Every sweep is whole or absent; every answered one is there.
	present := checkSweepsWhole(t, rdb, subs)
	absent := 0
	for _, s := range subs {
		id, ok := present[s.name]
		switch {
		case s.known() && !ok:
			t.Errorf("%s was answered %s with sweep %s; it is not in the store", s.key, s.kind, s.id)
		case s.known() && id != s.id:
			t.Errorf("%s was answered %s with sweep %s; the store holds %s for it", s.key, s.kind, s.id, id)
		case !ok:
			absent++
		}
		if !s.known() && ok {
			t.Logf("%s answered %s: its sweep %s is whole in the store", s.key, s.kind, id)
		}
		if !s.cli && s.kind == "unavailable" && ok {
			t.Logf("finding: %s was answered 503 unavailable (not outcome_unknown), yet its sweep %s was stored", s.key, id)
		}
	}
	t.Logf("after the crashes: %d sweeps whole, %d absent, none partial", len(present), absent)
	if t.Failed() {
		t.FailNow()
	}

	// Every key again, through the API, then once more through the API
	// (odd keys) or the CLI (even keys): the same sweep each time, never a
	// second one. A key whose admission held its claim when Redis died may
	// answer 503 until that claim lapses; each send is retried until a 200
	// or 201 comes back.
	type resend struct {
		code        int
		id, detail  string
		tries       int
		waited      time.Duration
		again       string
		againDetail string
	}
	res := make([]resend, crashSweeps)
	for i, s := range subs {
		wg.Add(1)
		go func(i int, s *crashSubmission) {
			defer wg.Done()
			r := &res[i]
			t0 := time.Now()
			waitfor.Poll(90*time.Second, func() bool {
				r.tries++
				code, id, detail := postSweep(hc, base, s)
				r.code, r.id = code, id
				if detail != "" {
					r.detail = strconv.Itoa(code) + " " + detail
				}
				return code == http.StatusOK || code == http.StatusCreated
			})
			r.waited = time.Since(t0)
			if s.cli {
				kind, id, detail := cliSweepSubmit(lathe, root, base, s)
				r.again, r.againDetail = kind+" "+id, detail
			} else {
				code, id, detail := postSweep(hc, base, s)
				r.again, r.againDetail = strconv.Itoa(code)+" "+id, detail
			}
		}(i, s)
	}
	wg.Wait()
	created, longest := 0, time.Duration(0)
	for i, s := range subs {
		r := res[i]
		longest = max(longest, r.waited)
		if r.tries > 1 {
			t.Logf("%s sent again: %d tries over %s before %d (the last answer before: %s)", s.key, r.tries, r.waited.Round(time.Millisecond), r.code, r.detail)
		}
		id, had := present[s.name]
		switch {
		case r.code != http.StatusOK && r.code != http.StatusCreated:
			t.Errorf("%s sent again: no 200 or 201 within 90 s; last %s", s.key, r.detail)
			continue
		case had && (r.code != http.StatusOK || r.id != id):
			t.Errorf("%s sent again: %d sweep %s; want 200 and its sweep %s", s.key, r.code, r.id, id)
		case !had && r.code != http.StatusCreated && r.tries == 1:
			// A 200 is right only after a try of this loop that got no
			// outcome (a 503) and stored the sweep all the same.
			t.Errorf("%s sent again: %d sweep %s at the first try; its sweep was absent, want 201", s.key, r.code, r.id)
		case !had:
			created++
		}
		wantAgain := "200 " + r.id
		if s.cli {
			wantAgain = "exit 0 " + r.id
		}
		if r.again != wantAgain {
			t.Errorf("%s sent a third time (cli %v): %s %s; want %s", s.key, s.cli, r.again, r.againDetail, wantAgain)
		}
	}
	t.Logf("every key sent again: %d answered 200 with their sweep, %d created their absent sweep; the longest wait for an answer other than 503: %s",
		crashSweeps-created, created, longest.Round(time.Millisecond))
	final := checkSweepsWhole(t, rdb, subs)
	if len(final) != crashSweeps {
		t.Errorf("after sending every key again the store holds %d sweeps of the test, want %d (one per key)", len(final), crashSweeps)
	}
	for name, id := range present {
		if final[name] != id {
			t.Errorf("sweep %s (%s) became %s", id, name, final[name])
		}
	}

	out, errOut, code := cli(t, lathe, base, "audit", "verify")
	if code != 0 || !strings.Contains(out+errOut, "intact") {
		t.Fatalf("lathe audit verify: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("%s; %d kills, %d AOF repairs", strings.TrimSpace(out), len(kills), repairs)
}

// TestTruncatedAOFRepairedAsDocumented: the repair docs/operations.md gives
// for a truncated AOF ("A truncated AOF"), on Lathe's own data. A sweep is
// admitted (201); redis-server is killed with SIGKILL, and the AOF's tail is
// cut inside a transaction, as a host crash (or a kill inside a large
// write) leaves it: the last MULTI … EXEC block appended again, cut in
// half. Redis (aof-load-truncated no) refuses to start; redis-check-aof
// --fix on the manifest drops the cut transaction; Redis starts, lathed
// carries on, the sweep is whole and `lathe audit verify` passes.
func TestTruncatedAOFRepairedAsDocumented(t *testing.T) {
	lathed, lathe := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	sd := startDaemon(t, lathed, "scheduler", "--redis-url", rs.URL(), "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
	waitHTTP(t, base, sd)
	s := &crashSubmission{key: "truncated-aof", name: "truncated-aof", trials: 60, cli: true, file: filepath.Join(data, "sweep.yaml")}
	spec := fmt.Sprintf("name: %s\njob:\n  name: t\n  base_model: tiny-char\n  dataset: file://%s/configs/examples/data/tiny-train.jsonl\n"+
		"  resources: {gpus: 0}\nparameters:\n  training.learning_rate: {log_uniform: [0.0001, 0.1]}\nsearch: {kind: random, trials: %d, seed: 1}\nmax_parallel: 1\n",
		s.name, repoRoot(t), s.trials)
	if err := os.WriteFile(s.file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if kind, id, detail := cliSweepSubmit(lathe, repoRoot(t), base, s); kind != "exit 0" {
		t.Fatalf("sweep submit: %s %s", kind, detail)
	} else {
		s.id = id
	}
	rs.Kill()
	incr := filepath.Join(rs.Dir, "appendonlydir", "appendonly.aof.1.incr.aof")
	aof, err := os.ReadFile(incr)
	if err != nil {
		t.Fatal(err)
	}
	multi := bytes.LastIndex(aof, []byte("*1\r\n$5\r\nMULTI\r\n"))
	if multi < 0 {
		t.Fatalf("no MULTI in the AOF (%d bytes)", len(aof))
	}
	last := aof[multi:]
	f, err := os.OpenFile(incr, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(last[:len(last)/2]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	repaired, err := restartRepairing(rs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(repaired) != 1 {
		t.Fatalf("redis-server started on a cut AOF without a repair (aof-load-truncated no?): %v", repaired)
	}
	t.Logf("repaired: %s", repaired[0])
	waitHealthy(t, base, 30*time.Second)
	if got := checkSweepsWhole(t, rs.Client(), []*crashSubmission{s}); got[s.name] != s.id {
		t.Fatalf("after the repair the store holds %v; want sweep %s", got, s.id)
	}
	if out, errOut, code := cli(t, lathe, base, "audit", "verify"); code != 0 || !strings.Contains(out+errOut, "intact") {
		t.Fatalf("lathe audit verify after the repair: exit %d\n%s\n%s", code, out, errOut)
	}
}

// restartRepairing starts rs again after a kill. Where redis-server
// refuses to load a truncated AOF, it does what docs/operations.md says ("A
// truncated AOF"): keeps a copy of the AOF directory, runs redis-check-aof
// --fix on the AOF's manifest (answering y), and starts it again. It
// returns what it repaired: the file the log named and redis-check-aof's
// last line.
func restartRepairing(rs *redistest.Server, kill int) ([]string, error) {
	var repaired []string
	for try := 0; ; try++ {
		err := rs.TryRestart()
		if err == nil {
			return repaired, nil
		}
		m := regexp.MustCompile(`(?:Unexpected end of file|Bad file format) reading the append only file (appendonly\.aof\.\d+\.incr\.aof)`).FindStringSubmatch(err.Error())
		if m == nil || try == 2 {
			return repaired, err
		}
		dir := filepath.Join(rs.Dir, "appendonlydir")
		backup := filepath.Join(rs.Dir, fmt.Sprintf("appendonlydir.before-repair-%d-%d", kill, try))
		if out, cerr := exec.Command("cp", "-a", dir, backup).CombinedOutput(); cerr != nil {
			return repaired, fmt.Errorf("copy the AOF before repairing it: %v\n%s", cerr, out)
		}
		fix := exec.Command("redis-check-aof", "--fix", "appendonly.aof.manifest")
		fix.Dir = dir
		fix.Stdin = strings.NewReader("y\n")
		out, ferr := fix.CombinedOutput()
		if ferr != nil {
			return repaired, fmt.Errorf("redis-check-aof --fix appendonly.aof.manifest: %v\n%s\n(after: %v)", ferr, out, err)
		}
		shrink := regexp.MustCompile(`This will shrink the AOF .*`).Find(out)
		repaired = append(repaired, m[1]+": "+string(shrink))
	}
}

// cliSweepSubmit runs `lathe sweep submit FILE --idempotency-key K -o json`
// and classifies its answer: "exit 0" with the sweep's id, else "exit N".
func cliSweepSubmit(lathe, root, base string, s *crashSubmission) (kind, id, detail string) {
	cmd := exec.Command(lathe, "sweep", "submit", s.file, "--idempotency-key", s.key, "-o", "json")
	cmd.Env = append(os.Environ(), "LATHE_SERVER="+base)
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		return "not run", "", err.Error()
	}
	if code != 0 {
		return "exit " + strconv.Itoa(code), "", strings.TrimSpace(errb.String())
	}
	var st wire.SweepStatus
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || st.Sweep == nil {
		return "exit 0 unreadable", "", out.String()
	}
	return "exit 0", st.Sweep.ID, ""
}

// httpSweepSubmit sends the sweep once (POST /api/v1/sweeps with its
// Idempotency-Key) and classifies the answer: "201" or "200" with the
// sweep's id, "outcome_unknown" or "unavailable" (a 503 by its code), "no
// answer", or the status.
func httpSweepSubmit(hc *http.Client, base string, s *crashSubmission) (kind, id, detail string) {
	code, id, detail := postSweep(hc, base, s)
	switch {
	case code == 0:
		return "no answer", "", detail
	case code == http.StatusCreated || code == http.StatusOK:
		return strconv.Itoa(code), id, ""
	case code == http.StatusServiceUnavailable:
		var e wire.Error
		_ = json.Unmarshal([]byte(detail), &e)
		return e.Code, "", detail
	}
	return strconv.Itoa(code), "", detail
}

// postSweep POSTs s's spec with its key: the status (0: no answer), the
// sweep's id on a 2xx, else the body or the error.
func postSweep(hc *http.Client, base string, s *crashSubmission) (int, string, string) {
	body, err := os.ReadFile(s.file)
	if err != nil {
		return 0, "", err.Error()
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/sweeps", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/yaml")
	req.Header.Set("Idempotency-Key", s.key)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, "", strings.TrimSpace(string(b))
	}
	var st wire.SweepStatus
	if err := json.Unmarshal(b, &st); err != nil || st.Sweep == nil {
		return resp.StatusCode, "", "2xx without a sweep: " + string(b)
	}
	return resp.StatusCode, st.Sweep.ID, ""
}

// checkSweepsWhole waits until no sweep is admitting (a sweep admitted in
// chunks is answered at once in state "admitting" and filled by the
// leader), then reads the store itself and fails the test unless every
// sweep in it is whole: its record (named for one of subs, with that
// one's trial count), its trials zset holding TrialID(id, i) at score i for
// every index, every trial's record (sweep_id and trial_index its own) in
// the jobs index, no two sweeps for one key, and no job in the store that
// is not a trial of a whole sweep. It returns each present sweep's id by
// name.
func checkSweepsWhole(t *testing.T, rdb *redis.Client, subs []*crashSubmission) map[string]string {
	t.Helper()
	ctx := context.Background()
	waitfor.Value(t, 60*time.Second, "no sweep admitting", func() string {
		ids, err := rdb.ZRange(ctx, "lathe:sweeps", 0, -1).Result()
		if err != nil {
			return err.Error()
		}
		var admitting []string
		for _, id := range ids {
			if st, _ := rdb.HGet(ctx, "lathe:sweep:"+id, "state").Result(); st == "admitting" {
				admitting = append(admitting, id)
			}
		}
		return strings.Join(admitting, " ")
	}, func(s string) bool { return s == "" })

	want := map[string]int{}
	for _, s := range subs {
		want[s.name] = s.trials
	}
	ids, err := rdb.ZRange(ctx, "lathe:sweeps", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := rdb.ZRange(ctx, "lathe:jobs", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	inJobs := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		inJobs[j] = true
	}
	present := map[string]string{}
	trialsOf := map[string]string{} // trial id prefix → sweep id
	for _, id := range ids {
		rec, err := rdb.HGetAll(ctx, "lathe:sweep:"+id).Result()
		if err != nil {
			t.Fatal(err)
		}
		name := rec["name"]
		n, ok := want[name]
		if !ok {
			t.Errorf("sweep %s: named %q, no sweep of the test (record %v)", id, name, rec)
			continue
		}
		if other, dup := present[name]; dup {
			t.Errorf("key of %s names two sweeps: %s and %s", name, other, id)
		}
		present[name] = id
		trialsOf[strings.TrimSuffix(jobstore.TrialID(id, 0), "00000")] = id
		if rec["trials"] != strconv.Itoa(n) {
			t.Errorf("sweep %s (%s): record says %s trials, its spec %d", id, name, rec["trials"], n)
		}
		zs, err := rdb.ZRangeWithScores(ctx, "lathe:sweep:"+id+":trials", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(zs) != n {
			t.Errorf("sweep %s (%s): PARTIAL: its trials zset holds %d of %d trials", id, name, len(zs), n)
		}
		pipe := rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, n)
		for i := 0; i < n; i++ {
			cmds[i] = pipe.HMGet(ctx, "lathe:job:"+jobstore.TrialID(id, i), "sweep_id", "trial_index", "state")
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		missing := 0
		for i := 0; i < n; i++ {
			tid := jobstore.TrialID(id, i)
			if i < len(zs) && (zs[i].Member != tid || zs[i].Score != float64(i)) {
				t.Errorf("sweep %s: trials zset entry %d is %v at %v, want %s at %d", id, i, zs[i].Member, zs[i].Score, tid, i)
			}
			v := cmds[i].Val()
			if v[0] == nil || !inJobs[tid] {
				missing++
				continue
			}
			if v[0] != id || v[1] != strconv.Itoa(i) {
				t.Errorf("trial %s: sweep_id %v trial_index %v, want %s and %d", tid, v[0], v[1], id, i)
			}
		}
		if missing > 0 {
			t.Errorf("sweep %s (%s): PARTIAL: %d of its %d trials have no record or are not in the jobs index", id, name, missing, n)
		}
	}
	total := 0
	for _, id := range present {
		n, _ := rdb.HGet(ctx, "lathe:sweep:"+id, "trials").Int()
		total += n
	}
	var orphans []string
	for _, j := range jobs {
		if len(j) < 6 || trialsOf[j[:len(j)-5]] == "" {
			orphans = append(orphans, j)
		}
	}
	sort.Strings(orphans)
	if len(orphans) > 0 {
		t.Errorf("PARTIAL: %d jobs in the store are no trial of a stored sweep: %v", len(orphans), orphans[:min(len(orphans), 10)])
	}
	if len(jobs) != total {
		t.Errorf("the jobs index holds %d jobs; the stored sweeps have %d trials", len(jobs), total)
	}
	if t.Failed() {
		t.FailNow()
	}
	return present
}
