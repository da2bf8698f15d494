package main

// Redis faults (issue #3): a kill -9 of redis-server under running daemons,
// and what a finished job costs in Redis memory. Real redis-server
// (internal/redistest), real lathed binaries, the real reference trainer.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// redisKillJobs is how many jobs TestRedisKillNoAcceptedJobLost submits
// before the kill; the first redisKillReal run the real reference trainer
// (they take the worker's two slots and are running at the kill), the rest
// a /bin/sh stand-in that speaks the trainer contract (standinTrainer). The
// real trainer costs a Python start with torch, 3–20 s of a 2-core machine
// depending on its load, so 200 real runs would not fit a test run; what is
// under test here is the store, the queues and the daemons, not the trainer.
const (
	redisKillJobs = 200
	redisKillReal = 2
)

// standinTrainer is a trainer stand-in (not the reference trainer): a
// /bin/sh script that speaks the trainer contract and succeeds in a few
// milliseconds.
const standinTrainer = `#!/bin/sh
echo '{"event":"progress","step":1,"total_steps":2,"loss":2.0}'
echo 'a plain log line'
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors","bytes":7}'
echo '{"event":"progress","step":2,"total_steps":2,"loss":1.0}'
echo '{"event":"done","metrics":{"train_loss":1.0}}'
`

