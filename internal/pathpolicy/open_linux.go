//go:build linux

package pathpolicy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// testHookResolved, when set (by tests only), runs in Open between
// resolving the path and opening it: the window a swap would use.
var testHookResolved func(resolved string)

// Open opens the file at p for reading, if p is allowed: the path is
// resolved once (symbolic links followed), the result must lie under one of
// the roots and not under a Deny entry, and it is then opened from the
// root's directory one component at a time without following any symbolic
// link. A link that appears after the resolution (a swap) makes the open
// fail instead of being followed, so the file returned is the one that was
// checked. The opened file must be a regular file or a folder (not a FIFO,
// a device or a socket) and must not be a Deny entry under another name (a
// hard link to it); CopyOpened copies either without following links. The error names p and wraps ErrOutside, ErrDenied or the
// system's error.
func (rs Roots) Open(p string, deny Deny) (*os.File, error) {
	rp, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if !filepath.IsAbs(rp) {
		return nil, fmt.Errorf("%s: not an absolute path", p)
	}
	root, dir, err := rs.openRoot(p, rp, deny)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	rel, err := filepath.Rel(root, rp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var f *os.File
	if rel == "." {
		f, err = OpenBeneathDir(dir) // the root itself
	} else {
		f, err = OpenBeneath(dir, rel)
	}
	if err != nil {
		return nil, fmt.Errorf("%s (resolved %s): %w", p, rp, err)
	}
	st, err := fstat(f)
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		err = fmt.Errorf("%w (it is a %s)", ErrNotData, fileMode(st.Mode))
	}
	if err == nil {
		err = deny.checkFile(st)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s (resolved %s): %w", p, rp, err)
	}
	return f, nil
}

// OpenDir opens the directory at p (absolute; its last component must not
// be a symbolic link) for use with OpenBeneath and OpenArtifact. Holding
// it pins the directory: renaming it, or putting a link in its place,
// does not change what later opens through it reach.
func OpenDir(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
				return nil, fmt.Errorf("open %s: %w", p, ErrSymlink)
			}
		}
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// OpenBeneath opens rel, a relative path inside dir, for reading, one
// component at a time, following no symbolic link (a link at any component
// is an error wrapping ErrSymlink) and refusing "..": what it opens is
// beneath dir whatever happens to the names meanwhile. The last component
// is opened non-blocking, so a FIFO does not hang the caller; callers check
// the file's type with Stat.
func OpenBeneath(dir *os.File, rel string) (*os.File, error) {
	rel = filepath.Clean(rel)
	if rel == "." || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("%q: want a relative path to a file", rel)
	}
	parts := strings.Split(rel, string(filepath.Separator))
	cur := int(dir.Fd())
	owned := -1 // the fd to close when moving on (not dir's own)
	defer func() {
		if owned >= 0 {
			unix.Close(owned)
		}
	}()
	for i, c := range parts {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("%q: component %q is not allowed", rel, c)
		}
		last := i == len(parts)-1
		flags := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if last {
			flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
		}
		fd, err := unix.Openat(cur, c, flags, 0)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || (!last && errors.Is(err, unix.ENOTDIR)) {
				var st unix.Stat_t
				if unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					return nil, fmt.Errorf("%s: %w", strings.Join(parts[:i+1], "/"), ErrSymlink)
				}
			}
			return nil, fmt.Errorf("open %s: %w", strings.Join(parts[:i+1], "/"), err)
		}
		if owned >= 0 {
			unix.Close(owned)
		}
		if last {
			owned = -1
			return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), rel)), nil
		}
		owned, cur = fd, fd
	}
	return nil, fmt.Errorf("%q: empty path", rel)
}

