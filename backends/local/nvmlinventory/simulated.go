//go:build cgo

package nvmlinventory

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// simModel is one go-nvml mock server and the power range we give its GPUs.
type simModel struct {
	newServer func() *server.Server
	idleW     float64 // board power at 0% utilisation
	maxW      float64 // board power at 100% (the GPU's TDP)
}

// simModels maps the names in simulatedServers to go-nvml's mock servers.
var simModels = map[string]simModel{
	"dgxa100": {dgxa100.New, 55, 400},   // 8 × A100-SXM4-40GB
	"dgxb200": {dgxb200.New, 120, 1000}, // 8 × B200 180GB
	"dgxh100": {dgxh100.New, 70, 700},   // 8 × H100 80GB
	"dgxh200": {dgxh200.New, 75, 700},   // 8 × H200 141GB
}

// How a simulated GPU looks under a job: the job's process holds jobMemoryPct of the
// memory, utilisation runs between busyUtilMin and busyUtilMin+busyUtilSpan-1 and
// changes at every reading.
const (
	jobMemoryPct  = 70
	busyUtilMin   = 80
	busyUtilSpan  = 20
	busyUtilStep  = 7 // coprime with busyUtilSpan: consecutive readings always differ
	idleTempC     = 32
	busyTempBaseC = 45
)

// The mock server types, aliased so that embedding them keeps the fields unexported.
type (
	mockServer = server.Server
	mockDevice = server.Device
)

// Simulated is a fake NVML, for machines without NVIDIA GPUs and for tests: one of
// go-nvml's mock DGX servers (names, memory sizes, driver and CUDA versions as the mock
// gives them) with state added. Its GPU UUIDs derive from the node name and index, so
// they stay the same across restarts; load follows [Simulated.SetLoad]; and test hooks
// inject faults: [Simulated.LoseGPU], [Simulated.AddECCErrors], [Simulated.InjectXID],
// [Simulated.AddForeignProcess]. It is an nvml.Interface for [New]; the methods the
// adapter uses are overridden here, so that the mock's call log, which grows with every
// call, stays empty on a long-running worker. Its methods are safe for concurrent use.
type Simulated struct {
	*mockServer
	model simModel

	mu   sync.Mutex // guards the state below and in every simDevice and simEventSet
	gpus []*simDevice
	sets []*simEventSet
}

var _ nvml.Interface = (*Simulated)(nil)

// simDevice is one fake GPU: the mock's device plus its load and faults.
type simDevice struct {
	*mockDevice
	sim   *Simulated
	index int

	pid      int // the job's process while busy
	busy     bool
	readings uint64 // utilisation readings while busy; makes utilisation move
	util     uint32 // the last utilisation read
	foreign  []nvml.ProcessInfo
	lost     bool
	ecc      uint64
	stalled  bool // busy but computing nothing (Stall)
}

var _ nvml.Device = (*simDevice)(nil)

// simEventSet is a fake event set: a queue InjectXID fills.
type simEventSet struct {
	*mock.EventSet // the methods not overridden panic, saying so
	sim            *Simulated
	registered     map[int]uint64 // GPU index → event mask
	queue          []nvml.EventData
	notify         chan struct{} // one token when queue grows
}

var _ nvml.EventSet = (*simEventSet)(nil)

// NewSimulated builds the fake of go-nvml's mock server name (one of
// [SimulatedServers]) for node: GPU i has the UUID "GPU-" + the first 16 bytes of
// sha256(node + "/" + i) in UUID form.
func NewSimulated(name, node string) (*Simulated, error) {
	model, ok := simModels[name]
	if !ok {
		return nil, fmt.Errorf("nvmlinventory: no simulated server %q; have %v", name, simulatedServers)
	}
	if node == "" {
		return nil, errors.New("nvmlinventory: simulated GPUs need a node name (their UUIDs derive from it)")
	}
	s := &Simulated{mockServer: model.newServer(), model: model}
	for i, d := range s.Devices {
		md := d.(*mockDevice)
		md.UUID = SimulatedUUID(node, i) // before any use: the mock's own lookups agree
		s.gpus = append(s.gpus, &simDevice{mockDevice: md, sim: s, index: i})
	}
	return s, nil
}

