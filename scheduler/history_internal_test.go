package scheduler

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
)

// TestHistoryEndedCountsPrunedJobs: a sample's Ended counts the jobs that
// ended since the previous sample even when the retention deleted some of
// them in between (the pruner tells the historian how many), and a new
// leader's first sample counts none (real redis-server, the real pruner).
func TestHistoryEndedCountsPrunedJobs(t *testing.T) {
	ctx := context.Background()
	store := jobstore.New(redistest.Start(t).Client(), jobstore.Config{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h := newHistorian(historianParams{Store: store, Log: log, Keep: 10})
	pr := newPruner(prunerParams{Store: store, Log: log, KeepFinished: 1, FinishedTTL: -1, Pruned: h.prunedJobs})
	finish := func(n int) {
		for range n {
			j, _, err := store.Create(ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "x", BaseModel: "tiny-char", Dataset: "file:///d",
				Priority: jobspec.PriorityNormal, Trainer: "reference"}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Cancel(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	finish(2)
	h.run(ctx) // a new leader's first sample: 2 finished before it, none counted
	finish(3)
	pr.run(ctx) // keeps 1 of the 5 finished jobs
	h.run(ctx)
	finish(1)
	h.run(ctx)
	h.run(ctx)
	got, err := store.History(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ended []int64
	for _, s := range got {
		ended = append(ended, s.Ended)
	}
	if len(got) != 4 || ended[0] != 0 || ended[1] != 3 || ended[2] != 1 || ended[3] != 0 {
		t.Fatalf("samples' ended: %v, want [0 3 1 0] (the pruner deleted 4 of the 5 finished jobs between the first two)", ended)
	}
	if !got[3].At.After(got[0].At.Add(-time.Second)) {
		t.Errorf("samples not oldest first: %v … %v", got[0].At, got[3].At)
	}
}
