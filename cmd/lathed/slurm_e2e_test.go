package main

// End-to-end tests of the Slurm pool: the real lathed binaries (scheduler,
// `worker --backend slurm`, and `slurm-step`, which Slurm's batch script
// runs) against a real one-host Slurm started by the test
// (internal/slurmtest: its own munged, slurmctld and slurmd; GPUs are GRES
// on mknod devices, so no GPU is touched). The trainers are small /bin/sh
// stand-ins that speak the trainer contract, named as such below.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/slurmtest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// slurmRig is one Redis, one Slurm, a lathed config with a slurm backend
// "hpc" in site dc-frankfurt [onprem, eu], a scheduler and a slurm worker.
type slurmRig struct {
	t             *testing.T
	lathed, lathe string
	rs            *redistest.Server
	slurm         *slurmtest.Cluster
	dir, cfgPath  string
	base          string
	worker        *daemon
}

// The trainer stand-ins (not trainers: /bin/sh scripts that speak the
// trainer contract): ok reports progress, records CUDA_VISIBLE_DEVICES,
// writes an artifact and a done line; sleep reports progress and sleeps
// until stopped; fail prints a reason and exits 3 (permanent).
var slurmTrainers = map[string]string{
	"ok": `echo '{"event":"progress","step":1,"total_steps":2,"loss":1.5}'
echo "cuda=$CUDA_VISIBLE_DEVICES" > "$LATHE_OUTPUT_DIR/../cvd.txt"
echo "adapter" > "$LATHE_OUTPUT_DIR/adapter.bin"
sleep 1.2
echo '{"event":"done","metrics":{"train_loss":0.5}}'
`,
	"sleep": `echo '{"event":"progress","step":1,"total_steps":100,"loss":2.0}'
exec sleep 600
`,
	"fail": `echo "bad data at line 3" >&2
exit 3
`,
	// gate waits for the file "go" beside its output folder, then succeeds.
	"gate": `echo '{"event":"progress","step":1,"total_steps":2,"loss":1.0}'
while [ ! -e "$LATHE_OUTPUT_DIR/../go" ]; do sleep 0.1; done
echo "adapter" > "$LATHE_OUTPUT_DIR/adapter.bin"
echo '{"event":"done","metrics":{"train_loss":0.25}}'
`,
	// second sleeps in its first attempt and succeeds in the next.
	"second": `echo '{"event":"progress","step":1,"total_steps":2,"loss":1.0}'
if [ "$LATHE_ATTEMPT" = 1 ]; then exec sleep 600; fi
echo "adapter" > "$LATHE_OUTPUT_DIR/adapter.bin"
`,
}

func newSlurmRig(t *testing.T, o slurmRigOptions) *slurmRig {
	t.Helper()
	r := &slurmRig{t: t}
	r.lathed, r.lathe = binaries(t)
	r.rs = redistest.Start(t)
	r.slurm = slurmtest.Start(t, o.Options)
	r.dir = t.TempDir()
	var trainers strings.Builder
	for name, body := range slurmTrainers {
		p := filepath.Join(r.dir, name+".sh")
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&trainers, "  sh-%s: [/bin/sh, %s]\n", name, p)
	}
	cfg := fmt.Sprintf(`sites:
  dc-frankfurt: [onprem, eu]
redis_site: dc-frankfurt
backends:
  hpc:
    kind: slurm
    site: dc-frankfurt
    partition: %s
    account: ml-team
    work_dir: %s
    lathed_path: %s
    price: {usd_per_gpu_hour: 2.0}
datasets:
  file_site: dc-frankfurt
scheduler: {leader_ttl: 2s}
worker: {heartbeat_ttl: 3s, kill_grace: 2s}
slurm: {conf: %s, poll_interval: 300ms, lease_ttl: 3s, lost_grace: 5s, submit_retry: 2s, orphan_grace: 1s}
trainers:
%sjobs:
  allowed_roots: [%s, %s]
`, r.slurm.Partition, filepath.Join(r.dir, "slurm-work"), r.lathed, r.slurm.Conf, trainers.String(), repoRoot(t), r.dir)
	r.cfgPath = filepath.Join(r.dir, "lathed.yaml")
	if err := os.WriteFile(r.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if !o.NoDaemons {
		r.startDaemons()
	}
	return r
}

