// Command codemetrics prints the structural counts issue #12 tracks: production
// functions over a length limit, imports from internal/ to packages above it,
// and imports that break the layering of docs/architecture.md ("Packages":
// what each package may import; importRules below is that table).
//
//	go run ./scripts/codemetrics [-max 80] [-v]
//
// Lengths are counted from the func keyword to the closing brace, as gofmt lays
// them out. Test files and generated files are not production code.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const module = "github.com/lathe-ml/lathe/"

type long struct {
	pos   string
	name  string
	lines int
}

func main() {
	maxLines := flag.Int("max", 80, "a function longer than this many lines is counted")
	verbose := flag.Bool("v", false, "list every long function and every upward import")
	flag.Parse()
	if err := run(".", *maxLines, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "codemetrics:", err)
		os.Exit(1)
	}
}

func run(root string, maxLines int, verbose bool) error {
	funcs, longs, upward, err := measure(root, maxLines)
	if err != nil {
		return err
	}
	sort.Slice(longs, func(i, j int) bool { return longs[i].lines > longs[j].lines })
	fmt.Printf("production functions: %d\n", funcs)
	fmt.Printf("production functions over %d lines: %d\n", maxLines, len(longs))
	if verbose {
		for _, l := range longs {
			fmt.Printf("  %4d  %s  %s\n", l.lines, l.name, l.pos)
		}
	}
	fmt.Printf("imports from internal/ to packages above it: %d\n", len(upward))
	if verbose {
		for _, u := range upward {
			fmt.Printf("  %s\n", u)
		}
	}
	bad, err := layerViolations(root)
	if err != nil {
		return err
	}
	fmt.Printf("imports against the layering rules: %d\n", len(bad))
	for _, b := range bad {
		fmt.Printf("  %s\n", b)
	}
	return nil
}

// measure counts the production functions under root, lists those over
// maxLines, and the imports from internal/ to packages above it.
func measure(root string, maxLines int) (funcs int, longs []long, upward []string, err error) {
	fset := token.NewFileSet()
	err = walkProduction(root, func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		if ast.IsGenerated(f) {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if strings.HasPrefix(dir, "internal/") || dir == "internal" {
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(p, module) && !strings.HasPrefix(p, module+"internal/") {
					upward = append(upward, fmt.Sprintf("%s imports %s", path, p))
				}
			}
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			funcs++
			start := fset.Position(fd.Pos())
			end := fset.Position(fd.End())
			n := end.Line - start.Line + 1
			if n > maxLines {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					name = recvName(fd.Recv.List[0].Type) + "." + name
				}
				longs = append(longs, long{pos: fmt.Sprintf("%s:%d", path, start.Line), name: name, lines: n})
			}
		}
		return nil
	})
	return funcs, longs, upward, err
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
// only those under one of the listed prefixes (its own folder always).
// cmd/ wires everything and may import anything, but for cmd/lathe.
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
	{"scheduler", []string{"internal/", "scheduler/placement", "scheduler/routing", "scheduler/sweep", "scheduler/cron", "scheduler/policy"}},
	{"backends/", []string{"internal/", "backends/"}},
	{"worker", []string{"internal/", "backends/", "scheduler/routing"}},
	{"scripts", []string{"internal/"}},
	// The CLI links the client and the pure packages, never the daemon
	// (scheduler, worker, backends/: asynq, Prometheus, the cloud SDKs).
	{"cmd/lathe", []string{"internal/", "scheduler/sim", "scheduler/policy", "scheduler/placement", "scheduler/routing", "scheduler/sweep", "scheduler/cron"}},
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
		allowed, ok := rulesFor(dir)
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
			if !permitted(p, dir, allowed) {
				bad = append(bad, fmt.Sprintf("%s imports %s (%s may import only %v)", rel, p, dir, allowed))
			}
		}
		return nil
	})
	return bad, err
}

// rulesFor is the rule of the longest package prefix that covers dir.
func rulesFor(dir string) ([]string, bool) {
	best, found := -1, false
	var allowed []string
	for _, r := range importRules {
		if covers(r.pkg, dir) && len(r.pkg) > best {
			best, allowed, found = len(r.pkg), r.mayUse, true
		}
	}
	return allowed, found
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

func permitted(imp, dir string, allowed []string) bool {
	if covers(dir, imp) {
		return true // its own folder, or below it
	}
	for _, a := range allowed {
		if a == "" || covers(a, imp) {
			return true
		}
	}
	return false
}

func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
