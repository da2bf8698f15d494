package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/lathe-ml/lathe/internal/trainer"
)

// Trainers of a root lathed with no worker.run_as run each attempt as a
// user of its own: a uid of worker.trainer_uids with no passwd entry (its
// group the same number), taken for the attempt and given back at its end.
// Two trainers running at once never share a uid, on this host whatever
// process runs them: a uid is held by an flock on its file in uidLockDir,
// which the kernel drops when the holder dies. So a trainer cannot read
// another's folders, signal it, or trace it, and cannot read lathed's files
// (its data dir's secrets, the managed Redis socket, /proc/<lathed>/environ).

// DefaultTrainerUIDs is worker.trainer_uids' default: 65,536 uids above
// any that useradd, systemd's DynamicUser or the usual /etc/subuid ranges
// hand out, and below 2^31 (some tools read a uid as a signed int).
var DefaultTrainerUIDs = [2]uint32{2_000_000_000, 2_000_065_535}

// uidLockDir holds one lock file per uid in use (root's, mode 0700).
// A variable so that a test may use its own.
var uidLockDir = "/run/lathe/trainer-uids"

// trainerUser is the name a pool uid's trainer sees in USER and LOGNAME
// (it has no passwd entry; Python's getpass reads these first).
const trainerUser = "lathe-trainer"

// uidPool hands out the uids of a range, one attempt each.
type uidPool struct {
	first, last uint32
	dir         string
}

// heldUID is a uid taken for one attempt: its credential, and its lock.
type heldUID struct {
	cred trainer.Credential
	lock *os.File
}

// newUIDPool checks the range and makes the lock folder.
func newUIDPool(first, last uint32, dir string) (*uidPool, error) {
	if first == 0 || last < first {
		return nil, fmt.Errorf("worker.trainer_uids = %d-%d: must be a range of uids above 0, first ≤ last", first, last)
	}
	if name, uid, ok := passwdUserIn(first, last); ok {
		// Its processes would be killed and its scratch files removed at
		// every attempt's end.
		return nil, fmt.Errorf("worker.trainer_uids = %d-%d includes uid %d (user %s): the range must hold no existing user", first, last, uid, name)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("worker.trainer_uids: lock folder %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("worker.trainer_uids: lock folder %s: %w", dir, err)
	}
	return &uidPool{first: first, last: last, dir: dir}, nil
}

// take holds a uid no other attempt on this host holds, from a random
// place in the range (so that a uid given back is seldom the next one
// taken).
func (p *uidPool) take() (*heldUID, error) {
	n := uint64(p.last-p.first) + 1
	start := rand.Uint64N(n)
	for i := range n {
		uid := p.first + uint32((start+i)%n)
		f, err := os.OpenFile(filepath.Join(p.dir, strconv.FormatUint(uint64(uid), 10)), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, fmt.Errorf("worker.trainer_uids: lock uid %d: %w", uid, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			return nil, fmt.Errorf("worker.trainer_uids: lock uid %d: %w", uid, err)
		}
		return &heldUID{cred: trainer.Credential{UID: uid, GID: uid}, lock: f}, nil
	}
	return nil, fmt.Errorf("worker.trainer_uids: all %d uids of %d-%d are in use on this host", n, p.first, p.last)
}

// release gives the uid back (its lock file stays, for the next taker).
func (h *heldUID) release() { h.lock.Close() }

// scratchDirs are the world-writable folders where a trainer may leave
// files behind; what its uid left there is removed at the attempt's end,
// so that a later attempt given the same uid finds nothing of it.
var scratchDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// sweepScratch removes the entries of scratchDirs owned by uid (their
// owner's processes are all gone: the attempt's cgroup was killed). A link
// is removed, never followed; nothing another uid owns is touched.
func sweepScratch(uid uint32) error {
	var errs []error
	for _, dir := range scratchDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			var st syscall.Stat_t
			if err := syscall.Lstat(p, &st); err != nil || st.Uid != uid {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killUID sends SIGKILL to every process whose real or effective uid is
// uid: a pool uid runs only its attempt's trainer, so whatever still runs
// as it when the attempt ends escaped the attempt (without a cgroup, a
// double fork outlives the process group) and must not meet the next
// attempt given the uid.
func killUID(uid uint32) {
	// A process that forks as fast as it can may make a child between a
	// pass's read of /proc and its kill: passes go on until one finds
	// none (a bounded number: each kill ends a process for good).
	for range 100 {
		procs, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := false
		for _, e := range procs {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid <= 1 {
				continue
			}
			if procUIDs(pid, uid) {
				found = true
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if !found {
			return
		}
	}
}

// procUIDs reports whether process pid's real or effective uid is uid.
func procUIDs(pid int, uid uint32) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	want := strconv.FormatUint(uint64(uid), 10)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			return len(f) >= 2 && (f[0] == want || f[1] == want)
		}
	}
	return false
}

// reachable checks that a user of its own can reach each folder: every
// folder on the way (the folder itself included) must let others search
// it (o+x), or the trainer cannot even enter its working directory. The
// error names the first that does not, and the ways out.
func reachable(dirs ...string) error {
	for _, d := range dirs {
		for p := d; ; p = filepath.Dir(p) {
			st, err := os.Stat(p)
			if err == nil && st.Mode().Perm()&0o001 == 0 {
				return fmt.Errorf("worker: trainers run as users of their own (lathed is root, worker.run_as unset) and cannot reach %s: %s is mode %04o, which others may not search: "+
					"chmod o+x %s, choose a folder others may reach, or set worker.run_as", d, p, st.Mode().Perm(), p)
			}
			if p == filepath.Dir(p) {
				break
			}
		}
	}
	return nil
}

// passwdFile is the user database passwdUserIn reads (a test may use its
// own).
var passwdFile = "/etc/passwd"

// passwdUserIn is a user of passwdFile whose uid lies in [first, last].
func passwdUserIn(first, last uint32) (name string, uid uint32, ok bool) {
	b, err := os.ReadFile(passwdFile)
	if err != nil {
		return "", 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 {
			continue
		}
		u, err := strconv.ParseUint(f[2], 10, 32)
		if err == nil && uint32(u) >= first && uint32(u) <= last {
			return f[0], uint32(u), true
		}
	}
	return "", 0, false
}

// othersMayRead checks that a user of its own may read the local model
// folder dir, which the trainer opens itself (models are large: not
// copied): every folder in it searchable and listable by others, every
// file readable by them. safetensors writes its files mode 0600, so a
// model saved as root is not, and the trainer would fail with "no such
// file"; this names the file and the way out instead. Links are not
// followed (the trainer's own open resolves them).
func othersMayRead(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		need := fs.FileMode(0o004)
		if d.IsDir() {
			need = 0o005
		}
		if info.Mode().Perm()&need != need {
			return fmt.Errorf("%s is mode %04o: the trainer runs as a user of its own and cannot read it: chmod -R o+rX %s, or set worker.run_as", p, info.Mode().Perm(), dir)
		}
		return nil
	})
}
