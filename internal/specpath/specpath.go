// Package specpath resolves the local paths of a job spec file against the
// file's folder: the CLI does it for a file it submits, the scheduler for a
// job or sweep file a schedule names (a daemon-side file).
package specpath

import (
	"bytes"
	"net/url"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/fileuri"
)

// hasURIScheme reports whether v starts with the scheme of a URI ("s3:",
// "file:", "https:"): a letter, then letters, digits, '+', '.' or '-', then
// ':' (RFC 3986). A loop, not a regexp: a regexp compiled at init would cost
// every program that links this package (the lathe CLI) at each start.
func hasURIScheme(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '.' || c == '-'):
		case i > 0 && c == ':':
			return true
		default:
			return false
		}
	}
	return false
}

// Resolve makes the local paths of a spec absolute file:// URIs,
// resolved against baseDir (the spec file's directory), so that a spec can
// name its data relative to itself. Only dataset, eval_dataset and
// output.uri are touched, and only when they hold a bare path
// ("data/x.jsonl", "/data/x.jsonl") or a file: URI without "//"
// ("file:data/x.jsonl"); s3://, file:///… and anything else stay as they
// are. It returns data unchanged when nothing needed rewriting or the
// document is not a YAML/JSON mapping (jobspec.Parse then reports why).
func Resolve(data []byte, baseDir string) []byte {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || doc.Kind != yaml.DocumentNode ||
		len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return data
	}
	top := doc.Content[0]
	changed := false
	for _, key := range []string{"dataset", "eval_dataset"} {
		if v := mappingValue(top, key); v != nil {
			changed = rewriteNode(v, baseDir) || changed
		}
	}
	if out := mappingValue(top, "output"); out != nil && out.Kind == yaml.MappingNode {
		if v := mappingValue(out, "uri"); v != nil {
			changed = rewriteNode(v, baseDir) || changed
		}
	}
	if !changed {
		return data
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return data
	}
	if err := enc.Close(); err != nil {
		return data
	}
	return buf.Bytes()
}

// mappingValue returns the value node of key in mapping m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// rewriteNode rewrites a string scalar holding a local path; it reports
// whether it changed n.
func rewriteNode(n *yaml.Node, baseDir string) bool {
	if n.Kind != yaml.ScalarNode || (n.Tag != "" && n.Tag != "!!str") {
		return false
	}
	uri, ok := LocalURI(n.Value, baseDir)
	if !ok {
		return false
	}
	n.Value, n.Tag, n.Style = uri, "!!str", yaml.DoubleQuotedStyle
	return true
}

// LocalURI turns a bare path or a "file:path" URI without "//" into
// the file:// URI of an absolute path (escaped as a URI path: a bare
// "r%65l.jsonl" stays that name; "file:r%65l.jsonl" is rel.jsonl),
// relative paths resolved against baseDir. It returns false for anything
// else.
func LocalURI(v, baseDir string) (string, bool) {
	var p string
	switch {
	case v == "":
		return "", false
	case strings.HasPrefix(v, "file:"):
		p = strings.TrimPrefix(v, "file:")
		if strings.HasPrefix(p, "//") || p == "" {
			return "", false // file:///abs (or file://host/…): leave it to validation
		}
		// A URI: its %-escapes mean what they say.
		var err error
		if p, err = url.PathUnescape(p); err != nil {
			return "", false // validation names the bad escape
		}
	case hasURIScheme(v):
		return "", false // s3://…, https://…: not a local path
	default:
		p = v
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(baseDir, p)
	}
	// A bare path is a file name, not a URI: a '%', '#', '?' or space in it
	// is escaped, so that the URI names that very file.
	return fileuri.FromPath(p), true
}
