package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/buildinfo"
)

// TestVersion: lathe version and lathe --version print one line, "lathe
// VERSION …", the same; -o json an object with the same fields. It needs
// no scheduler, and a bad LATHE_SERVER does not stop it.
func TestVersion(t *testing.T) {
	r := lathe(t, "not a url", "version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "lathe ") || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
		t.Fatalf("version: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if v := lathe(t, "not a url", "--version"); v.code != exitOK || v.stdout != r.stdout {
		t.Errorf("--version: exit %d, stdout %q, want %q", v.code, v.stdout, r.stdout)
	}
	j := lathe(t, "not a url", "version", "-o", "json")
	var in buildinfo.Info
	if err := json.Unmarshal([]byte(j.stdout), &in); j.code != exitOK || err != nil {
		t.Fatalf("version -o json: exit %d, %v\n%s%s", j.code, err, j.stdout, j.stderr)
	}
	if in.String()+"\n" != r.stdout {
		t.Errorf("-o json %+v does not say %q", in, r.stdout)
	}
	if u := lathe(t, "not a url", "version", "-o", "yaml"); u.code != exitUsage {
		t.Errorf("version -o yaml: exit %d, want %d", u.code, exitUsage)
	}
}
