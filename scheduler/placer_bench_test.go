package scheduler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// BenchmarkPlaceRound10kOn64x8 times one whole placement round of the
// leader against a real redis-server: 10,000 pending jobs of mixed sizes
// (1, 2, 4 and 8 GPUs, a few CPU-only; urgent, normal and batch) onto 64
// nodes of 8 GPUs, all free: reading the snapshot, the pure plan, every
// dispatch script (reservation) and asynq enqueue of the jobs that fit, and
// the places in line of the rest. Node heartbeats are written directly (no
// worker processes), the jobs with CreateMany; neither is timed.
func BenchmarkPlaceRound10kOn64x8(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	trips := &redistest.Trips{}
	rdb.AddHook(trips)
	store := jobstore.New(rdb, jobstore.Config{})
	s := New(rdb, store, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Defaults: jobspec.Defaults{OutputURI: "file:///tmp/lathe-bench"}})
	p := newPlacer(placerParams{Store: store, Log: s.log, Router: s.router,
		Queue: &enqueuer{client: s.client, log: s.log, defaultMaxRuntime: s.cfg.Defaults.MaxRuntime, killGrace: s.cfg.KillGrace},
		Fence: s.lease.fence, Fenced: func() {}, PlaceScan: s.cfg.PlaceScan, DefaultMaxRuntime: s.cfg.Defaults.MaxRuntime,
		ObserveRound: func(float64) {}})
	ctx := context.Background()
	placed := 0
	var cmds, pipes int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		for n := range 64 {
			gpus := make([]jobtype.GPU, 8)
			for g := range gpus {
				gpus[g] = jobtype.GPU{Index: g, UUID: fmt.Sprintf("GPU-%d-%d", n, g), Name: "NVIDIA H100 80GB HBM3",
					MemoryTotalMB: 81920, Healthy: true}
			}
			if err := store.Heartbeat(ctx, jobstore.Node{Name: fmt.Sprintf("node-%02d", n), Incarnation: "i", Backend: "local",
				Slots: 4, GPUs: gpus}, jobstore.HeartbeatOptions{TTL: time.Hour, First: true}); err != nil {
				b.Fatal(err)
			}
		}
		prios := []jobspec.Priority{jobspec.PriorityBatch, jobspec.PriorityNormal, jobspec.PriorityNormal, jobspec.PriorityUrgent}
		sizes := []int{1, 2, 4, 8, 1, 2, 0, 4}
		for batch := 0; batch < 10; batch++ {
			njs := make([]jobstore.NewJob, 1000)
			for k := range njs {
				n := batch*1000 + k
				spec := &jobspec.Spec{Name: "bench", BaseModel: "tiny-char", Dataset: "file:///d.jsonl", Trainer: "reference",
					Priority: prios[n%len(prios)], LoRA: jobspec.LoRA{Rank: 8, Alpha: 16}, Training: jobspec.Training{Epochs: 1, LearningRate: 1e-4, BatchSize: 8},
					Resources: jobspec.Resources{GPUs: sizes[n%len(sizes)]}, MaxRuntime: jobspec.Duration(time.Duration(1+n%12) * time.Hour)}
				njs[k] = jobstore.NewJob{Spec: spec, OutputURI: "file:///tmp/lathe-bench/{id}"}
			}
			if _, err := store.CreateMany(ctx, njs); err != nil {
				b.Fatal(err)
			}
		}
		trips.Reset()
		b.StartTimer()
		p.round(ctx)
		b.StopTimer()
		cmds, pipes = trips.Cmds(), trips.Pipelines()
		ids, err := store.IDsInState(ctx, jobtype.StateDispatched, 20000)
		if err != nil {
			b.Fatal(err)
		}
		placed = len(ids)
		if placed == 0 {
			b.Fatal("the round placed nothing")
		}
		b.StartTimer()
	}
	b.Logf("commands sent alone in the last round, by name: %v", trips.Alone())
	b.ReportMetric(float64(placed), "placed/round")
	b.ReportMetric(float64(cmds+pipes), "trips/round")
	b.ReportMetric(float64(cmds), "cmds/round")
	b.ReportMetric(float64(pipes), "pipelines/round")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/round")
}

