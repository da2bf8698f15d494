package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/worker"
)

// TestTeamRootsOnTheWorker: the worker checks a job's files against the
// roots of the team the job record carries (teams.<name>.allowed_roots),
// whatever admitted it (a task put on a queue by hand skips the
// scheduler): team beta's job naming team alpha's dataset, a link in
// beta's folder into alpha's, or an output in alpha's folder fails
// (permanent, naming the field and teams.beta.allowed_roots) before the
// trainer reads anything; alpha's job in its own folder runs. A real
// redis-server, the real worker, a /bin/sh STAND-IN trainer that prints
// its dataset.
func TestTeamRootsOnTheWorker(t *testing.T) {
	var alpha, beta string
	b, _ := setupRoots(t, map[string]string{"cat": catDatasetTrainer}, func(cfg *worker.Config, data string) {
		alpha, beta = filepath.Join(data, "alpha"), filepath.Join(data, "beta")
		teams, err := pathpolicy.NewTeamRoots(map[string][]string{"alpha": {alpha}, "beta": {beta}}, cfg.AllowedRoots)
		if err != nil {
			t.Fatal(err)
		}
		cfg.TeamRoots = teams
	})
	for _, d := range []string{alpha, beta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	alphaData := filepath.Join(alpha, "train.jsonl")
	if err := os.WriteFile(alphaData, []byte("{\"text\":\"alpha-private-row\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(beta, "train.jsonl"), []byte("{\"text\":\"beta row\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(alphaData, filepath.Join(beta, "link.jsonl")); err != nil {
		t.Fatal(err)
	}
	submit := func(team, dataset, output string) string {
		t.Helper()
		spec := &jobspec.Spec{Name: "t", BaseModel: "tiny-char", Dataset: fileuri.FromPath(dataset), Trainer: "cat",
			Priority: jobspec.PriorityNormal, MaxRuntime: jobspec.Duration(time.Hour)}
		j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec, Team: team, OutputURI: fileuri.FromPath(output) + "/{id}"})
		if err != nil {
			t.Fatal(err)
		}
		b.dispatch(t, j.ID, 1)
		return j.ID
	}
	for _, c := range []struct {
		name, dataset, output, field string
	}{
		{"alpha's dataset", alphaData, filepath.Join(beta, "out"), "dataset"},
		{"a link in beta's folder to alpha's dataset", filepath.Join(beta, "link.jsonl"), filepath.Join(beta, "out"), "dataset"},
		{"an output in alpha's folder", filepath.Join(beta, "train.jsonl"), filepath.Join(alpha, "out"), "output"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := submit("beta", c.dataset, c.output)
			j := b.wait(t, id, terminal)
			if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || !strings.HasPrefix(j.Error, c.field+": ") ||
				!strings.Contains(j.Error, "(teams.beta.allowed_roots)") {
				t.Fatalf("got %s/%s: %q; want a permanent failure naming %s and teams.beta.allowed_roots", j.State, j.Reason, j.Error, c.field)
			}
			if logs := b.logText(t, id); strings.Contains(logs, "alpha-private-row") {
				t.Fatalf("the trainer read alpha's data:\n%s", logs)
			}
		})
	}
	id := submit("alpha", alphaData, filepath.Join(alpha, "out"))
	if j := b.wait(t, id, terminal); j.State != jobtype.StateSucceeded || !strings.Contains(b.logText(t, id), "alpha-private-row") {
		t.Fatalf("alpha's job in its own folder: %s %q", j.State, j.Error)
	}
}
