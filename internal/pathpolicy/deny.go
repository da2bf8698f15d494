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
			return fmt.Errorf("%s (resolved %s): %w (%s, %s)", p, rp, ErrDenied, e.Why, e.Path)
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
