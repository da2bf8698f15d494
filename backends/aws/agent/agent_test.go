package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lathe-ml/lathe/backends/aws/imdsfake"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/mototest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

const (
	bucket = "lathe-agent-test"
	prefix = "runs"
)

// testBundle holds what a test's agent runs against: the real aws-sdk-go-v2
// S3 client talking to moto_server (a FAKE of S3, see mototest) and
// imdsfake (a FAKE of IMDSv2).
type testBundle struct {
	ctx  context.Context
	s3   *s3.Client
	imds *imdsfake.Server
	repo string

	mu        sync.Mutex
	shutdowns int
	onShut    func()
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := t.Context()
	moto := mototest.Start(t)
	client := s3.NewFromConfig(moto.Config(ctx), mototest.S3PathStyle)
	mototest.Bucket(ctx, t, client, bucket)
	imds := imdsfake.New()
	t.Cleanup(imds.Close)
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..", "..")
	b := &testBundle{ctx: ctx, s3: client, imds: imds, repo: repo}
	b.putFile(t, "data/train.jsonl", filepath.Join(repo, "configs/examples/data/tiny-train.jsonl"))
	b.putFile(t, "data/eval.jsonl", filepath.Join(repo, "configs/examples/data/tiny-eval.jsonl"))
	return b
}

