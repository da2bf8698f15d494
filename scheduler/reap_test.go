package scheduler_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/scheduler"
)

// Reaper tests: a real redis-server and a leading scheduler (Start); the
// test plays the workers through the store (dispatch, claim with a short
// lease, heartbeats), as no worker runs here.

type reapBundle struct {
	ctx   context.Context
	srv   *redistest.Server
	store *jobstore.Store
	s     *scheduler.Scheduler
	log   *syncLog
}

// syncLog is the scheduler's log, readable while it writes.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *syncLog) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func reapSetup(t *testing.T, cfg scheduler.Config) reapBundle {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	lg := &syncLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(lg, nil))
	cfg.PlaceInterval = 50 * time.Millisecond
	cfg.LeaderTTL = time.Second
	cfg.Defaults = jobspec.Defaults{OutputURI: fileuri.FromPath(t.TempDir())}
	s := scheduler.New(rdb, store, cfg)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return reapBundle{ctx: context.Background(), srv: srv, store: store, s: s, log: lg}
}

// running stores n jobs running on node under incarnation inc with a lease
// of lease, as a worker's claim would leave them. The node sends no
// heartbeat: its worker is dead.
func (b reapBundle) running(t *testing.T, n int, node, inc string, lease time.Duration) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "r", Priority: jobspec.PriorityNormal,
			Resources: jobspec.Resources{GPUs: 0}}, OutputURI: "file:///out/{id}"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.store.Dispatch(b.ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: node, Backend: "local", Capacity: n}); err != nil {
			t.Fatal(err)
		}
		if out, err := b.store.Claim(b.ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: node, Incarnation: inc, Lease: lease}); err != nil || out != jobstore.Claimed {
			t.Fatalf("claim %s: %v %v", j.ID, out, err)
		}
		ids = append(ids, j.ID)
	}
	return ids
}

func (b reapBundle) waitLeader(t *testing.T, want bool) {
	t.Helper()
	waitfor.True(t, 20*time.Second, fmt.Sprintf("scheduler leader = %v", want), func() bool { return b.s.IsLeader() == want })
}

func (b reapBundle) waitRequeued(t *testing.T, ids []string) {
	t.Helper()
	for _, id := range ids {
		// notReaped says what the job is while it is not reaped ("" once it is).
		notReaped := func() string {
			j, err := b.store.Get(b.ctx, id)
			if err == nil && j.Attempt == 2 && j.State != jobtype.StateRunning {
				return ""
			}
			return fmt.Sprintf("%+v %v\n%s", j, err, b.log.String())
		}
		waitfor.Value(t, 20*time.Second, "job "+id+" reaped", notReaped, func(s string) bool { return s == "" })
	}
}

// TestReapSingleDeadNode: the only node dies with two attempts running;
// every running lease (100%) expires at once, and the scheduler itself saw
// no Redis error. That is a dead node, not a Redis blip: both attempts are
// reaped after the lease plus the grace (the old "most leases expired at
// once: wait" rule held them for MassExpiryWait, here 10 minutes).
func TestReapSingleDeadNode(t *testing.T) {
	b := reapSetup(t, scheduler.Config{ReapGrace: 100 * time.Millisecond, MassExpiryWait: 10 * time.Minute})
	b.waitLeader(t, true)
	ids := b.running(t, 2, "n1", "dead-incarnation", 300*time.Millisecond)
	b.waitRequeued(t, ids)
	for _, id := range ids {
		j, _ := b.store.Get(b.ctx, id)
		if !strings.Contains(j.Error, "lease expired") {
			t.Errorf("job %s: error %q, want the reaper's", id, j.Error)
		}
	}
}

// TestReapHoldsOnRedisBlip: leases that expire while the scheduler itself
// could not reach Redis (redis-server killed and started again under it)
// are held, not reaped, though their node sends no heartbeat; once another
// node heartbeats after the outage while theirs does not, the heartbeats
// say their node is dead and they are reaped.
func TestReapHoldsOnRedisBlip(t *testing.T) {
	b := reapSetup(t, scheduler.Config{ReapGrace: 100 * time.Millisecond, MassExpiryWait: 10 * time.Minute, LeaseTTL: time.Minute})
	b.waitLeader(t, true)
	b.srv.Kill()
	b.waitLeader(t, false) // it could not renew its lease: it saw the error
	b.srv.Restart()
	b.waitLeader(t, true)
	ids := b.running(t, 2, "n1", "inc-1", 300*time.Millisecond)
	waitfor.Value(t, 20*time.Second, "the reaper holding the leases off", b.log.String,
		func(log string) bool { return strings.Contains(log, "waiting instead of reaping") })
	for _, id := range ids {
		if j, err := b.store.Get(b.ctx, id); err != nil || j.State != jobtype.StateRunning || j.Attempt != 1 {
			t.Fatalf("job %s was reaped during a Redis blip: %+v %v", id, j, err)
		}
	}
	// Another node heartbeats now, after the outage; n1 does not.
	if err := b.store.Heartbeat(b.ctx, jobstore.Node{Name: "n2", Incarnation: "inc-2", Backend: "local", Slots: 1}, jobstore.HeartbeatOptions{TTL: time.Minute, First: true}); err != nil {
		t.Fatal(err)
	}
	b.waitRequeued(t, ids)
}
