//go:build !linux

package pathpolicy

import (
	"errors"
	"io"
	"os"
)

// errUnsupported: opening without following links is implemented for
// Linux only, the platform the worker runs on.
var errUnsupported = errors.New("pathpolicy: opening files without following links needs Linux")

// Open is implemented on Linux only (see open_linux.go).
func (rs Roots) Open(p string, deny Deny) (*os.File, error) { return nil, errUnsupported }

// OpenDir is implemented on Linux only.
func OpenDir(p string) (*os.File, error) { return nil, errUnsupported }

// OpenArtifact is implemented on Linux only.
func OpenArtifact(dir *os.File, name string) (*os.File, int64, error) { return nil, 0, errUnsupported }

// ListRegular is implemented on Linux only.
func ListRegular(dir *os.File) ([]string, error) { return nil, errUnsupported }

// CopyOpened is implemented on Linux only.
func CopyOpened(f *os.File, dst string, deny Deny) (int64, error) { return 0, errUnsupported }

// ChownTree is implemented on Linux only.
func ChownTree(dir string, uid, gid int) error { return errUnsupported }

// MakeDir is implemented on Linux only.
func (rs Roots) MakeDir(p string, deny Deny) (*os.File, error) { return nil, errUnsupported }

// CreateIn is implemented on Linux only.
func CreateIn(dir *os.File, name string, r io.Reader) (int64, error) { return 0, errUnsupported }

// Size is implemented on Linux only.
func (rs Roots) Size(p string, deny Deny) (int64, error) { return 0, errUnsupported }
