package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFileName is the file in the data dir `lathed up` holds its lock on.
const lockFileName = "lathed.lock"

// dataDirLock is `lathed up`'s hold on its data dir: an exclusive flock on
// <data dir>/lathed.lock, which holds the holder's pid. The kernel drops
// the lock when the process ends, however it ends (a kill -9 included), so
// a stale file never keeps a later lathed out; the pid in it is read only
// while someone holds the lock.
type dataDirLock struct {
	f *os.File
}

// dataDirInUseError: another process holds the data dir's lock. PID is
// the lathed that wrote its pid into the lock file (0 when it had not
// written it yet); Exited, that it has exited while its redis-server,
// which holds the lock too, has not yet.
type dataDirInUseError struct {
	Dir, Lock string
	PID       int
	Exited    bool
}

func (e *dataDirInUseError) Error() string {
	holder := "another lathed"
	switch {
	case e.PID > 0 && e.Exited:
		holder = "the redis-server of lathed pid " + strconv.Itoa(e.PID) + ", which has exited"
	case e.PID > 0:
		holder = "lathed pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("data dir %s is in use by %s (lock %s)", e.Dir, holder, e.Lock)
}

// alive reports whether a process pid exists (EPERM: it does, as another
// user's).
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// lockDataDir takes the lock of data dir dir without waiting: a
// *dataDirInUseError when another process holds it. The lock file is
// opened without following a symbolic link and must be a regular file.
func lockDataDir(dir string) (*dataDirLock, error) {
	p := filepath.Join(dir, lockFileName)
	// Go opens files close-on-exec: redis-server and trainers do not
	// inherit the lock, so it ends with lathed.
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("data dir lock %s is a symbolic link: refusing to use it (remove it)", p)
	}
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
		}
		return nil, fmt.Errorf("data dir lock %s: %w", p, err)
	}
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, &dataDirInUseError{Dir: dir, Lock: p, PID: pid, Exited: pid > 0 && !alive(pid)}
		}
		return nil, fmt.Errorf("data dir lock %s: flock: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir lock %s: write pid: %w", p, err)
	}
	return &dataDirLock{f: f}, nil
}

// flock calls flock(2) on f's descriptor.
func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = unix.Flock(int(fd), how) }); err != nil {
		return err
	}
	return ferr
}

// file is the open lock file (nil for a nil lock), for a child that
// must hold the lock as long as it runs.
func (l *dataDirLock) file() *os.File {
	if l == nil {
		return nil
	}
	return l.f
}

// Release empties the lock file and drops the lock. Safe on nil and twice.
func (l *dataDirLock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
}
