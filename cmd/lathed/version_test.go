package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestVersion: lathed --version and lathed version print the same one
// line, "lathed VERSION …" (its fields: internal/buildinfo's test).
func TestVersion(t *testing.T) {
	var lines []string
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out, errb bytes.Buffer
		root := newRootCmd(&out, &errb)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("lathed %v: %v", args, err)
		}
		if !strings.HasPrefix(out.String(), "lathed ") || strings.Count(out.String(), "\n") != 1 || errb.Len() != 0 {
			t.Errorf("lathed %v: stdout %q, stderr %q", args, out.String(), errb.String())
		}
		lines = append(lines, out.String())
	}
	if lines[0] != lines[1] {
		t.Errorf("--version %q and version %q differ", lines[0], lines[1])
	}
}

// TestVersionBinaries: the built lathed and lathe print their version
// (lathed --version, lathed version, lathe version -o json), the same
// build fields from the same shared code (internal/buildinfo).
func TestVersionBinaries(t *testing.T) {
	lathed, lathe := binaries(t)
	var lines []string
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.Command(lathed, args...).Output()
		if err != nil || !strings.HasPrefix(string(out), "lathed ") {
			t.Fatalf("lathed %v: %v\n%s", args, err, out)
		}
		lines = append(lines, string(out))
	}
	if lines[0] != lines[1] {
		t.Errorf("lathed --version %q, lathed version %q", lines[0], lines[1])
	}
	out, errOut, code := runLathe(t, lathe, os.Environ(), "version")
	if code != 0 || strings.TrimPrefix(out, "lathe ") != strings.TrimPrefix(lines[0], "lathed ") {
		t.Errorf("lathe version: exit %d, %q (%s); lathed says %q", code, out, errOut, lines[0])
	}
	out, errOut, code = runLathe(t, lathe, os.Environ(), "version", "-o", "json")
	if code != 0 || !strings.Contains(out, `"program": "lathe"`) {
		t.Errorf("lathe version -o json: exit %d\n%s%s", code, out, errOut)
	}
}
