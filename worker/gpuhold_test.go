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

	"github.com/lathe-ml/lathe/backends/local/nvmlinventory"
	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/worker"
)

// gpuBundle is a worker n1 with 8 simulated GPUs (go-nvml's dgxh100 mock
// server: a fake, as nothing real runs here) and the trainers given.
func gpuBundle(t *testing.T, trainers map[string]string) testBundle {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	dir := t.TempDir()
	argv := map[string][]string{}
	for name, body := range trainers {
		p := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(body, "@D@", dir)), 0o755); err != nil {
			t.Fatal(err)
		}
		argv[name] = []string{"/bin/sh", p}
	}
	b := testBundle{srv: srv, ctx: context.Background(), rdb: rdb, store: jobstore.New(rdb, jobstore.Config{}),
		client: asynq.NewClientFromRedisClient(rdb), dir: dir}
	b.w, _ = b.gpuWorker(t, "n1", argv)
	return b
}

// gpuWorker starts worker node on b's Redis with 8 simulated GPUs and
// returns it and its GPUs.
func (b testBundle) gpuWorker(t *testing.T, node string, argv map[string][]string) (*worker.Worker, nvmlinventory.Source) {
	t.Helper()
	gpus, err := nvmlinventory.Open(context.Background(), "simulated:dgxh100", node, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gpus.Close() })
	w, err := worker.New(b.rdb, b.store, worker.Config{Node: node, Slots: 4, DataDir: filepath.Join(b.dir, node), Trainers: argv, MaxAttempts: 2, GPUs: gpus,
		KillGrace: 2 * time.Second, CancelPoll: 50 * time.Millisecond, AdvertiseAddr: "127.0.0.1",
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w, gpus
}

func (b testBundle) createGPUJob(t *testing.T, trainer string, gpus, nodes int) string {
	t.Helper()
	spec := &jobspec.Spec{Name: "t", BaseModel: "tiny-char", Dataset: "file:///d.jsonl", Trainer: trainer,
		Priority: jobspec.PriorityNormal, MaxRuntime: jobspec.Duration(time.Hour), Resources: jobspec.Resources{GPUs: gpus, Nodes: nodes}}
	j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec, OutputURI: fileuri.FromPath(filepath.Join(b.dir, "out")) + "/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	return j.ID
}

func (b testBundle) enqueue(t *testing.T, id string, attempt int, rank *int, node string) {
	t.Helper()
	payload, _ := json.Marshal(jobtype.TaskPayload{JobID: id, Attempt: attempt, Rank: rank})
	taskID := jobtype.TaskID(id, attempt)
	if rank != nil {
		taskID = jobtype.RankTaskID(id, attempt, *rank)
	}
	if _, err := b.client.Enqueue(asynq.NewTask(jobtype.TaskType, payload), asynq.TaskID(taskID),
		asynq.Queue(jobtype.NodeQueue(node)), asynq.MaxRetry(0), asynq.Timeout(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// TestGPUHeldUntilTrainerExits: an attempt the store ended behind the
// worker's back (as a gang's attempt ends on every node when one rank
// fails) has its GPUs freed in the store at once, while its trainer here
// is still being stopped. A job given that GPU meanwhile must not start
// its trainer beside the old one: it waits until the old trainer is gone.
// The old trainer ignores SIGTERM until the new one has run, so without
// the wait the two meet every time; with it the old one is killed at its
// kill grace, and then the new one runs alone.
func TestGPUHeldUntilTrainerExits(t *testing.T) {
	b := gpuBundle(t, map[string]string{
		"stubborn": "#!/bin/sh\necho $$ > @D@/a.pid\ntrap 'while [ ! -e @D@/b.result ]; do sleep 0.05; done; exit 143' TERM\n" +
			"echo '{\"event\":\"progress\",\"step\":1,\"total_steps\":9,\"loss\":1}'\nwhile :; do sleep 0.05; done\n",
		"probe": "#!/bin/sh\nif kill -0 $(cat @D@/a.pid) 2>/dev/null; then echo overlap > @D@/b.tmp; else echo alone > @D@/b.tmp; fi\nmv @D@/b.tmp @D@/b.result\nprintf x > \"$LATHE_OUTPUT_DIR/adapter_model.safetensors\"\n" +
			"echo '{\"event\":\"artifact\",\"path\":\"adapter_model.safetensors\",\"format\":\"safetensors\",\"bytes\":1}'\n",
	})
	a := b.createGPUJob(t, "stubborn", 1, 0)
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: a, Attempt: 1, Node: "n1", Backend: "local", Capacity: 4, GPUs: []int{0}}); err != nil {
		t.Fatal(err)
	}
	b.enqueue(t, a, 1, nil, "n1")
	b.wait(t, a, func(j *jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })

	// The store ends attempt 1 and frees GPU 0; job B is given GPU 0 at once.
	if err := b.store.Requeue(b.ctx, a, 1, "gang", "another rank failed"); err != nil {
		t.Fatal(err)
	}
	id := b.createGPUJob(t, "probe", 1, 0)
	if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: "n1", Backend: "local", Capacity: 4, GPUs: []int{0}}); err != nil {
		t.Fatalf("GPU 0 not free in the store after the attempt ended: %v", err)
	}
	b.enqueue(t, id, 1, nil, "n1")
	j := b.wait(t, id, terminal)
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("job B: %s (%s)", j.State, j.Error)
	}
	got, err := os.ReadFile(filepath.Join(b.dir, "b.result"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "alone" {
		t.Fatalf("job B's trainer started on GPU 0 while the ended attempt's trainer still ran there (%s)", strings.TrimSpace(string(got)))
	}
}

// TestGangRankPinsItsOwnGPUs: a gang's record carries rank 0's GPUs; each
// rank's trainer must get its own rank's GPUs on its node. Here rank 0 on n1's GPU 2 and rank 1 on n2's GPU 5, and each trainer
// writes the CUDA_VISIBLE_DEVICES it was given.
func TestGangRankPinsItsOwnGPUs(t *testing.T) {
	trainer := "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES\" > @D@/rank$NODE_RANK.gpus\n" +
		"[ \"$NODE_RANK\" = 0 ] || exit 0\nprintf x > \"$LATHE_OUTPUT_DIR/adapter_model.safetensors\"\n" +
		"echo '{\"event\":\"artifact\",\"path\":\"adapter_model.safetensors\",\"format\":\"safetensors\",\"bytes\":1}'\n"
	b := gpuBundle(t, map[string]string{"rank": trainer})
	_, n2GPUs := b.gpuWorker(t, "n2", map[string][]string{"rank": {"/bin/sh", filepath.Join(b.dir, "rank.sh")}})
	id := b.createGPUJob(t, "rank", 1, 2)
	ranks := []jobtype.GangRank{{Node: "n1", GPUs: []int{2}}, {Node: "n2", GPUs: []int{5}}}
	if err := b.store.DispatchGang(b.ctx, id, 1, ranks, ""); err != nil {
		t.Fatal(err)
	}
	for r, node := range []string{"n1", "n2"} {
		b.enqueue(t, id, 1, &r, node)
	}
	j := b.wait(t, id, terminal)
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("gang: %s (%s)", j.State, j.Error)
	}
	inv, err := n2GPUs.Inventory(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range []int{-1, 5} {
		if want < 0 {
			continue // rank 0's GPUs are the record's
		}
		got, err := os.ReadFile(filepath.Join(b.dir, "rank"+string(rune('0'+r))+".gpus"))
		if err != nil {
			t.Fatal(err)
		}
		if g := strings.TrimSpace(string(got)); g != inv.GPUs[want].UUID {
			t.Errorf("rank %d's trainer got CUDA_VISIBLE_DEVICES=%s, want GPU %d's %s", r, g, want, inv.GPUs[want].UUID)
		}
	}
	waitfor.True(t, 10*time.Second, "GPUs 2 and 5 free again", func() bool {
		ns, err := b.store.Nodes(b.ctx)
		if err != nil {
			return false
		}
		for _, n := range ns {
			if len(n.Reservations) > 0 {
				return false
			}
		}
		return true
	})
}
