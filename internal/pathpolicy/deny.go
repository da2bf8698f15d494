package pathpolicy

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrDenied: the path is one of the daemon's own files (its ledger key, its
// Redis files, other jobs' work folders…), which no job may read, whatever
// the allowed roots say.
var ErrDenied = errors.New("is lathed's own file, never readable by a job")

// ErrSymlink: a symbolic link where Open, OpenBeneath or OpenArtifact
// follow none.
var ErrSymlink = errors.New("a symbolic link is in the path (links are not followed here)")

// ErrNotArtifact: what a trainer left under an artifact's name is not a
// regular file of its own.
var ErrNotArtifact = errors.New("not a regular file of the output folder")

// ErrNotData: what Open or CopyOpened met is not a regular file or a
// folder (a FIFO, a device, a socket).
var ErrNotData = errors.New("not a regular file or a folder")

// DeniedError is a path refused because it is a Deny entry or lies under
// one. It wraps ErrDenied; Entry alone (the entry and why it is denied)
// says why without repeating the path asked for.
type DeniedError struct {
	Path, Resolved string // as asked for, and with links resolved
	Entry          DenyEntry
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s (resolved %s): %v (%s, %s)", e.Path, e.Resolved, ErrDenied, e.Entry.Why, e.Entry.Path)
}

func (e *DeniedError) Unwrap() error { return ErrDenied }

// Deny lists absolute paths, files or folders, that no job may read as data
// even under an allowed root. Each entry has a reason shown in the error.
type Deny []DenyEntry

// DenyEntry is one denied path and why it is denied ("the ledger key").
type DenyEntry struct {
	Path string
	Why  string
}

// checkPath refuses rp (p resolved) when it is a denied entry or lies under
// one (the entries resolved too, so a denied folder reached through a link
// is still denied).
func (d Deny) checkPath(p, rp string) error {
	for _, e := range d {
		if e.Path == "" {
			continue
		}
		re, err := resolve(e.Path)
		if err != nil {
			re = filepath.Clean(e.Path)
		}
		if rp == re || strings.HasPrefix(rp, re+string(filepath.Separator)) {
			return &DeniedError{Path: p, Resolved: rp, Entry: e}
		}
	}
	return nil
}

// CheckResolvedDeny is CheckResolved that also refuses a path under a Deny
// entry (for an output folder, which may not exist yet).
func (rs Roots) CheckResolvedDeny(p string, deny Deny) error {
	if err := rs.CheckResolved(p); err != nil {
		return err
	}
	rp, err := resolve(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return deny.checkPath(p, rp)
}

// DataDeny is what no job may read as data on a machine whose lathed data
// dir is dataDir: OutputDeny, the checkpoint root ("" for none), and the
// data dir as a whole (other attempts' work folders and data copies,
// checkpoints, published artifacts of every team). The specific entries
// come first for a clearer error.
func DataDeny(dataDir, ckptRoot, scriptsDir string, extra Deny) Deny {
	d := OutputDeny(dataDir, scriptsDir, extra)
	if ckptRoot != "" {
		d = append(d, DenyEntry{Path: ckptRoot, Why: "the checkpoint root (every job's checkpoints)"})
	}
	return append(d, DenyEntry{Path: dataDir, Why: "the data dir of lathed (work folders, checkpoints, artifacts of every job); keep datasets outside it"})
}

// OutputDeny is where no job's output may go: lathed's secrets and
// bookkeeping under dataDir (ledger.key and ledger.anchor, the managed
// Redis, work folders, pidfiles, scripts), and extra (lathed's config,
// tokens and ledger key and anchor files wherever they are).
func OutputDeny(dataDir, scriptsDir string, extra Deny) Deny {
	d := Deny{
		{Path: filepath.Join(dataDir, "ledger.key"), Why: "the ledger key"},
		{Path: filepath.Join(dataDir, "ledger.anchor"), Why: "the ledger anchor"},
		{Path: filepath.Join(dataDir, "ledger.anchor.lock"), Why: "the ledger anchor's lock"},
		{Path: filepath.Join(dataDir, "redis"), Why: "the managed Redis's files"},
		{Path: filepath.Join(dataDir, "work"), Why: "the attempts' work folders"},
		{Path: filepath.Join(dataDir, "pids"), Why: "the trainers' pidfiles"},
	}
	if scriptsDir != "" {
		d = append(d, DenyEntry{Path: scriptsDir, Why: "the trainers' scripts"})
	}
	return append(d, extra...)
}

// Check refuses p (absolute) when, with the links that exist resolved, it
// is a Deny entry or lies under one: the scheduler's check at submit (the
// worker checks the file it opens again).
func (d Deny) Check(p string) error {
	rp, err := resolve(p)
	if err != nil {
		rp = filepath.Clean(p)
	}
	return d.checkPath(p, rp)
}
