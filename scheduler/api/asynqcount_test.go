package api

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// TestAsynqCountsAgree checks asynqCounts, which reads asynq's keys itself
// (one pipeline for every queue), against asynq's Inspector.GetQueueInfo
// on a real Redis, with tasks in every state it counts: completed (kept by
// Retention), archived (failed with no retry left), active (held by a
// handler) and pending (behind them), in two queues; a third queue asynq
// does not know counts nothing (nil), where GetQueueInfo answers not found. An
// asynq upgrade that moves these keys fails here.
func TestAsynqCountsAgree(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	s := &Server{insp: asynq.NewInspectorFromRedisClient(rdb), rdb: rdb}
	queues := []string{"node:a", "node:b"}
	client := asynq.NewClientFromRedisClient(rdb)
	enqueue := func(q, kind string, n int, opts ...asynq.Option) {
		t.Helper()
		for range n {
			if _, err := client.Enqueue(asynq.NewTask(kind, nil), append(opts, asynq.Queue(q))...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, q := range queues {
		enqueue(q, "ok", 2+i, asynq.Retention(time.Hour))
		enqueue(q, "fail", 1+i, asynq.MaxRetry(0))
	}
	release := make(chan struct{})
	worker := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 3, Queues: map[string]int{"node:a": 1, "node:b": 1},
		LogLevel: asynq.FatalLevel, ShutdownTimeout: time.Second})
	if err := worker.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		switch task.Type() {
		case "fail":
			return asynq.SkipRetry
		case "hold":
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(release); worker.Shutdown() })
	info := func(q string) *asynq.QueueInfo {
		i, err := s.insp.GetQueueInfo(q)
		if err != nil {
			t.Fatalf("GetQueueInfo(%s): %v", q, err)
		}
		return i
	}
	waitfor.True(t, 10*time.Second, "the completed and archived tasks", func() bool {
		a, b := info("node:a"), info("node:b")
		return a.Completed == 2 && a.Archived == 1 && b.Completed == 3 && b.Archived == 2
	})
	// Three handlers held, the rest pending behind them.
	enqueue("node:a", "hold", 2)
	enqueue("node:b", "hold", 4)
	waitfor.True(t, 10*time.Second, "three tasks held", func() bool { return info("node:a").Active+info("node:b").Active == 3 })

	names := append(queues, "node:unknown")
	got, err := opsView{s}.asynqCounts(ctx, names)
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range names {
		want, err := s.insp.GetQueueInfo(q)
		if q == "node:unknown" {
			if err == nil || got[i] != nil {
				t.Errorf("%s: asynqCounts %+v, GetQueueInfo error %v; want nil and its not-found error", q, got[i], err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		w := asynqCount{Pending: want.Pending, Active: want.Active, Archived: want.Archived, Completed: want.Completed}
		if got[i] == nil || *got[i] != w {
			t.Errorf("%s: asynqCounts %+v, GetQueueInfo %+v", q, got[i], w)
		}
		if w.Pending+w.Active == 0 || w.Archived == 0 || w.Completed == 0 {
			t.Errorf("%s: %+v: want a task in every state counted", q, w)
		}
	}
	if got, err := (opsView{s}).asynqCounts(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("no queues: %v, %v", got, err)
	}
}
