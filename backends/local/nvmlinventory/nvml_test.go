//go:build cgo

package nvmlinventory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// testBundle is a simulated DGX H100 (a fake: go-nvml's mock server with our state) and
// the adapter over it, logging into logs.
type testBundle struct {
	sim  *Simulated
	src  *NVML
	logs *bytes.Buffer
}

func setup(t *testing.T, node string) *testBundle {
	t.Helper()
	sim, err := NewSimulated("dgxh100", node)
	if err != nil {
		t.Fatal(err)
	}
	return setupWith(t, sim)
}

func setupWith(t *testing.T, sim *Simulated) *testBundle {
	t.Helper()
	logs := &bytes.Buffer{}
	src, err := New(sim, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return &testBundle{sim: sim, src: src, logs: logs}
}

func (b *testBundle) read(t *testing.T) Inventory {
	t.Helper()
	inv, err := b.src.Inventory(context.Background())
	if err != nil {
		t.Fatalf("Inventory: %v", err)
	}
	return inv
}

var uuidForm = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func uuids(t *testing.T, src Source) []string {
	t.Helper()
	inv, err := src.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range inv.GPUs {
		out = append(out, g.UUID)
	}
	return out
}

// Runs on go-nvml's mock DGX H100 server (a fake), opened the way lathed opens it.
func TestSimulatedDGXH100(t *testing.T) {
	ctx := context.Background()
	src, err := Open(ctx, "simulated:dgxh100", "node-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	inv, err := src.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !inv.Simulated || inv.Driver != "550.54.15" || inv.CUDA != "12.4" {
		t.Errorf("inventory header = simulated %v, driver %q, cuda %q; want true, 550.54.15, 12.4", inv.Simulated, inv.Driver, inv.CUDA)
	}
	if len(inv.GPUs) != 8 {
		t.Fatalf("got %d GPUs, want 8", len(inv.GPUs))
	}
	for i, g := range inv.GPUs {
		if g.Index != i || g.Name != "NVIDIA H100 80GB HBM3" || g.MemoryTotalMB != 81920 {
			t.Errorf("GPU %d = index %d, %q, %d MB; want %d, NVIDIA H100 80GB HBM3, 81920 MB", i, g.Index, g.Name, g.MemoryTotalMB, i)
		}
		if g.MemoryUsedMB != 0 || g.MemoryFreeMB != 81920 || g.UtilizationPct != 0 || len(g.Processes) != 0 {
			t.Errorf("idle GPU %d = used %d, free %d, util %d, processes %v", i, g.MemoryUsedMB, g.MemoryFreeMB, g.UtilizationPct, g.Processes)
		}
		if g.TemperatureC < 30 || g.PowerW <= 0 {
			t.Errorf("idle GPU %d = %d °C, %.1f W; want a plausible idle reading", i, g.TemperatureC, g.PowerW)
		}
		if !g.Healthy || g.Unhealthy != "" || !g.Simulated {
			t.Errorf("GPU %d = healthy %v (%q), simulated %v", i, g.Healthy, g.Unhealthy, g.Simulated)
		}
		if !uuidForm.MatchString(g.UUID) {
			t.Errorf("GPU %d UUID %q is not of NVML's form", i, g.UUID)
		}
	}

	first := uuids(t, src)
	if got := slices.Compact(slices.Sorted(slices.Values(first))); len(got) != 8 {
		t.Errorf("UUIDs are not distinct: %v", first)
	}
	again, err := Open(ctx, "simulated:dgxh100", "node-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if second := uuids(t, again); !slices.Equal(first, second) {
		t.Errorf("UUIDs changed between two opens for node-a:\n%v\n%v", first, second)
	}
	other, err := Open(ctx, "simulated:dgxh100", "node-b", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for i, u := range uuids(t, other) {
		if slices.Contains(first, u) {
			t.Errorf("node-b GPU %d has node-a's UUID %s", i, u)
		}
	}
}

// Every server --gpus simulated: accepts is one of go-nvml's mock servers (fakes), and
// gives the names and memory sizes the mock has.
func TestSimulatedServers(t *testing.T) {
	if got := slices.Sorted(maps.Keys(simModels)); !slices.Equal(got, simulatedServers) {
		t.Fatalf("simModels has %v, ParseGPUsFlag accepts %v", got, simulatedServers)
	}
	want := map[string]struct {
		name string
		mb   uint64
	}{
		"dgxa100": {"Mock NVIDIA A100-SXM4-40GB", 40960},
		"dgxb200": {"NVIDIA B200 180GB HBM3e", 184320},
		"dgxh100": {"NVIDIA H100 80GB HBM3", 81920},
		"dgxh200": {"NVIDIA H200 141GB HBM3e", 144384},
	}
	for _, name := range SimulatedServers() {
		src, err := Open(context.Background(), "simulated:"+name, "n1", nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inv, err := src.Inventory(context.Background())
		_ = src.Close()
		if err != nil || len(inv.GPUs) != 8 {
			t.Fatalf("%s: %d GPUs, %v", name, len(inv.GPUs), err)
		}
		if g := inv.GPUs[7]; g.Name != want[name].name || g.MemoryTotalMB != want[name].mb {
			t.Errorf("%s: GPU 7 = %q %d MB, want %q %d MB", name, g.Name, g.MemoryTotalMB, want[name].name, want[name].mb)
		}
	}
	if _, err := NewSimulated("dgxh100", ""); err == nil {
		t.Error("NewSimulated without a node name succeeded")
	}
	if _, err := NewSimulated("dgx2", "n1"); err == nil || !strings.Contains(err.Error(), "dgx2") {
		t.Errorf("NewSimulated(dgx2) = %v, want an error naming it", err)
	}
}

// A GPU fallen off the bus on go-nvml's mock server (a fake) turns unhealthy and keeps
// its identity; the others stay healthy.
func TestGPULost(t *testing.T) {
	b := setup(t, "n1")
	before := b.read(t).GPUs[3]
	if err := b.sim.LoseGPU(3); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		inv := b.read(t)
		g := inv.GPUs[3]
		if g.Healthy || !strings.HasPrefix(g.Unhealthy, ReasonGPULost+": ") || !strings.Contains(g.Unhealthy, "ERROR_GPU_IS_LOST") {
			t.Fatalf("lost GPU = healthy %v, %q", g.Healthy, g.Unhealthy)
		}
		if g.UUID != before.UUID || g.Name != before.Name || g.MemoryTotalMB != 81920 {
			t.Errorf("lost GPU lost its identity: %+v", g)
		}
		for _, other := range inv.GPUs {
			if other.Index != 3 && !other.Healthy {
				t.Errorf("GPU %d unhealthy: %s", other.Index, other.Unhealthy)
			}
		}
	}
	if n := strings.Count(b.logs.String(), "GPU unhealthy until restart"); n != 1 {
		t.Errorf("logged the lost GPU %d times, want once:\n%s", n, b.logs)
	}
	if err := b.sim.LoseGPU(8); !errors.Is(err, ErrNoSuchGPU) {
		t.Errorf("LoseGPU(8) = %v, want ErrNoSuchGPU", err)
	}
}

// New uncorrected ECC errors on go-nvml's mock server (a fake) make a GPU unhealthy;
// errors counted before start do not.
func TestECCErrors(t *testing.T) {
	sim, err := NewSimulated("dgxh100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.AddECCErrors(1, 3); err != nil { // before start: the baseline
		t.Fatal(err)
	}
	b := setupWith(t, sim)
	if g := b.read(t).GPUs[1]; !g.Healthy || g.ECCUncorrected != 3 {
		t.Fatalf("GPU with old ECC errors = healthy %v (%q), count %d; want healthy, 3", g.Healthy, g.Unhealthy, g.ECCUncorrected)
	}
	if err := sim.AddECCErrors(1, 2); err != nil {
		t.Fatal(err)
	}
	g := b.read(t).GPUs[1]
	want := ReasonECC + ": 2 new since start (volatile count 5)"
	if g.Healthy || g.Unhealthy != want || g.ECCUncorrected != 5 {
		t.Fatalf("GPU with new ECC errors = healthy %v, %q, count %d; want %q, 5", g.Healthy, g.Unhealthy, g.ECCUncorrected, want)
	}
	if g := b.read(t).GPUs[0]; !g.Healthy {
		t.Errorf("GPU 0 unhealthy: %s", g.Unhealthy)
	}
}

// An XID critical error event from go-nvml's mock server (a fake) makes its GPU
// unhealthy; an application XID does not.
func TestXIDEvents(t *testing.T) {
	b := setup(t, "n1")
	if b.src.events == nil {
		t.Fatal("no event set registered on the simulated server")
	}
	if err := b.sim.InjectXID(2, 79); err != nil { // 79: GPU has fallen off the bus
		t.Fatal(err)
	}
	if err := b.sim.InjectXID(4, 31); err != nil { // 31: a program's page fault
		t.Fatal(err)
	}
	inv := b.read(t)
	if g := inv.GPUs[2]; g.Healthy || g.Unhealthy != ReasonXID+": xid 79" {
		t.Errorf("GPU 2 after xid 79 = healthy %v, %q", g.Healthy, g.Unhealthy)
	}
	if g := inv.GPUs[4]; !g.Healthy {
		t.Errorf("GPU 4 after application xid 31 = %q, want healthy", g.Unhealthy)
	}
	if g := b.read(t).GPUs[2]; g.Healthy { // the event is gone, the health stays
		t.Error("GPU 2 healthy again on the next reading")
	}
}

// The fake event set (over go-nvml's mock EventSet) wakes a waiter when an event comes.
func TestSimulatedEventWait(t *testing.T) {
	sim, err := NewSimulated("dgxh100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	set, _ := sim.EventSetCreate()
	dev, _ := sim.DeviceGetHandleByIndex(6)
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := set.Wait(0); ret != nvml.ERROR_TIMEOUT {
		t.Fatalf("Wait(0) on an empty set = %v, want ERROR_TIMEOUT", ret)
	}
	go func() { _ = sim.InjectXID(6, 48) }()
	ev, ret := set.Wait(60_000) // returns as soon as the event is queued
	if ret != nvml.SUCCESS || ev.EventData != 48 || ev.EventType != nvml.EventTypeXidCriticalError {
		t.Fatalf("Wait = %+v, %v", ev, ret)
	}
	if i, _ := ev.Device.GetIndex(); i != 6 {
		t.Errorf("event for GPU %d, want 6", i)
	}
	if ret := set.Free(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	_ = sim.InjectXID(6, 48)
	if _, ret := set.Wait(0); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("a freed set got an event: %v", ret)
	}
}

// MarkUnhealthy on go-nvml's mock server (a fake) lasts, and the first reason wins.
func TestMarkUnhealthy(t *testing.T) {
	b := setup(t, "n1")
	if err := b.src.MarkUnhealthy(5, "trainer saw CUDA error 700"); err != nil {
		t.Fatal(err)
	}
	_ = b.sim.AddECCErrors(5, 1)
	want := ReasonMarked + ": trainer saw CUDA error 700"
	for range 2 {
		if g := b.read(t).GPUs[5]; g.Healthy || g.Unhealthy != want {
			t.Fatalf("GPU 5 = healthy %v, %q; want %q", g.Healthy, g.Unhealthy, want)
		}
	}
	for _, i := range []int{-1, 8} {
		if err := b.src.MarkUnhealthy(i, "x"); !errors.Is(err, ErrNoSuchGPU) {
			t.Errorf("MarkUnhealthy(%d) = %v, want ErrNoSuchGPU", i, err)
		}
	}
}

// A foreign process holding half of a GPU on go-nvml's mock server (a fake) shows in
// its memory and processes.
func TestForeignProcess(t *testing.T) {
	b := setup(t, "n1")
	if err := b.sim.AddForeignProcess(5, 4242, 40960); err != nil {
		t.Fatal(err)
	}
	inv := b.read(t)
	g := inv.GPUs[5]
	if g.MemoryUsedMB != 40960 || g.MemoryFreeMB != 40960 || g.MemoryTotalMB != 81920 {
		t.Errorf("half-full GPU memory = used %d, free %d, total %d", g.MemoryUsedMB, g.MemoryFreeMB, g.MemoryTotalMB)
	}
	if want := []Process{{PID: 4242, UsedMemoryMB: 40960}}; !slices.Equal(g.Processes, want) {
		t.Errorf("processes = %v, want %v", g.Processes, want)
	}
	if g.UtilizationPct != 0 || !g.Healthy {
		t.Errorf("half-full idle GPU = util %d, healthy %v", g.UtilizationPct, g.Healthy)
	}
	if other := inv.GPUs[4]; other.MemoryUsedMB != 0 || len(other.Processes) != 0 {
		t.Errorf("GPU 4 shows GPU 5's process: %+v", other)
	}
}

// A job on a GPU of go-nvml's mock server (a fake) moves its readings; it goes back to
// idle values when the job stops.
func TestBusyAndIdle(t *testing.T) {
	b := setup(t, "n1")
	idle := b.read(t).GPUs[0]
	var src Source = b.src
	src.SetLoad(0, 1234, true)

	utils := map[int]bool{}
	for range 4 {
		inv := b.read(t)
		g := inv.GPUs[0]
		utils[g.UtilizationPct] = true
		if g.UtilizationPct < 80 || g.UtilizationPct > 99 {
			t.Errorf("busy utilisation %d%%, want 80-99", g.UtilizationPct)
		}
		if g.MemoryUsedMB != 57344 || g.MemoryFreeMB != 81920-57344 {
			t.Errorf("busy memory used %d, free %d; want 57344 (70%%), 24576", g.MemoryUsedMB, g.MemoryFreeMB)
		}
		if want := []Process{{PID: 1234, UsedMemoryMB: 57344}}; !slices.Equal(g.Processes, want) {
			t.Errorf("busy processes = %v, want %v", g.Processes, want)
		}
		if g.TemperatureC <= idle.TemperatureC || g.PowerW <= idle.PowerW {
			t.Errorf("busy %d °C %.1f W, idle %d °C %.1f W", g.TemperatureC, g.PowerW, idle.TemperatureC, idle.PowerW)
		}
		if g1 := inv.GPUs[1]; g1.UtilizationPct != 0 || g1.MemoryUsedMB != 0 {
			t.Errorf("GPU 1 moved with GPU 0's job: %+v", g1)
		}
	}
	if len(utils) < 4 {
		t.Errorf("busy utilisation did not move: %v", utils)
	}

	src.SetLoad(0, 1234, false)
	src.SetLoad(99, 1, true) // ignored
	if g := b.read(t).GPUs[0]; !equalGPU(g, idle) {
		t.Errorf("after the job: %+v\nwant idle: %+v", g, idle)
	}
}

func equalGPU(a, b GPU) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// rawH100 is go-nvml's mock DGX H100 server (a fake) used directly, with the queries
// the adapter makes filled in as an idle, healthy GPU that reports no events. Tests
// replace single Func fields on it before New.
func rawH100() (*server.Server, []*server.Device) {
	s := dgxh100.New()
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	var devs []*server.Device
	for _, d := range s.Devices {
		md := d.(*server.Device)
		md.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 80 << 30, Free: 80 << 30}, nvml.SUCCESS
		}
		md.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.SUCCESS }
		md.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 30, nvml.SUCCESS }
		md.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 70_000, nvml.SUCCESS }
		md.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return 0, nvml.SUCCESS
		}
		md.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		devs = append(devs, md)
	}
	return s, devs
}