func (b *testBundle) put(t *testing.T, key string, data []byte) {
	t.Helper()
	_, err := b.s3.PutObject(b.ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func (b *testBundle) putFile(t *testing.T, key, src string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	b.put(t, key, data)
}

func (b *testBundle) get(t *testing.T, key string) []byte {
	t.Helper()
	out, err := b.s3.GetObject(b.ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func (b *testBundle) list(t *testing.T, p string) []string {
	t.Helper()
	keys, err := S3Store{b.s3}.List(b.ctx, bucket, p)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// events reads every events batch of an attempt, in order.
func (b *testBundle) events(t *testing.T, id string, attempt int) []EventLine {
	t.Helper()
	var out []EventLine
	for _, k := range b.list(t, prefix+"/"+id+"/"+strconv.Itoa(attempt)+"/"+EventsFolder) {
		for _, line := range strings.Split(strings.TrimSpace(string(b.get(t, k))), "\n") {
			var e EventLine
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("%s: bad line %q: %v", k, line, err)
			}
			out = append(out, e)
		}
	}
	return out
}

func (b *testBundle) job(id string, attempt int, maxRuntimeS int64, argv []string) Job {
	return Job{
		JobID:   id,
		Attempt: attempt,
		Spec: jobspec.Spec{
			Name: "agent-test", BaseModel: "tiny-char",
			Dataset:     "s3://" + bucket + "/data/train.jsonl",
			EvalDataset: "s3://" + bucket + "/data/eval.jsonl",
			LoRA:        jobspec.LoRA{Rank: 4, Alpha: 8, TargetModules: []string{"q_proj", "v_proj"}},
			Training:    jobspec.Training{MaxSteps: 6, BatchSize: 8, LearningRate: 0.02, Seed: 42, CheckpointEvery: 2, EvalEvery: 3},
			Residency:   []string{"eu"}, Priority: jobspec.PriorityNormal, Trainer: "reference",
		},
		Dataset:          "s3://" + bucket + "/data/train.jsonl",
		EvalDataset:      "s3://" + bucket + "/data/eval.jsonl",
		CheckpointPrefix: "s3://" + bucket + "/" + prefix + "/" + id + "/" + CheckpointsFolder,
		MaxRuntimeS:      maxRuntimeS,
		TrainerArgv:      argv,
	}
}

// config writes job.json and returns a Config for it whose Shutdown only
// counts (and runs onShut).
func (b *testBundle) config(t *testing.T, job Job) Config {
	t.Helper()
	data, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	key := prefix + "/" + job.JobID + "/" + strconv.Itoa(job.Attempt) + "/" + JobObject
	b.put(t, key, data)
	return Config{
		JobURI:             "s3://" + bucket + "/" + key,
		S3:                 b.s3,
		WorkDir:            t.TempDir(),
		Env:                []string{"LATHE_SIMULATED_GPUS=1", "LATHE_TORCH_THREADS=2"},
		KillGrace:          30 * time.Second,
		IMDSEndpoint:       b.imds.URL(),
		IMDSPollInterval:   20 * time.Millisecond,
		EventBatchLines:    4,
		EventFlushInterval: 50 * time.Millisecond,
		Shutdown: func(context.Context) error {
			b.mu.Lock()
			b.shutdowns++
			f := b.onShut
			b.mu.Unlock()
			if f != nil {
				f()
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	}
}

func (b *testBundle) shutdownCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shutdowns
}

// status reads status.json and checks that it matches what Run returned.
func (b *testBundle) status(t *testing.T, id string, attempt int, got Status) Status {
	t.Helper()
	var st Status
	if err := json.Unmarshal(b.get(t, prefix+"/"+id+"/"+strconv.Itoa(attempt)+"/"+StatusObject), &st); err != nil {
		t.Fatal(err)
	}
	if st.State != got.State || st.ExitCode != got.ExitCode || st.Error != got.Error {
		t.Fatalf("status.json %+v differs from Run's %+v", st, got)
	}
	return st
}

func hasType(evs []EventLine, typ string) bool {
	for _, e := range evs {
		if e.Type == typ {
			return true
		}
	}
	return false
}

// TestRunReferenceTrainer runs the real reference trainer
// (scripts/train_lora.py with /usr/bin/python3 and torch, on the CPU) on the
// tiny example data: the artifacts land in S3 with the sha256 the trainer
// reported, the events and checkpoints are uploaded, status.json says
// succeeded, and the instance is shut down once.
func TestRunReferenceTrainer(t *testing.T) {
	b := setup(t)
	job := b.job("job-ok", 1, 600, []string{"/usr/bin/python3", filepath.Join(b.repo, "scripts", "train_lora.py")})
	cfg := b.config(t, job)

	got, err := Run(b.ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.State != StateSucceeded || got.ExitCode != 0 {
		t.Fatalf("status %+v, want succeeded", got)
	}
	st := b.status(t, "job-ok", 1, got)
	if len(st.Artifacts) == 0 {
		t.Fatal("no artifacts in status.json")
	}

	evs := b.events(t, "job-ok", 1)
	for _, typ := range []string{"progress", "eval", "checkpoint", "artifact", "done", TypeLog} {
		if !hasType(evs, typ) {
			t.Errorf("no %s line in the uploaded events", typ)
		}
	}
	reported := map[string]string{}
	for _, e := range evs {
		if e.Type == "artifact" {
			var a struct{ Path, SHA256 string }
			if err := json.Unmarshal(e.Data, &a); err != nil {
				t.Fatal(err)
			}
			reported[a.Path] = a.SHA256
		}
	}
	for _, a := range st.Artifacts {
		data := b.get(t, prefix+"/job-ok/1/"+ArtifactsFolder+a.Name)
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != a.SHA256 || int64(len(data)) != a.Bytes {
			t.Errorf("artifact %s in S3: %d bytes sha256 %x; status says %d bytes %s", a.Name, len(data), sum, a.Bytes, a.SHA256)
		}
		if reported[a.Name] != a.SHA256 {
			t.Errorf("artifact %s: trainer reported sha256 %q, uploaded %s", a.Name, reported[a.Name], a.SHA256)
		}
	}
	if _, ok := reported["adapter_model.safetensors"]; !ok {
		t.Errorf("reported artifacts %v lack adapter_model.safetensors", reported)
	}
	ckpts := b.list(t, prefix+"/job-ok/"+CheckpointsFolder)
	if !slicesContainSuffix(ckpts, "/"+completeMarker) {
		t.Errorf("no complete checkpoint uploaded: %v", ckpts)
	}
	if st.Checkpoint == "" {
		t.Error("status.json names no checkpoint")
	}
	if n := b.shutdownCount(); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}

func slicesContainSuffix(keys []string, suffix string) bool {
	for _, k := range keys {
		if strings.HasSuffix(k, suffix) {
			return true
		}
	}
	return false
}

// standIn is a STAND-IN for a trainer (a /bin/sh script, not the reference
// trainer) that follows the trainer contract: it resumes from the newest
// ckpt-N/trainer_state.json in LATHE_CHECKPOINT_DIR (and says so in a log
// line "resumed from step N"), prints a progress line about every 50ms, and
// on SIGTERM writes ckpt-STEP, prints the checkpoint event and exits 143.
// Once resumed (step > 0), or from the start with STANDIN_FINISH=1, it
// stops by itself after 3 more steps with an artifact (its sha256 reported
// wrong with STANDIN_BAD_SHA=1) and exit 0. With STANDIN_IGNORE_TERM=1 it carries on after
// SIGTERM (a stuck trainer), touching STANDIN_PIDFILE.term, and writes its
// pid to STANDIN_PIDFILE.
const standIn = `#!/bin/sh
step=0
for d in "$LATHE_CHECKPOINT_DIR"/ckpt-*; do
	[ -f "$d/trainer_state.json" ] || continue
	s=${d##*/ckpt-}
	[ "$s" -gt "$step" ] && step=$s
done
echo "resumed from step $step"
start=$step
if [ "$STANDIN_IGNORE_TERM" = 1 ]; then
	trap 'echo "SIGTERM ignored"; touch "$STANDIN_PIDFILE.term"' TERM
	echo $$ > "$STANDIN_PIDFILE"
else
	trap 'mkdir -p "$LATHE_CHECKPOINT_DIR/ckpt-$step" && echo "{\"step\":$step}" > "$LATHE_CHECKPOINT_DIR/ckpt-$step/trainer_state.json" && echo "{\"event\":\"checkpoint\",\"step\":$step,\"path\":\"ckpt-$step\"}"; exit 143' TERM
fi
while :; do
	step=$((step+1))
	echo "{\"event\":\"progress\",\"step\":$step,\"total_steps\":1000}"
	if { [ "$start" -gt 0 ] || [ "$STANDIN_FINISH" = 1 ]; } && [ "$step" -ge $((start+3)) ]; then
		echo "adapter of step $step" > "$LATHE_OUTPUT_DIR/adapter.txt"
		sum=$(sha256sum "$LATHE_OUTPUT_DIR/adapter.txt" | cut -d' ' -f1)
		[ "$STANDIN_BAD_SHA" = 1 ] && sum=0000000000000000000000000000000000000000000000000000000000000000
		echo "{\"event\":\"artifact\",\"path\":\"adapter.txt\",\"format\":\"text\",\"bytes\":$(wc -c < "$LATHE_OUTPUT_DIR/adapter.txt"),\"sha256\":\"$sum\"}"
		echo '{"event":"done","metrics":{"train_loss":1.5}}'
		exit 0
	fi
	sleep 0.05
done
`

func writeStandIn(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "standin-trainer.sh")
	if err := os.WriteFile(p, []byte(standIn), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

type runResult struct {
	st  Status
	err error
}

func runAsync(ctx context.Context, cfg Config) <-chan runResult {
	ch := make(chan runResult, 1)
	go func() {
		st, err := Run(ctx, cfg)
		ch <- runResult{st, err}
	}()
	return ch
}

// TestSpotInterruptionThenResume plays a spot interruption with imdsfake
// (a FAKE IMDSv2) once the first progress line is in S3: the stand-in
// trainer gets SIGTERM, its checkpoint is uploaded and status.json says
// preempted. Attempt 2 then downloads that checkpoint before the start (the
// stand-in says the step it resumed from) and succeeds.
func TestSpotInterruptionThenResume(t *testing.T) {
	b := setup(t)
	sh := writeStandIn(t)
	job := b.job("job-spot", 1, 600, []string{"/bin/sh", sh})
	done := runAsync(b.ctx, b.config(t, job))

	waitfor.True(t, time.Minute, "a progress line in S3", func() bool { return hasType(b.events(t, "job-spot", 1), "progress") })
	b.imds.Interrupt("terminate", time.Now().Add(2*time.Minute))
	r := <-done
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if r.st.State != StatePreempted {
		t.Fatalf("status %+v, want preempted", r.st)
	}
	st := b.status(t, "job-spot", 1, r.st)
	if st.Checkpoint == "" {
		t.Fatal("status.json names no checkpoint")
	}
	ckptKey := prefix + "/job-spot/" + CheckpointsFolder + st.Checkpoint + "/" + completeMarker
	var state struct{ Step int }
	if err := json.Unmarshal(b.get(t, ckptKey), &state); err != nil {
		t.Fatal(err)
	}
	if state.Step < 1 || "ckpt-"+strconv.Itoa(state.Step) != st.Checkpoint {
		t.Fatalf("checkpoint %s holds step %d", st.Checkpoint, state.Step)
	}
	if n := b.shutdownCount(); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}

	// Attempt 2, on a "new instance" (a fresh work folder), resumes.
	job2 := b.job("job-spot", 2, 600, []string{"/bin/sh", sh})
	b.imds.Close()
	b.imds = imdsfake.New() // the new instance has no notice
	t.Cleanup(b.imds.Close)
	got, err := Run(b.ctx, b.config(t, job2))
	if err != nil {
		t.Fatalf("Run attempt 2: %v", err)
	}
	if got.State != StateSucceeded {
		t.Fatalf("attempt 2: %+v, want succeeded", got)
	}
	b.status(t, "job-spot", 2, got)
	want := "resumed from step " + strconv.Itoa(state.Step)
	found := false
	for _, e := range b.events(t, "job-spot", 2) {
		if e.Type == TypeLog && strings.Contains(string(e.Data), want) {
			found = true
		}
	}
	if !found {
		t.Errorf("attempt 2's events lack %q", want)
	}
	if len(got.Artifacts) != 1 || got.Artifacts[0].Name != "adapter.txt" {
		t.Errorf("attempt 2 artifacts %+v", got.Artifacts)
	}
}

// TestMaxRuntime stops the stand-in trainer at a max_runtime of one second:
// status timeout, its checkpoint uploaded.
func TestMaxRuntime(t *testing.T) {
	b := setup(t)
	job := b.job("job-slow", 1, 1, []string{"/bin/sh", writeStandIn(t)})
	got, err := Run(b.ctx, b.config(t, job))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.State != StateTimeout {
		t.Fatalf("status %+v, want timeout", got)
	}
	st := b.status(t, "job-slow", 1, got)
	if st.Checkpoint == "" || len(b.list(t, prefix+"/job-slow/"+CheckpointsFolder+st.Checkpoint+"/")) == 0 {
		t.Errorf("checkpoint %q not in S3", st.Checkpoint)
	}
	if n := b.shutdownCount(); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}

// TestGuardShutsDownAStuckAttempt: the stand-in ignores SIGTERM and the kill
// grace is long, so the attempt is stuck past max_runtime; the guard calls
// Shutdown by itself (max_runtime + margin). The test's Shutdown plays the
// power-off by killing the trainer's process group, which ends the attempt.
func TestGuardShutsDownAStuckAttempt(t *testing.T) {
	b := setup(t)
	job := b.job("job-stuck", 1, 1, []string{"/bin/sh", writeStandIn(t)})
	cfg := b.config(t, job)
	pidfile := filepath.Join(t.TempDir(), "pid")
	cfg.Env = append(cfg.Env, "STANDIN_IGNORE_TERM=1", "STANDIN_PIDFILE="+pidfile)
	cfg.KillGrace = 10 * time.Minute
	cfg.ShutdownMargin = 10 * time.Millisecond
	byGuard := make(chan bool, 1)
	b.onShut = func() {
		// The max_runtime timer fired first: the trainer saw its SIGTERM.
		// (Poll, not True: this runs on the guard's goroutine, where
		// t.Fatal is not allowed.)
		if !waitfor.Poll(time.Minute, func() bool { _, err := os.Stat(pidfile + ".term"); return err == nil }) {
			t.Errorf("the stand-in never got SIGTERM")
		}
		// The guard wrote its status before shutting down.
		if out, err := b.s3.GetObject(b.ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(prefix + "/job-stuck/1/" + StatusObject)}); err != nil {
			t.Errorf("no status.json when the guard shuts down: %v", err)
		} else {
			var st Status
			err := json.NewDecoder(out.Body).Decode(&st)
			out.Body.Close()
			if err != nil || st.State != StateTimeout || !strings.Contains(st.Error, "guard") {
				t.Errorf("guard's status.json: %+v, %v", st, err)
			}
		}
		data, err := os.ReadFile(pidfile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 1 {
			t.Errorf("stand-in pid file: %q, %v", data, err)
		} else if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("kill the trainer's group: %v", err)
		}
		byGuard <- true
	}
	done := runAsync(b.ctx, cfg)
	<-byGuard
	r := <-done
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if r.st.State != StateTimeout {
		t.Fatalf("status %+v, want timeout", r.st)
	}
	b.status(t, "job-stuck", 1, r.st)
	if n := b.shutdownCount(); n != 1 {
		t.Errorf("Shutdown called %d times, want 1 (the guard's)", n)
	}
}

// TestBadJob: a job.json whose ids do not match its key fails the attempt
// with a status.json saying why, and still shuts down.
func TestBadJob(t *testing.T) {
	b := setup(t)
	job := b.job("job-bad", 1, 60, []string{"/bin/true"})
	cfg := b.config(t, job)
	cfg.JobURI = strings.Replace(cfg.JobURI, "/job-bad/1/", "/job-bad/2/", 1)
	job.Attempt = 1
	data, _ := json.Marshal(job)
	b.put(t, prefix+"/job-bad/2/"+JobObject, data)
	got, err := Run(b.ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.State != StateFailed || !strings.Contains(got.Error, "attempt 1 does not match") {
		t.Fatalf("status %+v", got)
	}
	b.status(t, "job-bad", 2, got)
	if n := b.shutdownCount(); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}

// TestAgentStoppedIsPreempted: cancelling Run's context (the agent gets
// SIGTERM as the instance goes down without a notice seen) stops the
// stand-in trainer, uploads its checkpoint and ends in preempted.
func TestAgentStoppedIsPreempted(t *testing.T) {
	b := setup(t)
	job := b.job("job-stop", 1, 600, []string{"/bin/sh", writeStandIn(t)})
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	done := runAsync(ctx, b.config(t, job))
	waitfor.True(t, time.Minute, "a progress line in S3", func() bool { return hasType(b.events(t, "job-stop", 1), "progress") })
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if r.st.State != StatePreempted || !strings.Contains(r.st.Error, "the agent was stopped") {
		t.Fatalf("status %+v, want preempted by a stop", r.st)
	}
	st := b.status(t, "job-stop", 1, r.st)
	if st.Checkpoint == "" || len(b.list(t, prefix+"/job-stop/"+CheckpointsFolder+st.Checkpoint+"/")) == 0 {
		t.Errorf("checkpoint %q not in S3", st.Checkpoint)
	}
}

// TestArtifactChecksumMismatch: an artifact whose sha256 differs from the
// trainer's report fails the attempt (reason trainer_fault, which the
// worker fails the job with, not retried) and is not counted as uploaded.
func TestArtifactChecksumMismatch(t *testing.T) {
	b := setup(t)
	job := b.job("job-sha", 1, 600, []string{"/bin/sh", writeStandIn(t)})
	cfg := b.config(t, job)
	cfg.Env = append(cfg.Env, "STANDIN_FINISH=1", "STANDIN_BAD_SHA=1")
	got, err := Run(b.ctx, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.State != StateFailed || got.ExitCode != 0 || !strings.Contains(got.Error, "trainer reported sha256") || got.Reason != jobtype.ReasonTrainerFault {
		t.Fatalf("status %+v, want failed on the checksum, reason trainer_fault", got)
	}
	b.status(t, "job-sha", 1, got)
	if keys := b.list(t, prefix+"/job-sha/1/"+ArtifactsFolder); len(keys) != 0 {
		t.Errorf("artifacts uploaded despite the mismatch: %v", keys)
	}
}

// envStandIn is a /bin/sh STAND-IN trainer that prints its environment,
// one variable a line, writes an artifact and succeeds.
const envStandIn = `#!/bin/sh
env | sed 's/^/env: /'
echo adapter > "$LATHE_OUTPUT_DIR/adapter.txt"
echo '{"event":"done","metrics":{}}'
`

// TestTrainerEnvironmentIsScrubbed: the instance's trainer gets the same
// environment as a local worker's: the base variables, the contract's
// LATHE_*, and the job's trainer_pass_env (the job's trainer's pass_env in
// the daemon config) from the agent's own environment; never the agent's
// API tokens or AWS credentials. A trainer_pass_env naming a token is
// refused before anything runs, naming the field and the value.
func TestTrainerEnvironmentIsScrubbed(t *testing.T) {
	t.Setenv("LATHE_TOKEN", "tok-secret-agent")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-agent")
	t.Setenv("AWS_SESSION_TOKEN", "aws-session-agent")
	t.Setenv("HF_TOKEN", "hf-passed-agent")
	b := setup(t)
	p := filepath.Join(t.TempDir(), "env-trainer.sh")
	if err := os.WriteFile(p, []byte(envStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	job := b.job("job-env", 1, 600, []string{"/bin/sh", p})
	job.TrainerPassEnv = []string{"HF_TOKEN"}
	got, err := Run(b.ctx, b.config(t, job))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.State != StateSucceeded {
		t.Fatalf("status %+v, want succeeded", got)
	}
	var logs strings.Builder
	for _, e := range b.events(t, "job-env", 1) {
		logs.Write(e.Data)
		logs.WriteByte('\n')
	}
	for _, w := range []string{"env: PATH=", "env: LATHE_JOB_ID=job-env", "env: HF_TOKEN=hf-passed-agent"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("the trainer's environment lacks %q:\n%s", w, logs.String())
		}
	}
	for _, n := range []string{"tok-secret", "aws-secret", "aws-session", "LATHE_TOKEN", "AWS_"} {
		if strings.Contains(logs.String(), n) {
			t.Errorf("the trainer's environment holds %q:\n%s", n, logs.String())
		}
	}

	bad := b.job("job-env-bad", 1, 600, []string{"/bin/sh", p})
	bad.TrainerPassEnv = []string{"HF_TOKEN", "LATHE_TOKEN"}
	got, err = Run(b.ctx, b.config(t, bad))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got.State != StateFailed || !strings.Contains(got.Error, `trainer_pass_env[1] = "LATHE_TOKEN"`) {
		t.Fatalf("status %+v, want failed naming trainer_pass_env[1] = \"LATHE_TOKEN\"", got)
	}
	if keys := b.list(t, prefix+"/job-env-bad/1/"+EventsFolder); len(keys) != 0 {
		for _, e := range b.events(t, "job-env-bad", 1) {
			if strings.Contains(string(e.Data), "env: ") {
				t.Fatalf("the trainer ran: %s", e.Data)
			}
		}
	}
}

// TestShutdownCommandEnvironment: the power-off command the agent runs
// (shutdown -h now) gets a minimal environment, not the agent's (its AWS
// credentials, API tokens). It is checked on the command as built and on a
// real child started by the same constructor (/usr/bin/env in shutdown's
// place: the test must not power off its machine).
func TestShutdownCommandEnvironment(t *testing.T) {
	t.Setenv("LATHE_TOKEN", "tok-secret-shutdown")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-shutdown")
	t.Setenv("LATHE_TEST_CANARY", "canary-secret-shutdown")
	check := func(what string, env []string) {
		t.Helper()
		hasPath := false
		for _, kv := range env {
			if strings.Contains(kv, "secret-shutdown") || strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "LATHE_TOKEN") {
				t.Errorf("%s: the environment holds %q", what, kv)
			}
			hasPath = hasPath || strings.HasPrefix(kv, "PATH=")
		}
		if !hasPath {
			t.Errorf("%s: no PATH in %q", what, env)
		}
	}
	cmd := shutdownCommand(t.Context(), "shutdown", "-h", "now")
	if strings.Join(cmd.Args, " ") != "shutdown -h now" {
		t.Fatalf("args %q", cmd.Args)
	}
	check("shutdown -h now", cmd.Environ())
	out, err := shutdownCommand(t.Context(), "/usr/bin/env").Output()
	if err != nil {
		t.Fatalf("env: %v", err)
	}
	check("a child started by shutdownCommand", strings.Split(strings.TrimSpace(string(out)), "\n"))
}

// TestPauseAtStopAtStepThenResume runs the reference trainer with
// training.stop_at_step 3 of 6 steps (ASHA's pause, set by the AWS worker
// from the trial): status paused at step 3 with the trainer's metrics and
// ckpt-3 in S3, no artifact uploaded, the instance shut down. Attempt 2,
// without the limit (promoted), restores that checkpoint, resumes at step
// 4 and succeeds with the adapter.
func TestPauseAtStopAtStepThenResume(t *testing.T) {
	b := setup(t)
	argv := []string{"/usr/bin/python3", filepath.Join(b.repo, "scripts", "train_lora.py")}
	job := b.job("job-asha", 1, 600, argv)
	job.Spec.Training.StopAtStep = 3
	got, err := Run(b.ctx, b.config(t, job))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := b.status(t, "job-asha", 1, got)
	if st.State != StatePaused || st.PausedAt != 3 || st.ExitCode != 0 || st.Checkpoint != "ckpt-3" || st.Metrics["eval_loss"] <= 0 {
		t.Fatalf("status %+v, want paused at 3 with checkpoint ckpt-3 and the eval_loss", st)
	}
	if arts := b.list(t, prefix+"/job-asha/1/"+ArtifactsFolder); len(arts) != 0 || len(st.Artifacts) != 0 {
		t.Fatalf("a paused attempt uploaded artifacts %v (status %v)", arts, st.Artifacts)
	}
	if !slicesContainSuffix(b.list(t, prefix+"/job-asha/"+CheckpointsFolder+"ckpt-3/"), "/"+completeMarker) {
		t.Fatal("ckpt-3 is not complete in S3")
	}
	if n := b.shutdownCount(); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}

	job2 := b.job("job-asha", 2, 600, argv)
	got2, err := Run(b.ctx, b.config(t, job2))
	if err != nil || got2.State != StateSucceeded || got2.PausedAt != 0 || len(got2.Artifacts) == 0 {
		t.Fatalf("attempt 2: %+v %v, want succeeded with artifacts", got2, err)
	}
	for _, e := range b.events(t, "job-asha", 2) {
		if e.Type == "progress" {
			var p struct{ Step int }
			_ = json.Unmarshal(e.Data, &p)
			if p.Step != 4 {
				t.Fatalf("attempt 2's first progress step %d, want 4 (resumed from ckpt-3)", p.Step)
			}
			break
		}
	}
}
