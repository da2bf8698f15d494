package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

var topNow = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// sampleOverview is an overview as the scheduler answers it, with a
// hostile job name (an OSC 52 clipboard write and a bidi override) that
// must reach the terminal escaped.
func sampleOverview() *wire.Overview {
	started := topNow.Add(-90 * time.Second)
	est := topNow.Add(3 * time.Hour)
	return &wire.Overview{
		At: topNow,
		Queues: wire.OverviewQueues{Pending: 3, ByState: map[jobtype.State]int64{"queued": 3, "running": 2, "succeeded": 7},
			ByPriority: map[string]int64{"urgent": 1, "normal": 2}, OldestWaitS: 600, OldestJob: "j-oldest", Burst: 1},
		Running: []wire.RunningJob{
			{ID: "j-run", Name: "tiny-lora", State: "running", Backend: "local", Node: "n1", GPUs: []int{0, 1},
				Step: 40, TotalSteps: 120, Loss: 1.93, StartedAt: &started},
			{ID: "j-cloud", Name: "evil\x1b]52;c;aGk=\x07\u202ename", State: "provisioning", Backend: "aws-eu", Node: "cloud:aws-eu",
				GPUs: []int{}, CostUSD: 1.86},
		},
		Nodes: []wire.NodeGPUs{{Name: "n1", Backend: "local", GPUs: []wire.OverviewGPU{
			{GPU: jobtype.GPU{Node: "n1", Index: 0, Name: "NVIDIA H100 80GB HBM3", UtilizationPct: 97, MemoryUsedMB: 40000, MemoryTotalMB: 81559, Healthy: true, JobID: "j-run"}, Busy: true},
			{GPU: jobtype.GPU{Node: "n1", Index: 1, Name: "NVIDIA H100 80GB HBM3", Healthy: false, Unhealthy: "XID 79"}},
			{GPU: jobtype.GPU{Node: "n1", Index: 2, Name: "NVIDIA H100 80GB HBM3", Healthy: true}, Busy: true},
		}}, {Name: "sim", Simulated: true, GPUs: []wire.OverviewGPU{}}},
		Cloud: wire.OverviewCloud{USDPerHour: 1.86, Backends: []wire.CloudBackend{
			{Name: "aws-eu", Instances: 1, USDPerHour: 1.86, Month: "2026-12", SpentUSD: 100, ReservedUSD: 25, LimitUSD: 500}}},
		Waiting: []wire.WaitingJob{{ID: "j-oldest", Name: "big", Priority: "urgent", Backend: "local", CreatedAt: topNow.Add(-10 * time.Minute),
			Wait: &jobtype.WaitInfo{Position: 1, EstimatedStart: &est, Reason: "needs 8 GPUs, 1 free"}}},
	}
}

// TestTopModelView: the model's View of an overview shows each panel's
// numbers, a progress bar per running job, and the server's text escaped.
func TestTopModelView(t *testing.T) {
	m := newTopModel(context.Background(), nil, func() time.Time { return topNow }, topInterval)
	m.styles = plainStyles()
	if v := m.View(); !strings.Contains(v, "reading the overview") {
		t.Errorf("before the first read: %q", v)
	}
	next, cmd := m.Update(overviewMsg{ov: sampleOverview()})
	if cmd == nil {
		t.Fatal("no next read scheduled after an overview")
	}
	v := next.View()
	for _, want := range []string{
		"pending 3 · queued 3 · running 2 · succeeded 7",
		"urgent 1 · normal 2 · batch 0",
		"oldest wait 10m (j-oldest) · burst to the cloud 1",
		"RUNNING (2)",
		"[######--------------] 40/120", // 40 of 120 steps: 6 of 20 cells
		"1.93", "1m",
		"[--------------------] -", // no total yet
		`evil\x1b]52;c;aGk=\x07\u202ename`,
		"97%", "40000/81559 MB", "unhealthy: XID 79", "(another team's)", "sim (simulated)",
		"CLOUD ($1.86/h now)", "$500.00 (25% spent or reserved)",
		"WAITING (1)", "in 3h", "needs 8 GPUs, 1 free",
		"q quits",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("view lacks %q:\n%s", want, v)
		}
	}
	if strings.ContainsAny(v, "\x1b\x07\u202e") {
		t.Errorf("view holds raw control characters:\n%q", v)
	}
	// A failed read keeps the last overview on screen and says why.
	next, _ = next.Update(overviewMsg{err: errors.New("no Lathe scheduler answered")})
	if v := next.View(); !strings.Contains(v, "tiny-lora") || !strings.Contains(v, "error: no Lathe scheduler answered") {
		t.Errorf("after a failed read:\n%s", v)
	}
}

