package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/worker"
)

// hostileArtifactTrainer is a /bin/sh STAND-IN for a hostile trainer: it
// makes its artifact a symbolic link (LINK=sym) or a hard link (LINK=hard)
// to $SECRET, a file outside its output folder, reports it, and exits 0.
const hostileArtifactTrainer = `#!/bin/sh
if [ "$(basename "$0")" = "hard.sh" ]; then
  ln "` + "%SECRET%" + `" "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
else
  ln -s "` + "%SECRET%" + `" "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
fi
echo '{"event":"artifact","path":"adapter_model.safetensors","format":"safetensors"}'
echo '{"event":"done","metrics":{}}'
`

// TestArtifactLinkOutOfTheOutputIsRefused: a trainer whose artifact is a
// symbolic or hard link to a file outside its output folder does not get a
// succeeded job (reason trainer_fault), and the foreign bytes are not
// published.
func TestArtifactLinkOutOfTheOutputIsRefused(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "shadow")
	if err := os.WriteFile(secret, []byte("root:$6$secret-hash"), 0o600); err != nil {
		t.Fatal(err)
	}
	body := strings.ReplaceAll(hostileArtifactTrainer, "%SECRET%", secret)
	b := setup(t, map[string]string{"sym": body, "hard": body})
	for _, trainer := range []string{"sym", "hard"} {
		t.Run(trainer, func(t *testing.T) {
			id := b.submit(t, trainer, time.Hour)
			j := b.wait(t, id, terminal)
			if j.State == jobtype.StateSucceeded {
				t.Fatalf("succeeded with artifacts %+v", j.Artifacts)
			}
			if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonTrainerFault || !strings.Contains(j.Error, "adapter_model.safetensors") || !strings.Contains(j.Error, "not a regular file of the output folder") {
				t.Fatalf("got %s/%s: %q; want failed naming the artifact", j.State, j.Reason, j.Error)
			}
			p, _ := fileuri.Path(j.OutputURI)
			if got, err := os.ReadFile(filepath.Join(p, "adapter_model.safetensors")); err == nil {
				t.Fatalf("published %q", got)
			}
		})
	}
}

// catDatasetTrainer is a /bin/sh STAND-IN trainer that prints, as log
// lines, the file its job file names as the dataset, then writes an
// artifact and succeeds.
const catDatasetTrainer = `#!/bin/sh
ds=$(sed -n 's|^  "dataset": "file://\(.*\)",*$|\1|p' "$LATHE_JOB_FILE")
echo "dataset path: $ds"
cat "$ds"
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"done","metrics":{}}'
`

