//go:build linux

package pathpolicy

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestOpenRefusesASwapAfterTheCheck: a dataset replaced by a link to a
// file outside the roots between the resolution and the open is not
// opened (the link is not followed), and a second open of the new link is
// refused as outside.
func TestOpenRefusesASwapAfterTheCheck(t *testing.T) {
	dir := t.TempDir()
	root, outside := filepath.Join(dir, "root"), filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.MkdirAll(outside, 0o755)
	ds := filepath.Join(root, "sub", "train.jsonl")
	os.WriteFile(ds, []byte("checked\n"), 0o644)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644)
	rs, _ := New([]string{root})

	f, err := rs.Open(ds, nil)
	if err != nil {
		t.Fatalf("open a plain dataset: %v", err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "checked\n" {
		t.Fatalf("read %q", b)
	}

	for _, swap := range []struct{ name, target, link string }{
		{"the file", filepath.Join(outside, "secret"), ds},
		{"a folder of its path", outside, filepath.Join(root, "sub")},
	} {
		t.Run(swap.name, func(t *testing.T) {
			os.RemoveAll(filepath.Join(root, "sub"))
			os.MkdirAll(filepath.Join(root, "sub"), 0o755)
			os.WriteFile(ds, []byte("checked\n"), 0o644)
			testHookResolved = func(string) {
				os.RemoveAll(swap.link)
				if err := os.Symlink(swap.target, swap.link); err != nil {
					t.Fatal(err)
				}
			}
			defer func() { testHookResolved = nil }()
			name := ds
			if swap.link != ds {
				name = filepath.Join(swap.link, "secret")
				os.WriteFile(filepath.Join(root, "sub", "secret"), []byte("checked\n"), 0o644)
			}
			f, err := rs.Open(name, nil)
			if err == nil {
				b, _ := io.ReadAll(f)
				f.Close()
				t.Fatalf("the swapped path was opened; read %q", b)
			}
			if !errors.Is(err, ErrSymlink) {
				t.Fatalf("err %v, want ErrSymlink", err)
			}
			testHookResolved = nil
			if _, err := rs.Open(name, nil); !errors.Is(err, ErrOutside) {
				t.Fatalf("reopen after the swap: %v, want ErrOutside", err)
			}
		})
	}
}

// TestOpenDenied: a denied file, a file in a denied folder, and a hard link
// to a denied file are refused even under an allowed root; a FIFO and a
// folder are refused as not regular files.
func TestOpenDenied(t *testing.T) {
	root := t.TempDir()
	key := filepath.Join(root, "ledger.key")
	os.WriteFile(key, []byte("k"), 0o600)
	os.MkdirAll(filepath.Join(root, "redis"), 0o755)
	os.WriteFile(filepath.Join(root, "redis", "appendonly.aof"), []byte("x"), 0o644)
	os.Link(key, filepath.Join(root, "innocent.jsonl"))
	syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644)
	rs, _ := New([]string{root})
	deny := Deny{{Path: key, Why: "the ledger key"}, {Path: filepath.Join(root, "redis"), Why: "the managed Redis"}}
	for _, p := range []string{key, filepath.Join(root, "redis", "appendonly.aof"), filepath.Join(root, "innocent.jsonl")} {
		if _, err := rs.Open(p, deny); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), p) {
			t.Errorf("Open(%s): %v, want ErrDenied naming the path", p, err)
		}
	}
	for _, p := range []string{filepath.Join(root, "fifo"), filepath.Join(root, "redis")} {
		if _, err := rs.Open(p, deny); err == nil || !strings.Contains(err.Error(), "not a regular file or a folder") && !errors.Is(err, ErrDenied) {
			t.Errorf("Open(%s): %v, want refused", p, err)
		}
	}
	if _, err := rs.Open(filepath.Join(root, "missing.jsonl"), deny); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

// TestOpenArtifact: only a regular file with one link, under its own name
// in the folder, is an artifact.
func TestOpenArtifact(t *testing.T) {
	base := t.TempDir()
	out := filepath.Join(base, "output")
	os.MkdirAll(out, 0o755)
	secret := filepath.Join(base, "secret")
	os.WriteFile(secret, []byte("secret"), 0o600)
	os.WriteFile(filepath.Join(out, "ok.safetensors"), []byte("adapter"), 0o644)
	os.Symlink(secret, filepath.Join(out, "link.safetensors"))
	os.Link(secret, filepath.Join(out, "hard.safetensors"))
	syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644)
	os.Mkdir(filepath.Join(out, "dir"), 0o755)
	dir, err := OpenDir(out)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	f, n, err := OpenArtifact(dir, "ok.safetensors")
	if err != nil || n != 7 {
		t.Fatalf("a regular artifact: %d %v", n, err)
	}
	f.Close()
	for _, name := range []string{"link.safetensors", "hard.safetensors", "fifo", "dir", "../secret"} {
		if f, _, err := OpenArtifact(dir, name); !errors.Is(err, ErrNotArtifact) {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenArtifact(%s): %v, want ErrNotArtifact", name, err)
		}
	}
	names, err := ListRegular(dir)
	if err != nil || strings.Join(names, ",") != "hard.safetensors,ok.safetensors" && strings.Join(names, ",") != "ok.safetensors,hard.safetensors" {
		t.Errorf("ListRegular: %v %v", names, err)
	}
	// The folder itself swapped for a link after OpenDir: opens still
	// reach the folder that was opened.
	os.Rename(out, out+".moved")
	os.Symlink(base, out)
	if f, _, err := OpenArtifact(dir, "secret"); err == nil {
		f.Close()
		t.Fatal("an open through the pinned folder reached the link's target")
	}
	if _, err := OpenDir(out); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenDir of a link: %v", err)
	}
}

