package wire

import (
	"encoding/json"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/ledger"
)

// TestSameBytesAsTheMapsTheyReplace: each answer the handlers wrote as a
// map[string]any before this package encodes to the very same bytes (keys
// in the map's sorted order, the same absent keys).
func TestSameBytesAsTheMapsTheyReplace(t *testing.T) {
	yes, no := true, false
	spec := &jobspec.Spec{Name: "n"}
	route := &jobtype.RouteInfo{Backend: "local"}
	jobs := []*jobtype.Job{{ID: "j-1"}}
	for name, tc := range map[string]struct{ got, want any }{
		"dry run":           {DryRun{DryRun: true, Spec: spec, Route: route}, map[string]any{"dry_run": true, "spec": spec, "route": route}},
		"dry run, no route": {DryRun{DryRun: true, Spec: spec}, map[string]any{"dry_run": true, "spec": spec, "route": (*jobtype.RouteInfo)(nil)}},
		"batch dry run":     {BatchDryRun{DryRun: true, Specs: []*jobspec.Spec{spec}}, map[string]any{"dry_run": true, "specs": []*jobspec.Spec{spec}}},
		"gpus":              {GPUList{GPUs: []jobtype.GPU{}}, map[string]any{"gpus": []jobtype.GPU{}}},
		"nodes":             {NodeList{Nodes: []NodeInfo{{Name: "n1", Jobs: []string{}}}}, map[string]any{"nodes": []NodeInfo{{Name: "n1", Jobs: []string{}}}}},
		"jobs":              {JobList{Jobs: jobs, NextCursor: "c"}, map[string]any{"jobs": jobs, "next_cursor": "c"}},
		"events, none":      {EventList{}, map[string]any{"events": []jobtype.Event(nil)}},
		"records":           {AuditRecords{Records: []ledger.Record{}}, map[string]any{"records": []ledger.Record{}}},
		"healthz down": {Health{Redis: "down: x", Code: CodeUnavailable, Error: "Redis is unreachable: x"},
			map[string]any{"ok": false, "redis": "down: x", "code": "unavailable", "error": "Redis is unreachable: x"}},
		"healthz eviction": {Health{Redis: "up", Code: "eviction_policy", Error: "e", Leader: &no},
			map[string]any{"ok": false, "redis": "up", "code": "eviction_policy", "error": "e", "leader": false}},
		"healthz up": {Health{OK: true, Redis: "up", Leader: &yes}, map[string]any{"ok": true, "redis": "up", "leader": true}},
		"batch refusal": {BatchRefusal{Error: "e", Code: CodeRefused, Reasons: []string{"jobs[1]: r"}},
			map[string]any{"error": "e", "code": "refused", "reasons": []string{"jobs[1]: r"}}},
	} {
		got, err := json.Marshal(tc.got)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(tc.want)
		if string(got) != string(want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}

// TestRefusalSameBytes: a single submit's 422 is the struct it replaced:
// error, code, reasons, decision, in that order.
func TestRefusalSameBytes(t *testing.T) {
	d := Decision{Refused: true, Reasons: []string{"refused: no backend is feasible"}}
	got, _ := json.Marshal(Error{Error: "e", Code: CodeRefused, Reasons: d.Reasons, Decision: &d})
	want, _ := json.Marshal(struct {
		Error    string   `json:"error"`
		Code     string   `json:"code"`
		Reasons  []string `json:"reasons"`
		Decision Decision `json:"decision"`
	}{"e", "refused", d.Reasons, d})
	if string(got) != string(want) {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}