// On go-nvml's mock server (a fake) filled in by hand: GPU_IS_LOST from a query is
// unhealthy for good, NOT_SUPPORTED is no fault, any other failure is unhealthy for one
// reading only.
func TestQueryErrors(t *testing.T) {
	s, devs := rawH100()
	memRet := nvml.SUCCESS
	devs[0].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 80 << 30}, memRet }
	devs[1].GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		return 0, nvml.ERROR_NOT_SUPPORTED // a GPU without ECC
	}
	powerRet := nvml.SUCCESS
	devs[2].GetPowerUsageFunc = func() (uint32, nvml.Return) { return 70_000, powerRet }
	src, err := New(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	read := func() Inventory {
		inv, err := src.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}

	inv := read()
	if inv.Simulated || inv.GPUs[0].Simulated {
		t.Error("a plain mock behind New without Options.Simulated is marked simulated")
	}
	for _, g := range inv.GPUs {
		if !g.Healthy {
			t.Fatalf("GPU %d unhealthy at start: %s", g.Index, g.Unhealthy)
		}
	}

	memRet, powerRet = nvml.ERROR_GPU_IS_LOST, nvml.ERROR_UNKNOWN
	inv = read()
	if g := inv.GPUs[0]; g.Healthy || g.Unhealthy != ReasonGPULost+": GetMemoryInfo: ERROR_GPU_IS_LOST" {
		t.Errorf("GPU 0 after GPU_IS_LOST = healthy %v, %q", g.Healthy, g.Unhealthy)
	}
	if g := inv.GPUs[2]; g.Healthy || g.Unhealthy != ReasonQueryFailed+": GetPowerUsage: ERROR_UNKNOWN" {
		t.Errorf("GPU 2 after ERROR_UNKNOWN = healthy %v, %q", g.Healthy, g.Unhealthy)
	}

	memRet, powerRet = nvml.SUCCESS, nvml.SUCCESS
	calls := len(devs[0].GetMemoryInfoCalls())
	inv = read()
	if g := inv.GPUs[0]; g.Healthy || g.UUID == "" || g.MemoryTotalMB != 81920 {
		t.Errorf("GPU 0 after GPU_IS_LOST = healthy %v, uuid %q, %d MB; want unhealthy, known", g.Healthy, g.UUID, g.MemoryTotalMB)
	}
	if n := len(devs[0].GetMemoryInfoCalls()) - calls; n != 0 {
		t.Errorf("a lost GPU was queried %d more times", n)
	}
	if g := inv.GPUs[1]; !g.Healthy {
		t.Errorf("GPU without ECC support = %q, want healthy", g.Unhealthy)
	}
	if g := inv.GPUs[2]; !g.Healthy || g.PowerW != 70 {
		t.Errorf("GPU 2 after the failure passed = healthy %v (%q), %.1f W", g.Healthy, g.Unhealthy, g.PowerW)
	}
}

