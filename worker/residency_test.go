package worker_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestRefusesJobOutsideItsResidency: a task put on this node's queue by hand
// (no routing decision) for a job whose residency tag the node's site lacks
// is refused before the trainer starts: the job fails with reason
// "residency" and no "started" event exists. A job whose tags the site
// carries runs, and its artifacts carry its tags.
func TestRefusesJobOutsideItsResidency(t *testing.T) {
	b := setup(t, map[string]string{"reference": okTrainer}) // node n1, default site "local" = [onprem]
	mk := func(tags ...string) string {
		spec := &jobspec.Spec{Name: "r", BaseModel: "tiny-char", Dataset: "file:///d.jsonl", Trainer: "reference",
			Priority: jobspec.PriorityNormal, Residency: tags}
		j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec, OutputURI: fileuri.FromPath(filepath.Join(b.dir, "out")) + "/{id}"})
		if err != nil {
			t.Fatal(err)
		}
		b.dispatch(t, j.ID, 1)
		return j.ID
	}
	us := mk("us")
	j := b.wait(t, us, func(j *jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonResidency || !strings.Contains(j.Error, "us") {
		t.Fatalf("a [us] job on an [onprem] site: %s (%s: %s)", j.State, j.Reason, j.Error)
	}
	evs, _ := b.store.Events(b.ctx, us, "", 1000)
	for _, e := range evs {
		if e.Type == "started" {
			t.Fatal("the trainer of a refused job started")
		}
	}
	ok := mk("onprem")
	j = b.wait(t, ok, func(j *jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || len(j.Artifacts) == 0 || strings.Join(j.Artifacts[0].Residency, ",") != "onprem" || j.Artifacts[0].Site != "local" {
		t.Fatalf("an [onprem] job: %s (%s), artifacts %+v", j.State, j.Error, j.Artifacts)
	}
}

// TestRefusesJobThatSpansNodes: a task without a rank put on this node's
// queue by hand for a job of resources.nodes 2 (dispatched to this node
// alone, not as a gang) fails permanently before its trainer starts: a
// worker never runs a gang's work on one node.
func TestRefusesJobThatSpansNodes(t *testing.T) {
	b := setup(t, map[string]string{"reference": okTrainer})
	spec := &jobspec.Spec{Name: "g", BaseModel: "tiny-char", Dataset: "file:///d.jsonl", Trainer: "reference",
		Priority: jobspec.PriorityNormal, Residency: []string{"onprem"}, Resources: jobspec.Resources{GPUs: 1, Nodes: 2}}
	j, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: spec, OutputURI: fileuri.FromPath(filepath.Join(b.dir, "out")) + "/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	b.dispatch(t, j.ID, 1)
	j = b.wait(t, j.ID, func(j *jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || !strings.Contains(j.Error, "resources.nodes 2") {
		t.Fatalf("a job of 2 nodes: %s (%s: %s)", j.State, j.Reason, j.Error)
	}
	evs, _ := b.store.Events(b.ctx, j.ID, "", 1000)
	for _, e := range evs {
		if e.Type == "started" {
			t.Fatal("the trainer of a refused job started")
		}
	}
}
