// Command codemetrics prints the structural figures issue #12 and the
// scheduler-split issue track:
//
//   - production functions, those over -max lines (80 by default) and, as a
//     fixed figure, those over 50 lines (printed once when -max is 50);
//   - production functions with 6 or more parameters (each parameter name
//     counts: func(a, b int) has 2; the receiver does not);
//   - production files directly in scheduler/ (not its subfolders), and the
//     types under scheduler/ (any depth) with more than 30 methods, value and
//     pointer receivers together, generic receivers by their type's name;
//   - imports from internal/ to packages above it, and imports that break the
//     layering of docs/architecture.md ("Packages": what each package may
//     import; importRules below is that table);
//   - the packages `go list -deps` names for cmd/lathe-full and cmd/lathe, and whether they link
//     the daemon's libraries (asynq, asynqmon, Prometheus' client_golang).
//
// Run it from the repository root:
//
//	go run ./scripts/codemetrics [-max 80] [-v]
//
// -v lists what each figure counts: the functions over -max lines, those with
// 6 or more parameters, the top-level scheduler files, the ten types under
// scheduler/ with the most methods, upward imports and linked daemon packages.
//
// Lengths are counted from the func keyword to the closing brace, as gofmt lays
// them out. Test files and generated files are not production code.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const module = "github.com/lathe-ml/lathe/"

// The fixed thresholds the issues track.
const (
	longLines   = 50 // a function over this many lines is long, whatever -max says
	manyParams  = 6  // a function with this many parameters or more has too many
	manyMethods = 30 // a type under scheduler/ with more methods than this is too wide
	typesShown  = 10 // -v lists this many of the widest types under scheduler/
)

// daemonLibraries are the module paths the CLI must never link: the queue,
// its web UI, the metrics exporter and the Kubernetes client (the
// kubernetes worker's) belong to lathed.
var daemonLibraries = []string{
	"github.com/hibiken/asynq",
	"github.com/hibiken/asynqmon",
	"github.com/prometheus/client_golang",
	"k8s.io/client-go",
	"k8s.io/api",
	"k8s.io/apimachinery",
}

// function is one production function: where it is, its name (Type.name for
// a method), its length in lines and its number of parameters.
type function struct {
	pos    string
	name   string
	lines  int
	params int
}

// typeKey names a type by its folder and package, so that two packages of
// one name keep their types apart.
type typeKey struct {
	dir, name string // name is package.Type
}

// figures is what measure finds in a tree's production files.
type figures struct {
	funcs    []function
	upward   []string        // imports from internal/ to packages above it
	topLevel []string        // production files directly in scheduler/
	methods  map[typeKey]int // methods of each type under scheduler/
}

func main() {
	maxLines := flag.Int("max", 80, "a function longer than this many lines is counted")
	verbose := flag.Bool("v", false, "list what each figure counts")
	flag.Parse()
	if err := run(os.Stdout, ".", *maxLines, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "codemetrics:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, root string, maxLines int, verbose bool) error {
	fig, err := measure(root)
	if err != nil {
		return err
	}
	report(w, fig, maxLines, verbose)
	bad, err := layerViolations(root)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "imports against the layering rules: %d\n", len(bad))
	list(w, bad)
	for _, cli := range []string{"cmd/lathe-full", "cmd/lathe"} {
		deps, err := listDeps(root, "./"+cli)
		if err != nil {
			return err
		}
		linked := daemonLinks(deps)
		fmt.Fprintf(w, "packages in go list -deps ./%s: %d\n", cli, len(deps))
		fmt.Fprintf(w, "%s links asynq/asynqmon/client_golang/k8s.io: %s\n", cli, yesNo(len(linked) > 0))
		if verbose {
			list(w, linked)
		}
		if cli == "cmd/lathe" {
			heavy := frontLinks(deps)
			fmt.Fprintf(w, "cmd/lathe (the front) links net/http, cobra or crypto/tls: %s\n", yesNo(len(heavy) > 0))
			if verbose {
				list(w, heavy)
			}
		}
	}
	return nil
}

// frontLibraries are what the CLI's front (cmd/lathe) must not link: each
// costs its start-up time, which is what the front exists to save
// (cmd/lathe's doc comment).
var frontLibraries = []string{"net/http", "crypto/tls", "github.com/spf13/cobra"}