// Without the driver: go-nvml's mock Interface (a fake) answers Init with
// ERROR_LIBRARY_NOT_FOUND and has nothing else, so any other call would panic.
func TestNoDriver(t *testing.T) {
	var logs bytes.Buffer
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	src, err := openAuto(lib, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("openAuto without the driver: %v", err)
	}
	inv, err := src.Inventory(context.Background())
	if err != nil || len(inv.GPUs) != 0 || inv.GPUs == nil {
		t.Fatalf("Inventory = %+v, %v; want 0 GPUs, an empty list", inv, err)
	}
	if lines := strings.Split(strings.TrimSpace(logs.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], noDriverMessage) {
		t.Fatalf("log = %q, want the one line %q", logs.String(), noDriverMessage)
	}
	if len(lib.InitCalls()) != 1 {
		t.Errorf("Init called %d times", len(lib.InitCalls()))
	}
	if err := src.MarkUnhealthy(0, "x"); !errors.Is(err, ErrNoSuchGPU) {
		t.Errorf("MarkUnhealthy on no GPUs = %v", err)
	}

	// A library that is there but broken is an error, not 0 GPUs.
	broken := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIB_RM_VERSION_MISMATCH }}
	if _, err := openAuto(broken, slog.New(slog.DiscardHandler)); !errors.Is(err, nvml.ERROR_LIB_RM_VERSION_MISMATCH) ||
		!strings.Contains(err.Error(), "--gpus none") {
		t.Errorf("openAuto with a broken driver = %v", err)
	}
}

