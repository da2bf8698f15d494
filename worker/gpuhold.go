package worker

import (
	"context"
	"log/slog"
	"sync"
)

// gpuHolds is which of this node's GPUs a trainer of this worker still
// runs on, by GPU index; each entry's channel is closed when that
// attempt is over (its trainer exited and its leftovers were killed).
//
// The store frees an attempt's GPUs when the attempt ends, and the end is
// not always this worker's: a gang's attempt ends on every node when one
// rank fails, and this node's trainer is stopped only at its next lease
// renewal, then given its kill grace. The placer may meanwhile give the
// freed GPUs to another job, whose task can reach this worker while the
// old trainer still runs. A trainer never starts on a GPU another trainer
// here still holds: it waits for that one to be gone (TestGPUHeldUntilTrainerExits).
type gpuHolds struct {
	mu sync.Mutex
	by map[int]*gpuHold
}

type gpuHold struct {
	job  string
	done chan struct{}
}

// take waits until none of gpus is held by another attempt's trainer,
// then holds them until release is called. It returns ctx's error when
// ctx ends first (nothing held).
func (h *gpuHolds) take(ctx context.Context, log *slog.Logger, job string, gpus []int) (release func(), err error) {
	if len(gpus) == 0 {
		return func() {}, nil
	}
	told := false
	for {
		h.mu.Lock()
		var busy *gpuHold
		busyGPU := 0
		for _, g := range gpus {
			if o := h.by[g]; o != nil {
				busy, busyGPU = o, g
				break
			}
		}
		if busy == nil {
			mine := &gpuHold{job: job, done: make(chan struct{})}
			if h.by == nil {
				h.by = map[int]*gpuHold{}
			}
			for _, g := range gpus {
				h.by[g] = mine
			}
			h.mu.Unlock()
			return func() { h.release(mine, gpus) }, nil
		}
		h.mu.Unlock()
		if !told {
			log.Warn("the trainer waits: an ended attempt's trainer still runs on its GPU here (it is being stopped)",
				slog.Int("gpu", busyGPU), slog.String("held_by_job", busy.job))
			told = true
		}
		select {
		case <-busy.done:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (h *gpuHolds) release(mine *gpuHold, gpus []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range gpus {
		if h.by[g] == mine {
			delete(h.by, g)
		}
	}
	close(mine.done)
}
