//go:build cgo

package nvmlinventory

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Options configures [New].
type Options struct {
	// Logger gets one line when a GPU turns unhealthy, and warnings about NVML.
	// Nil discards them.
	Logger *slog.Logger
	// Simulated marks the Inventory and every GPU as simulated. Zero means real GPUs;
	// it is forced on when the library is a [*Simulated].
	Simulated bool
}

// applicationXIDs are XIDs that a faulty program causes, not a faulty GPU; like
// NVIDIA's k8s-device-plugin, they do not make a GPU unhealthy: 13 graphics engine
// exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive
// cleanup, 68 video processor exception, 109 context switch timeout.
var applicationXIDs = []uint64{13, 31, 43, 45, 68, 109}

// maxEventsPerReading bounds how many XID events one Inventory call drains.
const maxEventsPerReading = 256

// notAvailable is NVML's NVML_VALUE_NOT_AVAILABLE for a 64-bit counter.
const notAvailable = ^uint64(0)

// NVML is the adapter from an nvml.Interface to a [Source]. It keeps each GPU's health
// across readings. Its methods are safe for concurrent use; they take turns.
type NVML struct {
	lib       nvml.Interface
	log       *slog.Logger
	simulated bool
	driver    string
	cuda      string

	mu     sync.Mutex
	closed bool
	events nvml.EventSet // nil where XID events are not supported
	gpus   []gpuState
}

var _ Source = (*NVML)(nil)

// gpuState is what the adapter remembers of one GPU between readings.
type gpuState struct {
	uuid       string
	name       string
	memTotalMB uint64
	eccSeen    bool   // eccBase holds the first successful reading
	eccBase    uint64 // volatile uncorrected ECC count at the first reading
	lost       bool   // NVML said ERROR_GPU_IS_LOST: not queried any more
	unhealthy  string // sticky reason, "" while healthy
}

// New initialises NVML through lib (nvml.New() for the real library, a [*Simulated]
// or a go-nvml mock otherwise), takes the baseline ECC counts and registers every GPU
// that supports it for XID critical error events. When lib.Init fails, the error wraps
// its nvml.Return, so errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) tells a machine
// without the driver; nothing else is called on lib then.
func New(lib nvml.Interface, opts Options) (*NVML, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := check(lib.Init()); err != nil {
		return nil, fmt.Errorf("nvmlinventory: nvml init: %w", err)
	}
	_, isSim := lib.(*Simulated)
	n := &NVML{lib: lib, log: log, simulated: opts.Simulated || isSim}

	count, ret := lib.DeviceGetCount()
	if err := check(ret); err != nil {
		_ = lib.Shutdown()
		return nil, fmt.Errorf("nvmlinventory: nvml device count: %w", err)
	}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		n.driver = v
	} else {
		log.Warn("nvml: no driver version", slog.String("error", ret.Error()))
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		n.cuda = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	} else {
		log.Warn("nvml: no CUDA version", slog.String("error", ret.Error()))
	}

	n.gpus = make([]gpuState, count)
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range n.gpus {
		n.read(i) // identity and the ECC baseline
	}
	n.registerXIDEvents()
	return n, nil
}

// registerXIDEvents creates the event set and registers every GPU that supports XID
// critical error events; where none does, n.events stays nil.
func (n *NVML) registerXIDEvents() {
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		n.log.Warn("nvml: no event set, XID errors go unseen", slog.String("error", ret.Error()))
		return
	}
	registered := 0
	for i := range n.gpus {
		if n.gpus[i].lost {
			continue
		}
		dev, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&nvml.EventTypeXidCriticalError == 0 {
			n.log.Warn("nvml: GPU does not report XID errors", slog.Int("index", i))
			continue
		}
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			n.log.Warn("nvml: cannot register for XID errors", slog.Int("index", i), slog.String("error", ret.Error()))
			continue
		}
		registered++
	}
	if registered == 0 {
		_ = set.Free()
		return
	}
	n.events = set
}

