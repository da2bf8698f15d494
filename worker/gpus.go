package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"time"

	"github.com/lathe-ml/lathe/backends/local/nvmlinventory"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// errHung is the cause when a GPU job's GPUs sat idle with no progress line
// for HangTimeout.
var errHung = errors.New("hung: GPUs idle and no progress")

// errPreempted is the cause when the store asked the attempt to make room
// for an urgent job.
var errPreempted = errors.New("preempted for an urgent job")

// readInventory reads the node's GPUs and keeps the reading for pinning.
func (w *Worker) readInventory(ctx context.Context) (nvmlinventory.Inventory, error) {
	inv, err := w.cfg.GPUs.Inventory(ctx)
	if err != nil {
		return inv, err
	}
	w.invMu.Lock()
	w.inv = inv
	w.invMu.Unlock()
	return inv, nil
}

func (w *Worker) lastInventory() nvmlinventory.Inventory {
	w.invMu.Lock()
	defer w.invMu.Unlock()
	return w.inv
}

// nodeGPUs converts an inventory reading into the heartbeat's GPU list.
// Memory used by processes that are not this worker's trainers (or their
// children: same process group) is foreign and counts against free memory.
func (w *Worker) nodeGPUs(inv nvmlinventory.Inventory) []jobtype.GPU {
	out := make([]jobtype.GPU, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		var foreign uint64
		for _, p := range g.Processes {
			if !w.isOurs(p.PID) {
				foreign += p.UsedMemoryMB
			}
		}
		out = append(out, jobtype.GPU{Node: w.cfg.Node, Index: g.Index, UUID: g.UUID, Name: g.Name,
			MemoryTotalMB: g.MemoryTotalMB, MemoryUsedMB: g.MemoryUsedMB, MemoryFreeMB: g.MemoryFreeMB,
			ForeignUsedMB: foreign, UtilizationPct: g.UtilizationPct, TemperatureC: g.TemperatureC,
			PowerW: g.PowerW, ECCUncorrected: g.ECCUncorrected, Healthy: g.Healthy, Unhealthy: g.Unhealthy,
			Simulated: g.Simulated})
	}
	return out
}

// isOurs: pid is one of our trainers or in one of their process groups.
func (w *Worker) isOurs(pid int) bool {
	w.invMu.Lock()
	defer w.invMu.Unlock()
	if _, ok := w.trainers[pid]; ok {
		return true
	}
	pg, err := syscall.Getpgid(pid)
	if err != nil {
		return false
	}
	_, ok := w.trainers[pg]
	return ok
}

func (w *Worker) trackTrainer(pid int, on bool) {
	w.invMu.Lock()
	defer w.invMu.Unlock()
	if on {
		w.trainers[pid] = struct{}{}
	} else {
		delete(w.trainers, pid)
	}
}

// pinGPUs returns the trainer's CUDA_VISIBLE_DEVICES (the reserved GPUs'
// UUIDs: NVML and CUDA number GPUs differently, UUIDs are the same in both)
// and whether they are simulated. Simulated UUIDs match no real device, so
// a trainer given them sees no GPU and runs on the CPU, as it is told with
// LATHE_SIMULATED_GPUS=1. A reserved index the node does not have (any
// more) or a GPU that turned unhealthy is an error: the attempt goes back
// to the queue to be placed again.
func (w *Worker) pinGPUs(ctx context.Context, indices []int) (string, bool, error) {
	if len(indices) == 0 {
		return "", false, nil
	}
	inv, err := w.readInventory(ctx)
	if err != nil {
		return "", false, fmt.Errorf("read GPU inventory: %w", err)
	}
	byIndex := map[int]nvmlinventory.GPU{}
	for _, g := range inv.GPUs {
		byIndex[g.Index] = g
	}
	uuids := make([]string, 0, len(indices))
	for _, i := range indices {
		g, ok := byIndex[i]
		switch {
		case !ok:
			return "", false, fmt.Errorf("GPU %d was reserved but node %s has no such GPU", i, w.cfg.Node)
		case !g.Healthy:
			return "", false, fmt.Errorf("GPU %d (%s) is unhealthy: %s", i, g.UUID, g.Unhealthy)
		}
		uuids = append(uuids, g.UUID)
	}
	return strings.Join(uuids, ","), inv.Simulated, nil
}