// slurmRigOptions are the cluster's options, and whether the rig starts no
// daemon of its own.
type slurmRigOptions struct {
	slurmtest.Options
	NoDaemons bool
}

// startDaemons starts `lathed scheduler` and the slurm worker.
func (r *slurmRig) startDaemons() {
	t := r.t
	port := redistest.FreePort(t)
	r.base = "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemon(t, r.lathed, "scheduler", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"))
	waitHTTP(t, r.base, d)
	r.worker = r.startWorker()
}

// startWorker starts `lathed worker --backend slurm --slurm-backend hpc`.
func (r *slurmRig) startWorker() *daemon {
	d := startDaemon(r.t, r.lathed, "worker", "--backend", "slurm", "--slurm-backend", "hpc", "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"))
	if !waitfor.Poll(30*time.Second, func() bool {
		select {
		case <-d.done:
			r.t.Fatalf("slurm worker exited:\n%s", d.output())
		default:
		}
		return strings.Contains(d.output(), "slurm worker started")
	}) {
		r.t.Fatalf("slurm worker did not start:\n%s", d.output())
	}
	return d
}

// spec writes a one-GPU job spec of trainer sh-NAME with residency tags.
func (r *slurmRig) spec(name, trainer string, residency string) string {
	lines := []string{"name: " + name, "base_model: tiny-char",
		"dataset: file://" + repoRoot(r.t) + "/configs/examples/data/tiny-train.jsonl",
		"trainer: sh-" + trainer, "resources: {gpus: 1}", "residency: [" + residency + "]", "max_runtime: 10m",
		"output: {uri: file://" + filepath.Join(r.dir, "out", name) + "}"}
	p := filepath.Join(r.dir, name+".yaml")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return p
}