// frontLinks lists the packages of deps that frontLibraries name.
func frontLinks(deps []string) []string {
	var out []string
	for _, d := range deps {
		for _, lib := range frontLibraries {
			if d == lib || strings.HasPrefix(d, lib+"/") {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// report prints the figures measure found, and with verbose what each counts.
func report(w io.Writer, fig *figures, maxLines int, verbose bool) {
	fmt.Fprintf(w, "production functions: %d\n", len(fig.funcs))
	longs := longer(fig.funcs, maxLines)
	fmt.Fprintf(w, "production functions over %d lines: %d\n", maxLines, len(longs))
	if verbose {
		for _, f := range longs {
			fmt.Fprintf(w, "  %4d  %s  %s\n", f.lines, f.name, f.pos)
		}
	}
	if maxLines != longLines {
		fmt.Fprintf(w, "production functions over %d lines: %d\n", longLines, len(longer(fig.funcs, longLines)))
	}
	wide := withParams(fig.funcs, manyParams)
	fmt.Fprintf(w, "production functions with %d or more parameters: %d\n", manyParams, len(wide))
	if verbose {
		for _, f := range wide {
			fmt.Fprintf(w, "  %4d  %s  %s\n", f.params, f.name, f.pos)
		}
	}
	fmt.Fprintf(w, "production files at scheduler/ top level: %d\n", len(fig.topLevel))
	if verbose {
		list(w, fig.topLevel)
	}
	types := byMethods(fig.methods)
	fmt.Fprintf(w, "types under scheduler/ with more than %d methods: %d\n", manyMethods, countOver(types, manyMethods))
	if verbose {
		for _, t := range types[:min(len(types), typesShown)] {
			fmt.Fprintf(w, "  %4d  %s\n", t.methods, t.name)
		}
	}
	fmt.Fprintf(w, "imports from internal/ to packages above it: %d\n", len(fig.upward))
	if verbose {
		list(w, fig.upward)
	}
}

func list(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// longer is the functions over maxLines lines, longest first.
func longer(funcs []function, maxLines int) []function {
	var out []function
	for _, f := range funcs {
		if f.lines > maxLines {
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].lines > out[j].lines })
	return out
}

// withParams is the functions with n or more parameters, most first.
func withParams(funcs []function, n int) []function {
	var out []function
	for _, f := range funcs {
		if f.params >= n {
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].params > out[j].params })
	return out
}

// typeMethods is a type under scheduler/ with its number of methods.
type typeMethods struct {
	name    string
	methods int
}

// byMethods is every type in methods, most methods first, then by name.
func byMethods(methods map[typeKey]int) []typeMethods {
	out := make([]typeMethods, 0, len(methods))
	for k, n := range methods {
		out = append(out, typeMethods{name: k.name, methods: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].methods != out[j].methods {
			return out[i].methods > out[j].methods
		}
		return out[i].name < out[j].name
	})
	return out
}

func countOver(types []typeMethods, n int) int {
	c := 0
	for _, t := range types {
		if t.methods > n {
			c++
		}
	}
	return c
}

// measure reads every production file under root for the figures.
func measure(root string) (*figures, error) {
	fset := token.NewFileSet()
	fig := &figures{methods: map[typeKey]int{}}
	err := walkProduction(root, func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		fig.add(fset, filepath.ToSlash(rel), f)
		return nil
	})
	return fig, err
}

// add counts one production file, rel its slash-separated path under the root.
func (fig *figures) add(fset *token.FileSet, rel string, f *ast.File) {
	dir := filepath.ToSlash(filepath.Dir(rel))
	if dir == "scheduler" {
		fig.topLevel = append(fig.topLevel, rel)
	}
	if covers("internal/", dir) {
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, module) && !strings.HasPrefix(p, module+"internal/") {
				fig.upward = append(fig.upward, fmt.Sprintf("%s imports %s", rel, p))
			}
		}
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		fn := describe(fset, rel, fd)
		fig.funcs = append(fig.funcs, fn)
		if fd.Recv != nil && covers("scheduler", dir) {
			fig.methods[typeKey{dir, f.Name.Name + "." + recvType(fd)}]++
		}
	}
}

// describe is fd's place, name, length and parameter count.
func describe(fset *token.FileSet, rel string, fd *ast.FuncDecl) function {
	start := fset.Position(fd.Pos())
	end := fset.Position(fd.End())
	name := fd.Name.Name
	if fd.Recv != nil {
		name = recvType(fd) + "." + name
	}
	params := 0
	for _, field := range fd.Type.Params.List {
		params += max(len(field.Names), 1)
	}
	return function{
		pos:    fmt.Sprintf("%s:%d", rel, start.Line),
		name:   name,
		lines:  end.Line - start.Line + 1,
		params: params,
	}
}

// listDeps is what `go list -deps pkg` prints, run in root.
func listDeps(root, pkg string) ([]string, error) {
	cmd := exec.Command("go", "list", "-deps", pkg)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w: %s", pkg, err, strings.TrimSpace(stderr.String()))
	}
	return strings.Fields(string(out)), nil
}