// SimulatedUUID is the UUID of simulated GPU index on node.
func SimulatedUUID(node string, index int) string {
	h := sha256.Sum256([]byte(node + "/" + strconv.Itoa(index)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// SetLoad starts (busy) or stops a job's process pid on GPU index: while busy the GPU
// shows the process holding 70% of its memory, a utilisation of 80-99% that changes at
// every reading, and the temperature and power that go with it. An unknown index is
// ignored.
func (s *Simulated) SetLoad(index, pid int, busy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.gpu(index)
	if d == nil {
		return
	}
	d.busy, d.pid, d.readings = busy, pid, 0
	if !busy {
		d.pid = 0
	}
}

// Stall is a test hook: GPU index keeps its job's process and memory but
// computes nothing (0% utilisation), as under a hung job (a deadlocked
// collective, a stuck data loader).
func (s *Simulated) Stall(index int) error {
	return s.change(index, func(d *simDevice) { d.stalled = true })
}

// LoseGPU is a test hook: from now on GPU index answers ERROR_GPU_IS_LOST, to the
// handle lookup and to every query, as a GPU fallen off the bus does.
func (s *Simulated) LoseGPU(index int) error {
	return s.change(index, func(d *simDevice) { d.lost = true })
}

// AddECCErrors is a test hook: GPU index counts n more uncorrected ECC errors.
func (s *Simulated) AddECCErrors(index int, n uint64) error {
	return s.change(index, func(d *simDevice) { d.ecc += n })
}

// InjectXID is a test hook: an XID critical error event with code xid for GPU index
// goes to every event set that registered the GPU for such events.
func (s *Simulated) InjectXID(index int, xid uint64) error {
	return s.change(index, func(d *simDevice) {
		for _, set := range s.sets {
			if set.registered[index]&nvml.EventTypeXidCriticalError == 0 {
				continue
			}
			set.queue = append(set.queue, nvml.EventData{
				Device:            d,
				EventType:         nvml.EventTypeXidCriticalError,
				EventData:         xid,
				GpuInstanceId:     0xFFFFFFFF,
				ComputeInstanceId: 0xFFFFFFFF,
			})
			select {
			case set.notify <- struct{}{}:
			default:
			}
		}
	})
}

// AddForeignProcess is a test hook: process pid, not started by Lathe, holds usedMB MiB
// on GPU index. It shows in the processes and the memory used, busy or idle.
func (s *Simulated) AddForeignProcess(index, pid int, usedMB uint64) error {
	return s.change(index, func(d *simDevice) {
		d.foreign = append(d.foreign, nvml.ProcessInfo{
			Pid: uint32(pid), UsedGpuMemory: usedMB << 20,
			GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF,
		})
	})
}

func (s *Simulated) change(index int, f func(*simDevice)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.gpu(index)
	if d == nil {
		return noSuchGPU(index)
	}
	f(d)
	return nil
}

// gpu returns GPU index, nil when there is none. Callers hold s.mu.
func (s *Simulated) gpu(index int) *simDevice {
	if index < 0 || index >= len(s.gpus) {
		return nil
	}
	return s.gpus[index]
}

// DeviceGetHandleByIndex returns the fake GPU; ERROR_GPU_IS_LOST once it is lost.
func (s *Simulated) DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.gpu(index)
	switch {
	case d == nil:
		return nil, nvml.ERROR_INVALID_ARGUMENT
	case d.lost:
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return d, nvml.SUCCESS
}

// DeviceGetHandleByUUID returns the fake GPU with that UUID.
func (s *Simulated) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	for i, d := range s.gpus {
		if d.UUID == uuid {
			return s.DeviceGetHandleByIndex(i)
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// DeviceGetHandleByPciBusId returns the fake GPU at that PCI bus id.
func (s *Simulated) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	for i, d := range s.gpus {
		if d.PciBusID == busID {
			return s.DeviceGetHandleByIndex(i)
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// EventSetCreate returns an empty fake event set.
func (s *Simulated) EventSetCreate() (nvml.EventSet, nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := &simEventSet{EventSet: &mock.EventSet{}, sim: s, registered: map[int]uint64{}, notify: make(chan struct{}, 1)}
	s.sets = append(s.sets, set)
	return set, nvml.SUCCESS
}

// EventSetWait waits on a fake event set.
func (s *Simulated) EventSetWait(set nvml.EventSet, timeoutMs uint32) (nvml.EventData, nvml.Return) {
	return set.Wait(timeoutMs)
}

// EventSetFree frees a fake event set.
func (s *Simulated) EventSetFree(set nvml.EventSet) nvml.Return {
	return set.Free()
}

// Wait returns the oldest queued event, waiting up to timeoutMs milliseconds for one;
// ERROR_TIMEOUT when none came.
func (e *simEventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	var timeout <-chan time.Time
	if timeoutMs > 0 {
		t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	for {
		e.sim.mu.Lock()
		if len(e.queue) > 0 {
			ev := e.queue[0]
			e.queue = e.queue[1:]
			e.sim.mu.Unlock()
			return ev, nvml.SUCCESS
		}
		e.sim.mu.Unlock()
		if timeout == nil {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		select {
		case <-e.notify:
		case <-timeout:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
}

// Free unregisters the set: no more events reach it.
func (e *simEventSet) Free() nvml.Return {
	e.sim.mu.Lock()
	defer e.sim.mu.Unlock()
	for i, set := range e.sim.sets {
		if set == e {
			e.sim.sets = append(e.sim.sets[:i], e.sim.sets[i+1:]...)
			return nvml.SUCCESS
		}
	}
	return nvml.ERROR_INVALID_ARGUMENT
}

// read runs f on the device's state under the server's lock; ERROR_GPU_IS_LOST once
// the GPU is lost.
func (d *simDevice) read(f func() nvml.Return) nvml.Return {
	d.sim.mu.Lock()
	defer d.sim.mu.Unlock()
	if d.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	return f()
}

func (d *simDevice) GetIndex() (int, nvml.Return) {
	return d.index, d.read(func() nvml.Return { return nvml.SUCCESS })
}

func (d *simDevice) GetUUID() (string, nvml.Return) {
	return d.UUID, d.read(func() nvml.Return { return nvml.SUCCESS })
}

func (d *simDevice) GetName() (string, nvml.Return) {
	return d.Config.Name, d.read(func() nvml.Return { return nvml.SUCCESS })
}

func (d *simDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	var m nvml.Memory
	ret := d.read(func() nvml.Return {
		m.Total = d.Config.MemoryMB << 20
		for _, p := range d.processes() {
			m.Used += p.UsedGpuMemory
		}
		m.Used = min(m.Used, m.Total)
		m.Free = m.Total - m.Used
		return nvml.SUCCESS
	})
	return m, ret
}

func (d *simDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	var u nvml.Utilization
	ret := d.read(func() nvml.Return {
		d.util = 0
		if d.busy && !d.stalled {
			d.util = uint32(busyUtilMin + d.readings*busyUtilStep%busyUtilSpan)
			d.readings++
			u.Memory = d.util / 2
		}
		u.Gpu = d.util
		return nvml.SUCCESS
	})
	return u, ret
}

func (d *simDevice) GetTemperature(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
	var t uint32
	ret := d.read(func() nvml.Return {
		if sensor != nvml.TEMPERATURE_GPU {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		t = idleTempC + uint32(d.index%4)
		if d.busy {
			t = busyTempBaseC + d.util/4 + uint32(d.index%4)
		}
		return nvml.SUCCESS
	})
	return t, ret
}

func (d *simDevice) GetPowerUsage() (uint32, nvml.Return) {
	var mw uint32
	ret := d.read(func() nvml.Return {
		w := d.sim.model.idleW
		if d.busy {
			w += (d.sim.model.maxW - d.sim.model.idleW) * float64(d.util) / 100
		}
		mw = uint32(w * 1000)
		return nvml.SUCCESS
	})
	return mw, ret
}

func (d *simDevice) GetTotalEccErrors(kind nvml.MemoryErrorType, _ nvml.EccCounterType) (uint64, nvml.Return) {
	var n uint64
	ret := d.read(func() nvml.Return {
		if kind == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
			n = d.ecc
		}
		return nvml.SUCCESS
	})
	return n, ret
}

func (d *simDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	var procs []nvml.ProcessInfo
	ret := d.read(func() nvml.Return {
		procs = d.processes()
		return nvml.SUCCESS
	})
	return procs, ret
}

// processes lists the job's process while busy, then the foreign ones. Callers hold
// d.sim.mu.
func (d *simDevice) processes() []nvml.ProcessInfo {
	procs := make([]nvml.ProcessInfo, 0, len(d.foreign)+1)
	if d.busy {
		procs = append(procs, nvml.ProcessInfo{
			Pid: uint32(d.pid), UsedGpuMemory: (d.Config.MemoryMB * jobMemoryPct / 100) << 20,
			GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF,
		})
	}
	return append(procs, d.foreign...)
}

func (d *simDevice) GetSupportedEventTypes() (uint64, nvml.Return) {
	return nvml.EventTypeXidCriticalError, d.read(func() nvml.Return { return nvml.SUCCESS })
}

func (d *simDevice) RegisterEvents(mask uint64, set nvml.EventSet) nvml.Return {
	return d.read(func() nvml.Return {
		fake, ok := set.(*simEventSet)
		switch {
		case !ok || fake.sim != d.sim:
			return nvml.ERROR_INVALID_ARGUMENT
		case mask&^uint64(nvml.EventTypeXidCriticalError) != 0:
			return nvml.ERROR_NOT_SUPPORTED
		}
		fake.registered[d.index] |= mask
		return nvml.SUCCESS
	})
}