// Inventory implements [Source]: it drains pending XID events, then reads every GPU.
func (n *NVML) Inventory(ctx context.Context) (Inventory, error) {
	if err := ctx.Err(); err != nil {
		return Inventory{}, fmt.Errorf("nvmlinventory: inventory: %w", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return Inventory{}, ErrClosed
	}
	n.drainEvents()
	inv := Inventory{Driver: n.driver, CUDA: n.cuda, Simulated: n.simulated, GPUs: make([]GPU, 0, len(n.gpus))}
	for i := range n.gpus {
		inv.GPUs = append(inv.GPUs, n.read(i))
	}
	return inv, nil
}

// MarkUnhealthy implements [Source].
func (n *NVML) MarkUnhealthy(index int, reason string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if index < 0 || index >= len(n.gpus) {
		return noSuchGPU(index)
	}
	n.setUnhealthy(index, ReasonMarked, reason)
	return nil
}

// SetLoad implements [Source]: it passes the load on to a [*Simulated] library and
// does nothing for any other.
func (n *NVML) SetLoad(index, pid int, busy bool) {
	if sim, ok := n.lib.(*Simulated); ok {
		sim.SetLoad(index, pid, busy)
	}
}

// Close frees the event set and shuts NVML down. Safe to call twice.
func (n *NVML) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.events != nil {
		_ = n.events.Free()
		n.events = nil
	}
	if err := check(n.lib.Shutdown()); err != nil {
		return fmt.Errorf("nvmlinventory: nvml shutdown: %w", err)
	}
	return nil
}

// drainEvents handles the XID events that arrived since the last reading, without
// waiting for more. Callers hold n.mu.
func (n *NVML) drainEvents() {
	if n.events == nil {
		return
	}
	for range maxEventsPerReading {
		ev, ret := n.events.Wait(0)
		switch ret {
		case nvml.SUCCESS:
			n.handleEvent(ev)
		case nvml.ERROR_TIMEOUT:
			return
		default:
			n.log.Warn("nvml: waiting for events", slog.String("error", ret.Error()))
			return
		}
	}
}

// handleEvent makes the GPU of an XID critical error unhealthy, unless the XID is an
// application error. An event for a GPU it cannot identify makes them all unhealthy,
// as NVIDIA's device plugin does.
func (n *NVML) handleEvent(ev nvml.EventData) {
	if ev.EventType != nvml.EventTypeXidCriticalError {
		return
	}
	xid := ev.EventData
	if slices.Contains(applicationXIDs, xid) {
		n.log.Info("nvml: application XID, the GPU stays healthy", slog.Uint64("xid", xid), slog.Int("index", n.indexOf(ev.Device)))
		return
	}
	if i := n.indexOf(ev.Device); i >= 0 {
		n.setUnhealthy(i, ReasonXID, fmt.Sprintf("xid %d", xid))
		return
	}
	for i := range n.gpus {
		n.setUnhealthy(i, ReasonXID, fmt.Sprintf("xid %d on a GPU NVML could not name", xid))
	}
}

// indexOf finds the index of an event's device by UUID, then by NVML index; -1 when
// neither works.
func (n *NVML) indexOf(dev nvml.Device) int {
	if dev == nil {
		return -1
	}
	if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		for i := range n.gpus {
			if n.gpus[i].uuid == uuid {
				return i
			}
		}
	}
	if i, ret := dev.GetIndex(); ret == nvml.SUCCESS && i >= 0 && i < len(n.gpus) {
		return i
	}
	return -1
}

// setUnhealthy records the first reason a GPU turned unhealthy and logs it once.
// Callers hold n.mu.
func (n *NVML) setUnhealthy(i int, reason, details string) {
	st := &n.gpus[i]
	if st.unhealthy != "" {
		return
	}
	st.unhealthy = reason + ": " + details
	n.log.Warn("GPU unhealthy until restart", slog.Int("index", i), slog.String("uuid", st.uuid),
		slog.String("reason", st.unhealthy))
}

// read takes one reading of GPU i and updates its state. Callers hold n.mu.
func (n *NVML) read(i int) GPU {
	st := &n.gpus[i]
	g := GPU{Index: i, Processes: []Process{}, Simulated: n.simulated}
	if !st.lost {
		if transient := n.query(i, &g); transient != "" && st.unhealthy == "" {
			g.Unhealthy = transient
		}
	}
	// Identity survives a lost GPU: the heartbeat still names what was lost.
	g.UUID, g.Name, g.MemoryTotalMB = st.uuid, st.name, st.memTotalMB
	if st.lost {
		g.MemoryUsedMB, g.MemoryFreeMB = 0, 0
	}
	if st.unhealthy != "" {
		g.Unhealthy = st.unhealthy
	}
	g.Healthy = g.Unhealthy == ""
	return g
}

