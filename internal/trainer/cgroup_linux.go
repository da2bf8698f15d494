//go:build linux

package trainer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroup2Magic is CGROUP2_SUPER_MAGIC, the f_type of a cgroup v2 file system.
const cgroup2Magic = 0x63677270

// ErrNoCgroup is wrapped by the errors that say no usable cgroup v2 was
// found (not mounted, not writable, or a kernel without cgroup.kill).
var ErrNoCgroup = errors.New("no usable cgroup v2")

// AutoCgroupRoot returns the cgroup v2 directory under which trainer
// cgroups go when none is configured, creating it: a "lathe" child of the
// caller's own cgroup (from /proc/self/cgroup), or of the cgroup v2 mount's
// root when the own cgroup cannot hold children that hold processes (it is
// not a plain domain cgroup, or it enables controllers for its children,
// where the "no internal processes" rule would refuse them) or cannot be
// written. Lathe enables no controller: its cgroups are for membership and
// cgroup.kill only, so the rule never applies to the cgroups it makes.
func AutoCgroupRoot() (string, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	var candidates []string
	if own, err := ownCgroup(); err == nil && own != "/" {
		dir := filepath.Join(mount, own)
		if cgroupHoldsChildProcesses(dir) {
			candidates = append(candidates, filepath.Join(dir, "lathe"))
		}
	}
	candidates = append(candidates, filepath.Join(mount, "lathe"))
	var errs []error
	for _, c := range candidates {
		if err := PrepareCgroup(c); err != nil {
			errs = append(errs, err)
			continue
		}
		return c, nil
	}
	return "", errors.Join(errs...)
}

// PrepareCgroup makes dir (and its missing parents) and checks that it is
// a cgroup v2 directory whose processes can be killed at once (cgroup.kill,
// Linux 5.14 and later). The error wraps ErrNoCgroup.
func PrepareCgroup(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("trainer: cgroup %q: %w: not an absolute path", dir, ErrNoCgroup)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(nearestExisting(dir), &st); err != nil {
		return fmt.Errorf("trainer: cgroup %s: %w: %w", dir, ErrNoCgroup, err)
	}
	if st.Type != cgroup2Magic {
		return fmt.Errorf("trainer: cgroup %s: %w: not in a cgroup v2 file system", dir, ErrNoCgroup)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("trainer: cgroup %s: %w: %w", dir, ErrNoCgroup, err)
	}
	if err := syscall.Statfs(dir, &st); err != nil || st.Type != cgroup2Magic {
		return fmt.Errorf("trainer: cgroup %s: %w: not in a cgroup v2 file system", dir, ErrNoCgroup)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		return fmt.Errorf("trainer: cgroup %s: %w: no cgroup.kill (Linux 5.14 or later is needed): %w", dir, ErrNoCgroup, err)
	}
	return nil
}

// nearestExisting returns dir or its closest existing parent.
func nearestExisting(dir string) string {
	for {
		if _, err := os.Lstat(dir); err == nil || dir == "/" {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted
// (/sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one).
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("trainer: %w: %w", ErrNoCgroup, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// "id parent maj:min root mountpoint opts [optional...] - fstype source superopts"
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || qf[0] != "cgroup2" || pf[3] != "/" {
			continue
		}
		return unescapeMount(pf[4]), nil
	}
	return "", fmt.Errorf("trainer: %w: no cgroup2 mount in /proc/self/mountinfo", ErrNoCgroup)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// ownCgroup returns the caller's cgroup v2 path ("0::/path" in
// /proc/self/cgroup), relative to the mount's root.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			if !strings.HasPrefix(p, "/") || strings.Contains(p, "/..") {
				return "", fmt.Errorf("trainer: own cgroup %q is outside the visible hierarchy", p)
			}
			return filepath.Clean(p), nil
		}
	}
	return "", errors.New("trainer: no cgroup v2 line in /proc/self/cgroup")
}

// cgroupHoldsChildProcesses reports whether a child of dir may hold
// processes: dir is a plain domain cgroup that enables no controller for
// its children.
func cgroupHoldsChildProcesses(dir string) bool {
	typ, err := os.ReadFile(filepath.Join(dir, "cgroup.type"))
	if err != nil || strings.TrimSpace(string(typ)) != "domain" {
		return false
	}
	sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	return err == nil && strings.TrimSpace(string(sub)) == ""
}

// CgroupPopulated reports whether cgroup dir or one of its descendants
// holds a live process ("populated 1" in cgroup.events; zombies do not
// count). A cgroup that no longer exists is not populated.
func CgroupPopulated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("trainer: read %s/cgroup.events: %w", dir, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) != "0", nil
		}
	}
	return true, fmt.Errorf("trainer: %s/cgroup.events has no populated line", dir)
}

// killCgroupOnce sends SIGKILL to every process of cgroup dir and its
// descendants: through cgroup.kill, or, where that fails, to each pid listed
// in the cgroups' cgroup.procs. A cgroup that no longer exists is not an
// error.
func killCgroupOnce(dir string) error {
	err := writeControl(filepath.Join(dir, "cgroup.kill"), "1")
	if err == nil || errors.Is(err, os.ErrNotExist) && !dirExists(dir) {
		return nil
	}
	kerr := fmt.Errorf("trainer: write %s/cgroup.kill: %w", dir, err)
	// Fallback: one pid at a time, descendants included.
	werr := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
	return errors.Join(kerr, werr)
}

// removeCgroup removes cgroup dir and its descendants, deepest first. Each
// must be empty of processes. A cgroup already gone is not an error.
func removeCgroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("trainer: remove cgroup %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroup(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("trainer: remove cgroup %s: %w", dir, err)
	}
	return nil
}

// writeControl writes v to an existing cgroup control file.
func writeControl(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

// KillCgroup kills every process in cgroup dir and its descendants, waits
// until none is left, and removes them: what a worker does with the cgroups
// a previous incarnation left. It returns when dir is gone, or with an
// error when ctx is done first (a process that cannot die, a cgroup that
// cannot be removed).
func KillCgroup(ctx context.Context, dir string) error {
	delay := time.Millisecond
	for {
		kerr := killCgroupOnce(dir)
		populated, perr := CgroupPopulated(dir)
		if !populated {
			rerr := removeCgroup(dir)
			if rerr == nil {
				return nil
			}
			perr = rerr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("trainer: cgroup %s still has processes or cannot be removed: %w", dir,
				errors.Join(context.Cause(ctx), kerr, perr))
		case <-time.After(delay):
		}
		delay = min(2*delay, maxPollInterval)
	}
}