// rootsBundle is a worker whose allowed roots are its data dir and a data
// folder, with extra config from mutate.
func setupRoots(t *testing.T, trainers map[string]string, mutate func(cfg *worker.Config, data string)) (testBundle, string) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client()
	dir, data := t.TempDir(), t.TempDir()
	argv := map[string][]string{}
	for name, body := range trainers {
		p := filepath.Join(dir, name+".sh")
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		argv[name] = []string{"/bin/sh", p}
	}
	roots, err := pathpolicy.New([]string{dir, data})
	if err != nil {
		t.Fatal(err)
	}
	store := jobstore.New(rdb, jobstore.Config{})
	cfg := worker.Config{Node: "n1", DataDir: dir, Trainers: argv, MaxAttempts: 1, AllowedRoots: roots, KillGrace: 2 * time.Second,
		CancelPoll: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if mutate != nil {
		mutate(&cfg, data)
	}
	w, err := worker.New(rdb, store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return testBundle{srv: srv, ctx: context.Background(), rdb: rdb, store: store, client: asynq.NewClientFromRedisClient(rdb), dir: dir, w: w}, data
}

// submitData creates and dispatches a job of trainer on dataset (a path).
func (b testBundle) submitData(t *testing.T, trainer, dataset, evalDataset string) string {
	t.Helper()
	spec := &jobspec.Spec{Name: "t", BaseModel: "tiny-char", Dataset: fileuri.FromPath(dataset), Trainer: trainer,
		Priority: jobspec.PriorityNormal, MaxRuntime: jobspec.Duration(time.Hour)}
	if evalDataset != "" {
		spec.EvalDataset = fileuri.FromPath(evalDataset)
	}
	j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec, OutputURI: fileuri.FromPath(filepath.Join(b.dir, "artifacts")) + "/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	b.dispatch(t, j.ID, 1)
	return j.ID
}

// logText is every log line of a job's events, one per line.
func (b testBundle) logText(t *testing.T, id string) string {
	t.Helper()
	evs, err := b.store.Events(b.ctx, id, "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, e := range evs {
		if e.Type == "log" {
			var d struct{ Line string }
			_ = json.Unmarshal(e.Data, &d)
			sb.WriteString(d.Line + "\n")
		}
	}
	return sb.String()
}

// TestDatasetSwappedAfterTheCheck: a dataset under an allowed root that
// is replaced by a symbolic link to a file outside the roots after the
// worker checked it (a TEST HOOK swaps it just before the trainer starts)
// is never read: the trainer reads the content that was checked.
func TestDatasetSwappedAfterTheCheck(t *testing.T) {
	b, data := setupRoots(t, map[string]string{"cat": catDatasetTrainer}, nil)
	ds := filepath.Join(data, "train.jsonl")
	if err := os.WriteFile(ds, []byte("{\"text\":\"checked-content\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.jsonl")
	if err := os.WriteFile(secret, []byte("{\"text\":\"outside-secret\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	worker.SetTestHookBeforeTrainer(func(*jobtype.Job) {
		if err := os.Remove(ds); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(secret, ds); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { worker.SetTestHookBeforeTrainer(nil) })
	id := b.submitData(t, "cat", ds, "")
	j := b.wait(t, id, terminal)
	logs := b.logText(t, id)
	if strings.Contains(logs, "outside-secret") {
		t.Fatalf("the trainer read the file outside the roots:\n%s", logs)
	}
	if j.State != jobtype.StateSucceeded || !strings.Contains(logs, "checked-content") {
		t.Fatalf("got %s (%s); want succeeded on the checked content; logs:\n%s", j.State, j.Error, logs)
	}
}

// TestDaemonFilesAreNotDatasets: lathed's own files under the data dir
// (the ledger key, the managed Redis folder, other attempts' work
// folders) are refused as dataset and eval_dataset even though the data
// dir is an allowed root; the error names the field and the path, and the
// trainer never starts.
func TestDaemonFilesAreNotDatasets(t *testing.T) {
	b, data := setupRoots(t, map[string]string{"cat": catDatasetTrainer}, func(cfg *worker.Config, data string) {
		cfg.Deny = pathpolicy.Deny{{Path: filepath.Join(data, "elsewhere.key"), Why: "ledger.key_file"}}
	})
	good := filepath.Join(data, "train.jsonl")
	elsewhere := filepath.Join(data, "elsewhere.key")
	os.WriteFile(elsewhere, []byte("ledger-key-secret\n"), 0o600)
	otherJob := filepath.Join(b.dir, "work", "other", "1", "job.json")
	os.MkdirAll(filepath.Dir(otherJob), 0o755)
	os.WriteFile(otherJob, []byte("{\"secret\":1}\n"), 0o644)
	hard := filepath.Join(data, "innocent.jsonl")
	if err := os.Link(elsewhere, hard); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(good, []byte("{\"text\":\"ok\"}\n"), 0o644)
	key := filepath.Join(b.dir, "ledger.key")
	os.WriteFile(key, []byte("ledger-key-secret\n"), 0o600)
	os.MkdirAll(filepath.Join(b.dir, "redis"), 0o755)
	aof := filepath.Join(b.dir, "redis", "appendonly.aof")
	os.WriteFile(aof, []byte("redis-secret\n"), 0o644)
	for _, c := range []struct{ name, dataset, eval, field string }{
		{"ledger key", key, "", "dataset"},
		{"redis file", aof, "", "dataset"},
		{"ledger key as eval", good, key, "eval_dataset"},
		{"another attempt's job file", otherJob, "", "dataset"},
		{"ledger.key_file elsewhere", elsewhere, "", "dataset"},
		{"hard link to ledger.key_file", hard, "", "dataset"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := b.submitData(t, "cat", c.dataset, c.eval)
			j := b.wait(t, id, terminal)
			bad := c.dataset
			if c.eval != "" {
				bad = c.eval
			}
			if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent ||
				!strings.HasPrefix(j.Error, c.field+": ") || !strings.Contains(j.Error, bad) || !strings.Contains(j.Error, "never readable by a job") {
				t.Fatalf("got %s/%s: %q; want a permanent failure naming %s and %s", j.State, j.Reason, j.Error, c.field, bad)
			}
			if logs := b.logText(t, id); strings.Contains(logs, "secret") {
				t.Fatalf("the trainer read it:\n%s", logs)
			}
		})
	}
}

// envTrainer is a /bin/sh STAND-IN trainer that prints its environment,
// one variable a line, and succeeds.
const envTrainer = `#!/bin/sh
env | sed 's/^/env: /'
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"done","metrics":{}}'
`

// TestTrainerEnvironmentIsScrubbed: the worker's API tokens and AWS
// credentials never reach a trainer; a trainer configured with pass_env
// gets exactly those variables in addition to the base ones.
func TestTrainerEnvironmentIsScrubbed(t *testing.T) {
	t.Setenv("LATHE_TOKEN", "tok-secret-1")
	t.Setenv("LATHE_TOKEN_ALICE", "tok-secret-2")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIA-secret")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
	t.Setenv("REDIS_PASSWORD", "redis-secret")
	b, data := setupRoots(t, map[string]string{"plain": envTrainer, "s3": envTrainer}, func(cfg *worker.Config, _ string) {
		cfg.TrainerPassEnv = map[string][]string{"s3": {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}}
	})
	ds := filepath.Join(data, "train.jsonl")
	os.WriteFile(ds, []byte("{\"text\":\"x\"}\n"), 0o644)

	for _, c := range []struct {
		trainer   string
		want, not []string
	}{
		{"plain", []string{"env: LATHE_JOB_ID=", "env: LATHE_JOB_FILE=", "env: PATH="}, []string{"secret"}},
		{"s3", []string{"env: AWS_ACCESS_KEY_ID=AKIA-secret", "env: AWS_SECRET_ACCESS_KEY=aws-secret"}, []string{"tok-secret", "redis-secret"}},
	} {
		t.Run(c.trainer, func(t *testing.T) {
			id := b.submitData(t, c.trainer, ds, "")
			j := b.wait(t, id, terminal)
			logs := b.logText(t, id)
			if j.State != jobtype.StateSucceeded {
				t.Fatalf("got %s: %s", j.State, j.Error)
			}
			for _, w := range c.want {
				if !strings.Contains(logs, w) {
					t.Errorf("the trainer's environment lacks %q:\n%s", w, logs)
				}
			}
			for _, n := range c.not {
				if strings.Contains(logs, n) {
					t.Errorf("the trainer's environment holds %q:\n%s", n, logs)
				}
			}
		})
	}
}

// runAsTrainer is a /bin/sh STAND-IN trainer that prints its uid and gid,
// reads its dataset copy, writes a checkpoint and an artifact, and
// succeeds.
const runAsTrainer = `#!/bin/sh
echo "uid=$(id -u) gid=$(id -g) home=$HOME"
ds=$(sed -n 's|^  "dataset": "file://\(.*\)",*$|\1|p' "$LATHE_JOB_FILE")
cat "$ds" || exit 1
mkdir -p "$LATHE_CHECKPOINT_DIR/ckpt-1" && printf x > "$LATHE_CHECKPOINT_DIR/ckpt-1/state" || exit 1
echo '{"event":"checkpoint","step":1,"path":"ckpt-1"}'
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors" || exit 1
echo '{"event":"done","metrics":{}}'
`

// TestRunAsAnotherUser: with worker.run_as the trainer runs as that user
// (nobody here; the tests run as root), reads its dataset copy, writes its
// checkpoint and artifact, and the job succeeds.
func TestRunAsAnotherUser(t *testing.T) {
	b, data := setupRoots(t, map[string]string{"who": runAsTrainer}, func(cfg *worker.Config, _ string) {
		cfg.RunAs = "nobody"
	})
	// nobody must reach the stand-in script (t.TempDir folders are 0700).
	for _, d := range []string{b.dir, filepath.Dir(b.dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ds := filepath.Join(data, "train.jsonl")
	os.WriteFile(ds, []byte("{\"text\":\"private-data\"}\n"), 0o600) // lathed (root) reads it; the trainer gets a copy
	id := b.submitData(t, "who", ds, "")
	j := b.wait(t, id, terminal)
	logs := b.logText(t, id)
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("got %s: %s\n%s", j.State, j.Error, logs)
	}
	if !strings.Contains(logs, "uid=65534 gid=65534") || !strings.Contains(logs, "private-data") {
		t.Fatalf("the trainer did not run as nobody or did not read its data:\n%s", logs)
	}
}

// TestRunAsNeedsRoot: worker.run_as in a lathed that is not root is refused
// at start, naming the key; so is an unknown user (the euid is a TEST HOOK).
func TestRunAsNeedsRoot(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	store := jobstore.New(rdb, jobstore.Config{})
	defer worker.SetTestGeteuid(func() int { return 1000 })()
	_, err := worker.New(rdb, store, worker.Config{Node: "n1", DataDir: t.TempDir(), RunAs: "nobody"})
	if err == nil || !strings.Contains(err.Error(), `worker.run_as = "nobody"`) || !strings.Contains(err.Error(), "not root") {
		t.Fatalf("New: %v, want a refusal naming worker.run_as", err)
	}
	_, err = worker.New(rdb, store, worker.Config{Node: "n1", DataDir: t.TempDir(), RunAs: "no-such-user-lathe"})
	if err == nil || !strings.Contains(err.Error(), `worker.run_as = "no-such-user-lathe": no such user`) {
		t.Fatalf("New: %v, want a refusal of the unknown user", err)
	}
}

// lsDatasetTrainer is a /bin/sh STAND-IN trainer that lists the folder its
// job file names as the dataset and prints each file in it.
const lsDatasetTrainer = `#!/bin/sh
ds=$(sed -n 's|^  "dataset": "file://\(.*\)",*$|\1|p' "$LATHE_JOB_FILE")
for f in "$ds"/*; do echo "file $(basename "$f"): $(cat "$f")"; done
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"done","metrics":{}}'
`

// TestDatasetFolder: a dataset that is a folder (for a trainer that reads
// one) reaches the trainer as a private copy; a folder holding a symbolic
// link out of the roots fails the job, naming the link, and the trainer
// never reads the outside file.
func TestDatasetFolder(t *testing.T) {
	b, data := setupRoots(t, map[string]string{"ls": lsDatasetTrainer}, nil)
	ds := filepath.Join(data, "shards")
	os.MkdirAll(ds, 0o755)
	os.WriteFile(filepath.Join(ds, "0.jsonl"), []byte("shard-zero"), 0o644)
	id := b.submitData(t, "ls", ds, "")
	j := b.wait(t, id, terminal)
	if logs := b.logText(t, id); j.State != jobtype.StateSucceeded || !strings.Contains(logs, "file 0.jsonl: shard-zero") {
		t.Fatalf("got %s (%s):\n%s", j.State, j.Error, logs)
	}

	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("outside-secret"), 0o644)
	os.Symlink(secret, filepath.Join(ds, "1.jsonl"))
	id = b.submitData(t, "ls", ds, "")
	j = b.wait(t, id, terminal)
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || !strings.HasPrefix(j.Error, "dataset: ") || !strings.Contains(j.Error, "1.jsonl") {
		t.Fatalf("got %s/%s: %q; want a permanent failure naming the link", j.State, j.Reason, j.Error)
	}
	if logs := b.logText(t, id); strings.Contains(logs, "outside-secret") {
		t.Fatalf("the trainer read the outside file:\n%s", logs)
	}
}

// outputSwapTrainer is a /bin/sh STAND-IN for a hostile trainer (or a user
// who can write to the output root) that, while the job runs, makes the
// job's future output folder %MODELS%/<job id> a symbolic link to %OUTSIDE%,
// then writes its artifact and succeeds.
const outputSwapTrainer = `#!/bin/sh
ln -s "%OUTSIDE%" "%MODELS%/$LATHE_JOB_ID"
printf 'adapter' > "$LATHE_OUTPUT_DIR/adapter_model.safetensors"
echo '{"event":"done","metrics":{}}'
`

// TestOutputFolderSwappedForALink: the job's output folder, checked at the
// attempt's start, that becomes a link out of the roots while the trainer
// runs is not written through: the artifact does not land outside, and the
// job fails naming the output, reason trainer_fault (the path as written is
// allowed; only the link takes it out).
func TestOutputFolderSwappedForALink(t *testing.T) {
	models, outside := t.TempDir(), t.TempDir()
	body := strings.NewReplacer("%OUTSIDE%", outside, "%MODELS%", models).Replace(outputSwapTrainer)
	b, data := setupRoots(t, map[string]string{"swap": body}, func(cfg *worker.Config, data string) {
		roots, _ := pathpolicy.New(append([]string(cfg.AllowedRoots), models))
		cfg.AllowedRoots = roots
	})
	ds := filepath.Join(data, "train.jsonl")
	os.WriteFile(ds, []byte("{\"text\":\"x\"}\n"), 0o644)
	spec := &jobspec.Spec{Name: "t", BaseModel: "tiny-char", Dataset: fileuri.FromPath(ds), Trainer: "swap",
		Priority: jobspec.PriorityNormal, MaxRuntime: jobspec.Duration(time.Hour)}
	j0, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec, OutputURI: fileuri.FromPath(models) + "/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	b.dispatch(t, j0.ID, 1)
	j := b.wait(t, j0.ID, terminal)
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("the artifact was written outside the roots: %v (job %s: %s)", entries, j.State, j.Error)
	}
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonTrainerFault || !strings.Contains(j.Error, "output") || !strings.Contains(j.Error, j0.ID) {
		t.Fatalf("got %s/%s: %q; want failed naming the output folder", j.State, j.Reason, j.Error)
	}
}
