package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTreeKeepsItsLayers holds the tree to the layering of
// docs/architecture.md: no production import outside importRules.
func TestTreeKeepsItsLayers(t *testing.T) {
	bad, err := layerViolations("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// TestLayerViolationsAreFound runs the check on a tree that breaks five
// rules (the CLI importing the daemon's scheduler, internal/ importing
// scheduler/, placement importing routing, policy importing the scheduler
// it serves and the Redis store) and keeps three (worker importing internal/, sim importing
// policy, lathed importing the scheduler), so the check above can fail.
func TestLayerViolationsAreFound(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("internal/x/x.go", "package x\nimport _ \""+module+"scheduler\"\n")
	write("scheduler/placement/p.go", "package placement\nimport _ \""+module+"scheduler/routing\"\n")
	write("worker/w.go", "package worker\nimport _ \""+module+"internal/x\"\n")
	write("internal/x/x_test.go", "package x\nimport _ \""+module+"cmd/lathe\"\n") // tests may
	write("cmd/lathe/main.go", "package main\nimport _ \""+module+"scheduler\"\n")
	write("cmd/lathed/main.go", "package main\nimport _ \""+module+"scheduler\"\n")
	write("scheduler/policy/p.go", "package policy\nimport _ \""+module+"scheduler\"\n")
	write("scheduler/policy/q.go", "package policy\nimport _ \""+module+"internal/jobstore\"\n")
	write("scheduler/sim/s.go", "package sim\nimport _ \""+module+"scheduler/policy\"\n")
	bad, err := layerViolations(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 5 || !strings.Contains(bad[0], "cmd/lathe/main.go imports scheduler") ||
		!strings.Contains(bad[1], "internal/x/x.go imports scheduler") ||
		!strings.Contains(bad[2], "scheduler/placement/p.go imports scheduler/routing") ||
		!strings.Contains(bad[3], "scheduler/policy/p.go imports scheduler") ||
		!strings.Contains(bad[4], "scheduler/policy/q.go imports internal/jobstore") {
		t.Fatalf("violations = %q, want the five broken rules", bad)
	}
}
