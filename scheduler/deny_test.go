package scheduler_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/scheduler"
)

// TestDaemonFilesRefusedAtSubmit: a dataset or eval_dataset that is
// lathed's ledger key or lies in its managed Redis folder is refused at
// submit (400) naming the field, although the data dir is an allowed root.
func TestDaemonFilesRefusedAtSubmit(t *testing.T) {
	dataDir := t.TempDir()
	roots, _ := pathpolicy.New([]string{filepath.Dir(dataDir)})
	b := setup(t, scheduler.Config{AllowedRoots: roots, DataDeny: pathpolicy.DataDeny(dataDir, "", "", nil),
		Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(filepath.Join(dataDir, "artifacts"))}})
	for field, p := range map[string]string{
		"dataset":      filepath.Join(dataDir, "ledger.key"),
		"eval_dataset": filepath.Join(dataDir, "redis", "appendonly.aof"),
	} {
		spec := `{"name":"x","base_model":"tiny-char","dataset":"` + fileuri.FromPath(p) + `"}`
		if field == "eval_dataset" {
			spec = `{"name":"x","base_model":"tiny-char","dataset":"` + fileuri.FromPath(filepath.Join(dataDir, "..", "train.jsonl")) + `","eval_dataset":"` + fileuri.FromPath(p) + `"}`
		}
		code, body := do(t, "POST", b.url+"/api/v1/jobs", spec, nil)
		if code != 400 || !strings.Contains(string(body), `"field":"`+field+`"`) || !strings.Contains(string(body), "never readable by a job") {
			t.Errorf("%s = %s: %d %s", field, p, code, body)
		}
	}
}
