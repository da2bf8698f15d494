package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/worker"
)

// Worker tests run a real redis-server and real child processes. The
// trainers here are small /bin/sh scripts that speak the trainer contract
// (stand-ins for the reference trainer, which scripts/ and the end-to-end
// tests in cmd/lathed run for real); they let each exit path be forced.

type testBundle struct {
	srv    *redistest.Server
	ctx    context.Context
	rdb    *redis.Client
	store  *jobstore.Store
	client *asynq.Client
	dir    string
	w      *worker.Worker
}

const okTrainer = `#!/bin/sh
echo '{"event":"progress","step":1,"total_steps":2,"loss":2.0}'
echo 'a plain log line'
echo 'to stderr' >&2
echo '{"event":"eval","step":2,"eval_loss":1.5}'
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors","bytes":7}'
echo '{"event":"progress","step":2,"total_steps":2,"loss":1.0}'
echo '{"event":"done","metrics":{"train_loss":1.0,"eval_loss":1.5}}'
`

func setup(t *testing.T, trainers map[string]string) testBundle {
	t.Helper()
	srv := redistest.StartWith(t, redistest.Options{AOF: true}) // TestSelfFencing restarts it
	rdb := srv.Client()
	dir := t.TempDir()
	argv := map[string][]string{}
	for name, body := range trainers {
		p := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		argv[name] = []string{"/bin/sh", p}
	}
	store := jobstore.New(rdb, jobstore.Config{})
	w, err := worker.New(rdb, store, worker.Config{Node: "n1", Slots: 2, DataDir: dir, Trainers: argv, MaxAttempts: 2,
		KillGrace: 2 * time.Second, CancelPoll: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	c := asynq.NewClientFromRedisClient(rdb)
	return testBundle{srv: srv, ctx: context.Background(), rdb: rdb, store: store, client: c, dir: dir, w: w}
}

// submit creates a job and dispatches it to n1 the way the scheduler does.
func (b testBundle) submit(t *testing.T, trainer string, maxRuntime time.Duration) string {
	t.Helper()
	return b.submitNode(t, trainer, maxRuntime, "n1")
}

// submitTo is submit to another node, with an hour's max_runtime.
func (b testBundle) submitTo(t *testing.T, trainer, node string) string {
	t.Helper()
	return b.submitNode(t, trainer, time.Hour, node)
}

func (b testBundle) submitNode(t *testing.T, trainer string, maxRuntime time.Duration, node string) string {
	t.Helper()
	spec := &jobspec.Spec{Name: "t", BaseModel: "tiny-char", Dataset: "file:///d.jsonl", Trainer: trainer,
		Priority: jobspec.PriorityNormal, MaxRuntime: jobspec.Duration(maxRuntime)}
	j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec, OutputURI: fileuri.FromPath(filepath.Join(b.dir, "out")) + "/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	b.dispatchTo(t, j.ID, 1, node)
	return j.ID
}

func (b testBundle) dispatch(t *testing.T, id string, attempt int) {
	t.Helper()
	b.dispatchTo(t, id, attempt, "n1")
}

func (b testBundle) dispatchTo(t *testing.T, id string, attempt int, node string) {
	t.Helper()
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: id, Attempt: attempt, Node: node, Backend: "local", Capacity: 2}); err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(jobtype.TaskPayload{JobID: id, Attempt: attempt})
	if _, err := b.client.Enqueue(asynq.NewTask(jobtype.TaskType, payload), asynq.TaskID(jobtype.TaskID(id, attempt)),
		asynq.Queue(jobtype.NodeQueue(node)), asynq.MaxRetry(0), asynq.Timeout(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// startedPID is the trainer pid of a job's "started" event.
func startedPID(t *testing.T, b testBundle, id string) int {
	t.Helper()
	evs, _ := b.store.Events(b.ctx, id, "", 1000)
	for _, e := range evs {
		if e.Type == "started" {
			var d struct{ PID int }
			_ = json.Unmarshal(e.Data, &d)
			return d.PID
		}
	}
	t.Fatalf("no started event for %s", id)
	return 0
}

func redisOf(t *testing.T, b testBundle) *redistest.Server { return b.srv }

func (b testBundle) wait(t *testing.T, id string, cond func(*jobtype.Job) bool) *jobtype.Job {
	t.Helper()
	get := func() *jobtype.Job {
		j, err := b.store.Get(b.ctx, id)
		if err != nil {
			return nil
		}
		return j
	}
	return waitfor.Value(t, 30*time.Second, "job "+id+": condition", get,
		func(j *jobtype.Job) bool { return j != nil && cond(j) })
}

func terminal(j *jobtype.Job) bool { return j.State.Terminal() }

func TestSucceededWithArtifactsAndEvents(t *testing.T) {
	b := setup(t, map[string]string{"ok": okTrainer})
	id := b.submit(t, "ok", time.Hour)
	j := b.wait(t, id, terminal)
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("state %s (%s)", j.State, j.Error)
	}
	if j.Progress.Step != 2 || j.Metrics["eval_loss"] != 1.5 || j.Metrics["train_loss"] != 1.0 {
		t.Fatalf("progress %+v metrics %v", j.Progress, j.Metrics)
	}
	if len(j.Artifacts) != 1 || j.Artifacts[0].Bytes != 7 || len(j.Artifacts[0].SHA256) != 64 {
		t.Fatalf("artifacts %+v", j.Artifacts)
	}
	p, _ := fileuri.Path(j.OutputURI)
	if b, err := os.ReadFile(filepath.Join(p, "adapter_model.safetensors")); err != nil || string(b) != "adapter" {
		t.Fatalf("published artifact: %q %v", b, err)
	}
	evs, _ := b.store.Events(b.ctx, id, "", 1000)
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Type]++
	}
	if kinds["log"] != 2 || kinds["progress"] != 2 || kinds["eval"] != 1 || kinds["artifact"] != 1 || kinds["done"] != 1 || kinds["started"] != 1 {
		t.Fatalf("event kinds %v", kinds)
	}
	// The final state event comes after every trainer event.
	if last := evs[len(evs)-1]; last.Type != "state" {
		t.Fatalf("last event %s, want the state change", last.Type)
	}
}

