package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/backends/kubernetes"
	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// TestKubeState: each state of a Job maps onto the slurm worker's state
// that ends the attempt as docs/kubernetes.md says: a disruption is a
// preemption, the deadline a timeout, a deletion a cancel; every ended
// state is ended for the slurm worker too.
func TestKubeState(t *testing.T) {
	want := map[string]string{
		kubernetes.StatePending: slurm.StatePending, kubernetes.StateRunning: slurm.StateRunning,
		kubernetes.StateSucceeded: slurm.StateCompleted, kubernetes.StateFailed: slurm.StateFailed,
		kubernetes.StateDeadlineExceeded: slurm.StateTimeout, kubernetes.StateDisrupted: slurm.StatePreempted,
		kubernetes.StateDeleting: slurm.StateCancelled, "something new": slurm.StatePending,
	}
	for k, s := range want {
		if got := kubeState(k); got != s || kubernetes.Ended(k) != slurm.Ended(got) {
			t.Errorf("kubeState(%s) = %s (ended %v), want %s", k, got, slurm.Ended(got), s)
		}
	}
}

// fakeKube is a KubeAPI with state (Jobs by name), a **fake**: cmd/lathed's
// TestKube*E2E run against a real API server.
type fakeKube struct {
	jobs map[string]kubernetes.Job
	reqs []kubernetes.SubmitRequest
}

func (f *fakeKube) Submit(_ context.Context, r kubernetes.SubmitRequest) (kubernetes.Job, bool, error) {
	if j, ok := f.jobs[r.Name]; ok {
		return j, true, nil
	}
	f.reqs = append(f.reqs, r)
	j := kubernetes.Job{Name: r.Name, State: kubernetes.StatePending, Created: time.Now(), Labels: r.Labels()}
	f.jobs[r.Name] = j
	return j, false, nil
}

func (f *fakeKube) Get(_ context.Context, name string) (kubernetes.Job, error) {
	return f.Watched(name)
}

func (f *fakeKube) Watched(name string) (kubernetes.Job, error) {
	if j, ok := f.jobs[name]; ok {
		return j, nil
	}
	return kubernetes.Job{}, kubernetes.ErrNotFound
}

func (f *fakeKube) List() ([]kubernetes.Job, error) {
	var out []kubernetes.Job
	for _, j := range f.jobs {
		out = append(out, j)
	}
	return out, nil
}

func (f *fakeKube) Delete(_ context.Context, name string) error { delete(f.jobs, name); return nil }

func (f *fakeKube) Logs(context.Context, string, int64) (string, error) { return "", nil }

// TestKubeBatchSubmit: the adapter's Job carries the backend's settings,
// the attempt's folder and script, and its deadline; a second submit of the
// attempt makes no second Job; the Job reads back in the slurm worker's
// terms, and one not made is not found.
func TestKubeBatchSubmit(t *testing.T) {
	f := &fakeKube{jobs: map[string]kubernetes.Job{}}
	b := routecfg.Backend{Name: "k8s", Kind: routecfg.KindKubernetes, WorkDir: "/shared/w", Kube: &routecfg.KubeSettings{Namespace: "ns",
		Image: "img", QueueName: "q", NodeSelector: map[string]string{"a": "b"}, VolumeClaim: "work",
		Tolerations: []routecfg.Toleration{{Key: "k", Operator: "Exists"}}}}
	k := &kubeBatch{api: f, b: b, cluster: "lathe"}
	r := slurm.SubmitRequest{Name: "lathe-j-0123456789abcdef-3", GPUs: 2, Script: "/shared/w/j/3/run.sh", Dir: "/shared/w/j/3", TimeLimit: time.Hour,
		Checkpoints: "/shared/w/j/checkpoints", Data: []string{"/data/train.jsonl"}}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if id, err := k.Submit(ctx, r); err != nil || id != r.Name {
			t.Fatalf("submit %d: %q %v", i, id, err)
		}
	}
	if len(f.reqs) != 1 {
		t.Fatalf("%d Jobs made, want 1", len(f.reqs))
	}
	q := f.reqs[0]
	if q.JobID != "j-0123456789abcdef" || q.Attempt != 3 || q.Image != "img" || q.QueueName != "q" || q.Command[0] != r.Script ||
		q.WorkingDir != r.Dir || q.GPUs != 2 || q.ActiveDeadline != time.Hour || q.ClaimPath != "/shared/w" || len(q.Tolerations) != 1 {
		t.Errorf("request %+v", q)
	}
	if want := []kubernetes.Mount{{Path: r.Dir}, {Path: r.Checkpoints}, {Path: "/data/train.jsonl", ReadOnly: true}}; !slices.Equal(q.ClaimMounts, want) {
		t.Errorf("claim mounts %+v, want the attempt's folder, its checkpoints and its data (read-only)", q.ClaimMounts)
	}
	found, err := k.FindByName(ctx, r.Name)
	if err != nil || len(found) != 1 || found[0].State != slurm.StatePending {
		t.Errorf("find: %+v %v", found, err)
	}
	if _, err := k.Job(ctx, "lathe-j-0123456789abcdef-9"); err != slurm.ErrNotFound {
		t.Errorf("unknown Job: %v", err)
	}
}

