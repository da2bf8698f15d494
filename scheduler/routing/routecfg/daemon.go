package routecfg

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
)

// Daemon is what lathed's config file says about where a job goes: the
// routing config, and the job defaults a spec is normalised with before it
// is decided on. lathed (cmd/lathed/config.go) and the CLI's offline
// `lathe route --explain --config` (cmd/lathe-full/route.go) both read it with
// ReadDaemon, so that they decide on the same config and the same spec
// (docs/routing.md).
type Daemon struct {
	// Routing is the routing config (ParseConfig); its DefaultResidency is
	// routing.default_residency, default [onprem].
	Routing Config
	// MaxRuntime is jobs.default_max_runtime; 0: none given
	// (jobspec.DeploymentDefaults makes it 24h).
	MaxRuntime time.Duration
	// OutputURI is jobs.default_output_uri (a file:// URI); "": none given,
	// and the default output folder is <data dir>/artifacts (see Defaults).
	OutputURI string
	// DataDir is data_dir, a relative one joined to the folder of the
	// file; "": none given.
	DataDir string
}

// DefaultDataDir is lathed's data folder when neither --data-dir nor
// data_dir gives one. lathed resolves it against its working folder; the
// CLI, which cannot know that folder, against the config file's (the two
// differ only in where file:// output lands within the same file site, so
// routing decides alike: docs/routing.md).
const DefaultDataDir = "lathe-data"

// ReadDaemon reads lathed's config file at path ("": none, the implicit
// routing config and no job defaults) with ReadFile, the routing sections
// by ParseConfig (its *ConfigError), then data_dir and the jobs defaults.
// Every other top-level key is left to lathed's own parser. The errors
// name no file: callers add it.
func ReadDaemon(path string) (Daemon, error) {
	var data []byte
	if path != "" {
		var err error
		if data, err = ReadFile(path); err != nil {
			return Daemon{}, err
		}
	}
	rc, err := ParseConfig(data)
	if err != nil {
		return Daemon{}, err
	}
	d := Daemon{Routing: rc}
	root, _ := parseRoot(data) // ParseConfig read it: no error here
	if root == nil {
		return d, nil
	}
	if err := d.readJobDefaults(root); err != nil {
		return Daemon{}, err
	}
	if d.DataDir != "" && !filepath.IsAbs(d.DataDir) {
		d.DataDir = filepath.Join(filepath.Dir(path), d.DataDir)
	}
	return d, nil
}

// ReadFile reads lathed's config file at path, at most MaxConfigBytes (what
// ParseConfig takes): a longer one (or /dev/zero) is an error wrapping
// ErrTooLarge, and is not read further. A file that cannot be read is its
// *fs.PathError (see IsReadError).
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("%w: over the limit of %d bytes: not read further", ErrTooLarge, MaxConfigBytes)
	}
	return data, nil
}

// readJobDefaults reads data_dir, jobs.default_max_runtime and
// jobs.default_output_uri from the top-level mapping root, with lathed's
// messages (a duration ≥ 0 like 10s or 2h; a file:// output URI).
func (d *Daemon) readJobDefaults(root *yaml.Node) error {
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch k, v := root.Content[i], root.Content[i+1]; k.Value {
		case "data_dir":
			if err := v.Decode(&d.DataDir); err != nil {
				return err
			}
		case "jobs":
			if err := d.readJobs(v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *Daemon) readJobs(n *yaml.Node) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("jobs: want a mapping, not %s (line %d)", kindName(n), n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k, v := n.Content[i], n.Content[i+1]; k.Value {
		case "default_max_runtime":
			if isNull(v) {
				continue
			}
			dur, err := jobspec.ParseDuration(v.Value)
			if err != nil || dur < 0 {
				return fmt.Errorf("jobs.default_max_runtime = %q: not a duration like 10s or 2h (line %d)", v.Value, v.Line)
			}
			d.MaxRuntime = dur
		case "default_output_uri":
			if err := v.Decode(&d.OutputURI); err != nil {
				return err
			}
			if d.OutputURI == "" {
				continue
			}
			if _, err := fileuri.Path(d.OutputURI); err != nil {
				return fmt.Errorf("jobs.default_output_uri: %w", err)
			}
		}
	}
	return nil
}

// Defaults are the job defaults of d for a daemon whose data folder is
// dataDir (absolute): jobs.default_max_runtime, routing.default_residency
// and jobs.default_output_uri, else file://<dataDir>/artifacts. The
// scheduler normalises every spec with jobspec.DeploymentDefaults of them.
func (d Daemon) Defaults(dataDir string) jobspec.Defaults {
	out := d.OutputURI
	if out == "" {
		out = fileuri.FromPath(filepath.Join(dataDir, "artifacts"))
	}
	return jobspec.Defaults{MaxRuntime: d.MaxRuntime, Residency: d.Routing.DefaultResidency, OutputURI: out}
}

// IsReadError reports whether err, from ReadDaemon, is that the file could
// not be read (rather than a problem in it).
func IsReadError(err error) bool {
	var pe *os.PathError
	return errors.As(err, &pe)
}
