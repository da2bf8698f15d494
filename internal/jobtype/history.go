package jobtype

import "time"

// HistorySample is one point of the leader's history of the whole pool
// (GET /api/v1/history, the dashboard's history panels): what the queues,
// the waits, the throughput and the GPUs were at At. Every team's jobs are
// counted, as in GET /api/v1/queues; no job id or name is kept.
type HistorySample struct {
	At time.Time `json:"at"`
	// Pending is the size of the pending set (queued jobs waiting for a
	// place); Queued counts every queued job (sweep trials their sweep
	// holds back included); Running counts dispatched, provisioning and
	// running jobs.
	Pending int64 `json:"pending"`
	Queued  int64 `json:"queued"`
	Running int64 `json:"running"`
	// OldestWaitS is the age of the oldest queued job (now - created_at),
	// seconds; 0 when none is queued.
	OldestWaitS float64 `json:"oldest_wait_s"`
	// Ended is how many jobs ended (succeeded, failed, cancelled) since the
	// previous sample, as the growth of the finished jobs' count plus
	// those retention deleted in between; 0 for a leader's first sample.
	Ended int64 `json:"ended"`
	// GPUs counts the live nodes' GPUs, GPUsBusy those holding a job, and
	// GPUUtilPct is their mean utilisation (%).
	GPUs       int     `json:"gpus"`
	GPUsBusy   int     `json:"gpus_busy"`
	GPUUtilPct float64 `json:"gpu_util_pct"`
}
