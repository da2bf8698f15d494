package pathpolicy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestAllows(t *testing.T) {
	rs, err := New([]string{"/data", "/srv/models/"})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"/data": true, "/data/a/b.jsonl": true, "/srv/models/x": true,
		"/datax/a": false, "/data/../etc/passwd": false, "/etc/passwd": false, "data/a": false, "/srv/model": false} {
		if got := rs.Allows(p); got != want {
			t.Errorf("Allows(%q) = %v", p, got)
		}
	}
	if _, err := New([]string{"relative"}); err == nil {
		t.Error("a relative root was accepted")
	}
}

func TestCheckResolvedFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(root, 0o755)
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret.jsonl"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(root, "link"))
	rs, _ := New([]string{root})
	if err := rs.CheckResolved(filepath.Join(root, "link", "secret.jsonl")); !errors.Is(err, ErrOutside) {
		t.Fatalf("a link out of the root was allowed: %v", err)
	}
	if err := rs.CheckResolved(filepath.Join(root, "new", "dir", "file")); err != nil {
		t.Fatalf("a not-yet-existing path under the root: %v", err)
	}
}
