package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// fullName is the whole client's executable.
const fullName = "lathe-full"

// handOver runs lathe-full with args and env in this process's place. It
// returns only when it cannot (the exit code, after saying why on stderr).
func handOver(args, env []string) int {
	path, tried := findFull()
	if path == "" {
		fmt.Fprintf(os.Stderr, "error: this command is run by %s, the whole lathe client, which is not installed: looked for %s.\n"+
			"Build and install both: go build -o DIR/ ./cmd/lathe ./cmd/lathe-full (DIR on PATH, or the folder lathe is in).\n",
			fullName, strings.Join(tried, " and "))
		return 2
	}
	argv := append([]string{"lathe"}, args...)
	err := syscall.Exec(path, argv, env)
	fmt.Fprintf(os.Stderr, "error: run %s: %v\n", path, err)
	return 2
}

// findFull returns lathe-full's path: beside this executable (links
// resolved), else the first on PATH; and where it looked.
func findFull() (path string, tried []string) {
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			p := filepath.Join(filepath.Dir(exe), fullName)
			if executable(p) {
				return p, nil
			}
			tried = append(tried, p)
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		if p := filepath.Join(dir, fullName); executable(p) {
			if !filepath.IsAbs(p) {
				// as os/exec refuses: a relative PATH entry names a
				// program of the current folder, which may not be ours
				continue
			}
			return p, nil
		}
	}
	return "", append(tried, fullName+" on PATH")
}

// executable reports whether p is a regular file someone may execute.
func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
