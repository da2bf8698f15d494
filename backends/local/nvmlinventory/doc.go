// Package nvmlinventory reads a machine's GPUs through NVML and keeps their health.
//
// A local worker opens one [Source] with [Open] from its --gpus flag and asks it for an
// [Inventory] at every heartbeat: the driver, and for each GPU its identity, memory,
// utilisation, temperature, power, uncorrected ECC count, compute processes and health.
//
// The --gpus values:
//
//	auto               real NVML (libnvidia-ml.so.1); without it, 0 GPUs and one log line
//	none               0 GPUs, NVML never loaded
//	simulated:dgxh100  8 fake GPUs from go-nvml's mock server (also dgxa100, dgxh200, dgxb200)
//
// Health is kept across readings and only ever goes one way: a GPU turns unhealthy, with
// the reason in [GPU.Unhealthy], when its volatile uncorrected ECC count rises above the
// count seen at start, when NVML answers ERROR_GPU_IS_LOST for it, when an XID critical
// error event arrives for it (XIDs that NVIDIA's device plugin counts as application
// errors excepted), or when the worker calls [Source.MarkUnhealthy]; it stays so until
// the process restarts. Other failed queries make one reading unhealthy, not the GPU.
//
// Only [NVML], the one adapter, knows nvml.Interface, and it takes it injected: it never
// uses go-nvml's package-level functions. [Simulated] is a fake nvml.Interface (go-nvml's
// mock DGX servers with state added: load, lost GPUs, ECC errors, XID events, foreign
// processes) for machines without NVIDIA GPUs and for tests; everything it produces is
// marked simulated.
//
// go-nvml needs cgo. Built with CGO_ENABLED=0 the package keeps [Open] and
// [ParseGPUsFlag]: auto then gives 0 GPUs with a log line that says why, and simulated
// GPUs are refused.
package nvmlinventory
