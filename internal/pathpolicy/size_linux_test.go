//go:build linux

package pathpolicy

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSize: a file's size, a folder's sum, and the refusals Open makes
// (outside the roots, a denied path), plus a link inside a folder, which
// is not followed.
func TestSize(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	write := func(p string, n int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "f"), 1234)
	write(filepath.Join(root, "d", "a"), 100)
	write(filepath.Join(root, "d", "sub", "b"), 20)
	write(filepath.Join(root, "l", "a"), 1)
	write(filepath.Join(outside, "big"), 5000)
	write(filepath.Join(root, "secret"), 9)
	if err := os.Symlink(filepath.Join(outside, "big"), filepath.Join(root, "l", "out")); err != nil {
		t.Fatal(err)
	}
	rs := Roots{root}
	deny := Deny{{Path: filepath.Join(root, "secret"), Why: "a secret"}}
	for _, c := range []struct {
		p    string
		want int64
		err  error
	}{
		{filepath.Join(root, "f"), 1234, nil},
		{filepath.Join(root, "d"), 120, nil},
		{filepath.Join(root, "l"), 0, ErrSymlink},
		{filepath.Join(outside, "big"), 0, ErrOutside},
		{filepath.Join(root, "secret"), 0, ErrDenied},
	} {
		n, err := rs.Size(c.p, deny)
		if n != c.want || (c.err == nil) != (err == nil) || c.err != nil && !errors.Is(err, c.err) {
			t.Errorf("Size(%s) = %d, %v; want %d, %v", c.p, n, err, c.want, c.err)
		}
	}
}