// query fills g from NVML. A GPU_IS_LOST answer marks the GPU lost and stops; a
// NOT_SUPPORTED answer leaves the field zero; any other failure is returned as a
// reason for this reading only. Callers hold n.mu.
func (n *NVML) query(i int, g *GPU) (transient string) {
	st := &n.gpus[i]
	failed := func(what string, ret nvml.Return) (stop bool) {
		switch ret {
		case nvml.ERROR_NOT_SUPPORTED:
			return false
		case nvml.ERROR_GPU_IS_LOST:
			st.lost = true
			n.setUnhealthy(i, ReasonGPULost, what+": "+ret.Error())
			return true
		}
		if transient == "" {
			transient = ReasonQueryFailed + ": " + what + ": " + ret.Error()
		}
		return false
	}

	dev, ret := n.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		failed("DeviceGetHandleByIndex", ret)
		return transient
	}
	for _, s := range n.querySteps(i, dev, g) {
		if ret := s.do(); ret != nvml.SUCCESS && failed(s.what, ret) {
			break
		}
	}
	return transient
}

// queryStep is one NVML call of a reading: what it is called, and the call,
// which stores what it read.
type queryStep struct {
	what string
	do   func() nvml.Return
}

// querySteps lists the calls that read GPU i through dev into g and the GPU's
// state, in the order query makes them: what the GPU is, then what it is
// doing. Callers hold n.mu.
func (n *NVML) querySteps(i int, dev nvml.Device, g *GPU) []queryStep {
	return append(identitySteps(&n.gpus[i], dev, g), n.activitySteps(i, dev, g)...)
}

// identitySteps read what the GPU is into st: its UUID, name and memory
// size (the memory in use and free into g, from the same call).
func identitySteps(st *gpuState, dev nvml.Device, g *GPU) []queryStep {
	return []queryStep{
		{"GetUUID", func() nvml.Return {
			v, ret := dev.GetUUID()
			if ret == nvml.SUCCESS {
				st.uuid = v
			}
			return ret
		}},
		{"GetName", func() nvml.Return {
			v, ret := dev.GetName()
			if ret == nvml.SUCCESS {
				st.name = v
			}
			return ret
		}},
		{"GetMemoryInfo", func() nvml.Return {
			m, ret := dev.GetMemoryInfo()
			if ret == nvml.SUCCESS {
				st.memTotalMB = toMB(m.Total)
				g.MemoryUsedMB, g.MemoryFreeMB = toMB(m.Used), toMB(m.Free)
			}
			return ret
		}},
	}
}

// activitySteps read what GPU i is doing into g: utilisation, temperature,
// power, uncorrected ECC errors (checked against the first count) and the
// compute processes on it. Callers hold n.mu.
func (n *NVML) activitySteps(i int, dev nvml.Device, g *GPU) []queryStep {
	return []queryStep{
		{"GetUtilizationRates", func() nvml.Return {
			u, ret := dev.GetUtilizationRates()
			g.UtilizationPct = int(u.Gpu)
			return ret
		}},
		{"GetTemperature", func() nvml.Return {
			t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
			g.TemperatureC = int(t)
			return ret
		}},
		{"GetPowerUsage", func() nvml.Return {
			mw, ret := dev.GetPowerUsage()
			g.PowerW = float64(mw) / 1000
			return ret
		}},
		{"GetTotalEccErrors", func() nvml.Return {
			v, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
			if ret == nvml.SUCCESS {
				g.ECCUncorrected = v
				n.checkECC(i, v)
			}
			return ret
		}},
		{"GetComputeRunningProcesses", func() nvml.Return {
			procs, ret := dev.GetComputeRunningProcesses()
			for _, p := range procs {
				g.Processes = append(g.Processes, Process{PID: int(p.Pid), UsedMemoryMB: toMB(p.UsedGpuMemory)})
			}
			return ret
		}},
	}
}

// checkECC takes the first count as the baseline and makes the GPU unhealthy when a
// later count is higher. Callers hold n.mu.
func (n *NVML) checkECC(i int, count uint64) {
	st := &n.gpus[i]
	if !st.eccSeen {
		st.eccSeen, st.eccBase = true, count
		if count > 0 {
			n.log.Warn("GPU had uncorrected ECC errors before start", slog.Int("index", i), slog.Uint64("count", count))
		}
		return
	}
	if count > st.eccBase {
		n.setUnhealthy(i, ReasonECC, fmt.Sprintf("%d new since start (volatile count %d)", count-st.eccBase, count))
	}
}

// check turns an nvml.Return into an error, nil for SUCCESS (an nvml.Return is an
// error even when it is SUCCESS).
func check(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return ret
}

// toMB converts bytes to MiB; NVML's "not available" becomes 0.
func toMB(bytes uint64) uint64 {
	if bytes == notAvailable {
		return 0
	}
	return bytes >> 20
}
