package main

// The pool conformance suite: one list of scenarios run, unchanged, against
// every kind of pool Lathe runs owned GPUs on, through the real binaries (a
// `lathed scheduler`, the pool's worker, the `lathe` CLI) and a real
// redis-server:
//   - local: a `lathed worker --backend local` on the node, its GPUs
//     simulated by go-nvml's mock server (dgxh100: a **fake**, as
//     everywhere in these tests; the trainers run on the CPU);
//   - slurm: a `lathed worker --backend slurm` against a real one-host
//     Slurm (internal/slurmtest: munged, slurmctld and slurmd started here;
//     its GPUs are GRES on mknod devices);
//   - kubernetes: a `lathed worker --backend kubernetes` against a real
//     kube-apiserver and etcd (envtest) with the real Job controller,
//     garbage collector and scheduler, and kwok GPU nodes
//     (internal/kubetest); no container runs: its **stand-in** runs each
//     pod's command on this host and ends the pod through the API.
// The trainers are small /bin/sh stand-ins that speak the trainer contract
// (confTrainers), not trainers.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/kubetest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/slurmtest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// confTrainers are the suite's trainer stand-ins (/bin/sh scripts, not
// trainers). GATES is replaced by the rig's gate folder: gate waits there
// for a file named after its job.
var confTrainers = map[string]string{
	"ok": `echo '{"event":"progress","step":1,"total_steps":2,"loss":1.5}'
echo "adapter" > "$LATHE_OUTPUT_DIR/adapter.bin"
echo '{"event":"done","metrics":{"train_loss":0.5}}'
`,
	"sleep": `echo '{"event":"progress","step":1,"total_steps":100,"loss":2.0}'
exec sleep 600
`,
	"fail": `echo "bad data at line 3" >&2
exit 3
`,
	// flaky fails its first attempt (exit 1: retried) and succeeds in the next.
	"flaky": `if [ "$LATHE_ATTEMPT" = 1 ]; then echo "transient trouble" >&2; exit 1; fi
echo "adapter" > "$LATHE_OUTPUT_DIR/adapter.bin"
echo '{"event":"done","metrics":{"train_loss":0.75}}'
`,
	"gate": `echo '{"event":"progress","step":1,"total_steps":2,"loss":1.0}'
while [ ! -e "GATES/$LATHE_JOB_ID" ]; do sleep 0.1; done
echo "adapter" > "$LATHE_OUTPUT_DIR/adapter.bin"
echo '{"event":"done","metrics":{"train_loss":0.25}}'
`,
}

// confPool is one kind of pool under the suite: its backend's config
// entry (and any top-level config it needs) and how its worker starts.
type confPool struct {
	name    string
	config  func(r *confRig) string // YAML: the backends entry "pool", then top-level keys
	worker  func(r *confRig) *daemon
	started string // what the worker logs once it takes work
}

// confRig is one pool under the suite: Redis, the config, a scheduler and
// the pool's worker.
type confRig struct {
	t             *testing.T
	pool          confPool
	lathed, lathe string
	rs            *redistest.Server
	slurm         *slurmtest.Cluster // the slurm pool's
	kube          *kubetest.Cluster  // the kubernetes pool's
	dir, cfgPath  string
	base, listen  string
	sched, worker *daemon
}

func confPools() []confPool {
	return []confPool{
		{name: "local", started: "worker started",
			config: func(r *confRig) string {
				return "  pool: {kind: local, site: dc-frankfurt, price: {usd_per_gpu_hour: 2.0}}\n"
			},
			worker: func(r *confRig) *daemon {
				return startDaemon(r.t, r.lathed, "worker", "--backend", "local", "--gpus", "simulated:dgxh100", "--node", "conf-node",
					"--redis-url", r.rs.URL(), "--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"))
			}},
		{name: "slurm", started: "slurm worker started",
			config: func(r *confRig) string {
				r.slurm = slurmtest.Start(r.t, slurmtest.Options{GPUs: 2, CPUs: 2})
				return fmt.Sprintf(`  pool:
    kind: slurm
    site: dc-frankfurt
    partition: %s
    work_dir: %s
    lathed_path: %s
    price: {usd_per_gpu_hour: 2.0}
slurm: {conf: %s, poll_interval: 300ms, lease_ttl: 3s, lost_grace: 5s, submit_retry: 2s, orphan_grace: 1s}
`, r.slurm.Partition, filepath.Join(r.dir, "slurm-work"), r.lathed, r.slurm.Conf)
			},
			worker: func(r *confRig) *daemon {
				return startDaemon(r.t, r.lathed, "worker", "--backend", "slurm", "--slurm-backend", "pool", "--redis-url", r.rs.URL(),
					"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"))
			}},
		{name: "kubernetes", started: "kubernetes worker started",
			config: func(r *confRig) string {
				r.kube = kubetest.Start(r.t, kubetest.Options{GPUs: 2})
				return kubeBackendConfig("pool", r.kube, filepath.Join(r.dir, "kube-work"), r.lathed, r.dir)
			},
			worker: func(r *confRig) *daemon {
				return startDaemon(r.t, r.lathed, "worker", "--backend", "kubernetes", "--kube-backend", "pool", "--redis-url", r.rs.URL(),
					"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"))
			}},
	}
}

