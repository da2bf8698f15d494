package nvmlinventory

import (
	"context"
	"errors"
	"fmt"
)

// Inventory is one reading of a machine's GPUs. It goes into the node heartbeat and
// the API as JSON.
type Inventory struct {
	// Driver is the NVIDIA driver version ("550.54.15"); empty without NVML.
	Driver string `json:"driver"`
	// CUDA is the highest CUDA version the driver supports ("12.4"); empty without NVML.
	CUDA string `json:"cuda"`
	// Simulated is true when the GPUs are fakes (--gpus simulated:...).
	Simulated bool `json:"simulated"`
	// GPUs is ordered by NVML index; never nil, empty on a machine without GPUs.
	GPUs []GPU `json:"gpus"`
}

// GPU is one GPU in an [Inventory].
type GPU struct {
	// Index is the NVML index, stable until the machine reboots.
	Index int `json:"index"`
	// UUID is NVML's "GPU-…" identifier. A GPU lost since start keeps the UUID it had.
	UUID string `json:"uuid"`
	// Name is the product name as NVML gives it ("NVIDIA H100 80GB HBM3").
	Name string `json:"name"`
	// MemoryTotalMB, MemoryUsedMB and MemoryFreeMB are in MiB, as NVML counts them.
	MemoryTotalMB uint64 `json:"memory_total_mb"`
	MemoryUsedMB  uint64 `json:"memory_used_mb"`
	MemoryFreeMB  uint64 `json:"memory_free_mb"`
	// UtilizationPct is the share of the last sample period a kernel ran, 0 to 100.
	UtilizationPct int `json:"utilization_pct"`
	// TemperatureC is the GPU die temperature.
	TemperatureC int `json:"temperature_c"`
	// PowerW is the board's power draw in watts.
	PowerW float64 `json:"power_w"`
	// ECCUncorrected is the volatile uncorrected ECC count (since the driver loaded);
	// 0 where ECC is not supported.
	ECCUncorrected uint64 `json:"ecc_uncorrected"`
	// Processes are the compute processes on the GPU, ours and foreign; never nil.
	Processes []Process `json:"processes"`
	// Healthy is false when Unhealthy says why.
	Healthy bool `json:"healthy"`
	// Unhealthy is "<reason>: <details>", the reason one of the Reason constants.
	Unhealthy string `json:"unhealthy,omitempty"`
	// Simulated is true for a fake GPU.
	Simulated bool `json:"simulated"`
}

// Process is a compute process using a GPU.
type Process struct {
	// PID is the process id as the driver sees it (the host's PID namespace).
	PID int `json:"pid"`
	// UsedMemoryMB is the GPU memory it holds, in MiB; 0 where NVML cannot tell.
	UsedMemoryMB uint64 `json:"used_memory_mb"`
}

// The reasons a GPU is unhealthy; [GPU.Unhealthy] starts with one of them, then ": "
// and the details. All but ReasonQueryFailed last until the process restarts.
const (
	// ReasonGPULost: NVML answered ERROR_GPU_IS_LOST (fallen off the bus).
	ReasonGPULost = "gpu lost"
	// ReasonECC: the volatile uncorrected ECC count rose above the count at start.
	ReasonECC = "uncorrected ECC errors"
	// ReasonXID: an XID critical error event arrived for the GPU.
	ReasonXID = "xid critical error"
	// ReasonMarked: the worker called [Source.MarkUnhealthy].
	ReasonMarked = "marked unhealthy"
	// ReasonQueryFailed: an NVML query failed in this reading; the next may succeed.
	ReasonQueryFailed = "nvml query failed"
)

// Errors a caller may branch on.
var (
	// ErrClosed is returned by a Source used after Close.
	ErrClosed = errors.New("nvmlinventory: source closed")
	// ErrNoSuchGPU is returned for a GPU index the Source does not have.
	ErrNoSuchGPU = errors.New("nvmlinventory: no such GPU")
)

// Source gives fresh readings of a machine's GPUs. Its methods are safe for concurrent
// use.
type Source interface {
	// Inventory reads every GPU now and applies health: a GPU once unhealthy stays so.
	// It fails only on a cancelled ctx or a closed Source; a failed query on one GPU
	// shows in that GPU's Unhealthy instead.
	Inventory(ctx context.Context) (Inventory, error)
	// MarkUnhealthy makes GPU index unhealthy until restart, with reason as details;
	// ErrNoSuchGPU for an index the Source does not have.
	MarkUnhealthy(index int, reason string) error
	// SetLoad tells simulated GPUs that a job's process pid started (busy) or stopped
	// on GPU index, so that their readings show it. Real GPUs report their own load:
	// for them, and for an unknown index, it does nothing.
	SetLoad(index, pid int, busy bool)
	// Close releases NVML. Safe to call twice.
	Close() error
}

// noGPUs is the Source of a machine without GPUs (--gpus none, or no driver).
type noGPUs struct{}

var _ Source = noGPUs{}

func (noGPUs) Inventory(ctx context.Context) (Inventory, error) {
	if err := ctx.Err(); err != nil {
		return Inventory{}, err
	}
	return Inventory{GPUs: []GPU{}}, nil
}

func (noGPUs) MarkUnhealthy(index int, _ string) error { return noSuchGPU(index) }
func (noGPUs) SetLoad(int, int, bool)                  {}
func (noGPUs) Close() error                            { return nil }

func noSuchGPU(index int) error {
	return fmt.Errorf("%w: index %d", ErrNoSuchGPU, index)
}

// None returns the Source of a machine without GPUs: 0 GPUs, CPU jobs only.
func None() Source { return noGPUs{} }