// BenchmarkPlaceRoundQueued1800 times the placement round a `lathe
// submit` causes once the pool is full (docs/benchmarks.md, "`lathe
// submit` against Slurm's `sbatch`"): one local node of one CPU slot,
// held by a running job, 1,800 CPU-only jobs queued behind it, each routed
// already; before each round one more job is stored (not timed), so
// every round reads the queue, decides, places nothing and writes every
// job's place in line. "decode-every" decodes each record each round (as
// GetMany; the placer before its cache), "cached" decodes only the
// records that changed since the last round (jobstore.GetManyCached, the
// placer's read now).
func BenchmarkPlaceRoundQueued1800(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	s := New(rdb, store, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Defaults: jobspec.Defaults{OutputURI: "file:///tmp/lathe-bench"}})
	ctx := context.Background()
	newJob := func() jobstore.NewJob {
		spec := &jobspec.Spec{Name: "bench", BaseModel: "tiny-char", Dataset: "file:///d.jsonl", Trainer: "sleeper",
			LoRA: jobspec.LoRA{Rank: 8, Alpha: 16}, Training: jobspec.Training{Epochs: 1, LearningRate: 1e-4, BatchSize: 8},
			MaxRuntime: jobspec.Duration(10 * time.Minute)}
		return jobstore.NewJob{Spec: spec, OutputURI: "file:///tmp/lathe-bench/{id}"}
	}
	for _, bc := range []struct {
		name   string
		cached bool
	}{{"decode-every", false}, {"cached", true}} {
		b.Run(bc.name, func(b *testing.B) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			if err := store.Heartbeat(ctx, jobstore.Node{Name: "node-0", Incarnation: "i", Backend: "local", Slots: 1},
				jobstore.HeartbeatOptions{TTL: time.Hour, First: true}); err != nil {
				b.Fatal(err)
			}
			for _, n := range []int{1000, 801} {
				njs := make([]jobstore.NewJob, n)
				for k := range njs {
					njs[k] = newJob()
				}
				if _, err := store.CreateMany(ctx, njs); err != nil {
					b.Fatal(err)
				}
			}
			p := newPlacer(placerParams{Store: store, Log: s.log, Router: s.router,
				Queue: &enqueuer{client: s.client, log: s.log, defaultMaxRuntime: s.cfg.Defaults.MaxRuntime, killGrace: s.cfg.KillGrace},
				Fence: s.lease.fence, Fenced: func() {}, PlaceScan: s.cfg.PlaceScan, DefaultMaxRuntime: s.cfg.Defaults.MaxRuntime,
				ObserveRound: func(float64) {}})
			if !bc.cached {
				p.jobs = nil
			}
			// Rounds until every queued job is routed (at most
			// policy.MaxRedecisions a round) and the slot is taken.
			for range 20 {
				p.forceRound()
				p.round(ctx)
			}
			ids, err := store.Pending(ctx, 10000)
			if err != nil {
				b.Fatal(err)
			}
			jobs, err := store.GetMany(ctx, ids)
			if err != nil {
				b.Fatal(err)
			}
			for _, j := range jobs {
				if j.Route == nil {
					b.Fatalf("job %s not routed after the warm-up rounds", j.ID)
				}
			}
			if len(jobs) != 1800 {
				b.Fatalf("%d jobs queued after the warm-up rounds, want 1800 (one placed)", len(jobs))
			}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				if _, err := store.CreateMany(ctx, []jobstore.NewJob{newJob()}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				p.forceRound()
				p.round(ctx)
			}
			b.StopTimer()
			running, err := store.IDsInState(ctx, jobtype.StateDispatched, 10)
			if err != nil || len(running) != 1 {
				b.Fatalf("%d jobs dispatched, want 1 (%v)", len(running), err)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/round")
		})
	}
}