func TestPermanentFailureDoesNotRetry(t *testing.T) {
	b := setup(t, map[string]string{"bad": "#!/bin/sh\necho 'bad line 3 in train.jsonl' >&2\nexit 3\n"})
	id := b.submit(t, "bad", time.Hour)
	j := b.wait(t, id, terminal)
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || j.Attempt != 1 {
		t.Fatalf("got %s/%s attempt %d", j.State, j.Reason, j.Attempt)
	}
	if want := "bad line 3"; !strings.Contains(j.Error, want) {
		t.Fatalf("error %q lacks the trainer's message", j.Error)
	}
}

func TestRetryableFailureMakesANewAttempt(t *testing.T) {
	b := setup(t, map[string]string{"flaky": "#!/bin/sh\nexit 1\n"})
	id := b.submit(t, "flaky", time.Hour)
	j := b.wait(t, id, func(j *jobtype.Job) bool { return j.State == jobtype.StateQueued && j.Attempt == 2 })
	if ids, _ := b.store.Pending(b.ctx, 10); len(ids) != 1 || ids[0] != id {
		t.Fatalf("retry not in the pending set: %v", ids)
	}
	b.dispatch(t, id, 2)
	j = b.wait(t, id, terminal)
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonExit || j.Attempt != 2 {
		t.Fatalf("got %s/%s attempt %d (max 2)", j.State, j.Reason, j.Attempt)
	}
}

func TestMaxRuntimeFailsWithTimeout(t *testing.T) {
	b := setup(t, map[string]string{"slow": "#!/bin/sh\necho started\nexec sleep 60\n"})
	id := b.submit(t, "slow", 300*time.Millisecond)
	j := b.wait(t, id, terminal)
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonTimeout || j.Attempt != 1 {
		t.Fatalf("got %s/%s attempt %d", j.State, j.Reason, j.Attempt)
	}
}

