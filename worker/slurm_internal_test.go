package worker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/backends/aws/agent"
	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/internal/fileuri"
	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// fakeSlurm is a **fake** Slurm (a SlurmScheduler with state, no Slurm
// behind it) for the end states a one-host Slurm cannot be made to show
// on demand (TIMEOUT in seconds, NODE_FAIL, REQUEUED, a job it forgot);
// cmd/lathed's TestSlurm* tests run the real one.
type fakeSlurm struct {
	mu        sync.Mutex
	jobs      map[string]slurm.Job
	submits   int
	cancelled []string
	onSubmit  func(j *slurm.Job) // sets the state a submitted job ends in
}

func (f *fakeSlurm) Submit(_ context.Context, r slurm.SubmitRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits++
	id := strconv.Itoa(100 + len(f.jobs))
	j := slurm.Job{ID: id, Name: r.Name, State: slurm.StatePending, Partition: r.Partition}
	if f.onSubmit != nil {
		f.onSubmit(&j)
	}
	f.jobs[id] = j
	return id, nil
}

func (f *fakeSlurm) Job(_ context.Context, id string) (slurm.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok || j.State == "forgotten" {
		return slurm.Job{}, slurm.ErrNotFound
	}
	return j, nil
}

func (f *fakeSlurm) Jobs(ctx context.Context, ids []string) (map[string]slurm.Job, error) {
	out := map[string]slurm.Job{}
	for _, id := range ids {
		if j, err := f.Job(ctx, id); err == nil {
			out[id] = j
		}
	}
	return out, nil
}

func (f *fakeSlurm) FindByName(_ context.Context, name string) ([]slurm.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []slurm.Job
	for _, j := range f.jobs {
		if j.Name == name {
			out = append(out, j)
		}
	}
	return out, nil
}

func (f *fakeSlurm) Cancel(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, id)
	return nil
}

func (f *fakeSlurm) InPartition(context.Context, string) ([]slurm.Job, error) { return nil, nil }

func (f *fakeSlurm) QueueWait(context.Context, string) (time.Duration, error) { return 0, nil }

const slurmTestConfig = `
sites:
  dc: [onprem, eu]
redis_site: dc
backends:
  hpc: {kind: slurm, site: dc, partition: gpu, work_dir: WORK, price: {usd_per_gpu_hour: 2}}
datasets:
  file_site: dc
`

// runSlurmAttempt runs one claimed attempt of a new job on a slurm worker
// over fake, and returns the job after its end was recorded.
func runSlurmAttempt(t *testing.T, fake *fakeSlurm, before func(s *Slurm, job *jobtype.Job)) *jobtype.Job {
	t.Helper()
	return runPoolAttempt(t, slurmTestConfig, func(rdb redis.UniversalClient, store *jobstore.Store, cfg SlurmConfig) (*Slurm, error) {
		cfg.Slurm = fake
		return NewSlurm(rdb, store, cfg)
	}, before)
}