// monitor samples the job's GPUs every MonitorInterval while it runs: it
// keeps a downsampled series in the store, and stops the attempt (errHung)
// when every GPU sat at 0% utilisation and no progress line came for
// HangTimeout.
func (w *Worker) monitor(ctx context.Context, cancel context.CancelCauseFunc, log *slog.Logger, id string, gpus []int, sink *eventSink) {
	if len(gpus) == 0 {
		return
	}
	t := time.NewTicker(w.cfg.MonitorInterval)
	defer t.Stop()
	series := newSeries(w.cfg.SeriesPoints, w.cfg.MonitorInterval)
	idleSince := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		inv, err := w.readInventory(ctx)
		if err != nil {
			log.Warn("monitor: read GPUs", slog.Any("err", err))
			continue
		}
		now := time.Now()
		pt, busy := sampleGPUs(inv, gpus, now)
		w.writeSeries(ctx, log, id, series, pt)
		if busy {
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = now
		}
		lastProgress := time.UnixMilli(sink.progress.Load())
		if now.Sub(idleSince) >= w.cfg.HangTimeout && now.Sub(lastProgress) >= w.cfg.HangTimeout {
			log.Warn("job hung: GPUs idle and no progress line; stopping it for a retry",
				slog.Duration("idle", now.Sub(idleSince)), slog.Time("last_progress", lastProgress))
			cancel(errHung)
			return
		}
	}
}

// sampleGPUs is the reading at now of the job's GPUs (by index) in inv;
// busy is true when any of them shows utilisation.
func sampleGPUs(inv nvmlinventory.Inventory, gpus []int, now time.Time) (pt jobstore.GPUSample, busy bool) {
	pt = jobstore.GPUSample{T: now.UnixMilli()}
	for _, i := range gpus {
		for _, g := range inv.GPUs {
			if g.Index != i {
				continue
			}
			pt.GPUs = append(pt.GPUs, jobstore.GPUReading{Index: i, Util: float64(g.UtilizationPct),
				MemMB: float64(g.MemoryUsedMB), PowerW: g.PowerW, TempC: float64(g.TemperatureC)})
			busy = busy || g.UtilizationPct > 0
		}
	}
	return pt, busy
}

// writeSeries adds pt to the job's series and writes what that flushed to
// the store: the new point, or the whole series when it was halved. A
// failed write is logged, not retried.
func (w *Worker) writeSeries(ctx context.Context, log *slog.Logger, id string, series *series, pt jobstore.GPUSample) {
	flushed, rewrite := series.add(pt)
	if flushed == nil {
		return
	}
	wctx, wc := context.WithTimeout(ctx, 2*time.Second)
	defer wc()
	var err error
	if rewrite {
		err = w.store.ReplaceGPUSeries(wctx, id, series.points, series.step)
	} else {
		err = w.store.AppendGPUSample(wctx, id, *flushed, series.step)
	}
	if err != nil {
		log.Warn("monitor: write GPU series", slog.Any("err", err))
	}
}

// series downsamples GPU samples into at most max points: each point is
// the mean of per samples (per starts at 1); when the series is full,
// neighbouring points are averaged in pairs, per and step double. Memory
// per job stays bounded however long it runs.
type series struct {
	max    int
	per    int
	step   time.Duration // the time one point covers
	points []jobstore.GPUSample
	bucket []jobstore.GPUSample
}

func newSeries(max int, interval time.Duration) *series {
	return &series{max: max, per: 1, step: interval}
}

// add takes a sample; it returns the point to write when a bucket closed
// (rewrite: the whole series was compacted and must be written again).
func (s *series) add(p jobstore.GPUSample) (flushed *jobstore.GPUSample, rewrite bool) {
	s.bucket = append(s.bucket, p)
	if len(s.bucket) < s.per {
		return nil, false
	}
	s.points = append(s.points, average(s.bucket))
	s.bucket = s.bucket[:0]
	if len(s.points) <= s.max {
		return &s.points[len(s.points)-1], false
	}
	merged := make([]jobstore.GPUSample, 0, (len(s.points)+1)/2)
	for i := 0; i < len(s.points); i += 2 {
		merged = append(merged, average(s.points[i:min(i+2, len(s.points))]))
	}
	s.points = merged
	s.per *= 2
	s.step *= 2
	return &s.points[len(s.points)-1], true
}

// average of samples of the same GPUs: time of the first, mean readings.
func average(ps []jobstore.GPUSample) jobstore.GPUSample {
	out := jobstore.GPUSample{T: ps[0].T}
	if len(ps) == 1 {
		out.GPUs = append([]jobstore.GPUReading(nil), ps[0].GPUs...)
		return out
	}
	n := float64(len(ps))
	for gi, g := range ps[0].GPUs {
		r := jobstore.GPUReading{Index: g.Index}
		for _, p := range ps {
			if gi >= len(p.GPUs) {
				continue
			}
			r.Util += p.GPUs[gi].Util / n
			r.MemMB += p.GPUs[gi].MemMB / n
			r.PowerW += p.GPUs[gi].PowerW / n
			r.TempC += p.GPUs[gi].TempC / n
		}
		out.GPUs = append(out.GPUs, r)
	}
	return out
}