func TestCancelRunningThroughTheStoreFlag(t *testing.T) {
	b := setup(t, map[string]string{"slow": "#!/bin/sh\ntrap 'echo {\\\"event\\\":\\\"checkpoint\\\",\\\"step\\\":1,\\\"path\\\":\\\"ckpt-1\\\"}; exit 143' TERM\necho '{\"event\":\"progress\",\"step\":1,\"total_steps\":9,\"loss\":1}'\nwhile :; do sleep 0.05; done\n"})
	id := b.submit(t, "slow", time.Hour)
	b.wait(t, id, func(j *jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	// Only the durable flag: no asynq CancelProcessing here.
	if _, err := b.store.Cancel(b.ctx, id); err != nil {
		t.Fatal(err)
	}
	j := b.wait(t, id, terminal)
	if j.State != jobtype.StateCancelled || j.Attempt != 1 {
		t.Fatalf("got %s attempt %d", j.State, j.Attempt)
	}
	evs, _ := b.store.Events(b.ctx, id, "", 1000)
	found := false
	for _, e := range evs {
		found = found || e.Type == "checkpoint"
	}
	if !found {
		t.Fatal("the trainer's checkpoint on SIGTERM was not recorded")
	}
}

func TestStaleTaskDoesNothing(t *testing.T) {
	b := setup(t, map[string]string{"ok": okTrainer})
	spec := &jobspec.Spec{Name: "t", Trainer: "ok", Priority: jobspec.PriorityNormal}
	j, _, _ := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec, OutputURI: fileuri.FromPath(b.dir) + "/{id}"})
	// A task put on the queue by hand for a job that was never dispatched.
	payload, _ := json.Marshal(jobtype.TaskPayload{JobID: j.ID, Attempt: 1})
	info, err := b.client.Enqueue(asynq.NewTask(jobtype.TaskType, payload), asynq.Queue(jobtype.NodeQueue("n1")), asynq.MaxRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	waitfor.True(t, 20*time.Second, "the stale task handled", func() bool {
		ti, err := insp.GetTaskInfo(info.Queue, info.ID)
		return err != nil || ti.State == asynq.TaskStateCompleted // handled and removed
	})
	got, _ := b.store.Get(b.ctx, j.ID)
	if got.State != jobtype.StateQueued || got.Attempt != 1 {
		t.Fatalf("a stale task changed the job: %s attempt %d", got.State, got.Attempt)
	}
}

func TestSecondWorkerWithTheSameNameIsRefused(t *testing.T) {
	b := setup(t, nil)
	w2, err := worker.New(b.rdb, b.store, worker.Config{Node: "n1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Start(b.ctx); err == nil {
		_ = w2.Stop(b.ctx)
		t.Fatal("a second live worker named n1 was accepted")
	}
}

// TestAsynqCancelWithoutStoreCancelRequeues: asynq cancelling the handler
// on its own (CancelProcessing by hand, as from asynqmon) is not a cancel:
// only the store's cancel_requested is. The attempt is requeued instead.
func TestAsynqCancelWithoutStoreCancelRequeues(t *testing.T) {
	b := setup(t, map[string]string{"slow": "#!/bin/sh\necho '{\"event\":\"progress\",\"step\":1,\"total_steps\":9,\"loss\":1}'\nexec sleep 60\n"})
	id := b.submit(t, "slow", time.Hour)
	b.wait(t, id, func(j *jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	insp := asynq.NewInspectorFromRedisClient(b.rdb)
	if err := insp.CancelProcessing(jobtype.TaskID(id, 1)); err != nil {
		t.Fatal(err)
	}
	j := b.wait(t, id, func(j *jobtype.Job) bool { return j.State != jobtype.StateRunning })
	if j.State != jobtype.StateQueued || j.Attempt != 2 {
		t.Fatalf("after asynq's own cancel: %s attempt %d, want queued attempt 2", j.State, j.Attempt)
	}
}

// TestDatasetOutsideAllowedRootsFails: a dataset reached through a link
// that leaves the allowed roots fails the job permanently; the trainer
// never starts.
func TestDatasetOutsideAllowedRootsFails(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.jsonl"), []byte("{}\n"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "link"))
	p := filepath.Join(dir, "ok.sh")
	os.WriteFile(p, []byte(okTrainer), 0o755)
	roots, _ := pathpolicy.New([]string{dir})
	store := jobstore.New(rdb, jobstore.Config{})
	w, err := worker.New(rdb, store, worker.Config{Node: "n1", DataDir: dir, Trainers: map[string][]string{"ok": {"/bin/sh", p}},
		AllowedRoots: roots, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	b := testBundle{ctx: context.Background(), rdb: rdb, store: store, client: asynq.NewClientFromRedisClient(rdb), dir: dir, w: w}
	spec := &jobspec.Spec{Name: "t", BaseModel: "tiny-char", Dataset: fileuri.FromPath(filepath.Join(dir, "link", "secret.jsonl")),
		Trainer: "ok", Priority: jobspec.PriorityNormal, MaxRuntime: jobspec.Duration(time.Hour)}
	j, _, _ := store.Create(b.ctx, jobstore.NewJob{Spec: spec, OutputURI: fileuri.FromPath(filepath.Join(dir, "out")) + "/{id}"})
	b.dispatch(t, j.ID, 1)
	got := b.wait(t, j.ID, terminal)
	if got.State != jobtype.StateFailed || got.Reason != jobtype.ReasonPermanent || !strings.Contains(got.Error, "allowed root") {
		t.Fatalf("got %s/%s: %s", got.State, got.Reason, got.Error)
	}
	evs, _ := store.Events(b.ctx, j.ID, "", 100)
	for _, e := range evs {
		if e.Type == "started" {
			t.Fatal("the trainer started for a dataset outside the allowed roots")
		}
	}
}
