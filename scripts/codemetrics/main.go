// Command codemetrics prints the structural counts issue #12 tracks: production
// functions over a length limit, and imports from internal/ to packages above it.
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
	fset := token.NewFileSet()
	var longs []long
	var upward []string
	funcs := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
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
	return nil
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
