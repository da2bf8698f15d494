package scheduler

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestPlacerRoundSeesWritesBetweenRounds checks that the placer's cache of
// decoded records (placer.jobs, jobstore.GetManyCached) never serves a
// record older than the store's: a job is routed and cached by a round
// while no node is live, then held by SetRoute (a write that does not
// bump updated_at); once a node with a free slot is live, the next round
// must see it held and not place it, while the job beside it, unchanged
// (served from the cache), is placed. A round over a stale record would
// place both. It also checks that a round modifies none of the cached
// records (they are shared between rounds). A real redis-server; no
// worker (the node's heartbeat is written directly).
func TestPlacerRoundSeesWritesBetweenRounds(t *testing.T) {
	p, store := testPlacer(t)
	ctx := context.Background()
	newJob := func(name string) jobstore.NewJob { return placerJob(name, jobspec.Resources{}) }
	created, err := store.CreateMany(ctx, []jobstore.NewJob{newJob("held-later"), newJob("unchanged")})
	if err != nil {
		t.Fatal(err)
	}
	held, kept := created[0].Job.ID, created[1].Job.ID

	// Round 1: no node live; both jobs are routed, none placed.
	p.forceRound()
	p.round(ctx)
	j, err := store.Get(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	if j.Route == nil || j.State != jobtype.StateQueued {
		t.Fatalf("after the first round: route %+v, state %s; want routed and queued", j.Route, j.State)
	}
	if n := p.jobs.Len(); n != 2 {
		t.Fatalf("the placer's cache holds %d records after the first round, want 2", n)
	}
	before := j.UpdatedAt

	// Between the rounds: the job is held by a write that keeps
	// updated_at, and a node with two free slots joins.
	if err := store.SetRoute(ctx, held, j.Route, "held by the test"); err != nil {
		t.Fatal(err)
	}
	if j, err = store.Get(ctx, held); err != nil || j.Held == "" || !j.UpdatedAt.Equal(before) {
		t.Fatalf("SetRoute: held %q, updated_at %v (was %v), err %v; the test needs a write that keeps updated_at", j.Held, j.UpdatedAt, before, err)
	}
	if err := store.Heartbeat(ctx, jobstore.Node{Name: "node-0", Incarnation: "i", Backend: "local", Slots: 2},
		jobstore.HeartbeatOptions{TTL: time.Hour, First: true}); err != nil {
		t.Fatal(err)
	}

	// Round 2 places the unchanged job and leaves the held one queued.
	p.forceRound()
	p.round(ctx)
	states, err := store.States(ctx, []string{held, kept})
	if err != nil {
		t.Fatal(err)
	}
	if states[0] != jobtype.StateQueued || states[1] != jobtype.StateDispatched {
		t.Fatalf("after the second round: held job %s, unchanged job %s; want queued and dispatched (a stale cached record places the held one)",
			states[0], states[1])
	}
	w, err := store.WaitOf(ctx, held)
	if err != nil || w == nil || w.Code != "held" {
		t.Fatalf("the held job's wait: %+v (%v), want code held", w, err)
	}

	// The records the rounds were given are as stored: no round modified
	// them (GetManyCached hands back the cached ones for records that did
	// not change).
	ids := []string{held, kept}
	cached, err := store.GetManyCached(ctx, p.jobs, ids)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := store.GetMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cached, fresh) {
		t.Fatalf("cached records differ from the store's:\n%+v\n%+v", cached, fresh)
	}
}

// TestPlacerDispatchesAGangAsAWhole: a job that spans nodes is dispatched
// as one gang attempt: every rank's GPUs reserved at once on distinct
// nodes, the ranks recorded on the job, and one task per rank
// (<job>:<attempt>:<rank>, no retry) on that rank's node queue.
func TestPlacerDispatchesAGangAsAWhole(t *testing.T) {
	p, store := testPlacer(t)
	ctx := context.Background()
	newJob := func(name string, nodes int) jobstore.NewJob {
		return placerJob(name, jobspec.Resources{GPUs: 1, Nodes: nodes})
	}
	for _, name := range []string{"node-0", "node-1", "node-2"} {
		if err := store.Heartbeat(ctx, jobstore.Node{Name: name, Incarnation: "i", Backend: "local", Slots: 2,
			GPUs: []jobtype.GPU{{Index: 0, UUID: "GPU-" + name, Name: "NVIDIA H100 80GB HBM3", Healthy: true, MemoryTotalMB: 81559}}},
			jobstore.HeartbeatOptions{TTL: time.Hour, First: true}); err != nil {
			t.Fatal(err)
		}
	}
	created, err := store.CreateMany(ctx, []jobstore.NewJob{newJob("gang", 2), newJob("one", 1)})
	if err != nil {
		t.Fatal(err)
	}
	gang, one := created[0].Job.ID, created[1].Job.ID
	for range 2 { // the first round routes, the second places
		p.forceRound()
		p.round(ctx)
	}
	states, err := store.States(ctx, []string{gang, one})
	if err != nil {
		t.Fatal(err)
	}
	if states[0] != jobtype.StateDispatched || states[1] != jobtype.StateDispatched {
		t.Fatalf("gang %s, one-GPU job %s; want both dispatched", states[0], states[1])
	}
	g, err := store.GangOf(ctx, gang)
	if err != nil || g == nil || len(g.Ranks) != 2 || g.Ranks[0].Node == g.Ranks[1].Node {
		t.Fatalf("gang record: %+v %v", g, err)
	}
	insp := asynq.NewInspectorFromRedisClient(store.Redis())
	for r, m := range g.Ranks {
		info, err := insp.GetTaskInfo(jobtype.NodeQueue(m.Node), jobtype.RankTaskID(gang, 1, r))
		if err != nil || info.MaxRetry != 0 {
			t.Fatalf("rank %d's task on %s: %+v %v", r, m.Node, info, err)
		}
	}
}

// testPlacer is a placer over a store on a real redis-server of its own,
// with a scheduler's default config; no worker, no node.
func testPlacer(t *testing.T) (*placer, *jobstore.Store) {
	t.Helper()
	rdb := redistest.Start(t).Client()
	store := jobstore.New(rdb, jobstore.Config{})
	s := New(rdb, store, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Defaults: jobspec.Defaults{OutputURI: "file:///tmp/lathe-test"}})
	p := newPlacer(placerParams{Store: store, Log: s.log, Router: s.router,
		Queue: &enqueuer{client: s.client, log: s.log, defaultMaxRuntime: s.cfg.Defaults.MaxRuntime, killGrace: s.cfg.KillGrace},
		Fence: s.lease.fence, Fenced: func() { t.Error("fenced") }, PlaceScan: s.cfg.PlaceScan,
		DefaultMaxRuntime: s.cfg.Defaults.MaxRuntime, ObserveRound: func(float64) {}})
	return p, store
}

// placerJob is a small valid job named name asking for res.
func placerJob(name string, res jobspec.Resources) jobstore.NewJob {
	return jobstore.NewJob{Spec: &jobspec.Spec{Name: name, BaseModel: "tiny-char", Dataset: "file:///d.jsonl", Trainer: "reference",
		LoRA: jobspec.LoRA{Rank: 8, Alpha: 16}, Training: jobspec.Training{Epochs: 1, LearningRate: 1e-4, BatchSize: 8},
		Resources: res, MaxRuntime: jobspec.Duration(time.Hour)}, OutputURI: "file:///tmp/lathe-test/{id}"}
}
