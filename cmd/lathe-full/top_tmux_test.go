package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// asLatheEnv, set to 1, makes the test binary run as the lathe CLI (its
// arguments the command line): TestTopFitsTmux80x24 runs it in tmux.
const asLatheEnv = "LATHE_TEST_RUN_AS_LATHE"

func TestMain(m *testing.M) {
	if os.Getenv(asLatheEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
	}
	os.Exit(m.Run())
}

// TestTopFitsTmux80x24: the live `lathe top` (bubbletea on a real
// terminal: tmux 80×24, the test binary running as the CLI against the
// real scheduler handler over a real redis-server) keeps its title, the
// whole queue summary and its keys line on screen with 8 GPUs, a running
// job and 7 waiting, and no line wider than 80 cells; q quits it. It
// lost the title and the queue summary before (bubbletea keeps a view's
// last rows). It fails, never skips, without tmux (scripts/setup.sh
// --test installs it).
func TestTopFitsTmux80x24(t *testing.T) {
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatal("tmux is not installed (scripts/setup.sh --test installs it):", err)
	}
	d := newTestDaemon(t, routeConfig, 0)
	d.heartbeat(t, jobstore.Node{Name: "gpu-1", Incarnation: "i1", Backend: "local", Slots: 2, GPUs: h100s(8)})
	spec := writeFile(t, t.TempDir(), "job.yaml", routableSpec)
	var ids []string
	for range 8 {
		r := lathe(t, d.url, "-o", "json", "submit", spec)
		var j jobtype.Job
		if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &j) != nil {
			t.Fatalf("submit: exit %d; %s %s", r.code, r.stdout, r.stderr)
		}
		ids = append(ids, j.ID)
	}
	if err := d.store.Dispatch(d.ctx, jobstore.DispatchParams{JobID: ids[0], Attempt: 1, Node: "gpu-1", Backend: "local", Capacity: 1, GPUs: []int{3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.store.Claim(d.ctx, jobstore.ClaimParams{ID: ids[0], Attempt: 1, Node: "gpu-1", Incarnation: "i1", Lease: time.Hour}); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "tmux.sock")
	tm := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	// sh writes the CLI's exit status to a file when it ends (tmux's own
	// pane_dead_status is not always filled in when the pane closes).
	statusFile := filepath.Join(t.TempDir(), "status")
	if out, err := tm("new-session", "-d", "-x", "80", "-y", "24", "-e", asLatheEnv+"=1", "-e", "LATHE_SERVER="+d.url,
		"-e", "TERM=xterm-256color", "sh", "-c", `"$0" top; echo $? > "$1.tmp" && mv "$1.tmp" "$1"; sleep 60`, exe, statusFile); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })
	var screen string
	if !waitfor.Poll(20*time.Second, func() bool {
		out, err := tm("capture-pane", "-p")
		screen = out
		return err == nil && strings.Contains(out, "q quits") && strings.Contains(out, "RUNNING (1)")
	}) {
		t.Fatalf("lathe top never drew its overview in tmux 80x24:\n%s", screen)
	}
	lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
	if len(lines) > 24 || !strings.HasPrefix(lines[0], "lathe top · ") {
		t.Errorf("screen has %d lines, want at most 24, the first the title:\n%s", len(lines), screen)
	}
	for _, want := range []string{"QUEUES", "pending 7 · queued 7", "running 1", "queued by priority: urgent 0 · normal 7 · batch 0",
		"oldest wait ", ids[0], "GPUS", "more lines (a taller terminal shows them)"} {
		if !strings.Contains(screen, want) {
			t.Errorf("the 80x24 screen lacks %q:\n%s", want, screen)
		}
	}
	if !strings.Contains(lines[len(lines)-1], "refreshes every 2s · q quits") {
		t.Errorf("the last line is %q, want the keys", lines[len(lines)-1])
	}
	for i, l := range lines {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("line %d is %d cells wide: %q", i+1, n, l)
		}
	}
	if out, err := tm("send-keys", "q"); err != nil {
		t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
	var status string
	waitfor.True(t, 10*time.Second, "lathe top to exit after q", func() bool {
		b, err := os.ReadFile(statusFile)
		status = strings.TrimSpace(string(b))
		return err == nil
	})
	if status != strconv.Itoa(exitOK) {
		pane, _ := tm("capture-pane", "-p", "-S", "-100")
		t.Fatalf("q ended lathe top with exit status %s, want %d; the pane:\n%s", status, exitOK, pane)
	}
}