func (r *slurmRig) submit(name, trainer string) string {
	r.t.Helper()
	out, errOut, code := cli(r.t, r.lathe, r.base, "submit", r.spec(name, trainer, "eu"), "-o", "json")
	if code != 0 {
		r.t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	return decodeJob(r.t, out).ID
}

// slurmJob returns what Slurm holds of the attempt's job (by its name).
func (r *slurmRig) slurmJob(id string, attempt int) (slurmtest.Job, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := r.slurm.Jobs(ctx)
	if err != nil {
		r.t.Fatalf("squeue: %v", err)
	}
	for _, j := range jobs {
		if j.Name == "lathe-"+id+"-"+strconv.Itoa(attempt) {
			return j, true
		}
	}
	return slurmtest.Job{}, false
}

// sbatch submits a job that is not Lathe's (output discarded), in the
// rig's partition unless args name another.
func (r *slurmRig) sbatch(ctx context.Context, args ...string) {
	r.t.Helper()
	if _, err := r.slurm.Command(ctx, "sbatch", append([]string{"--parsable", "--partition=" + r.slurm.Partition, "--output=/dev/null"}, args...)...); err != nil {
		r.t.Fatal(err)
	}
}

func (r *slurmRig) dump() {
	if r.t.Failed() {
		r.t.Logf("slurm worker:\n%s", r.worker.output())
	}
}

// TestSlurmPoolE2E: a job routed to the slurm backend runs as a Slurm job
// asking --gres=gpu:1 in the configured partition and account, its trainer
// sees the CUDA_VISIBLE_DEVICES Slurm set, and it succeeds with its
// artifact published and its cost recorded; a job cancelled mid-run ends
// cancelled and its Slurm job is cancelled; a trainer that exits 3 fails
// the job for good with its reason; a job whose tags the Slurm site lacks
// is refused, never sent there.
func TestSlurmPoolE2E(t *testing.T) {
	r := newSlurmRig(t, slurmRigOptions{Options: slurmtest.Options{GPUs: 2, CPUs: 2}})
	defer r.dump()

	okID := r.submit("slurm-ok", "ok")
	sleepID := r.submit("slurm-sleep", "sleep")
	j := waitJob(t, r.base, okID, 2*time.Minute, "succeeded", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || len(j.Artifacts) != 1 || j.Artifacts[0].Path != "adapter.bin" || j.Metrics["train_loss"] != 0.5 {
		t.Fatalf("ok job: %s %s %s artifacts %+v metrics %v", j.State, j.Reason, j.Error, j.Artifacts, j.Metrics)
	}
	if j.Instance == nil || j.Instance.Backend != "hpc" || j.CloudCostUSD <= 0 {
		t.Errorf("ok job's Slurm record %+v cost %v", j.Instance, j.CloudCostUSD)
	}
	sj, ok := r.slurmJob(okID, 1)
	if !ok || sj.State != "COMPLETED" || sj.TRESPerNode != "gres:gpu:1" || sj.Partition != r.slurm.Partition || sj.Account != "ml-team" ||
		strconv.Itoa(sj.ID) != j.Instance.ID {
		t.Errorf("ok job's Slurm job %+v (found %v), recorded %s", sj, ok, j.Instance.ID)
	}
	cvd, err := os.ReadFile(filepath.Join(r.dir, "slurm-work", okID, "1", "cvd.txt"))
	if err != nil || !strings.HasPrefix(string(cvd), "cuda=") || strings.TrimSpace(string(cvd)) == "cuda=" {
		t.Errorf("the trainer's CUDA_VISIBLE_DEVICES: %q %v", cvd, err)
	}
	if b, err := os.ReadFile(filepath.Join(strings.TrimPrefix(j.OutputURI, "file://"), "adapter.bin")); err != nil || string(b) != "adapter\n" {
		t.Errorf("published artifact %q %v", b, err)
	}

	waitJob(t, r.base, sleepID, 2*time.Minute, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	if sj, ok := r.slurmJob(sleepID, 1); !ok || sj.State != "RUNNING" {
		t.Fatalf("sleeping job's Slurm job %+v (found %v)", sj, ok)
	}
	if out, errOut, code := cli(t, r.lathe, r.base, "cancel", sleepID); code != 0 {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	j = waitJob(t, r.base, sleepID, time.Minute, "cancelled", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateCancelled {
		t.Errorf("cancelled job: %s %s %s", j.State, j.Reason, j.Error)
	}
	if sj, ok := r.slurmJob(sleepID, 1); !ok || sj.State != "CANCELLED" {
		t.Errorf("cancelled job's Slurm job %+v (found %v)", sj, ok)
	}

	failID := r.submit("slurm-fail", "fail")
	j = waitJob(t, r.base, failID, 2*time.Minute, "failed", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || !strings.Contains(j.Error, "bad data at line 3") || j.Attempt != 1 {
		t.Errorf("failing job: %s %s %q attempt %d", j.State, j.Reason, j.Error, j.Attempt)
	}

	out, errOut, code := cli(t, r.lathe, r.base, "submit", r.spec("slurm-us", "ok", "us"), "-o", "json")
	if code == 0 || !strings.Contains(out+errOut, "hpc") {
		t.Errorf("a [us] job: exit %d\n%s\n%s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, _ := r.slurm.Jobs(ctx)
	if len(jobs) != 3 {
		t.Errorf("Slurm ran %d jobs, want 3 (ok, sleep, fail): %+v", len(jobs), jobs)
	}
}

// TestSlurmWorkerRestartE2E: the slurm worker is killed (-9) while its
// attempt runs in Slurm; the next worker adopts the attempt and re-attaches
// to the Slurm job recorded on the job (no second sbatch), which then
// succeeds.
func TestSlurmWorkerRestartE2E(t *testing.T) {
	r := newSlurmRig(t, slurmRigOptions{Options: slurmtest.Options{GPUs: 2, CPUs: 2}})
	defer r.dump()
	id := r.submit("slurm-gate", "gate")
	waitJob(t, r.base, id, 2*time.Minute, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	kill9(t, r.worker)
	r.worker = r.startWorker()
	waitfor.True(t, time.Minute, "the new worker re-attached", func() bool { return strings.Contains(r.worker.output(), "re-attached to Slurm job") })
	if err := os.WriteFile(filepath.Join(r.dir, "slurm-work", id, "1", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, r.base, id, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt != 1 || j.Metrics["train_loss"] != 0.25 || len(j.Artifacts) != 1 {
		t.Fatalf("job %s attempt %d %s metrics %v artifacts %+v", j.State, j.Attempt, j.Error, j.Metrics, j.Artifacts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if jobs, err := r.slurm.Jobs(ctx); err != nil || len(jobs) != 1 || jobs[0].State != "COMPLETED" {
		t.Errorf("Slurm jobs %+v %v, want the one, completed", jobs, err)
	}
}

// TestSlurmPreemptionE2E: a job of Slurm's urgent partition preempts the
// attempt's Slurm job (PREEMPTED); the attempt ends as a preemption (not a
// failure), the job goes back to the queue and its next attempt runs in a
// new Slurm job and succeeds.
func TestSlurmPreemptionE2E(t *testing.T) {
	r := newSlurmRig(t, slurmRigOptions{Options: slurmtest.Options{GPUs: 2, CPUs: 2, Preemption: true}})
	defer r.dump()
	id := r.submit("slurm-second", "second")
	waitJob(t, r.base, id, 2*time.Minute, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.sbatch(ctx, "--job-name=urgent", "--gres=gpu:2", "--partition="+slurmtest.UrgentPartition, "--wrap", "sleep 2")
	j := waitJob(t, r.base, id, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt != 2 || j.Preemptions != 1 {
		t.Fatalf("job %s attempt %d preemptions %d: %s", j.State, j.Attempt, j.Preemptions, j.Error)
	}
	if first, ok := r.slurmJob(id, 1); !ok || first.State != "PREEMPTED" {
		t.Errorf("the first attempt's Slurm job %+v (found %v)", first, ok)
	}
	if second, ok := r.slurmJob(id, 2); !ok || second.State != "COMPLETED" {
		t.Errorf("the second attempt's Slurm job %+v (found %v)", second, ok)
	}
}

// TestSlurmQueueFeedsRoutingE2E: Slurm's pending queue of the backend's
// partition reaches routing's wait estimate: with both GPUs held and a
// 2-GPU job of 60 minutes pending (none of them Lathe's), route --explain
// gives the slurm backend a wait of one hour (2 GPU-hours over 2 GPUs).
func TestSlurmQueueFeedsRoutingE2E(t *testing.T) {
	r := newSlurmRig(t, slurmRigOptions{Options: slurmtest.Options{GPUs: 2, CPUs: 2}})
	defer r.dump()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r.sbatch(ctx, "--job-name=holder", "--gres=gpu:2", "--time=10", "--wrap", "sleep 600")
	r.sbatch(ctx, "--job-name=waiting", "--gres=gpu:2", "--time=60", "--wrap", "sleep 1")
	spec := r.spec("slurm-route", "ok", "eu")
	waitfor.True(t, time.Minute, "route --explain with the queue's hour", func() bool {
		out, _, code := cli(t, r.lathe, r.base, "route", "--explain", spec, "-o", "json")
		var ex struct {
			Candidates []struct {
				Backend  string  `json:"backend"`
				EstWaitS float64 `json:"est_wait_s"`
			} `json:"candidates"`
		}
		return code == 0 && json.Unmarshal([]byte(out), &ex) == nil && len(ex.Candidates) == 1 && ex.Candidates[0].EstWaitS == 3600
	})
}

// TestSlurmCancelWhileWorkerDownE2E: the job is cancelled while its slurm
// worker is down (killed -9); the cancel is durable in the store, and the
// next worker adopts the attempt, scancels its Slurm job and ends it
// cancelled.
func TestSlurmCancelWhileWorkerDownE2E(t *testing.T) {
	r := newSlurmRig(t, slurmRigOptions{Options: slurmtest.Options{GPUs: 2, CPUs: 2}})
	defer r.dump()
	id := r.submit("slurm-down", "sleep")
	waitJob(t, r.base, id, 2*time.Minute, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning && j.Progress.Step == 1 })
	kill9(t, r.worker)
	if out, errOut, code := cli(t, r.lathe, r.base, "cancel", id); code != 0 {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	if sj, ok := r.slurmJob(id, 1); !ok || sj.State != "RUNNING" {
		t.Fatalf("with no worker the Slurm job should still run: %+v (found %v)", sj, ok)
	}
	r.worker = r.startWorker()
	j := waitJob(t, r.base, id, time.Minute, "cancelled", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateCancelled {
		t.Errorf("job %s %s %s", j.State, j.Reason, j.Error)
	}
	if sj, ok := r.slurmJob(id, 1); !ok || sj.State != "CANCELLED" {
		t.Errorf("Slurm job %+v (found %v)", sj, ok)
	}
}

// TestSlurmUpE2E: `lathed up --slurm-backend hpc` runs the scheduler, a
// local worker and the slurm worker in one process; a job routed to the
// Slurm pool runs there and succeeds.
func TestSlurmUpE2E(t *testing.T) {
	r := newSlurmRig(t, slurmRigOptions{Options: slurmtest.Options{GPUs: 2, CPUs: 2}, NoDaemons: true})
	port := redistest.FreePort(t)
	r.base = "http://127.0.0.1:" + strconv.Itoa(port)
	r.worker = startDaemon(t, r.lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"), "--gpus", "none", "--slurm-backend", "hpc")
	waitHTTP(t, r.base, r.worker)
	defer r.dump()
	id := r.submit("slurm-up", "ok")
	j := waitJob(t, r.base, id, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Instance == nil || j.Instance.Backend != "hpc" {
		t.Fatalf("job %s %s %s instance %+v", j.State, j.Reason, j.Error, j.Instance)
	}
	if sj, ok := r.slurmJob(id, 1); !ok || sj.State != "COMPLETED" {
		t.Errorf("Slurm job %+v (found %v)", sj, ok)
	}
}

// TestSlurmOrphanE2E: a Slurm job of this deployment (its comment) named
// for an attempt the store does not hold is cancelled by the slurm worker;
// one of another deployment, and one not named as Lathe names attempts,
// are left alone.
func TestSlurmOrphanE2E(t *testing.T) {
	r := newSlurmRig(t, slurmRigOptions{Options: slurmtest.Options{GPUs: 2, CPUs: 2}})
	defer r.dump()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, a := range [][2]string{{"lathe-j-0000000000000000-1", "lathe:cluster=lathe"}, {"lathe-j-0000000000000001-1", "lathe:cluster=other"},
		{"someone-else", "lathe:cluster=lathe"}} {
		r.sbatch(ctx, "--job-name="+a[0], "--comment="+a[1], "--wrap", "sleep 600")
	}
	state := func(name string) string {
		jobs, _ := r.slurm.Jobs(ctx)
		for _, j := range jobs {
			if j.Name == name {
				return j.State
			}
		}
		return ""
	}
	waitfor.True(t, time.Minute, "the orphan cancelled", func() bool { return state("lathe-j-0000000000000000-1") == "CANCELLED" })
	// Two cores: one of the three may be pending.
	live := func(s string) bool { return s == "RUNNING" || s == "PENDING" }
	if s1, s2 := state("lathe-j-0000000000000001-1"), state("someone-else"); !live(s1) || !live(s2) {
		t.Errorf("another deployment's job %s, a foreign job %s; want both left running or pending", s1, s2)
	}
}
