// Package pathpolicy decides whether a local path may be read or written by
// a job: only paths under the roots the daemon's config allows
// (jobs.allowed_roots). The scheduler checks a spec's file:// URIs by their
// text at submit (it may not see the worker's files); the worker checks
// again with symbolic links resolved before it runs anything.
package pathpolicy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Roots is a list of absolute, cleaned directories.
type Roots []string

// New cleans and checks roots: each must be absolute.
func New(roots []string) (Roots, error) {
	out := make(Roots, 0, len(roots))
	for i, r := range roots {
		if !filepath.IsAbs(r) {
			return nil, fmt.Errorf("allowed_roots[%d] %q: must be an absolute path", i, r)
		}
		out = append(out, filepath.Clean(r))
	}
	return out, nil
}

// Allows reports whether p (absolute) lies under one of the roots, by its
// text after cleaning.
func (rs Roots) Allows(p string) bool {
	if !filepath.IsAbs(p) {
		return false
	}
	p = filepath.Clean(p)
	for _, r := range rs {
		if p == r || strings.HasPrefix(p, r+string(filepath.Separator)) || r == "/" {
			return true
		}
	}
	return false
}

// ErrOutside: the path is not under any allowed root.
var ErrOutside = errors.New("not under an allowed root")

// CheckResolved resolves symbolic links in p (and in the roots) and checks
// the result, so a link inside a root cannot point outside it. A path that
// does not exist yet is checked through its nearest existing parent.
func (rs Roots) CheckResolved(p string) error {
	rp, err := resolve(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	resolved := make(Roots, 0, len(rs))
	for _, r := range rs {
		if rr, err := resolve(r); err == nil {
			resolved = append(resolved, rr)
		}
	}
	if !resolved.Allows(rp) {
		return fmt.Errorf("%s (resolved %s): %w %v", p, rp, ErrOutside, []string(rs))
	}
	return nil
}

func resolve(p string) (string, error) {
	p = filepath.Clean(p)
	rest := ""
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !os.IsNotExist(err) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
