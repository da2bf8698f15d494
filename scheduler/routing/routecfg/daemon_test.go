package routecfg

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// TestReadDaemon: the routing config and the job defaults of lathed's
// config file, as lathed and the CLI both read them.
func TestReadDaemon(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "lathe.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write(briefConfig + "data_dir: state\njobs:\n  default_max_runtime: 6h\n  default_output_uri: file:///srv/models\n  keep_finished: 5\n")
	d, err := ReadDaemon(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.Routing.Hash() != mustParse(t, briefConfig).Hash() || d.MaxRuntime != 6*time.Hour || d.OutputURI != "file:///srv/models" || d.DataDir != filepath.Join(dir, "state") {
		t.Errorf("read %+v", d)
	}
	want := jobspec.Defaults{MaxRuntime: 6 * time.Hour, Residency: []string{"onprem"}, OutputURI: "file:///srv/models"}
	if got := d.Defaults("/var/lib/lathe"); !reflect.DeepEqual(got, want) {
		t.Errorf("Defaults %+v, want %+v", got, want)
	}
	// No job defaults: the output folder is under the data folder.
	for _, body := range []string{briefConfig, briefConfig + "jobs:\n", briefConfig + "jobs:\n  default_max_runtime:\n"} {
		d, err := ReadDaemon(write(body))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		if got := d.Defaults("/var/lib/lathe"); got.MaxRuntime != 0 || got.OutputURI != "file:///var/lib/lathe/artifacts" || d.DataDir != "" {
			t.Errorf("%q: Defaults %+v", body, got)
		}
	}
	// No file: the implicit routing config.
	if d, err := ReadDaemon(""); err != nil || !d.Routing.Implicit {
		t.Errorf("no file: %+v %v", d, err)
	}
	for body, msg := range map[string]string{
		"jobs:\n  default_max_runtime: soon\n":      `jobs.default_max_runtime = "soon": not a duration like 10s or 2h (line 2)`,
		"jobs:\n  default_max_runtime: -1h\n":       `jobs.default_max_runtime = "-1h": not a duration like 10s or 2h (line 2)`,
		"jobs:\n  default_output_uri: s3://b/p\n":   "jobs.default_output_uri: uri",
		"jobs:\n  default_output_uri: [a]\n":        "cannot unmarshal !!seq into string",
		"jobs: 5\n":                                 "jobs: want a mapping, not",
		"data_dir: {a: b}\n":                        "cannot unmarshal !!map into string",
		"sites: {a: [onprem]}\nredis_site: nowhere": "invalid routing config",
	} {
		_, err := ReadDaemon(write(body))
		if err == nil || !strings.Contains(err.Error(), msg) || IsReadError(err) {
			t.Errorf("%q: error %v, want one containing %q", body, err, msg)
		}
	}
	if _, err := ReadDaemon(filepath.Join(dir, "missing.yaml")); !IsReadError(err) {
		t.Errorf("missing file: %v", err)
	}
	big := write(strings.Repeat("#", MaxConfigBytes+1))
	if _, err := ReadDaemon(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too large: %v", err)
	}
}
