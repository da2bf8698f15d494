// Package seedtest fills a real store with a cluster's worth of jobs for the
// benchmarks (BenchmarkMetricsScrape in scheduler, BenchmarkDashboard100k in
// cmd/lathed): heartbeating nodes of GPUs, finished jobs with the records
// and events a run leaves, running jobs holding every GPU, and queued jobs
// waiting behind them. Every write goes through the jobstore's own calls,
// in the order the scheduler and the worker make them (admission with a
// route and a budget reservation, dispatch, claim, the trainer's events,
// finish with metrics and artifacts, settlement), so the records are the
// real ones, not a copy of their format.
package seedtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Cluster is what Seed writes.
type Cluster struct {
	Nodes, GPUsPerNode int // heartbeating local nodes, each with this many GPUs (and slots)
	// Finished jobs, ended one after another on the nodes' GPUs: 90%
	// succeeded (metrics, three artifacts), 7% failed, 3% cancelled; each
	// settled with a cost.
	Finished int
	// Running jobs, one GPU each, dispatched round-robin over the nodes'
	// GPUs (at most Nodes × GPUsPerNode), leased for an hour.
	Running int
	// Queued jobs (urgent, normal and batch; 1, 2, 4 or 8 GPUs), routed to
	// the local backend and holding a budget reservation, as admitted.
	Queued int
	// Events is the trainer events written for each finished job (started,
	// progress, logs, evals, done), on top of the state events the store
	// writes itself (created, dispatched, running, the end); running jobs
	// get half of them. The operations guide sizes Redis for ~25 in all.
	Events int
	// HeartbeatTTL is the nodes' heartbeat lifetime (default an hour, so a
	// benchmark needs no heartbeat loop).
	HeartbeatTTL time.Duration
}

// Seeded are the ids Seed wrote.
type Seeded struct {
	Nodes                     []string
	Finished, Running, Queued []string
}

// Teams are the teams the jobs are spread over (a budget scope each).
var Teams = []string{"ml-research", "nlp", "vision"}

// Seed writes c into store. Finished jobs are written by one goroutine per
// node (each reuses its node's GPUs one job after another), so seeding
// 100,000 jobs takes tens of seconds, not minutes.
func Seed(ctx context.Context, store *jobstore.Store, c Cluster) (Seeded, error) {
	var out Seeded
	if c.Running > c.Nodes*c.GPUsPerNode {
		return out, fmt.Errorf("seedtest: %d running jobs do not fit %d nodes × %d GPUs", c.Running, c.Nodes, c.GPUsPerNode)
	}
	if c.HeartbeatTTL == 0 {
		c.HeartbeatTTL = time.Hour
	}
	var err error
	if out.Nodes, err = heartbeatNodes(ctx, store, c); err != nil {
		return out, err
	}
	if out.Finished, err = create(ctx, store, c.Finished, false); err != nil {
		return out, err
	}
	if err := byNode(c.Nodes, out.Finished, func(id string, i int) error {
		return finished(ctx, store, c, id, i)
	}); err != nil {
		return out, err
	}
	if out.Running, err = create(ctx, store, c.Running, false); err != nil {
		return out, err
	}
	if err := byNode(c.Nodes, out.Running, func(id string, i int) error {
		return running(ctx, store, c, id, i)
	}); err != nil {
		return out, err
	}
	out.Queued, err = create(ctx, store, c.Queued, true)
	return out, err
}

// heartbeatNodes writes the first heartbeat of each of c's nodes (n00,
// n01, …), with busy H100s, and returns the names of those written.
func heartbeatNodes(ctx context.Context, store *jobstore.Store, c Cluster) ([]string, error) {
	var names []string
	for n := 0; n < c.Nodes; n++ {
		name := fmt.Sprintf("n%02d", n)
		gpus := make([]jobtype.GPU, c.GPUsPerNode)
		for i := range gpus {
			gpus[i] = jobtype.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d-%d", n, i), Name: "NVIDIA H100 80GB HBM3",
				Healthy: true, MemoryTotalMB: 81559, MemoryUsedMB: 61000, UtilizationPct: 97, TemperatureC: 64, PowerW: 610}
		}
		if err := store.Heartbeat(ctx, jobstore.Node{Name: name, Incarnation: "i", Backend: "local", Slots: c.GPUsPerNode, GPUs: gpus},
			jobstore.HeartbeatOptions{TTL: c.HeartbeatTTL, First: true}); err != nil {
			return names, err
		}
		names = append(names, name)
	}
	return names, nil
}

