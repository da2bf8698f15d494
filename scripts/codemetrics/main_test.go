package main

import (
	"bytes"
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

// TestTreeKeepsItsShape holds the tree to the structure it was brought to
// (docs/architecture.md): no production function over 80 lines, at most 20
// over 50, at most 12 production files at scheduler/'s top level, and no
// type under scheduler/ with more than 30 methods. Work that grows past one
// splits first (a type's methods into a view of it, as placement's gangs).
func TestTreeKeepsItsShape(t *testing.T) {
	fig, err := measure("../..")
	if err != nil {
		t.Fatal(err)
	}
	over50 := 0
	for _, f := range fig.funcs {
		switch {
		case f.lines > 80:
			t.Errorf("%s (%s) is %d lines: over 80", f.name, f.pos, f.lines)
		case f.lines > 50:
			over50++
		}
	}
	if over50 > 20 {
		t.Errorf("%d production functions over 50 lines, at most 20 (go run ./scripts/codemetrics -max 50 -v lists them)", over50)
	}
	if n := len(fig.topLevel); n > 12 {
		t.Errorf("%d production files at scheduler/'s top level, at most 12: %v", n, fig.topLevel)
	}
	for k, n := range fig.methods {
		if n > 30 {
			t.Errorf("%s (%s) has %d methods, at most 30", k.name, k.dir, n)
		}
	}
}

// TestLayerViolationsAreFound runs the check on a tree that breaks eight
// rules (the CLI importing the daemon's scheduler, internal/ importing
// scheduler/, placement importing routing, policy importing the scheduler
// it serves and the Redis store, the API importing the control plane and the
// control plane the API, the simulator importing the scheduler) and keeps
// five (worker importing internal/, sim importing policy, lathed importing
// the scheduler, the API importing policy and ui), so the check above can
// fail.
func TestLayerViolationsAreFound(t *testing.T) {
	root := t.TempDir()
	write := func(rel, imp string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		src := "package " + strings.ReplaceAll(filepath.Base(filepath.Dir(p)), "-", "") + "\nimport _ \"" + module + imp + "\"\n"
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("internal/x/x.go", "scheduler")
	write("scheduler/placement/p.go", "scheduler/routing")
	write("worker/w.go", "internal/x")
	write("internal/x/x_test.go", "cmd/lathe") // tests may
	write("cmd/lathe/main.go", "scheduler")
	write("cmd/lathe/x.go", "internal/apiclient")
	write("cmd/lathe/y.go", "internal/jobspec")
	write("cmd/lathe-full/main.go", "scheduler")
	write("cmd/lathe-full/s.go", "scheduler/sim")
	write("cmd/lathed/main.go", "scheduler")
	write("scheduler/policy/p.go", "scheduler")
	write("scheduler/policy/q.go", "internal/jobstore")
	write("scheduler/sim/s.go", "scheduler/policy")
	write("scheduler/sim/t.go", "scheduler")
	write("scheduler/api/a.go", "scheduler")
	write("scheduler/api/b.go", "scheduler/policy")
	write("scheduler/api/c.go", "scheduler/plane")
	write("scheduler/s.go", "scheduler/api")
	bad, err := layerViolations(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cmd/lathe/main.go imports scheduler ",
		"cmd/lathe/x.go imports internal/apiclient ",
		"cmd/lathe-full/main.go imports scheduler ",
		"internal/x/x.go imports scheduler ",
		"scheduler/api/a.go imports scheduler ",
		"scheduler/placement/p.go imports scheduler/routing ",
		"scheduler/policy/p.go imports scheduler ",
		"scheduler/policy/q.go imports internal/jobstore ",
		"scheduler/s.go imports scheduler/api ",
		"scheduler/sim/t.go imports scheduler ",
	}
	if len(bad) != len(want) {
		t.Fatalf("violations = %q, want the %d broken rules", bad, len(want))
	}
	for i, w := range want {
		if !strings.Contains(bad[i], w) {
			t.Errorf("violation %d = %q, want %q", i, bad[i], w)
		}
	}
}

// TestFiguresOfATree measures testdata/tree: a top-level scheduler file
// beside a test file and a generated one, a type with 31 methods (value and
// pointer receivers; the test and generated files' methods not counted),
// generic receivers, a package of the same type name below, functions of
// 6 parameters named and unnamed, and functions of 50 and 51 lines.
func TestFiguresOfATree(t *testing.T) {
	fig, err := measure("testdata/tree")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	report(&out, fig, 80, true)
	want := `production functions: 41
production functions over 80 lines: 0
production functions over 50 lines: 1
production functions with 6 or more parameters: 2
     6  six  scheduler/sub/sub.go:11
     6  sixUnnamed  scheduler/sub/sub.go:13
production files at scheduler/ top level: 1
  scheduler/s.go
types under scheduler/ with more than 30 methods: 1
    31  scheduler.S
     3  sub.S
     2  scheduler.G
     1  scheduler.P
imports from internal/ to packages above it: 0
`
	if out.String() != want {
		t.Errorf("report =\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	report(&out, fig, 50, true)
	if got := out.String(); strings.Count(got, "over 50 lines") != 1 || !strings.Contains(got, "  51  fiftyOne  worker/long.go:5\n") {
		t.Errorf("report with -max 50 =\n%s\nwant one line over 50 lines, listing fiftyOne", got)
	}
}

// TestDaemonLinks picks the daemon's libraries out of a dependency list by
// module path: asynq and its subpackages, asynqmon, client_golang; not a
// module whose name only begins like one.
func TestDaemonLinks(t *testing.T) {
	deps := []string{
		"fmt",
		"github.com/hibiken/asynq",
		"github.com/hibiken/asynq/internal/rdb",
		"github.com/hibiken/asynqmon",
		"github.com/hibiken/asynqx",
		"github.com/prometheus/client_golang/prometheus",
		"github.com/prometheus/client_model/go",
		"k8s.io/client-go/kubernetes",
		"k8s.io/apimachinery/pkg/apis/meta/v1",
		"k8s.io/apiserver",
	}
	got := daemonLinks(deps)
	want := []string{deps[1], deps[2], deps[3], deps[5], deps[7], deps[8]}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("daemonLinks = %q, want %q", got, want)
	}
}

// TestCLILinksNoDaemonLibraries holds the CLI (cmd/lathe-full and its front
// cmd/lathe) to linking the client, never the daemon's queue, web UI or
// metrics exporter (docs/architecture.md), and the front to linking none of
// what makes lathe-full slow to start.
func TestCLILinksNoDaemonLibraries(t *testing.T) {
	for _, cli := range []string{"./cmd/lathe-full", "./cmd/lathe"} {
		deps, err := listDeps("../..", cli)
		if err != nil {
			t.Fatal(err)
		}
		if linked := daemonLinks(deps); len(linked) > 0 {
			t.Errorf("%s links %q", cli, linked)
		}
		if heavy := frontLinks(deps); cli == "./cmd/lathe" && len(heavy) > 0 {
			t.Errorf("%s links %q", cli, heavy)
		}
	}
}

// TestFrontLinks: frontLinks finds what it names and nothing else.
func TestFrontLinks(t *testing.T) {
	deps := []string{"net", "net/http", "net/http/httptrace", "crypto/tls", "crypto/rand", "github.com/spf13/cobra", "github.com/spf13/pflag"}
	got := frontLinks(deps)
	want := []string{"net/http", "net/http/httptrace", "crypto/tls", "github.com/spf13/cobra"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("frontLinks = %q, want %q", got, want)
	}
}
