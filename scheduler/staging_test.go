package scheduler_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/ledger/ledgertest"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// stagingConfig is routeConfig with aws-eu starting a job after 10
// minutes and staging data into its site at 1 MB/s, and a bucket in the
// owned pool's site.
var stagingConfig = strings.NewReplacer(
	"    checkpoint_uri: s3://lathe-eu-ckpt/\n", "    checkpoint_uri: s3://lathe-eu-ckpt/\n    startup: 10m\n    staging_mbps: 1\n",
	"buckets: {", "buckets: {lathe-dc-data: dc-frankfurt, ",
).Replace(routeConfig)

// TestDatasetSizeLearnedAtAdmission: the scheduler learns a file://
// dataset's size (and its eval dataset's) at admission, reading it through
// the allowed roots as the worker does, keeps it on the job's route, and
// routing counts its staging in aws-eu's wait. An s3:// dataset, and a
// file reached through a link that leaves the allowed roots, have no known
// size: the submit succeeds and the reasons say so. Real redis-server,
// real scheduler and API; no worker.
func TestDatasetSizeLearnedAtAdmission(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	write := func(p string, n int) {
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "train.jsonl"), 3_000_000)
	write(filepath.Join(root, "eval.jsonl"), 1_000_000)
	if err := os.Mkdir(filepath.Join(root, "shards"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(root, "shards", "a.jsonl"), 2_000_000)
	write(filepath.Join(root, "shards", "b.jsonl"), 500_000)
	write(filepath.Join(outside, "secret.jsonl"), 7_000_000)
	if err := os.Symlink(filepath.Join(outside, "secret.jsonl"), filepath.Join(root, "link.jsonl")); err != nil {
		t.Fatal(err)
	}

	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	cfg, err := routecfg.ParseConfig([]byte(stagingConfig))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := pathpolicy.New([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "out")
	r := apitest.Start(t, rdb, store, scheduler.Config{Logger: quiet, PlaceInterval: 30 * time.Millisecond, Routing: cfg,
		Ledger: ledgertest.New(t, rdb), AllowedRoots: roots, Defaults: jobspec.Defaults{OutputURI: fileuri.FromPath(out)}}, api.Config{})

	job := func(dataset, eval string) string {
		s := `{"name":"st","base_model":"tiny-char","residency":["eu"],"max_wait":"1h","expected_runtime":"1h","dataset":"` + dataset + `"`
		if eval != "" {
			s += `,"eval_dataset":"` + eval + `"`
		}
		return s + "}"
	}
	file := func(name string) string { return fileuri.FromPath(filepath.Join(root, name)) }
	explain := func(t *testing.T, spec string) wire.Explanation {
		t.Helper()
		code, body := do(t, "POST", r.URL+"/api/v1/route?assume_wait=local=10h", spec, nil)
		var ex wire.Explanation
		if err := json.Unmarshal(body, &ex); code != 200 || err != nil || ex.Backend != "aws-eu" {
			t.Fatalf("explain %s: %d %s (%v); want aws-eu", spec, code, body, err)
		}
		return ex
	}
	reason := func(t *testing.T, ex wire.Explanation, want string) {
		t.Helper()
		for _, r := range ex.Reasons {
			if strings.Contains(r, want) {
				return
			}
		}
		t.Errorf("no reason contains %q:\n%s", want, strings.Join(ex.Reasons, "\n"))
	}
	awsWait := func(ex wire.Explanation) float64 {
		for _, c := range ex.Candidates {
			if c.Backend == "aws-eu" {
				return c.EstWaitS
			}
		}
		return -1
	}

	t.Run("file dataset and eval dataset: 4 MB at 1 MB/s after 10m", func(t *testing.T) {
		ex := explain(t, job(file("train.jsonl"), file("eval.jsonl")))
		reason(t, ex, "cloud wait 10m4s: startup 10m0s (backend aws-eu's instance launch to trainer start) + staging 4.0 MB at 1 MB/s (4s)")
		if w := awsWait(ex); w != 604 {
			t.Errorf("aws-eu's estimated wait %v s, want 604 (600 s start-up + 4 MB at 1 MB/s)", w)
		}
		// Submitted: the sizes are kept on the stored route, for every
		// later decision (spill-over, retry) to read.
		code, body := do(t, "POST", r.URL+"/api/v1/jobs", job(file("train.jsonl"), file("eval.jsonl")), nil)
		if code != 201 {
			t.Fatalf("submit: %d %s", code, body)
		}
		j, err := store.Get(t.Context(), jobOf(t, body).ID)
		if err != nil {
			t.Fatal(err)
		}
		if ri := j.Route; ri == nil || ri.DatasetBytes == nil || *ri.DatasetBytes != 3_000_000 || ri.EvalDatasetBytes == nil || *ri.EvalDatasetBytes != 1_000_000 {
			t.Errorf("stored route %+v: want dataset_bytes 3000000 and eval_dataset_bytes 1000000", ri)
		}
	})
	t.Run("a folder is the sum of its files", func(t *testing.T) {
		ex := explain(t, job(file("shards"), ""))
		reason(t, ex, "+ staging 2.5 MB at 1 MB/s (3s)")
	})
	t.Run("s3 dataset: unknown, counted 0, submit accepted", func(t *testing.T) {
		spec := job("s3://lathe-dc-data/train.jsonl", "")
		ex := explain(t, spec)
		reason(t, ex, "the size of dataset s3://lathe-dc-data/train.jsonl is unknown (an s3:// dataset is not read at admission), so its staging counts 0")
		if w := awsWait(ex); w != 600 {
			t.Errorf("aws-eu's estimated wait %v s, want 600 (the start-up alone)", w)
		}
		code, body := do(t, "POST", r.URL+"/api/v1/jobs", spec, nil)
		if code != 201 {
			t.Fatalf("submit: %d %s", code, body)
		}
		if ri := jobOf(t, body).Route; ri == nil || ri.DatasetBytes != nil {
			t.Errorf("route %+v: want no dataset_bytes", ri)
		}
	})
	t.Run("a link out of the allowed roots is not followed: unknown", func(t *testing.T) {
		ex := explain(t, job(file("link.jsonl"), ""))
		reason(t, ex, "the size of dataset "+file("link.jsonl")+" is unknown (a file:// dataset's size is learned at admission, and none was learned for this one)")
		if w := awsWait(ex); w != 600 {
			t.Errorf("aws-eu's estimated wait %v s, want 600: the 7 MB outside the roots must not be read", w)
		}
	})
	t.Run("a missing file: unknown, submit accepted", func(t *testing.T) {
		spec := job(file("missing.jsonl"), "")
		reason(t, explain(t, spec), "the size of dataset "+file("missing.jsonl")+" is unknown")
		if code, body := do(t, "POST", r.URL+"/api/v1/jobs", spec, nil); code != 201 {
			t.Fatalf("submit: %d %s", code, body)
		}
	})
}