// runPoolAttempt runs one claimed attempt of a new job on the batch pool
// worker of backend hpc of config (WORK its work_dir) that mk makes, and
// returns the job after its end was recorded.
func runPoolAttempt(t *testing.T, config string, mk func(redis.UniversalClient, *jobstore.Store, SlurmConfig) (*Slurm, error),
	before func(s *Slurm, job *jobtype.Job)) *jobtype.Job {
	t.Helper()
	rdb := redistest.Start(t).Client()
	store := jobstore.New(rdb, jobstore.Config{})
	dir := t.TempDir()
	rc, err := routecfg.ParseConfig([]byte(strings.ReplaceAll(config, "WORK", filepath.Join(dir, "work"))))
	if err != nil {
		t.Fatal(err)
	}
	s, err := mk(rdb, store, SlurmConfig{Routing: rc, Backend: "hpc", Trainers: map[string][]string{"sh": {"/bin/sh", "x"}},
		PollInterval: 10 * time.Millisecond, LeaseTTL: 3 * time.Second, LostGrace: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	j, _, err := store.Create(ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "s", Trainer: "sh", Priority: jobspec.PriorityNormal,
		Residency: []string{"eu"}, Resources: jobspec.Resources{GPUs: 1}}, OutputURI: fileuri.FromPath(filepath.Join(dir, "out")) + "/{id}"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Dispatch(ctx, jobstore.DispatchParams{JobID: j.ID, Attempt: 1, Node: s.Node(), Backend: "hpc", Capacity: 8}); err != nil {
		t.Fatal(err)
	}
	if out, err := store.ClaimCloud(ctx, jobstore.ClaimParams{ID: j.ID, Attempt: 1, Node: s.Node(), Incarnation: s.Incarnation(), Lease: time.Minute}); err != nil || out != jobstore.Claimed {
		t.Fatalf("claim: %v %v", out, err)
	}
	job, err := store.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(s, job)
	}
	if end := newSlurmAttempt(s, job).run(ctx); end != nil {
		if err := recordEnd(s.log, end); err != nil {
			t.Fatal(err)
		}
	}
	job, err = store.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// TestSlurmEndStates: how each end of a Slurm job the real one-host Slurm
// cannot show on demand maps onto the attempt (over fakeSlurm).
func TestSlurmEndStates(t *testing.T) {
	ended := func(state string) func(j *slurm.Job) {
		return func(j *slurm.Job) { j.State, j.Reason = state, "test" }
	}
	for _, tc := range []struct {
		name        string
		state       string
		wantState   jobtype.State
		wantAttempt int
		wantErr     string
		preempted   int
		wantCancel  bool
	}{
		{"timeout", slurm.StateTimeout, jobtype.StateFailed, 1, "ended TIMEOUT: max_runtime", 0, false},
		{"node failure", slurm.StateNodeFail, jobtype.StateQueued, 2, "ended NODE_FAIL (exit code 0, test) without a status", 0, false},
		{"preempted", slurm.StatePreempted, jobtype.StateQueued, 2, "Slurm PREEMPTED job", 1, false},
		{"requeued", slurm.StateRequeued, jobtype.StateQueued, 2, "Slurm REQUEUED job", 1, true},
		{"cancelled outside Lathe", slurm.StateCancelled, jobtype.StateQueued, 2, "cancelled outside Lathe", 0, false},
		{"forgotten by Slurm without a status", "forgotten", jobtype.StateQueued, 2, "unknown to Slurm and left no status", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeSlurm{jobs: map[string]slurm.Job{}, onSubmit: ended(tc.state)}
			j := runSlurmAttempt(t, fake, nil)
			if j.State != tc.wantState || j.Attempt != tc.wantAttempt || !strings.Contains(j.Error, tc.wantErr) || j.Preemptions != tc.preempted {
				t.Errorf("job %s attempt %d preemptions %d %q; want %s attempt %d preemptions %d …%s…", j.State, j.Attempt, j.Preemptions, j.Error,
					tc.wantState, tc.wantAttempt, tc.preempted, tc.wantErr)
			}
			if tc.wantState == jobtype.StateFailed && j.Reason != jobtype.ReasonTimeout {
				t.Errorf("reason %q, want timeout", j.Reason)
			}
			if (len(fake.cancelled) > 0) != tc.wantCancel {
				t.Errorf("scancel calls %v", fake.cancelled)
			}
		})
	}
}

// TestSlurmFindsJobSubmittedBeforeACrash: an attempt whose Slurm job was
// submitted (by name) but not recorded on the job is re-attached by name,
// never submitted again, and ends as its step's status says.
func TestSlurmFindsJobSubmittedBeforeACrash(t *testing.T) {
	fake := &fakeSlurm{jobs: map[string]slurm.Job{}}
	j := runSlurmAttempt(t, fake, func(s *Slurm, job *jobtype.Job) {
		dir := filepath.Join(s.b.WorkDir, job.ID, "1")
		if err := os.MkdirAll(filepath.Join(dir, slurmOutputDir), 0o755); err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(dir, slurmOutputDir, "adapter.bin"), []byte("a"), 0o644)
		_ = os.WriteFile(filepath.Join(dir, SlurmStatusFile), mustJSON(agent.Status{State: agent.StateSucceeded}), 0o644)
		fake.jobs["7"] = slurm.Job{ID: "7", Name: slurmJobName(job.ID, 1), State: slurm.StateCompleted,
			StartTime: time.Now().Add(-time.Hour), EndTime: time.Now()}
	})
	if j.State != jobtype.StateSucceeded || len(j.Artifacts) != 1 || fake.submits != 0 || j.Instance == nil || j.Instance.ID != "7" {
		t.Errorf("job %s %s artifacts %v, %d submits, instance %+v", j.State, j.Error, j.Artifacts, fake.submits, j.Instance)
	}
	if j.CloudCostUSD < 1.99 || j.CloudCostUSD > 2.01 { // 1 GPU × 1 h × $2
		t.Errorf("cost %v, want 2", j.CloudCostUSD)
	}
}