// OpenArtifact opens name, a plain file name, in dir (the attempt's output
// folder, opened with OpenDir before the trainer started) for reading, and
// returns it with its size. It refuses, with an error wrapping
// ErrNotArtifact (and ErrSymlink for a link), anything but a regular file
// with exactly one link: a symbolic link (to /etc/shadow or anywhere), a
// FIFO or device, a directory, and a hard link, which could be a second
// name of a file outside the folder (ledger.key, another job's artifact).
// The caller hashes and copies from the returned file, never from the
// name again.
func OpenArtifact(dir *os.File, name string) (*os.File, int64, error) {
	if name == "" || strings.ContainsRune(name, filepath.Separator) || name == "." || name == ".." {
		return nil, 0, fmt.Errorf("artifact %q: %w: not a plain file name", name, ErrNotArtifact)
	}
	f, err := OpenBeneath(dir, name)
	if err != nil {
		if errors.Is(err, ErrSymlink) {
			return nil, 0, fmt.Errorf("artifact %s: %w: %w", name, ErrNotArtifact, err)
		}
		return nil, 0, fmt.Errorf("artifact %s: %w", name, err)
	}
	st, err := fstat(f)
	switch {
	case err != nil:
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("artifact %s: %w (it is a %s)", name, ErrNotArtifact, fileMode(st.Mode))
	case st.Nlink != 1:
		err = fmt.Errorf("artifact %s: %w (it has %d hard links; an artifact must be a file of its own)", name, ErrNotArtifact, st.Nlink)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size, nil
}

// ListRegular returns the names of the regular files at the top of dir
// (a directory opened with OpenDir), read through the descriptor.
func ListRegular(dir *os.File) ([]string, error) {
	d, err := OpenBeneathDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir.Name(), err)
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// OpenBeneathDir returns a fresh descriptor of dir itself (so reading its
// entries does not move dir's own offset).
func OpenBeneathDir(dir *os.File) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir.Name(), err)
	}
	return os.NewFile(uintptr(fd), dir.Name()), nil
}

func fstat(f *os.File) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	return &st, nil
}

func fileMode(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symbolic link"
	}
	return "regular file"
}

// checkFile refuses an opened file that is a denied file under another
// name (a hard link to it): same device and inode.
func (d Deny) checkFile(st *unix.Stat_t) error {
	for _, e := range d {
		var ds unix.Stat_t
		if e.Path == "" || unix.Stat(e.Path, &ds) != nil || ds.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if ds.Dev == st.Dev && ds.Ino == st.Ino {
			return fmt.Errorf("%w (%s: it is %s under another name)", ErrDenied, e.Why, e.Path)
		}
	}
	return nil
}

// CopyOpened copies f, a regular file or a folder opened by Open, to dst
// (which must not exist), reading only through descriptors: a folder is
// walked with OpenBeneath, so a symbolic link inside it, a FIFO or a device
// is refused (naming it) instead of followed, and each file is checked
// against deny by inode (a hard link to a denied file). Files are written
// with mode 0400, folders 0700. It returns the bytes copied.
func CopyOpened(f *os.File, dst string, deny Deny) (int64, error) {
	st, err := fstat(f)
	if err != nil {
		return 0, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return copyRegular(f, dst)
	case unix.S_IFDIR:
		return copyTree(f, dst, deny, ".")
	}
	return 0, fmt.Errorf("%s: %w (it is a %s)", f.Name(), ErrNotData, fileMode(st.Mode))
}

func copyRegular(f *os.File, dst string) (int64, error) {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, f) // copy_file_range: in the kernel
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("copy %s: %w", f.Name(), err)
	}
	return n, nil
}

func copyTree(dir *os.File, dst string, deny Deny, rel string) (int64, error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return 0, err
	}
	return eachEntry(dir, deny, rel, func(f *os.File, st *unix.Stat_t, name, base string) (int64, error) {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return copyTree(f, filepath.Join(dst, base), deny, name)
		}
		return copyRegular(f, filepath.Join(dst, base))
	})
}