// The real go-nvml on this machine: without libnvidia-ml, Init answers
// ERROR_LIBRARY_NOT_FOUND instead of panicking, and Open("auto") gives 0 GPUs.
func TestOpenAutoWithoutDriver(t *testing.T) {
	probe := nvml.New()
	ret := probe.Init()
	if ret == nvml.SUCCESS {
		_ = probe.Shutdown()
		t.Skip("libnvidia-ml is present: TestRealNVML covers this machine")
	}
	if ret != nvml.ERROR_LIBRARY_NOT_FOUND {
		t.Skipf("NVML init = %v: a driver is here but broken", ret)
	}
	var logs bytes.Buffer
	src, err := Open(context.Background(), "auto", "n1", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	inv, err := src.Inventory(context.Background())
	if err != nil || len(inv.GPUs) != 0 {
		t.Fatalf("Inventory = %+v, %v", inv, err)
	}
	if strings.Count(logs.String(), "\n") != 1 || !strings.Contains(logs.String(), noDriverMessage) {
		t.Fatalf("log = %q", logs.String())
	}
}

// The real NVML on a machine with NVIDIA GPUs; skipped elsewhere.
func TestRealNVML(t *testing.T) {
	src, err := New(nvml.New(), Options{Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))})
	if errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Skip("no libnvidia-ml here")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for range 2 {
		start := time.Now()
		inv, err := src.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out, _ := json.MarshalIndent(inv, "", "  ")
		t.Logf("events registered: %v, reading took %v\n%s", src.events != nil, time.Since(start), out)
		if inv.Simulated || inv.Driver == "" || inv.CUDA == "" || len(inv.GPUs) == 0 {
			t.Fatalf("inventory = %+v", inv)
		}
		for _, g := range inv.GPUs {
			if !strings.HasPrefix(g.UUID, "GPU-") || g.Name == "" || g.MemoryTotalMB == 0 || g.MemoryUsedMB+g.MemoryFreeMB > g.MemoryTotalMB {
				t.Errorf("GPU %d = %+v", g.Index, g)
			}
			if !g.Healthy {
				t.Errorf("GPU %d unhealthy: %s", g.Index, g.Unhealthy)
			}
		}
	}

	auto, err := Open(context.Background(), "auto", "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer auto.Close()
	if inv, err := auto.Inventory(context.Background()); err != nil || len(inv.GPUs) == 0 {
		t.Fatalf("Open(auto) on a GPU machine = %d GPUs, %v", len(inv.GPUs), err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// --gpus none loads nothing and has 0 GPUs.
func TestOpenNone(t *testing.T) {
	src, err := Open(context.Background(), "none", "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := src.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(inv)
	if string(out) != `{"driver":"","cuda":"","simulated":false,"gpus":[]}` {
		t.Errorf("inventory JSON = %s", out)
	}
	if _, err := Open(context.Background(), "gpus", "n1", nil); err == nil || !strings.Contains(err.Error(), `"gpus"`) {
		t.Errorf("Open(gpus) = %v, want an error naming the value", err)
	}
}

// The JSON the heartbeat carries, from go-nvml's mock server (a fake).
func TestGPUJSON(t *testing.T) {
	b := setup(t, "n1")
	_ = b.sim.LoseGPU(1)
	inv := b.read(t)
	var healthy, lost map[string]any
	mustRoundTrip(t, inv.GPUs[0], &healthy)
	mustRoundTrip(t, inv.GPUs[1], &lost)
	keys := []string{"index", "uuid", "name", "memory_total_mb", "memory_used_mb", "memory_free_mb",
		"utilization_pct", "temperature_c", "power_w", "ecc_uncorrected", "processes", "healthy", "simulated"}
	if got := slices.Sorted(maps.Keys(healthy)); !slices.Equal(got, slices.Sorted(slices.Values(keys))) {
		t.Errorf("healthy GPU keys = %v", got)
	}
	if _, ok := lost["unhealthy"]; !ok || lost["healthy"] != false {
		t.Errorf("lost GPU JSON = %v", lost)
	}
	if p, ok := healthy["processes"].([]any); !ok || len(p) != 0 {
		t.Errorf(`"processes" = %#v, want []`, healthy["processes"])
	}
}

func mustRoundTrip(t *testing.T, v any, into *map[string]any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		t.Fatal(err)
	}
}

// Close on go-nvml's mock server (a fake) is safe twice; a closed or cancelled
// Inventory fails.
func TestCloseAndCancel(t *testing.T) {
	b := setup(t, "n1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.src.Inventory(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Inventory(cancelled) = %v", err)
	}
	if _, err := Open(ctx, "simulated:dgxh100", "n1", nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Open(cancelled) = %v", err)
	}
	if err := b.src.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.src.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := b.src.Inventory(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Inventory after Close = %v, want ErrClosed", err)
	}
}

// Readings, load changes and faults at once on go-nvml's mock server (a fake), for the
// race detector.
func TestConcurrentUse(t *testing.T) {
	b := setup(t, "n1")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				switch w {
				case 0:
					if _, err := b.src.Inventory(context.Background()); err != nil {
						t.Error(err)
					}
				case 1:
					b.src.SetLoad(i%8, 100+i, i%2 == 0)
				case 2:
					_ = b.sim.InjectXID(i%8, 13)
					_ = b.sim.AddForeignProcess(i%8, 9000+i, 1)
				case 3:
					_ = b.src.MarkUnhealthy(7, "test")
					if _, err := b.src.Inventory(context.Background()); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	inv := b.read(t)
	if g := inv.GPUs[7]; g.Healthy {
		t.Error("GPU 7 marked unhealthy shows healthy")
	}
	if g := inv.GPUs[0]; !g.Healthy {
		t.Errorf("application XIDs made GPU 0 unhealthy: %s", g.Unhealthy)
	}
}