func newConfRig(t *testing.T, p confPool) *confRig {
	r := &confRig{t: t, pool: p, dir: t.TempDir()}
	r.lathed, r.lathe = binaries(t)
	r.rs = redistest.Start(t)
	gates := filepath.Join(r.dir, "gates")
	reachableByTrainers(t, gates) // a root lathed's local trainers run as uids of their own
	if err := os.Chmod(gates, 0o777); err != nil {
		t.Fatal(err)
	}
	var trainers strings.Builder
	for name, body := range confTrainers {
		path := filepath.Join(r.dir, name+".sh")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(body, "GATES", gates)), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&trainers, "  sh-%s: [/bin/sh, %s]\n", name, path)
	}
	cfg := "sites:\n  dc-frankfurt: [onprem, eu]\nredis_site: dc-frankfurt\nbackends:\n" + p.config(r) +
		fmt.Sprintf(`datasets:
  file_site: dc-frankfurt
scheduler: {leader_ttl: 2s}
worker: {heartbeat_ttl: 3s, kill_grace: 2s, max_attempts: 3}
trainers:
%sjobs:
  allowed_roots: [%s, %s]
`, trainers.String(), repoRoot(t), r.dir)
	r.cfgPath = filepath.Join(r.dir, "lathed.yaml")
	if err := os.WriteFile(r.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r.listen = "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	r.base = "http://" + r.listen
	r.sched = r.startScheduler()
	r.worker = p.worker(r)
	if !waitfor.Poll(60*time.Second, func() bool { return strings.Contains(r.worker.output(), p.started) }) {
		t.Fatalf("%s worker did not start:\n%s", p.name, r.worker.output())
	}
	return r
}

func (r *confRig) startScheduler() *daemon {
	d := startDaemon(r.t, r.lathed, "scheduler", "--listen", r.listen, "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"))
	waitHTTP(r.t, r.base, d)
	return d
}

// submit submits a one-GPU job of trainer sh-TRAINER with residency tags;
// it returns the job's id, or "" and the CLI's output when it was refused.
func (r *confRig) submit(name, trainer, residency string) (string, string) {
	r.t.Helper()
	outDir := filepath.Join(r.dir, "out")
	reachableByTrainers(r.t, outDir)
	spec := strings.Join([]string{"name: " + name, "base_model: tiny-char",
		"dataset: file://" + repoRoot(r.t) + "/configs/examples/data/tiny-train.jsonl",
		"trainer: sh-" + trainer, "resources: {gpus: 1}", "residency: [" + residency + "]", "max_runtime: 10m",
		"output: {uri: file://" + filepath.Join(outDir, name) + "}"}, "\n") + "\n"
	path := filepath.Join(r.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		r.t.Fatal(err)
	}
	out, errOut, code := cli(r.t, r.lathe, r.base, "submit", path, "-o", "json")
	if code != 0 {
		return "", out + errOut
	}
	return decodeJob(r.t, out).ID, ""
}

func (r *confRig) mustSubmit(name, trainer string) string {
	r.t.Helper()
	id, refused := r.submit(name, trainer, "eu")
	if id == "" {
		r.t.Fatalf("submit %s refused: %s", name, refused)
	}
	return id
}