// eachEntry opens each entry of dir beneath it (no link followed), checks
// it against deny and calls fn with its file, its stat, its path under the
// walk's root (rel joined with base) and its name in dir, base. An entry
// neither a regular file nor a folder is ErrNotData. It returns the sum of
// fn's counts so far, and the first error.
func eachEntry(dir *os.File, deny Deny, rel string, fn func(f *os.File, st *unix.Stat_t, name, base string) (int64, error)) (int64, error) {
	d, err := OpenBeneathDir(dir)
	if err != nil {
		return 0, err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", filepath.Join(rel, "."), err)
	}
	var total int64
	for _, e := range entries {
		name := filepath.Join(rel, e.Name())
		f, err := OpenBeneath(dir, e.Name())
		if err != nil {
			return total, fmt.Errorf("%s: %w", name, err)
		}
		n, err := func() (int64, error) {
			defer f.Close()
			st, err := fstat(f)
			if err != nil {
				return 0, err
			}
			if err := deny.checkFile(st); err != nil {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
			if m := st.Mode & unix.S_IFMT; m != unix.S_IFREG && m != unix.S_IFDIR {
				return 0, fmt.Errorf("%s: %w (it is a %s)", name, ErrNotData, fileMode(st.Mode))
			}
			return fn(f, st, name, e.Name())
		}()
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ChownTree gives dir (absolute; not a link) and everything under it to
// uid:gid, walking through descriptors: each entry is changed with
// fchownat(AT_SYMLINK_NOFOLLOW) relative to its opened parent and each
// folder is entered with O_NOFOLLOW, so a link swapped in by a process of
// that user (one left from an earlier attempt) cannot redirect the change
// to a file outside dir. A dir that does not exist is no error.
func ChownTree(dir string, uid, gid int) error {
	d, err := OpenDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Fchown(int(d.Fd()), uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	return chownBeneath(d, uid, gid)
}

func chownBeneath(dir *os.File, uid, gid int) error {
	d, err := OpenBeneathDir(dir)
	if err != nil {
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("list %s: %w", dir.Name(), err)
	}
	for _, e := range entries {
		if err := unix.Fchownat(int(dir.Fd()), e.Name(), uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return fmt.Errorf("chown %s: %w", filepath.Join(dir.Name(), e.Name()), err)
		}
		if !e.IsDir() {
			continue
		}
		fd, err := unix.Openat(int(dir.Fd()), e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				continue // gone, or swapped for a link or a file: not followed
			}
			return fmt.Errorf("open %s: %w", filepath.Join(dir.Name(), e.Name()), err)
		}
		sub := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), e.Name()))
		err = chownBeneath(sub, uid, gid)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// openRoot finds the root that holds rp (p resolved once), checks rp
// against deny, and opens that root's folder: what Open and MakeDir walk
// from, one component at a time.
func (rs Roots) openRoot(p, rp string, deny Deny) (string, *os.File, error) {
	root := ""
	for _, r := range rs {
		rr, err := resolve(r)
		if err != nil {
			continue
		}
		if rr == rp || rr == "/" || strings.HasPrefix(rp, rr+string(filepath.Separator)) {
			root = rr
			break
		}
	}
	if root == "" {
		return "", nil, fmt.Errorf("%s (resolved %s): %w %v", p, rp, ErrOutside, []string(rs))
	}
	if err := deny.checkPath(p, rp); err != nil {
		return "", nil, err
	}
	if testHookResolved != nil {
		testHookResolved(rp)
	}
	dir, err := OpenDir(root)
	if err != nil {
		return "", nil, fmt.Errorf("%s: allowed root: %w", p, err)
	}
	return root, dir, nil
}

// MakeDir opens the folder p for writing artifacts into it, making what is
// missing of it (mode 0755), if p is allowed: its existing part resolved
// once must lie under one of the roots and not under a Deny entry, and it
// is then walked from the root's descriptor one component at a time
// without following any link (made with mkdirat where missing). A link
// that appears after the resolution, at any component, makes it fail with
// ErrSymlink instead of being followed, so files made through the returned
// descriptor land in the folder that was checked.
func (rs Roots) MakeDir(p string, deny Deny) (*os.File, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("%s: not an absolute path", p)
	}
	rp, err := resolve(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	root, dir, err := rs.openRoot(p, rp, deny)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(root, rp)
	if err != nil || rel == "." {
		return dir, err
	}
	cur := dir
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		next, err := openOrMakeDir(cur, c)
		cur.Close()
		if err != nil {
			return nil, fmt.Errorf("%s (resolved %s): %w", p, rp, err)
		}
		cur = next
	}
	return cur, nil
}

// openOrMakeDir opens (making it if missing) the folder name in dir,
// following no link.
func openOrMakeDir(dir *os.File, name string) (*os.File, error) {
	if name == "" || name == "." || name == ".." {
		return nil, fmt.Errorf("component %q is not allowed", name)
	}
	for range 2 {
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
		}
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(int(dir.Fd()), name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return nil, fmt.Errorf("make %s: %w", filepath.Join(dir.Name(), name), err)
			}
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir.Name(), name), ErrSymlink)
		}
		return nil, fmt.Errorf("open %s: %w", filepath.Join(dir.Name(), name), err)
	}
	return nil, fmt.Errorf("make %s: it keeps vanishing", filepath.Join(dir.Name(), name))
}