// byNode runs step for each of ids, ids[i] on node i mod nodes' goroutine
// (eachNode), one after another there; it returns the first error.
func byNode(nodes int, ids []string, step func(id string, i int) error) error {
	return eachNode(nodes, func(n int) error {
		for i := n; i < len(ids); i += nodes {
			if err := step(ids[i], i); err != nil {
				return err
			}
		}
		return nil
	})
}

// eachNode runs f for every node index at once and returns the first error.
func eachNode(nodes int, f func(n int) error) error {
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for n := 0; n < nodes; n++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[n] = f(n) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

var (
	prios = []jobspec.Priority{jobspec.PriorityNormal, jobspec.PriorityBatch, jobspec.PriorityNormal, jobspec.PriorityUrgent}
	sizes = []int{1, 1, 2, 1, 4, 1, 2, 8}
)

// create admits n jobs as the API does: CreateMany in batches of 500, each
// job routed to the local backend, then its budget reserved. Queued jobs
// (sized) take 1–8 GPUs; the others one, as they are dispatched so.
func create(ctx context.Context, store *jobstore.Store, n int, sized bool) ([]string, error) {
	ids := make([]string, 0, n)
	month := jobstore.Month(time.Now())
	for len(ids) < n {
		batch := make([]jobstore.NewJob, min(500, n-len(ids)))
		for k := range batch {
			i := len(ids) + k
			gpus := 1
			if sized {
				gpus = sizes[i%len(sizes)]
			}
			spec := &jobspec.Spec{Name: fmt.Sprintf("lora-%s-%d", Teams[i%len(Teams)], i%97), BaseModel: "tiny-char",
				Dataset: "file:///data/train.jsonl", Trainer: "reference", Priority: prios[i%len(prios)],
				LoRA: jobspec.LoRA{Rank: 8, Alpha: 16}, Training: jobspec.Training{Epochs: 1, LearningRate: 1e-4, BatchSize: 8},
				Resources: jobspec.Resources{GPUs: gpus}, MaxRuntime: jobspec.Duration(time.Duration(1+i%12) * time.Hour)}
			batch[k] = jobstore.NewJob{Spec: spec, OutputURI: "file:///data/out/{id}", Submitter: "bench", Team: Teams[i%len(Teams)],
				Route: &jobtype.RouteInfo{Backend: "local", Site: "local", Kind: "local", Path: "submit", Attempt: 1,
					EstRuntimeS: 3600, EstCostUSD: 2.5 * float64(gpus), DecidedAt: time.Now()}}
		}
		got, err := store.CreateMany(ctx, batch)
		if err != nil {
			return nil, err
		}
		for k, c := range got {
			scopes := []jobstore.BudgetScope{{Scope: "backend:local"}, {Scope: "team:" + batch[k].Team}}
			if err := store.Reserve(ctx, c.Job.ID, month, batch[k].Route.EstCostUSD, scopes); err != nil {
				return nil, err
			}
			ids = append(ids, c.Job.ID)
		}
	}
	return ids, nil
}

// start dispatches job id (the i-th of its kind) to its node and GPU,
// claims it for the node's worker and writes the trainer's first events.
func start(ctx context.Context, store *jobstore.Store, c Cluster, id string, i int, events []jobstore.EventIn) error {
	node, gpu := fmt.Sprintf("n%02d", i%c.Nodes), (i/c.Nodes)%c.GPUsPerNode
	if err := store.Dispatch(ctx, jobstore.DispatchParams{JobID: id, Attempt: 1, Node: node, Backend: "local",
		Capacity: c.GPUsPerNode, GPUs: []int{gpu}}); err != nil {
		return fmt.Errorf("seedtest: dispatch %s to %s GPU %d: %w", id, node, gpu, err)
	}
	if out, err := store.Claim(ctx, jobstore.ClaimParams{ID: id, Attempt: 1, Node: node, Incarnation: "i", Lease: time.Hour}); out != jobstore.Claimed {
		return fmt.Errorf("seedtest: claim %s: %v %v", id, out, err)
	}
	if err := store.RecordGPUs(ctx, id, 1, fmt.Sprint(gpu), false); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	_, err := store.Append(ctx, id, 1, events)
	return err
}

// running starts job id and leaves it running.
func running(ctx context.Context, store *jobstore.Store, c Cluster, id string, i int) error {
	return start(ctx, store, c, id, i, trainerEvents(c.Events/2, i, false))
}

// finished runs job id to its end: 90% succeeded, 7% failed, 3% cancelled,
// then settles its cost as the leader's settler does.
func finished(ctx context.Context, store *jobstore.Store, c Cluster, id string, i int) error {
	end := jobstore.Ending{State: jobtype.StateSucceeded}
	switch r := i % 100; {
	case r < 7:
		end = jobstore.Ending{State: jobtype.StateFailed, Reason: jobtype.ReasonExit, Error: "trainer exited 1: CUDA error: an illegal memory access was encountered"}
	case r < 10:
		end = jobstore.Ending{State: jobtype.StateCancelled, Reason: jobtype.ReasonCancelled}
	}
	if err := start(ctx, store, c, id, i, trainerEvents(c.Events, i, end.State == jobtype.StateSucceeded)); err != nil {
		return err
	}
	if end.State == jobtype.StateSucceeded {
		end.Metrics = map[string]float64{"loss": 0.41 + float64(i%50)/1000, "eval_loss": 0.47, "train_runtime_s": 3412}
		end.Artifacts = []jobtype.Artifact{
			{Path: "adapter_model.safetensors", Format: "safetensors", Bytes: 13_631_488, SHA256: fmt.Sprintf("%064x", i)},
			{Path: "adapter_config.json", Format: "json", Bytes: 712, SHA256: fmt.Sprintf("%064x", i+1)},
			{Path: "metrics.json", Format: "json", Bytes: 2_048, SHA256: fmt.Sprintf("%064x", i+2)},
		}
	}
	if err := store.Finish(ctx, id, 1, end); err != nil {
		return err
	}
	return store.Settle(ctx, id, 2.5*float64(1+i%4)/2)
}

// trainerEvents is n events of a reference trainer's run: started, then
// progress lines with a log line every third, an eval every tenth, and a
// done line when the run succeeded.
func trainerEvents(n, seed int, done bool) []jobstore.EventIn {
	if n == 0 {
		return nil
	}
	evs := []jobstore.EventIn{{Type: "started", Data: []byte(fmt.Sprintf(`{"pid":%d}`, 1000+seed%30000))}}
	for k := 1; len(evs) < n; k++ {
		loss := 2.0 / float64(k+1)
		p := jobtype.Progress{Step: k * 10, TotalSteps: n * 10, Epoch: float64(k) / float64(n), Loss: loss, LearningRate: 1e-4, SamplesPerS: 412.5}
		evs = append(evs, jobstore.EventIn{Type: jobtype.EventProgress,
			Data: []byte(fmt.Sprintf(`{"event":"progress","step":%d,"total_steps":%d,"loss":%.4f}`, p.Step, p.TotalSteps, loss))}.WithProgress(p))
		if k%3 == 0 && len(evs) < n {
			evs = append(evs, jobstore.EventIn{Type: jobtype.EventLog,
				Data: []byte(fmt.Sprintf(`{"stream":"stderr","line":"step %d: loss %.4f, 412.5 samples/s, 61.0 GiB"}`, p.Step, loss))})
		}
		if k%10 == 0 && len(evs) < n {
			evs = append(evs, jobstore.EventIn{Type: jobtype.EventEval,
				Data: []byte(fmt.Sprintf(`{"event":"eval","step":%d,"eval_loss":%.4f}`, p.Step, loss*1.1))})
		}
	}
	if done {
		evs[len(evs)-1] = jobstore.EventIn{Type: jobtype.EventDone, Data: []byte(`{"event":"done"}`)}
	}
	return evs
}

// Workers stands in for the nodes' workers on the asynq side: each running
// job's attempt task is enqueued on its node's queue as the placer does
// (so all the nodes' queues exist) and taken by an asynq server that holds
// it, as a worker holds its task while the trainer runs. Stop it with the
// returned function.
func Workers(ctx context.Context, rdb redis.UniversalClient, s Seeded) (stop func(), err error) {
	client := asynq.NewClientFromRedisClient(rdb)
	queues := map[string]int{}
	for i, id := range s.Running {
		node := s.Nodes[i%len(s.Nodes)]
		queues[jobtype.NodeQueue(node)] = 1
		payload, _ := json.Marshal(jobtype.TaskPayload{JobID: id, Attempt: 1})
		if _, err := client.EnqueueContext(ctx, asynq.NewTask(jobtype.TaskType, payload), asynq.TaskID(jobtype.TaskID(id, 1)),
			asynq.Queue(jobtype.NodeQueue(node)), asynq.MaxRetry(0), asynq.Timeout(24*time.Hour)); err != nil {
			return nil, err
		}
	}
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: max(1, len(s.Running)), Queues: queues,
		LogLevel: asynq.FatalLevel, ShutdownTimeout: time.Second})
	held := make(chan struct{})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		select {
		case <-ctx.Done():
		case <-held:
		}
		return nil
	})); err != nil {
		return nil, err
	}
	return func() { close(held); srv.Shutdown() }, nil
}
