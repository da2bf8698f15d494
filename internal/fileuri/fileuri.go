// Package fileuri turns file:// URIs into local paths, the one scheme the
// local backend reads and writes (s3:// comes with the AWS backend).
package fileuri

import (
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/lathe-ml/lathe/internal/redact"
)

// Path returns the local path of a file:///absolute/path URI (host empty or
// localhost), cleaned.
func Path(uri string) (string, error) {
	u, err := redact.Parse(uri, url.Parse)
	if err != nil {
		return "", fmt.Errorf("uri %q: %w", redact.URL(uri), err)
	}
	if u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
		return "", fmt.Errorf("uri %q: only file:///absolute/path is supported so far (s3:// comes with the AWS backend)", redact.URL(uri))
	}
	return filepath.Clean(u.Path), nil
}

// FromPath returns the file:// URI of an absolute path.
func FromPath(p string) string {
	return (&url.URL{Scheme: "file", Path: filepath.Clean(p)}).String()
}