// TestCopyOpenedFolder: a dataset folder is copied file by file through
// descriptors; a symbolic link or a FIFO inside it, or a hard link to a
// denied file, stops the copy with an error naming the entry.
func TestCopyOpenedFolder(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("secret"), 0o600)
	ds := filepath.Join(root, "ds")
	os.MkdirAll(filepath.Join(ds, "shards"), 0o755)
	os.WriteFile(filepath.Join(ds, "meta.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(ds, "shards", "0.arrow"), []byte("0123"), 0o644)
	rs, _ := New([]string{root})
	deny := Deny{{Path: outside, Why: "a secret"}}
	copyOf := func(t *testing.T) (string, error) {
		f, err := rs.Open(ds, deny)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		dst := filepath.Join(t.TempDir(), "copy")
		_, err = CopyOpened(f, dst, deny)
		return dst, err
	}
	dst, err := copyOf(t)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "shards", "0.arrow")); string(b) != "0123" {
		t.Fatalf("copied %q", b)
	}
	for name, mk := range map[string]func(p string) error{
		"link": func(p string) error { return os.Symlink(outside, p) },
		"fifo": func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"hard": func(p string) error { return os.Link(outside, p) },
	} {
		p := filepath.Join(ds, "shards", name)
		if err := mk(p); err != nil {
			t.Fatal(err)
		}
		if _, err := copyOf(t); err == nil || !strings.Contains(err.Error(), filepath.Join("shards", name)) {
			t.Errorf("%s in the folder: %v, want an error naming it", name, err)
		}
		os.Remove(p)
	}
}

// TestChownTree: everything under the folder changes owner; a link in it
// is changed itself, never its target (a file outside the folder keeps
// its owner). The tests run as root.
func TestChownTree(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "ckpt")
	os.MkdirAll(filepath.Join(dir, "ckpt-1"), 0o755)
	os.WriteFile(filepath.Join(dir, "ckpt-1", "state"), []byte("x"), 0o644)
	outside := filepath.Join(base, "outside")
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "root-file"), []byte("x"), 0o644)
	os.Symlink(filepath.Join(outside, "root-file"), filepath.Join(dir, "link-file"))
	os.Symlink(outside, filepath.Join(dir, "link-dir"))
	if err := ChownTree(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) uint32 {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	for _, p := range []string{dir, filepath.Join(dir, "ckpt-1"), filepath.Join(dir, "ckpt-1", "state"), filepath.Join(dir, "link-file"), filepath.Join(dir, "link-dir")} {
		if owner(p) != 65534 {
			t.Errorf("%s: owner %d", p, owner(p))
		}
	}
	for _, p := range []string{outside, filepath.Join(outside, "root-file")} {
		if owner(p) != 0 {
			t.Errorf("%s outside the folder changed owner to %d", p, owner(p))
		}
	}
	if err := ChownTree(filepath.Join(base, "missing"), 65534, 65534); err != nil {
		t.Errorf("a missing folder: %v", err)
	}
}

// TestMakeDir: an output folder is made under its root and written through
// its descriptor; one swapped for a link after the check is refused, and
// nothing is written through the link.
func TestMakeDir(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	rs, _ := New([]string{root})
	d, err := rs.MakeDir(filepath.Join(root, "models", "job-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := CreateIn(d, "adapter.safetensors", strings.NewReader("adapter")); err != nil || n != 7 {
		t.Fatalf("CreateIn: %d %v", n, err)
	}
	d.Close()
	if b, _ := os.ReadFile(filepath.Join(root, "models", "job-1", "adapter.safetensors")); string(b) != "adapter" {
		t.Fatalf("wrote %q", b)
	}
	testHookResolved = func(string) {
		os.Symlink(outside, filepath.Join(root, "models", "job-2"))
	}
	defer func() { testHookResolved = nil }()
	if d, err := rs.MakeDir(filepath.Join(root, "models", "job-2"), nil); !errors.Is(err, ErrSymlink) {
		if d != nil {
			d.Close()
		}
		t.Fatalf("MakeDir through a link swapped in: %v, want ErrSymlink", err)
	}
	testHookResolved = nil
	if _, err := rs.MakeDir(filepath.Join(root, "models", "job-2"), nil); !errors.Is(err, ErrOutside) {
		t.Fatalf("MakeDir of a link out of the root: %v, want ErrOutside", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("made %v outside", entries)
	}
}