// CreateIn writes a new file name in dir (a folder from MakeDir or OpenDir)
// from r: a temporary name made with O_EXCL|O_NOFOLLOW, synced, then
// renamed over name within dir, so a reader never sees half a file and
// nothing is written through a link. The file is mode 0640 (less the
// umask): not readable by others, such as trainers running as users of
// their own. It returns the bytes written.
func CreateIn(dir *os.File, name string, r io.Reader) (int64, error) {
	if name == "" || strings.ContainsRune(name, filepath.Separator) || name == "." || name == ".." {
		return 0, fmt.Errorf("%q: not a plain file name", name)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return 0, err
	}
	tmp := ".tmp-" + name + "-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(int(dir.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", filepath.Join(dir.Name(), tmp), err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), tmp))
	n, err := io.Copy(f, r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), name)
	}
	if err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), tmp, 0)
		return 0, fmt.Errorf("write %s: %w", filepath.Join(dir.Name(), name), err)
	}
	return n, nil
}

// MaxSizeEntries bounds the files and folders Size walks in a dataset
// folder: past it Size gives up (ErrTooMany), so that learning a size never
// costs an admission more than a bounded walk.
const MaxSizeEntries = 100_000

// ErrTooMany: a folder holds more than MaxSizeEntries entries.
var ErrTooMany = errors.New("more files than pathpolicy.MaxSizeEntries")

// Size is the size in bytes of the data at p, opened as Open opens it
// (under the roots, not under deny, no link followed after the one
// resolution): a regular file's size, or the sum of the regular files in a
// folder, walked through descriptors without following any link. The error
// names p and wraps Open's errors, ErrNotData (a FIFO, device or socket in
// the folder) or ErrTooMany.
func (rs Roots) Size(p string, deny Deny) (int64, error) {
	f, err := rs.Open(p, deny)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := fstat(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		return st.Size, nil
	}
	left := MaxSizeEntries
	n, err := sizeTree(f, deny, "", &left)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}

// sizeTree sums the regular files under dir (opened without following
// links), as copyTree walks it; left counts down the entries it may visit.
func sizeTree(dir *os.File, deny Deny, rel string, left *int) (int64, error) {
	n, err := eachEntry(dir, deny, rel, func(f *os.File, st *unix.Stat_t, name, _ string) (int64, error) {
		if *left--; *left < 0 {
			return 0, ErrTooMany
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return sizeTree(f, deny, name, left)
		}
		return st.Size, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