// TestRedisKillNoAcceptedJobLost: `lathed scheduler` and `lathed worker` as
// processes on a redis-server with AOF (appendfsync everysec). Jobs are
// submitted through the API with Idempotency-Keys; more than a second after
// the last one was accepted, redis-server is killed with SIGKILL and started
// again on the same port and directory. While it is down the API answers
// 503 (its latency logged; TestTwoProcesses holds it to 2 s) and accepts
// nothing; once it is back every accepted job is
// still there, its Idempotency-Key still maps to it, every job ends
// succeeded exactly once, and neither daemon exited: they reconnect by
// themselves. Two jobs run the real reference trainer across the kill; the
// others, queued at the kill, run standinTrainer.
func TestRedisKillNoAcceptedJobLost(t *testing.T) {
	requireTorch(t)
	lathed, _ := binaries(t)
	rs := redistest.StartWith(t, redistest.Options{AOF: true})
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	data := t.TempDir()
	standin := filepath.Join(data, "standin.sh")
	if err := os.WriteFile(standin, []byte(standinTrainer), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(data, "lathe.yaml")
	// Only the placer's poll is shortened; leases, reaping and repair keep
	// their defaults, so the test sees what a deployment would.
	if err := os.WriteFile(cfg, []byte("scheduler:\n  place_interval: 100ms\ntrainers:\n  standin: [/bin/sh, "+standin+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sd := startDaemon(t, lathed, "scheduler", "--config", cfg, "--redis-url", rs.URL(), "--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", data)
	wd := startDaemon(t, lathed, "worker", "--config", cfg, "--backend", "local", "--redis-url", rs.URL(), "--data-dir", data,
		"--node", "redis-kill-node", "--slots", "2")
	waitHTTP(t, base, sd)
	alive := func(when string) {
		t.Helper()
		for name, d := range map[string]*daemon{"scheduler": sd, "worker": wd} {
			select {
			case <-d.done:
				t.Fatalf("%s: lathed %s exited (%v):\n%s", when, name, d.cmd.ProcessState, d.output())
			default:
			}
		}
	}

	root := repoRoot(t)
	spec := func(i int) string {
		trainer := "reference"
		if i >= redisKillReal {
			trainer = "standin"
		}
		return fmt.Sprintf(`{"name":"redis-kill-%d","base_model":"tiny-char","trainer":%q,`+
			`"dataset":"file://%s/configs/examples/data/tiny-train.jsonl",`+
			`"lora":{"rank":2,"alpha":4,"target_modules":["q_proj","v_proj"]},`+
			`"training":{"max_steps":3,"batch_size":2,"learning_rate":0.01,"checkpoint_every":1000,"eval_every":1000},`+
			`"resources":{"gpus":0},"max_runtime":"5m"}`, i, trainer, root)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	submit := func(c *http.Client, key, body string) (int, jobtype.Job, string, error) {
		req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/jobs", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := c.Do(req)
		if err != nil {
			return 0, jobtype.Job{}, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var j jobtype.Job
		if resp.StatusCode/100 == 2 {
			if err := json.Unmarshal(b, &j); err != nil {
				return resp.StatusCode, j, string(b), fmt.Errorf("2xx without a job: %v", err)
			}
		}
		return resp.StatusCode, j, string(b), nil
	}

	type acceptedJob struct {
		id, key string
		at      time.Time // when the API's 2xx came back
	}
	var accepted []acceptedJob
	for i := 0; i < redisKillJobs; i++ {
		key := fmt.Sprintf("redis-kill-%d", i)
		code, j, body, err := submit(hc, key, spec(i))
		if err != nil || code != http.StatusCreated {
			t.Fatalf("submit %d: %d %v %s", i, code, err, body)
		}
		accepted = append(accepted, acceptedJob{id: j.ID, key: key, at: time.Now()})
	}
	last := accepted[len(accepted)-1].at
	// The bound: a kill -9 loses no job the API accepted more than a
	// second before it. This is the one timed wait of the test.
	time.Sleep(time.Until(last.Add(1100 * time.Millisecond)))

	before := map[jobtype.State]int{}
	for _, a := range accepted {
		before[getJob(t, base, a.id).State]++
	}
	t.Logf("at the kill (%s after the last accept): %v", time.Since(last).Round(time.Millisecond), before)

	rs.Kill()
	killedAt := time.Now()
	// The API answers 503 while Redis is away. The bound, within
	// 2 s, is held by TestTwoProcesses (e2e_test.go); here, with 200 jobs
	// stored and other tests sharing the two cores, a GET was seen past 2 s,
	// so its latency is logged and the client waits up to 10 s.
	c2 := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/healthz", "/api/v1/jobs/" + accepted[0].id} {
		start := time.Now()
		resp, err := c2.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s with Redis down: no answer within 10 s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("GET %s with Redis down: %d, want 503", path, resp.StatusCode)
		}
		t.Logf("GET %s with Redis down: 503 in %s", path, time.Since(start).Round(time.Millisecond))
	}
	// Nothing is accepted while Redis is away. (Its latency is logged, not
	// held to 2 s here: on a loaded 2-core machine a submit's parse plus its
	// 1.5 s Redis budget was seen at 1.9 s; TestTwoProcesses holds the GETs to 2 s.)
	start := time.Now()
	code, j, body, err := submit(hc, "redis-kill-while-down", spec(999))
	if err != nil {
		t.Fatalf("POST /api/v1/jobs with Redis down: no answer: %v", err)
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("POST /api/v1/jobs with Redis down: %d (job %q), want 503: %s", code, j.ID, body)
	}
	t.Logf("POST /api/v1/jobs with Redis down: 503 in %s", time.Since(start).Round(time.Millisecond))
	alive("with Redis down")

	rs.Restart()
	restartedAt := time.Now()
	t.Logf("redis-server was down for %s", restartedAt.Sub(killedAt).Round(time.Millisecond))
	waitHealthy(t, base, 15*time.Second)
	alive("after Redis came back")

	// Every accepted job is still there.
	var lost []string
	for _, a := range accepted {
		resp, err := hc.Get(base + "/api/v1/jobs/" + a.id)
		if err != nil {
			t.Fatalf("GET job %s after the restart: %v", a.id, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			lost = append(lost, fmt.Sprintf("%s (accepted %s before the kill): %d", a.id, killedAt.Sub(a.at).Round(time.Millisecond), resp.StatusCode))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d accepted jobs are gone after the Redis restart:\n%s", len(lost), len(accepted), strings.Join(lost, "\n"))
	}
	// Its Idempotency-Key still maps to it: a resubmit returns the same job.
	code, j, body, err = submit(hc, accepted[0].key, spec(0))
	if err != nil || code != http.StatusOK || j.ID != accepted[0].id {
		t.Fatalf("resubmit with key %s after the restart: %d %v job %q, want 200 and %s: %s", accepted[0].key, code, err, j.ID, accepted[0].id, body)
	}

	// Every job ends succeeded: the daemons carried on by themselves.
	pending := map[string]bool{}
	for _, a := range accepted {
		pending[a.id] = true
	}
	// notEnded reads the pending jobs, drops those that ended, and says what
	// the others are.
	notEnded := func() []string {
		alive("waiting for the jobs")
		var left []string
		for id := range pending {
			j := getJob(t, base, id)
			if !j.State.Terminal() {
				left = append(left, fmt.Sprintf("%s %s attempt %d node %q", id, j.State, j.Attempt, j.Node))
				continue
			}
			if j.State != jobtype.StateSucceeded {
				t.Fatalf("job %s ended %s (reason %q, attempt %d): %s", id, j.State, j.Reason, j.Attempt, j.Error)
			}
			delete(pending, id)
		}
		return left
	}
	waitfor.Value(t, 3*time.Minute, "every job terminal after the restart", notEnded, func(left []string) bool { return len(left) == 0 })
	alive("after every job ended")
	t.Logf("every job ended %s after Redis came back", time.Since(restartedAt).Round(time.Millisecond))

	attempts, nEvents := map[int]int{}, 0
	for i, a := range accepted {
		evs := events(t, base, a.id)
		nEvents += len(evs)
		succeeded := 0
		for _, e := range evs {
			var sc jobtype.StateChange
			if e.Type == jobtype.EventState && json.Unmarshal(e.Data, &sc) == nil && sc.To == jobtype.StateSucceeded {
				succeeded++
			}
		}
		if succeeded != 1 {
			t.Errorf("job %s: %d succeeded state events, want 1", a.id, succeeded)
		}
		j := getJob(t, base, a.id)
		attempts[j.Attempt]++
		if i < redisKillReal && j.StartedAt != nil && j.FinishedAt != nil {
			t.Logf("%s: accepted %s, started +%s, finished +%s (relative to the kill)", a.id, a.at.Sub(killedAt).Round(time.Millisecond),
				j.StartedAt.Sub(killedAt).Round(time.Millisecond), j.FinishedAt.Sub(killedAt).Round(time.Millisecond))
		}
	}
	t.Logf("%d jobs succeeded; jobs by final attempt number %v; %.1f events per job", len(accepted), attempts, float64(nEvents)/float64(len(accepted)))
	for name, d := range map[string]*daemon{"scheduler": sd, "worker": wd} {
		for _, s := range []string{"lost the leader lease", "leading", "repair:", "reaper:", "heartbeat restored", "lease renewal failed", "self-fencing", "recording attempt end failed"} {
			if n := strings.Count(d.output(), s); n > 0 {
				t.Logf("lathed %s logged %q %d times", name, s, n)
			}
		}
	}
}

// waitHealthy polls /healthz until it answers 200.
func waitHealthy(t *testing.T, base string, within time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	waitfor.NoError(t, within, "/healthz 200 after the Redis restart", func() error {
		resp, err := c.Get(base + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	})
}

// memJobs is how many jobs TestMeasureMemoryPerJob stores: 10,000 in the
// suite, or LATHE_MEM_JOBS (the 100,000 figure in docs/operations.md was
// measured with LATHE_MEM_JOBS=100000).
var memJobs = func() int {
	if n, err := strconv.Atoi(os.Getenv("LATHE_MEM_JOBS")); err == nil && n > 0 {
		return n
	}
	return 10000
}()

// TestMeasureMemoryPerJob measures what a finished job costs in Redis: on a
// fresh redis-server it creates memJobs jobs with jobstore.Create and drives
// each to succeeded the way a worker does (Dispatch, Claim, Append of the
// events a short run writes, Finish with metrics and artifacts), then logs
// INFO memory's used_memory before and after, per job. The figure is in
// docs/operations.md ("Memory per finished job"). It fails when a job is not
// readable and succeeded afterwards, or its event stream is not what was
// written.
//
//	go test -count=1 -run TestMeasureMemoryPerJob -v ./cmd/lathed/
func TestMeasureMemoryPerJob(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	ctx := context.Background()
	spec, err := jobspec.Parse([]byte(`name: support-bot-lora
base_model: tiny-char
dataset: file:///data/support/train.jsonl
eval_dataset: file:///data/support/eval.jsonl
lora: {rank: 16, alpha: 32, dropout: 0.05, target_modules: [q_proj, k_proj, v_proj, o_proj]}
training: {max_steps: 200, batch_size: 8, learning_rate: 0.0002, checkpoint_every: 100, eval_every: 100}
resources: {gpus: 0}
priority: normal
max_runtime: 8h
`))
	if err != nil {
		t.Fatal(err)
	}
	spec.Normalize(jobspec.Defaults{MaxRuntime: 24 * time.Hour, Residency: []string{"onprem"}, OutputURI: "file:///srv/lathe/artifacts"})

	// What one short run writes besides its state changes: a start, ten
	// progress lines, an eval, a checkpoint, five log lines, two artifacts
	// and done (the reference trainer's tiny example writes about as many).
	var evs []jobstore.EventIn
	evs = append(evs, jobstore.EventIn{Type: "started", Data: json.RawMessage(`{"pid":12345}`)})
	for i := 1; i <= 5; i++ {
		evs = append(evs, jobstore.EventIn{Type: jobtype.EventLog,
			Data: json.RawMessage(fmt.Sprintf(`{"stream":"stderr","line":"loading tiny-char, dataset shard %d of 5"}`, i))})
	}
	for step := 20; step <= 200; step += 20 {
		p := jobtype.Progress{Step: step, TotalSteps: 200, Epoch: float64(step) / 200, Loss: 2.5 - float64(step)/200, LearningRate: 2e-4, SamplesPerS: 41.5}
		pb, _ := json.Marshal(p)
		raw := fmt.Sprintf(`{"event":"progress","step":%d,"total_steps":200,"epoch":%g,"loss":%g,"learning_rate":0.0002,"samples_per_s":41.5}`, step, p.Epoch, p.Loss)
		evs = append(evs, jobstore.EventIn{Type: jobtype.EventProgress, Data: json.RawMessage(raw), Field: "progress", Value: string(pb)})
	}
	evs = append(evs,
		jobstore.EventIn{Type: jobtype.EventEval, Data: json.RawMessage(`{"event":"eval","step":100,"eval_loss":1.92}`), Field: "metrics", Value: `{"eval_loss":1.92}`},
		jobstore.EventIn{Type: jobtype.EventCheckpoint, Data: json.RawMessage(`{"event":"checkpoint","step":100,"path":"ckpt-100"}`)},
		jobstore.EventIn{Type: jobtype.EventArtifact, Data: json.RawMessage(`{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors","bytes":123456,"sha256":"5d380cd0f4db307c1194dafdcfc6ccfe7a1abd7b05f3eb079de55a53cfda5b55"}`)},
		jobstore.EventIn{Type: jobtype.EventArtifact, Data: json.RawMessage(`{"event":"artifact","path":"adapter_config.json","format":"json","bytes":349,"sha256":"20162fb667a60fe6b2503b2a199b86ac9e4128438cbd0a7e11146b21769c8724"}`)},
		jobstore.EventIn{Type: jobtype.EventDone, Data: json.RawMessage(`{"event":"done","metrics":{"train_loss":1.71,"eval_loss":1.88}}`), Field: "metrics", Value: `{"eval_loss":1.88,"train_loss":1.71}`},
	)
	// Plus the state events: queued, dispatched, running, succeeded.
	wantEvents := int64(len(evs) + 4)
	arts := []jobtype.Artifact{
		{Path: "adapter_model.safetensors", Format: "safetensors", Bytes: 123456, SHA256: "5d380cd0f4db307c1194dafdcfc6ccfe7a1abd7b05f3eb079de55a53cfda5b55"},
		{Path: "adapter_config.json", Format: "json", Bytes: 349, SHA256: "20162fb667a60fe6b2503b2a199b86ac9e4128438cbd0a7e11146b21769c8724"},
	}

	usedMemory := func() (used, dataset int64) {
		t.Helper()
		info, err := rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				continue
			}
			switch k {
			case "used_memory":
				used, _ = strconv.ParseInt(v, 10, 64)
			case "used_memory_dataset":
				dataset, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if used == 0 {
			t.Fatalf("no used_memory in INFO memory:\n%s", info)
		}
		return used, dataset
	}
	used0, data0 := usedMemory()

	const workers = 8
	ids := make([]string, memJobs)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			node := fmt.Sprintf("mem-node-%d", w)
			for i := w; i < memJobs; i += workers {
				j, _, err := store.Create(ctx, jobstore.NewJob{Spec: spec, OutputURI: "file:///srv/lathe/artifacts/{id}", Submitter: "alice", Team: "nlp"})
				if err == nil {
					err = store.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: node, Backend: "local", Capacity: 1})
				}
				if err == nil {
					var out jobstore.ClaimOutcome
					if out, err = store.Claim(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: node, Incarnation: "inc", Lease: time.Minute}); err == nil && out != jobstore.Claimed {
						err = fmt.Errorf("claim %s: outcome %v", j.ID, out)
					}
				}
				if err == nil {
					_, err = store.Append(ctx, j.ID, 1, evs)
				}
				if err == nil {
					err = store.Finish(ctx, j.ID, 1, jobstore.Ending{State: jobtype.StateSucceeded,
						Metrics: map[string]float64{"train_loss": 1.71, "eval_loss": 1.88}, Artifacts: arts})
				}
				if err != nil {
					errs <- fmt.Errorf("job %d: %w", i, err)
					return
				}
				ids[i] = j.ID
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	used1, data1 := usedMemory()

	// Every job is readable, succeeded, with its progress, metrics,
	// artifacts and the whole event stream.
	for i := 0; i < memJobs; i += 500 {
		n := min(500, memJobs-i)
		jobs, err := store.GetMany(ctx, ids[i:i+n])
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != n {
			t.Fatalf("GetMany of %d ids returned %d jobs", n, len(jobs))
		}
		for k, j := range jobs {
			if j == nil || j.ID != ids[i+k] || j.State != jobtype.StateSucceeded || j.Progress.Step != 200 || j.Metrics["eval_loss"] != 1.88 || len(j.Artifacts) != 2 {
				t.Fatalf("job %s after the run: %+v", ids[i+k], j)
			}
		}
	}
	pipe := rdb.Pipeline()
	for _, id := range ids {
		pipe.XLen(ctx, store.Prefix()+"job:"+id+":events")
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		if n, ok := c.(*redis.IntCmd); !ok || n.Val() != wantEvents {
			t.Fatalf("job %s: %v, want %d events", ids[i], c, wantEvents)
		}
	}
	counts, err := store.CountByState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[jobtype.StateSucceeded] != int64(memJobs) {
		t.Fatalf("state counts %v, want %d succeeded", counts, memJobs)
	}

	one := map[string]int64{}
	for _, k := range []string{"job:" + ids[0], "job:" + ids[0] + ":events"} {
		n, err := rdb.MemoryUsage(ctx, store.Prefix()+k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		one[k] = n
	}

	// A job whose trainer printed more log lines than the stream keeps: the
	// stream stays at about events_max_len (default 5000) entries.
	big, _, err := store.Create(ctx, jobstore.NewJob{Spec: spec, OutputURI: "file:///srv/lathe/artifacts/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Dispatch(ctx, jobstore.DispatchParams{JobID: big.ID, Attempt: 1, Node: "mem-node-big", Backend: "local", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	if out, err := store.Claim(ctx, jobstore.ClaimParams{ID: big.ID, Attempt: 1, Node: "mem-node-big", Incarnation: "inc", Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	const logLines, batch = 6000, 64
	for i := 0; i < logLines; i += batch {
		var b []jobstore.EventIn
		for k := i; k < min(i+batch, logLines); k++ {
			b = append(b, jobstore.EventIn{Type: jobtype.EventLog, Data: json.RawMessage(fmt.Sprintf(
				`{"stream":"stderr","line":"step %d: loss 1.2345 lr 0.0002 grad_norm 0.731 tokens/s 4187.2 mem 14.2 GiB"}`, k))})
		}
		if _, err := store.Append(ctx, big.ID, 1, b); err != nil {
			t.Fatal(err)
		}
	}
	bigKey := store.Prefix() + "job:" + big.ID + ":events"
	bigLen, err := rdb.XLen(ctx, bigKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole stream nodes (stream-node-max-entries, 100).
	if bigLen < 5000 || bigLen > 5100 {
		t.Fatalf("after %d log lines the stream holds %d entries, want about 5000 (events_max_len)", logLines, bigLen)
	}
	bigMem, err := rdb.MemoryUsage(ctx, bigKey, 0).Result()
	if err != nil {
		t.Fatal(err)
	}

	per := float64(used1-used0) / float64(memJobs)
	perData := float64(data1-data0) / float64(memJobs)
	t.Logf("%d finished jobs, %d events each: used_memory %d → %d bytes: %.0f bytes per job (used_memory_dataset: %.0f per job)",
		memJobs, wantEvents, used0, used1, per, perData)
	t.Logf("extrapolated to 100,000 finished jobs: %.0f MiB (used_memory)", per*100000/(1<<20))
	t.Logf("one job: MEMORY USAGE of its record %d bytes, of its %d-entry event stream %d bytes (the rest is its entries in the jobs and state:succeeded indexes and allocator overhead)",
		one["job:"+ids[0]], wantEvents, one["job:"+ids[0]+":events"])
	t.Logf("a job that printed %d log lines of ~110 bytes: %d entries kept, MEMORY USAGE of the stream %d bytes (%.0f KiB)", logLines, bigLen, bigMem, float64(bigMem)/1024)
}