func (r *confRig) ended(id string) jobtype.Job {
	r.t.Helper()
	return waitJob(r.t, r.base, id, 2*time.Minute, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
}

func (r *confRig) running(id string) {
	r.t.Helper()
	waitJob(r.t, r.base, id, 2*time.Minute, "running with progress", func(j jobtype.Job) bool {
		return j.State == jobtype.StateRunning && j.Progress.Step == 1
	})
}

func (r *confRig) dump() {
	if r.t.Failed() {
		r.t.Logf("%s worker:\n%s\nscheduler:\n%s", r.pool.name, r.worker.output(), r.sched.output())
	}
}

// TestPoolConformance runs the scenarios against each pool: submit, run
// with progress and an artifact; cancel mid-run; a permanent failure; a
// retry after a transient one; a restart of lathed (the scheduler, kill -9)
// while a job runs; residency (a job whose tags the pool's site lacks is
// refused and never reaches it).
func TestPoolConformance(t *testing.T) {
	for _, p := range confPools() {
		t.Run(p.name, func(t *testing.T) {
			r := newConfRig(t, p)
			defer r.dump()
			t.Run("submit, run, progress, artifact", r.runsToTheEnd)
			t.Run("cancel mid-run", r.cancelsMidRun)
			t.Run("permanent failure", r.failsForGood)
			t.Run("retry after a transient failure", r.retries)
			t.Run("restart of lathed mid-job", r.survivesRestart)
			t.Run("restart of the pool's worker mid-job", r.survivesWorkerRestart)
			t.Run("residency", r.keepsResidency)
		})
	}
}

func (r *confRig) runsToTheEnd(t *testing.T) {
	id := r.mustSubmit("conf-ok", "ok")
	j := r.ended(id)
	if j.State != jobtype.StateSucceeded || j.Attempt != 1 || j.Progress.Step != 1 || j.Metrics["train_loss"] != 0.5 ||
		len(j.Artifacts) != 1 || j.Artifacts[0].Path != "adapter.bin" {
		t.Fatalf("job %s %s %q attempt %d progress %+v metrics %v artifacts %+v", j.State, j.Reason, j.Error, j.Attempt, j.Progress, j.Metrics, j.Artifacts)
	}
	if b, err := os.ReadFile(filepath.Join(strings.TrimPrefix(j.OutputURI, "file://"), "adapter.bin")); err != nil || string(b) != "adapter\n" {
		t.Errorf("published artifact %q %v", b, err)
	}
}

func (r *confRig) cancelsMidRun(t *testing.T) {
	id := r.mustSubmit("conf-sleep", "sleep")
	r.running(id)
	if out, errOut, code := cli(t, r.lathe, r.base, "cancel", id); code != 0 {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	if j := r.ended(id); j.State != jobtype.StateCancelled || j.Attempt != 1 {
		t.Fatalf("job %s %s %q attempt %d, want cancelled in attempt 1", j.State, j.Reason, j.Error, j.Attempt)
	}
}

func (r *confRig) failsForGood(t *testing.T) {
	j := r.ended(r.mustSubmit("conf-fail", "fail"))
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonPermanent || j.Attempt != 1 || !strings.Contains(j.Error, "bad data at line 3") {
		t.Fatalf("job %s %s %q attempt %d, want failed (permanent) in attempt 1 with the trainer's reason", j.State, j.Reason, j.Error, j.Attempt)
	}
}

func (r *confRig) retries(t *testing.T) {
	j := r.ended(r.mustSubmit("conf-flaky", "flaky"))
	if j.State != jobtype.StateSucceeded || j.Attempt != 2 || j.Metrics["train_loss"] != 0.75 {
		t.Fatalf("job %s %s %q attempt %d metrics %v, want succeeded in attempt 2", j.State, j.Reason, j.Error, j.Attempt, j.Metrics)
	}
}

// survivesRestart kills the scheduler (-9) while a job runs and starts
// another: the attempt runs on and succeeds, still attempt 1.
func (r *confRig) survivesRestart(t *testing.T) {
	id := r.mustSubmit("conf-gate", "gate")
	r.running(id)
	kill9(t, r.sched)
	r.sched = r.startScheduler()
	if err := os.WriteFile(filepath.Join(r.dir, "gates", id), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if j := r.ended(id); j.State != jobtype.StateSucceeded || j.Attempt != 1 || j.Metrics["train_loss"] != 0.25 {
		t.Fatalf("job %s %s %q attempt %d metrics %v, want succeeded in attempt 1", j.State, j.Reason, j.Error, j.Attempt, j.Metrics)
	}
}

// survivesWorkerRestart kills the pool's worker (-9) while a job runs and
// starts another: the job still succeeds, in attempt 1 where the pool
// keeps the attempt running without its worker (Slurm: the next worker
// re-attaches) or in attempt 2 where the attempt died with it (a local
// node: the next worker kills what is left, and the attempt is released).
func (r *confRig) survivesWorkerRestart(t *testing.T) {
	id := r.mustSubmit("conf-gate-w", "gate")
	r.running(id)
	kill9(t, r.worker)
	r.worker = r.pool.worker(r)
	if !waitfor.Poll(60*time.Second, func() bool { return strings.Contains(r.worker.output(), r.pool.started) }) {
		t.Fatalf("the next %s worker did not start:\n%s", r.pool.name, r.worker.output())
	}
	if err := os.WriteFile(filepath.Join(r.dir, "gates", id), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if j := r.ended(id); j.State != jobtype.StateSucceeded || j.Attempt > 2 || j.Metrics["train_loss"] != 0.25 {
		t.Fatalf("job %s %s %q attempt %d metrics %v, want succeeded within 2 attempts", j.State, j.Reason, j.Error, j.Attempt, j.Metrics)
	} else {
		t.Logf("%s: succeeded in attempt %d after its worker's kill -9", r.pool.name, j.Attempt)
	}
}

// keepsResidency submits a [us] job: the pool's site is [onprem, eu], and
// no other backend exists, so it is refused, naming the pool, and nothing
// of it is stored to run.
func (r *confRig) keepsResidency(t *testing.T) {
	id, refused := r.submit("conf-us", "ok", "us")
	if id != "" || !strings.Contains(refused, "pool") || !strings.Contains(refused, "us") {
		t.Fatalf("a [us] job: stored %q, output %q; want it refused, naming the pool", id, refused)
	}
}
