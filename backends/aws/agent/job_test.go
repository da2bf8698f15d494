package agent

import (
	"strings"
	"testing"
)

func TestParseJobURI(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want JobURI
		ok   bool
	}{
		{"s3://b/runs/j1/3/job.json", JobURI{Bucket: "b", Prefix: "runs/j1/3/", JobID: "j1", Attempt: 3}, true},
		{"s3://b/a/b/c/j1/12/job.json", JobURI{Bucket: "b", Prefix: "a/b/c/j1/12/", JobID: "j1", Attempt: 12}, true},
		{"s3://b/j1/1/job.json", JobURI{Bucket: "b", Prefix: "j1/1/", JobID: "j1", Attempt: 1}, true},
		{"s3://b/runs/j1/0/job.json", JobURI{}, false},
		{"s3://b/runs/j1/01/job.json", JobURI{}, false},
		{"s3://b/runs/j1/x/job.json", JobURI{}, false},
		{"s3://b/runs/j1/1/other.json", JobURI{}, false},
		{"s3://b/1/job.json", JobURI{}, false},
		{"s3://b/runs/../1/job.json", JobURI{}, false},
		{"s3://b//j1/1/job.json", JobURI{}, false},
		{"file:///runs/j1/1/job.json", JobURI{}, false},
		{"s3:///runs/j1/1/job.json", JobURI{}, false},
	} {
		got, err := ParseJobURI(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseJobURI(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	u, _ := ParseJobURI("s3://b/runs/j1/3/job.json")
	if k := u.EventsKey(1); k != "runs/j1/3/events/000001.jsonl" {
		t.Errorf("EventsKey(1) = %s", k)
	}
	if k := u.Key(StatusObject); k != "runs/j1/3/status.json" {
		t.Errorf("status key = %s", k)
	}
}

func TestStepOf(t *testing.T) {
	for in, want := range map[string]int{"ckpt-100": 100, "ckpt-9": 9, "x": 0, "": 0} {
		if got := stepOf(in); got != want {
			t.Errorf("stepOf(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestNoDefaultShutdownInTests: Run refuses a Config without Shutdown in a
// test binary instead of powering the machine off.
func TestNoDefaultShutdownInTests(t *testing.T) {
	_, err := Run(t.Context(), Config{JobURI: "s3://b/p/j/1/job.json", store: newMemStore()})
	if err == nil || !strings.Contains(err.Error(), "Shutdown must be set") {
		t.Fatalf("Run without Shutdown in a test: %v", err)
	}
}