// TestParseSlurmJobName: the names the worker gives its Slurm jobs, and
// the names it never takes for its own.
func TestParseSlurmJobName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		id      string
		attempt int
		ok      bool
	}{
		{slurmJobName("j-0123456789abcdef", 3), "j-0123456789abcdef", 3, true},
		{slurmJobName("j-0123456789abcdef-00007", 1), "j-0123456789abcdef-00007", 1, true},
		{"lathe-j-0123456789abcdef-0", "", 0, false},
		{"lathe-j-0123456789abcdef-x", "", 0, false},
		{"lathe-nothing-1", "", 0, false},
		{"other-j-0123456789abcdef-1", "", 0, false},
		{"lathe-", "", 0, false},
	} {
		id, n, ok := parseSlurmJobName(tc.name)
		if id != tc.id || n != tc.attempt || ok != tc.ok {
			t.Errorf("%q: %q %d %v", tc.name, id, n, ok)
		}
	}
}

// TestSlurmStepFilesNoLinks: the attempt folder is written by the Slurm
// job, whose trainer may swap its files for links to files of the worker's
// host. A status.json that is a symbolic link, and an events.jsonl that is
// a hard link of a secret, are never read: the attempt ends as one with no
// status (a retry), and no line of the secret reaches the job's events.
func TestSlurmStepFilesNoLinks(t *testing.T) {
	secretDir := t.TempDir()
	secret := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secret, []byte(`{"t":1765000000000,"type":"progress","data":{"event":"progress","step":1,"total_steps":2,"loss":0.5,"secret":"SECRET-OF-THE-HOST"}}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	status := filepath.Join(secretDir, "status.json")
	if err := os.WriteFile(status, mustJSON(agent.Status{State: agent.StateSucceeded}), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := &fakeSlurm{jobs: map[string]slurm.Job{}}
	var store *jobstore.Store
	j := runSlurmAttempt(t, fake, func(s *Slurm, job *jobtype.Job) {
		store = s.store
		dir := filepath.Join(s.b.WorkDir, job.ID, "1")
		if err := os.MkdirAll(filepath.Join(dir, slurmOutputDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(status, filepath.Join(dir, SlurmStatusFile)); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(secret, filepath.Join(dir, SlurmEventsFile)); err != nil {
			t.Fatal(err)
		}
		fake.jobs["7"] = slurm.Job{ID: "7", Name: slurmJobName(job.ID, 1), State: slurm.StateCompleted,
			StartTime: time.Now().Add(-time.Minute), EndTime: time.Now()}
	})
	if j.State == jobtype.StateSucceeded || !strings.Contains(j.Error, "without a status") {
		t.Errorf("job %s attempt %d %q: want the linked status.json unread (ended without a status)", j.State, j.Attempt, j.Error)
	}
	evs, err := store.Events(t.Context(), j.ID, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if strings.Contains(string(mustJSON(e)), "SECRET-OF-THE-HOST") {
			t.Fatalf("the hard-linked secret reached the job's events: %s", mustJSON(e))
		}
	}
}

// TestSlurmRefusesJobThatSpansNodes: a gang put on the slurm backend's
// queue by hand (admission and the placer never send one) fails for good
// before anything is submitted to Slurm.
func TestSlurmRefusesJobThatSpansNodes(t *testing.T) {
	fake := &fakeSlurm{jobs: map[string]slurm.Job{}}
	j := runSlurmAttempt(t, fake, func(s *Slurm, job *jobtype.Job) { job.Spec.Resources.Nodes = 2 })
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || !strings.Contains(j.Error, "span nodes") || fake.submits != 0 {
		t.Fatalf("job %s %s %q, %d submits; want failed (permanent) with nothing submitted", j.State, j.Reason, j.Error, fake.submits)
	}
}

// TestSlurmAttemptFolderNoLinks: a link put where an attempt's folder goes
// (by an earlier attempt's trainer, which may write under work_dir/JOB)
// is not followed: the worker writes nothing through it and submits
// nothing, and the attempt ends for another try.
func TestSlurmAttemptFolderNoLinks(t *testing.T) {
	elsewhere := t.TempDir()
	// A job submitted ends at once (without the fix, the attempt would
	// run and end here rather than wait).
	fake := &fakeSlurm{jobs: map[string]slurm.Job{}, onSubmit: func(j *slurm.Job) { j.State = slurm.StateCompleted }}
	j := runSlurmAttempt(t, fake, func(s *Slurm, job *jobtype.Job) {
		if err := os.MkdirAll(filepath.Join(s.b.WorkDir, job.ID), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(elsewhere, filepath.Join(s.b.WorkDir, job.ID, "1")); err != nil {
			t.Fatal(err)
		}
	})
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 || fake.submits != 0 {
		t.Fatalf("wrote %d entries through the link, %d submits; want none", len(ents), fake.submits)
	}
	if j.State == jobtype.StateSucceeded || j.Attempt == 1 && j.State == jobtype.StateRunning {
		t.Fatalf("job %s attempt %d %q: want the attempt ended, not run", j.State, j.Attempt, j.Error)
	}
}