// daemonLinks is the packages of deps that belong to daemonLibraries.
func daemonLinks(deps []string) []string {
	var out []string
	for _, d := range deps {
		for _, lib := range daemonLibraries {
			if d == lib || strings.HasPrefix(d, lib+"/") {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// walkProduction calls fn with the path of every production Go file under
// root: not a test, not under testdata/, node_modules/ or a dot folder.
func walkProduction(root string, fn func(path string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return fn(path)
	})
}

// importRules is the layering of docs/architecture.md: a package (matched by
// the longest prefix of its folder) may import, of Lathe's own packages,
// only those under one of the listed prefixes, its own folder, and the
// folders below it that no rule of their own covers (scheduler may not import
// scheduler/sim or scheduler/api unless its rule lists them). The rules name
// Lathe's packages only: which outside modules a package links (asynq,
// Prometheus) is the CLI's figure above, not a rule here.
// cmd/ wires everything and may import anything, but for the CLI's two
// binaries, cmd/lathe-full and its front cmd/lathe.
var importRules = []struct {
	pkg    string
	mayUse []string
}{
	{"internal/", []string{"internal/"}},
	{"scheduler/placement", nil},
	{"scheduler/sweep", []string{"internal/"}},
	{"scheduler/cron", []string{"internal/"}},
	{"scheduler/routing/routecfg", []string{"internal/"}},
	{"scheduler/routing", []string{"internal/", "scheduler/routing"}},
	// The pure decisions and the simulator over them read plain types,
	// never the Redis store (internal/jobstore) or the ledger.
	{"scheduler/policy", []string{"internal/jobspec", "internal/jobtype", "internal/poolstate", "scheduler/placement", "scheduler/routing"}},
	{"scheduler/sim", []string{"internal/jobspec", "internal/jobtype", "internal/poolstate", "internal/trace", "scheduler/policy", "scheduler/placement", "scheduler/routing"}},
	// The contract between the HTTP API and the control plane: who asks,
	// what may be asked, the typed admission errors.
	{"scheduler/plane", []string{"internal/", "scheduler/policy", "scheduler/routing", "scheduler/cron"}},
	// The HTTP API (the anchors keep their HTTP apart from their control
	// loops): it reaches the control plane through plane.Plane, so it
	// never imports scheduler, and scheduler never imports it (cmd/lathed
	// wires the two). It may link asynq, asynqmon and Prometheus, which
	// are not Lathe's.
	{"scheduler/api", []string{"internal/", "scheduler/plane", "scheduler/policy", "scheduler/routing", "scheduler/cron", "scheduler/sweep"}},
	// Test support: the real control plane and API wired as cmd/lathed
	// wires them, for _test files only.
	{"scheduler/apitest", []string{"internal/", "scheduler", "scheduler/api", "scheduler/plane"}},
	{"scheduler", []string{"internal/", "scheduler/placement", "scheduler/routing", "scheduler/sweep", "scheduler/cron", "scheduler/policy", "scheduler/plane"}},
	{"backends/", []string{"internal/", "backends/"}},
	{"worker", []string{"internal/", "backends/", "scheduler/routing"}},
	{"scripts", []string{"internal/"}},
	// The CLI links the client and the pure packages, never the daemon
	// (scheduler, worker, backends/: asynq, Prometheus, the cloud SDKs).
	{"cmd/lathe-full", []string{"internal/", "scheduler/sim", "scheduler/policy", "scheduler/placement", "scheduler/routing", "scheduler/sweep", "scheduler/cron"}},
	// Its front, which starts fast, reads specs and nothing else of ours.
	{"cmd/lathe", []string{"internal/jobspec", "internal/jobtype", "internal/specpath"}},
	{"cmd/", []string{""}},
}

// layerViolations lists every import of a production file under root that
// importRules does not allow.
func layerViolations(root string) ([]string, error) {
	fset := token.NewFileSet()
	var bad []string
	err := walkProduction(root, func(path string) error {
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		rule, allowed, ok := rulesFor(dir)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: no layering rule covers %s (add one to importRules and docs/architecture.md)", rel, dir))
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, module) {
				continue
			}
			p = strings.TrimPrefix(p, module)
			if !permitted(p, dir, rule, allowed) {
				bad = append(bad, fmt.Sprintf("%s imports %s (%s may import only %v)", rel, p, dir, allowed))
			}
		}
		return nil
	})
	return bad, err
}

// rulesFor is the rule of the longest package prefix that covers dir: that
// prefix and what it may use.
func rulesFor(dir string) (rule string, allowed []string, found bool) {
	for _, r := range importRules {
		if covers(r.pkg, dir) && (!found || len(r.pkg) > len(rule)) {
			rule, allowed, found = r.pkg, r.mayUse, true
		}
	}
	return rule, allowed, found
}

// covers reports whether rule prefix pkg names dir: a prefix ending in "/"
// covers every folder below it; one without covers that folder and those
// below it.
func covers(pkg, dir string) bool {
	if strings.HasSuffix(pkg, "/") {
		return strings.HasPrefix(dir+"/", pkg)
	}
	return dir == pkg || strings.HasPrefix(dir, pkg+"/")
}

// permitted reports whether the package in dir, under rule, may import imp.
func permitted(imp, dir, rule string, allowed []string) bool {
	if covers(dir, imp) {
		if own, _, _ := rulesFor(imp); own == rule {
			return true // its own folder, or below it under the same rule
		}
	}
	for _, a := range allowed {
		if a == "" || covers(a, imp) {
			return true
		}
	}
	return false
}

// recvType is the name of the type a method is declared on, without its
// pointer or type parameters.
func recvType(fd *ast.FuncDecl) string {
	if len(fd.Recv.List) != 1 {
		return "?"
	}
	return typeName(fd.Recv.List[0].Type)
}

func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.ParenExpr:
		return typeName(t.X)
	case *ast.IndexExpr:
		return typeName(t.X)
	case *ast.IndexListExpr:
		return typeName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
