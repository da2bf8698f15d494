package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/trace"
	"github.com/lathe-ml/lathe/internal/wire"
)

func TestParseSince(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "1d": 24 * time.Hour, " 7d ": 7 * 24 * time.Hour,
		"36h": 36 * time.Hour, "90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "3650d": 3650 * 24 * time.Hour,
	} {
		got, err := parseSince(in)
		if err != nil || got != want {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "0d", "-1d", "1.5d", "xd", "30", "0s", "-5h", "week", "3651d", "99999999999d", "100000h"} {
		if got, err := parseSince(in); err == nil {
			t.Errorf("parseSince(%q) = %v; want an error", in, got)
		}
	}
}

func TestParseExportStates(t *testing.T) {
	got, err := parseExportStates("succeeded, Failed,succeeded,,cancelled")
	if err != nil || !slices.Equal(got, []jobtype.State{"succeeded", "failed", "cancelled"}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, in := range []string{"", ",", "running", "succeeded,queued", "done"} {
		if got, err := parseExportStates(in); err == nil {
			t.Errorf("parseExportStates(%q) = %v; want an error", in, got)
		}
	}
}

// TestExportRow: the mapping of a finished job's record to its trace row.
func TestExportRow(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) *time.Time { x := t0.Add(time.Duration(s * float64(time.Second))); return &x }
	spec := func(gpus int, models ...string) jobspec.Spec {
		var s jobspec.Spec
		s.Resources.GPUs, s.Resources.GPUModels = gpus, models
		s.Residency, s.Priority = []string{"onprem", "eu"}, jobspec.PriorityBatch
		return s
	}
	names := func(node string, index int) string {
		if node == "n1" {
			return "NVIDIA H100 80GB HBM3#" + strconv.Itoa(index)
		}
		return ""
	}
	for _, tc := range []struct {
		name string
		job  jobtype.Job
		want trace.Job
		ok   bool
	}{
		{"local GPUs: the node's name for its first GPU",
			jobtype.Job{ID: "j-1", Backend: "local", Node: "n1", GPUs: []int{3, 4}, CostUSD: 1.25, StartedAt: at(10), FinishedAt: at(70.5), Spec: spec(2, "A100")},
			trace.Job{DurationS: 60.5, GPUs: 2, GPUModel: "NVIDIA H100 80GB HBM3#3", Residency: []string{"onprem", "eu"}, Priority: "batch", Backend: "local", CostUSD: 1.25, ID: "j-1"}, true},
		{"a node gone: the spec's first model",
			jobtype.Job{ID: "j-2", Backend: "local", Node: "gone", GPUs: []int{0}, StartedAt: at(0), FinishedAt: at(1), Spec: spec(1, "A100", "H100")},
			trace.Job{DurationS: 1, GPUs: 1, GPUModel: "A100", Residency: []string{"onprem", "eu"}, Priority: "batch", Backend: "local", ID: "j-2"}, true},
		{"cloud: the instance type is no GPU model, so the spec's",
			jobtype.Job{ID: "j-3", Backend: "aws-eu", Node: jobtype.CloudNode("aws-eu"), GPUs: []int{0}, CostUSD: 3.5,
				Instance: &jobtype.Instance{Type: "p4d.24xlarge"}, StartedAt: at(0), FinishedAt: at(3600), Spec: spec(8, "A100")},
			trace.Job{DurationS: 3600, GPUs: 8, GPUModel: "A100", Residency: []string{"onprem", "eu"}, Priority: "batch", Backend: "aws-eu", CostUSD: 3.5, ID: "j-3"}, true},
		{"no model known anywhere",
			jobtype.Job{ID: "j-4", Node: "gone", GPUs: []int{0}, Route: &jobtype.RouteInfo{Backend: "local"}, StartedAt: at(0), FinishedAt: at(2), Spec: spec(1)},
			trace.Job{DurationS: 2, GPUs: 1, Residency: []string{"onprem", "eu"}, Priority: "batch", Backend: "local", ID: "j-4"}, true},
		{"CPU-only: no model even with gpu_models",
			jobtype.Job{ID: "j-5", Backend: "local", Node: "n1", StartedAt: at(0), FinishedAt: at(2), Spec: spec(0, "A100")},
			trace.Job{DurationS: 2, Residency: []string{"onprem", "eu"}, Priority: "batch", Backend: "local", ID: "j-5"}, true},
		{"cancelled while queued: never started", jobtype.Job{ID: "j-6", FinishedAt: at(5), Spec: spec(1)}, trace.Job{}, false},
		{"no finish", jobtype.Job{ID: "j-7", StartedAt: at(5), Spec: spec(1)}, trace.Job{}, false},
		{"finish before start", jobtype.Job{ID: "j-8", StartedAt: at(5), FinishedAt: at(4), Spec: spec(1)}, trace.Job{}, false},
	} {
		got, ok := exportRow(&tc.job, names)
		if ok != tc.ok || !jobRowEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v, %v\nwant %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func jobRowEqual(a, b trace.Job) bool {
	return a.SubmitS == b.SubmitS && a.DurationS == b.DurationS && a.GPUs == b.GPUs && a.GPUModel == b.GPUModel &&
		slices.Equal(a.Residency, b.Residency) && a.Priority == b.Priority && a.Backend == b.Backend &&
		a.CostUSD == b.CostUSD && a.ID == b.ID
}

// exportServer is an httptest stand-in of GET /api/v1/jobs (state filter,
// newest first, pages of pageSize with a cursor) and GET /api/v1/gpus over
// a fixed job table, recording each request: what `lathe export jobs`
// reads. Team scoping is the real scheduler's (TestTeamReads in scheduler/,
// TestExportJobsE2E in cmd/lathed).
type exportServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
}

func newExportServer(t *testing.T, jobs []*jobtype.Job, pageSize int) *exportServer {
	t.Helper()
	slices.SortFunc(jobs, func(a, b *jobtype.Job) int { return strings.Compare(b.ID, a.ID) }) // newest first
	s := &exportServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.URL.Path+"?"+r.URL.RawQuery)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/gpus":
			_ = json.NewEncoder(w).Encode(wire.GPUList{GPUs: []jobtype.GPU{{Node: "n1", Index: 0, Name: "NVIDIA H100 80GB HBM3"}}})
		case "/api/v1/jobs":
			q := r.URL.Query()
			if q.Get("limit") != "1000" {
				t.Errorf("list with limit %q, want 1000", q.Get("limit"))
			}
			var page []*jobtype.Job
			next := ""
			for _, j := range jobs {
				if string(j.State) != q.Get("state") || (q.Get("cursor") != "" && j.ID >= q.Get("cursor")) {
					continue
				}
				if len(page) == pageSize {
					next = page[len(page)-1].ID
					break
				}
				page = append(page, j)
			}
			_ = json.NewEncoder(w).Encode(apiclient.JobList{Jobs: append([]*jobtype.Job{}, page...), NextCursor: next})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// exportJobs is a table of finished jobs around a --since cutoff: ids sort
// as their submit times (as the store's do).
func exportJobs(now time.Time) []*jobtype.Job {
	mk := func(id string, ageH float64, st jobtype.State, runS float64, gpus int) *jobtype.Job {
		created := now.Add(-time.Duration(ageH * float64(time.Hour)))
		j := &jobtype.Job{ID: id, State: st, CreatedAt: created, Backend: "local", Node: "n1", CostUSD: 0.5}
		if runS >= 0 {
			s, f := created.Add(time.Minute), created.Add(time.Minute+time.Duration(runS*float64(time.Second)))
			j.StartedAt, j.FinishedAt = &s, &f
		} else {
			f := created.Add(time.Minute)
			j.FinishedAt = &f
		}
		j.Spec.Resources.GPUs, j.Spec.Priority, j.Spec.Residency = gpus, jobspec.PriorityNormal, []string{"onprem"}
		if gpus > 0 {
			j.GPUs = []int{0}
		}
		return j
	}
	return []*jobtype.Job{
		mk("j-0000000000000001", 24*40, jobtype.StateSucceeded, 10, 1), // before the window
		mk("j-0000000000000002", 24*20, jobtype.StateSucceeded, 30, 1),
		mk("j-0000000000000003", 24*10, jobtype.StateFailed, 12.25, 0),
		mk("j-0000000000000004", 24*5, jobtype.StateCancelled, -1, 1), // never ran
		mk("j-0000000000000005", 24*2, jobtype.StateCancelled, 5, 1),
		mk("j-0000000000000006", 24*1, jobtype.StateSucceeded, 60, 2),
		mk("j-0000000000000007", 1, jobtype.StateFailed, -1, 1), // refused: never ran
		mk("j-0000000000000008", 0.5, jobtype.StateSucceeded, 90, 1),
	}
}

// TestExportJobsCLI: `lathe export jobs` against a stand-in list API pages
// each state (pages of 2) until the jobs are older than --since, skips the
// jobs that never ran and says how many, and writes a trace that
// trace.Read reads back with submit_s counted from the first job.
func TestExportJobsCLI(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	jobs := exportJobs(now)
	srv := newExportServer(t, jobs, 2)
	res := lathe(t, srv.URL, "export", "jobs")
	if res.code != 0 {
		t.Fatalf("exit %d, stderr %q", res.code, res.stderr)
	}
	if !strings.HasPrefix(res.stdout, strings.Join(trace.Columns, ",")+"\n") {
		t.Errorf("stdout does not start with the header:\n%s", res.stdout)
	}
	rows, err := trace.Read(strings.NewReader(res.stdout))
	if err != nil {
		t.Fatalf("trace.Read: %v\n%s", err, res.stdout)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if want := []string{"j-0000000000000002", "j-0000000000000003", "j-0000000000000006", "j-0000000000000008"}; !slices.Equal(ids, want) {
		t.Fatalf("exported %v, want %v (succeeded and failed in 30d that ran)", ids, want)
	}
	first := jobs[len(jobs)-2].CreatedAt // sorted newest first by the server: j-…02 is second to last
	for i, r := range rows {
		var j *jobtype.Job
		for _, x := range jobs {
			if x.ID == r.ID {
				j = x
			}
		}
		if want := j.CreatedAt.Sub(first).Seconds(); r.SubmitS != want {
			t.Errorf("row %d submit_s %v, want %v", i, r.SubmitS, want)
		}
		if want := j.FinishedAt.Sub(*j.StartedAt).Seconds(); r.DurationS != want {
			t.Errorf("row %d duration_s %v, want %v", i, r.DurationS, want)
		}
		if r.GPUs != j.Spec.Resources.GPUs || r.Backend != "local" || r.Priority != "normal" || r.CostUSD != 0.5 ||
			!slices.Equal(r.Residency, []string{"onprem"}) {
			t.Errorf("row %d %+v does not match job %+v", i, r, j)
		}
		if want := map[bool]string{true: "NVIDIA H100 80GB HBM3", false: ""}[j.Spec.Resources.GPUs > 0]; r.GPUModel != want {
			t.Errorf("row %d gpu_model %q, want %q", i, r.GPUModel, want)
		}
	}
	if rows[0].SubmitS != 0 {
		t.Errorf("first row's submit_s %v, want 0", rows[0].SubmitS)
	}
	if !strings.Contains(res.stderr, "exported 4 jobs from "+first.UTC().Format(time.RFC3339)) ||
		!strings.Contains(res.stderr, "skipped 1 that never ran") {
		t.Errorf("stderr %q: want the summary with 4 exported, 1 skipped", res.stderr)
	}
	// Paging stopped at the first job older than the window: the succeeded
	// pages are [8 6] [2 1], and no page after the one holding j-…01.
	for _, r := range srv.requests {
		if strings.Contains(r, "cursor=j-0000000000000001") || strings.Contains(r, "state=cancelled") || strings.Contains(r, "state=running") {
			t.Errorf("unexpected request %s", r)
		}
	}
	if n := slices.IndexFunc(srv.requests, func(r string) bool { return strings.HasPrefix(r, "/api/v1/gpus") }); n < 0 {
		t.Errorf("no GET /api/v1/gpus in %v", srv.requests)
	}

	// --state cancelled --since 3d -o FILE: the cancelled job that ran.
	out := filepath.Join(t.TempDir(), "jobs.csv")
	res = lathe(t, srv.URL, "export", "jobs", "--state", "cancelled", "--since", "3d", "-o", out)
	if res.code != 0 || res.stdout != "" {
		t.Fatalf("-o FILE: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rows, err = trace.Read(strings.NewReader(string(b)))
	if err != nil || len(rows) != 1 || rows[0].ID != "j-0000000000000005" || rows[0].DurationS != 5 || rows[0].SubmitS != 0 {
		t.Fatalf("cancelled since 3d: %+v, %v\n%s", rows, err, b)
	}
	if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 1 {
		t.Errorf("the folder holds %d entries, want only jobs.csv (no temporary left)", len(ents))
	}

	// Nothing in the window: a header only, exit 0, and says so.
	res = lathe(t, srv.URL, "export", "jobs", "--state", "cancelled", "--since", "1h")
	if res.code != 0 || res.stdout != strings.Join(trace.Columns, ",")+"\n" || !strings.Contains(res.stderr, "exported 0 jobs") {
		t.Errorf("empty export: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
}

// TestExportJobsUsage: bad flags are usage errors (exit 2) naming the flag
// and the value, and nothing is asked of the scheduler.
func TestExportJobsUsage(t *testing.T) {
	srv := newExportServer(t, nil, 10)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--since", "30x"}, `--since "30x"`},
		{[]string{"--since", "-1d"}, `--since "-1d"`},
		{[]string{"--since", "0s"}, `--since "0s"`},
		{[]string{"--state", "running"}, `--state "running"`},
		{[]string{"--state", ""}, `--state ""`},
		{[]string{"-o", "json"}, `-o "json"`},
		{[]string{"extra"}, "takes 0 argument"},
	} {
		res := lathe(t, srv.URL, append([]string{"export", "jobs"}, tc.args...)...)
		if res.code != exitUsage || !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %s", tc.args, res.code, res.stderr, exitUsage, tc.want)
		}
	}
	if len(srv.requests) != 0 {
		t.Errorf("requests %v: want none", srv.requests)
	}
}

// TestExportJobsCap: more jobs than a trace may hold is an error, not a
// truncated export; nothing is written.
func TestExportJobsCap(t *testing.T) {
	now := time.Now()
	srv := newExportServer(t, exportJobs(now), 1000)
	c := apiclient.New(srv.URL, "", nil)
	_, _, err := collectFinished(context.Background(), c, defaultExportStates, now.Add(-defaultExportSince), 3,
		func(context.Context, string, int) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "more than 3 jobs") {
		t.Fatalf("err %v, want more than 3 jobs", err)
	}
	jobs, skipped, err := collectFinished(context.Background(), c, defaultExportStates, now.Add(-defaultExportSince), 4,
		func(context.Context, string, int) string { return "" })
	if err != nil || len(jobs) != 4 || skipped != 1 {
		t.Fatalf("limit 4: %d jobs, %d skipped, %v", len(jobs), skipped, err)
	}
}