// TestStripControls: a pod's log keeps its lines, not its escapes.
func TestStripControls(t *testing.T) {
	if got := stripControls("a\x1b[31mb\nc\td\x00"); got != "a [31mb\nc\td " {
		t.Errorf("stripControls = %q", got)
	}
}

const kubeTestConfig = `
sites:
  dc: [onprem, eu]
redis_site: dc
backends:
  hpc: {kind: kubernetes, site: dc, namespace: ns, image: img, work_dir: WORK, price: {usd_per_gpu_hour: 2}}
datasets:
  file_site: dc
`

// TestKubeRefusesJobThatSpansNodes: a job of resources.nodes 2 put on the
// kubernetes worker's queue by hand fails for good, naming the field,
// before any Job is made.
func TestKubeRefusesJobThatSpansNodes(t *testing.T) {
	f := &fakeKube{jobs: map[string]kubernetes.Job{}}
	j := runPoolAttempt(t, kubeTestConfig, func(rdb redis.UniversalClient, store *jobstore.Store, cfg SlurmConfig) (*Slurm, error) {
		k, err := NewKube(rdb, store, KubeConfig{SlurmConfig: cfg, Kube: f})
		if err != nil {
			return nil, err
		}
		return k.Slurm, nil
	}, func(s *Slurm, job *jobtype.Job) { job.Spec.Resources.Nodes = 2 })
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || !strings.Contains(j.Error, "resources.nodes 2") ||
		!strings.Contains(j.Error, "(kubernetes)") || len(f.reqs) != 0 {
		t.Fatalf("job %s %s %q, %d Jobs made; want failed (permanent) with nothing made", j.State, j.Reason, j.Error, len(f.reqs))
	}
}

// TestKubeAttemptMountsItsOwnPaths: an attempt's Job gets, of the claim
// holding work_dir, the attempt's folder and its checkpoint folder
// (writable) and its dataset and eval dataset (read-only), and nothing
// else of work_dir: not the job's other attempts' folders, nor other
// jobs'.
func TestKubeAttemptMountsItsOwnPaths(t *testing.T) {
	f := &fakeKube{jobs: map[string]kubernetes.Job{}}
	var got []kubernetes.Mount
	var dir, ckpt string
	runPoolAttempt(t, strings.Replace(kubeTestConfig, "image: img,", "image: img, volume_claim: shared,", 1),
		func(rdb redis.UniversalClient, store *jobstore.Store, cfg SlurmConfig) (*Slurm, error) {
			k, err := NewKube(rdb, store, KubeConfig{SlurmConfig: cfg, Kube: f})
			if err != nil {
				return nil, err
			}
			return k.Slurm, nil
		}, func(s *Slurm, job *jobtype.Job) {
			data := filepath.Join(s.b.WorkDir, "data")
			if err := os.MkdirAll(data, 0o755); err != nil {
				t.Fatal(err)
			}
			job.Spec.Dataset, job.Spec.EvalDataset = fileuri.FromPath(filepath.Join(data, "train.jsonl")), fileuri.FromPath(filepath.Join(data, "eval.jsonl"))
			a := newSlurmAttempt(s, job)
			if end := a.prepare(); end != nil {
				t.Fatal("prepare ended the attempt")
			}
			if _, err := s.cfg.Slurm.Submit(t.Context(), a.request()); err != nil {
				t.Fatal(err)
			}
			got, dir, ckpt = f.reqs[0].ClaimMounts, a.dir, a.ckpt
			job.Spec.Resources.Nodes = 2 // the run that follows ends at once
		})
	wd := filepath.Dir(filepath.Dir(dir))
	want := []kubernetes.Mount{{Path: dir}, {Path: ckpt}, {Path: filepath.Join(wd, "data", "train.jsonl"), ReadOnly: true},
		{Path: filepath.Join(wd, "data", "eval.jsonl"), ReadOnly: true}}
	if !slices.Equal(got, want) || f.reqs[0].VolumeClaim != "shared" || f.reqs[0].ClaimPath != wd {
		t.Errorf("claim %s at %s, mounts %+v; want %+v", f.reqs[0].VolumeClaim, f.reqs[0].ClaimPath, got, want)
	}
}