// TestTopModelKeysAndTicks: q, Esc and Ctrl-C quit; each tick reads the
// overview again.
func TestTopModelKeysAndTicks(t *testing.T) {
	reads := 0
	fetch := func(context.Context) (*wire.Overview, error) { reads++; return sampleOverview(), nil }
	m := newTopModel(context.Background(), fetch, func() time.Time { return topNow }, topInterval)
	for _, k := range []tea.KeyMsg{{Type: tea.KeyRunes, Runes: []rune("q")}, {Type: tea.KeyEsc}, {Type: tea.KeyCtrlC}} {
		_, cmd := m.Update(k)
		if cmd == nil {
			t.Fatalf("%s: no command", k)
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%s does not quit", k)
		}
	}
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("x")}); cmd != nil {
		t.Errorf("x does something")
	}
	msg := m.Init()()
	if om, ok := msg.(overviewMsg); !ok || om.ov == nil || reads != 1 {
		t.Fatalf("Init: %#v after %d reads", msg, reads)
	}
	_, cmd := m.Update(tickMsg{})
	if _, ok := cmd().(overviewMsg); !ok || reads != 2 {
		t.Errorf("a tick did not read the overview again (%d reads)", reads)
	}
}

// TestTopProgramQuits runs the real bubbletea program with q as its input
// and a buffer as its output: it reads, draws and quits.
func TestTopProgramQuits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fetch := func(context.Context) (*wire.Overview, error) { return sampleOverview(), nil }
	var out strings.Builder
	p := tea.NewProgram(newTopModel(ctx, fetch, func() time.Time { return topNow }, time.Hour),
		tea.WithContext(ctx), tea.WithInput(strings.NewReader("q")), tea.WithOutput(&out))
	final, err := p.Run()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if m, ok := final.(topModel); !ok || ctx.Err() != nil || (m.ov == nil && m.err != nil) {
		t.Fatalf("final model %#v, ctx %v", final, ctx.Err())
	}
}

// TestTopAndQueuesAgainstTheDaemon: against the real scheduler's API in
// process, `lathe top` (stdout not a terminal) prints one snapshot with
// the running job, its progress and the node's GPUs; -o json is the
// overview; `lathe queues` shows the overview's queue numbers.
func TestTopAndQueuesAgainstTheDaemon(t *testing.T) {
	d := newTestDaemon(t, routeConfig, 0)
	d.heartbeat(t, jobstore.Node{Name: "host1", Incarnation: "i1", Backend: "local", Slots: 1, GPUs: h100s(2)})
	spec := writeFile(t, t.TempDir(), "job.yaml", routableSpec)
	var ids []string
	for range 3 {
		r := lathe(t, d.url, "-o", "json", "submit", spec)
		var j jobtype.Job
		if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &j) != nil {
			t.Fatalf("submit: exit %d; %s %s", r.code, r.stdout, r.stderr)
		}
		ids = append(ids, j.ID)
	}
	if err := d.store.Dispatch(d.ctx, jobstore.DispatchParams{JobID: ids[0], Attempt: 1, Node: "host1", Backend: "local", Capacity: 1, GPUs: []int{1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.store.Claim(d.ctx, jobstore.ClaimParams{ID: ids[0], Attempt: 1, Node: "host1", Incarnation: "i1", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	pb, _ := json.Marshal(jobtype.Progress{Step: 10, TotalSteps: 20, Loss: 2.5})
	if _, err := d.store.Append(d.ctx, ids[0], 1, []jobstore.EventIn{{Type: jobtype.EventProgress, Data: pb, Field: "progress", Value: string(pb)}}); err != nil {
		t.Fatal(err)
	}
	r := lathe(t, d.url, "top")
	if r.code != exitOK {
		t.Fatalf("top: exit %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"pending 2 · queued 2 · dispatched 0 · provisioning 0 · running 1", "RUNNING (1)", ids[0],
		"[##########----------] 10/20", "2.5", "host1", "NVIDIA H100 80GB HBM3", "WAITING (2)", "not placed by a round yet"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("top lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "q quits") || strings.Contains(r.stdout, "\x1b") {
		t.Errorf("plain output holds the live view's parts:\n%q", r.stdout)
	}
	var ov wire.Overview
	if r := lathe(t, d.url, "top", "-o", "json"); r.code != exitOK || json.Unmarshal([]byte(r.stdout), &ov) != nil ||
		len(ov.Running) != 1 || ov.Running[0].Step != 10 || len(ov.Waiting) != 2 || len(ov.Nodes) != 1 || len(ov.Nodes[0].GPUs) != 2 {
		t.Fatalf("top -o json: exit %d\n%s", r.code, r.stdout)
	}
	r = lathe(t, d.url, "queues")
	oldest := fmt.Sprintf("(%s, ", ov.Queues.OldestJob)
	for _, want := range []string{"Pending (waiting for a place):", "running:", "urgent 0, normal 2, batch 0", oldest,
		"Burst (queued or running on cloud backends):  0", "node:host1"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("queues lacks %q:\n%s", want, r.stdout)
		}
	}
	var q wire.OverviewQueues
	if r := lathe(t, d.url, "queues", "-o", "json"); r.code != exitOK || json.Unmarshal([]byte(r.stdout), &q) != nil ||
		q.Pending != ov.Queues.Pending || q.ByPriority["normal"] != 2 || q.OldestJob != ids[1] || len(q.Queues) != 1 {
		t.Errorf("queues -o json: exit %d\n%s", r.code, r.stdout)
	}
}
