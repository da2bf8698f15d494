package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/wire"
)

// TestSchedules: `lathe schedules` prints each schedule's row (next and
// last ticks relative to a stopped clock) and each last tick's message,
// terminal-safe; -o json is the API's body; no schedules says so. A
// canned GET /api/v1/schedules stands in for the scheduler (the real
// handler is tested in the scheduler package and end to end).
func TestSchedules(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	next, last := now.Add(14*time.Hour), now.Add(-10*time.Hour)
	body := wire.ScheduleList{Schedules: []wire.ScheduleInfo{
		{Name: "nightly-lr", Cron: "0 2 * * *", Timezone: "Europe/Berlin", Kind: "job", File: "/etc/lathe/lr.yaml",
			Concurrency: "forbid", Missed: "skip", StartingDeadline: "1h0m0s", NextTick: &next, LastTick: &last,
			Outcome: "skipped", Message: "concurrency: forbid: the last run j-0000000000000001 is still queued\x1b[2J",
			LastRunID: "j-0000000000000001", LastRunState: "queued"},
		{Name: "fresh", Cron: "@hourly", Timezone: "UTC", Kind: "sweep", NextTick: &next},
	}}
	var empty atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/api/v1/schedules" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if empty.Load() {
			_ = json.NewEncoder(w).Encode(wire.ScheduleList{Schedules: []wire.ScheduleInfo{}})
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	defer srv.Close()
	r := latheAt(t, srv.URL, now, "schedules")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	requireLines(t, "lathe schedules", r.stdout, []string{
		"NAME", "NEXT", "OUTCOME", "nightly-lr", "0 2 * * *", "Europe/Berlin", "2026-03-11 02:00:00Z (in 14h)",
		"2026-03-10 02:00:00Z (10h ago)", "skipped", "j-0000000000000001", "queued",
		`nightly-lr: concurrency: forbid: the last run j-0000000000000001 is still queued\x1b[2J`,
		"fresh", "sweep",
	})
	if strings.Contains(r.stdout, "\x1b") {
		t.Errorf("a control character reached the terminal:\n%q", r.stdout)
	}
	r = latheAt(t, srv.URL, now, "schedules", "-o", "json")
	var got wire.ScheduleList
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &got) != nil || len(got.Schedules) != 2 || got.Schedules[0].Outcome != "skipped" {
		t.Fatalf("-o json: exit %d\n%s", r.code, r.stdout)
	}
	empty.Store(true)
	if r = latheAt(t, srv.URL, now, "schedules"); r.code != exitOK || !strings.Contains(r.stdout, "No schedules") {
		t.Fatalf("no schedules: exit %d\n%s", r.code, r.stdout)
	}
}
