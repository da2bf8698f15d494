package main

// End-to-end tests of the AWS backend (issue #6): the real lathed binaries
// (scheduler, `worker --backend aws`, `agent`) and the real aws-sdk-go-v2
// clients against moto_server, an emulator of EC2 and S3 (not AWS), behind
// mototest.FaultProxy, a fake EC2 front that answers chosen calls with
// EC2's errors. moto starts no VM and never runs user data, so the test
// plays EC2's part: for each instance launched it reads the user data and
// runs `lathed agent` with those arguments as a local process (pointed at
// moto for S3 and at its own fake IMDS, backends/aws/imdsfake), and kills
// that process when the instance is terminated.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/backends/aws/imdsfake"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/mototest"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/worker"
)

const cloudCluster = "e2e"

// cloudRig is one Redis, one moto_server with a VPC, two subnets, a
// security group, an instance profile, an AMI and the work bucket, the
// fault proxy in front of it, a lathed config for them, and the player of
// EC2's part.
type cloudRig struct {
	t             *testing.T
	lathed, lathe string
	rs            *redistest.Server
	moto          *mototest.Server
	proxy         *mototest.FaultProxy
	ec2           *ec2.Client // straight to moto, for checks
	s3            *s3.Client
	dir, cfgPath  string
	env           []string
	player        *ec2Player
}

func newCloudRig(t *testing.T, spot string) *cloudRig {
	t.Helper()
	requireTorch(t)
	r := &cloudRig{t: t}
	r.lathed, r.lathe = binaries(t)
	r.rs = redistest.Start(t)
	r.moto = mototest.Start(t)
	r.proxy = mototest.NewFaultProxy(t, r.moto.URL())
	ctx := t.Context()
	awsCfg := r.moto.Config(ctx)
	r.ec2 = ec2.NewFromConfig(awsCfg)
	r.s3 = s3.NewFromConfig(awsCfg, mototest.S3PathStyle)
	net := mototest.NewNetwork(ctx, t, awsCfg)
	mototest.Bucket(ctx, t, r.s3, "lathe-eu-work")
	r.dir = t.TempDir()
	root := repoRoot(t)
	cfg := fmt.Sprintf(`cluster: %s
sites:
  dc-frankfurt: [onprem, eu]
  aws-eu-central-1: [cloud, eu]
redis_site: dc-frankfurt
backends:
  local:
    kind: local
    site: dc-frankfurt
  aws-eu:
    kind: aws
    site: aws-eu-central-1
    region: %s
    checkpoint_uri: s3://lathe-eu-work/ckpt
    work_uri: s3://lathe-eu-work/runs
    ami: %s
    subnets: [%s]
    security_groups: [%s]
    instance_profile: %s
    spot: %s
    instance_types:
      g5.xlarge: {gpus: 1, gpu_model: A10G, gpu_memory_gb: 24, on_demand_usd_per_hour: 1.006, spot_usd_per_hour: 0.45}
      g6e.xlarge: {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.861, spot_usd_per_hour: 0.80}
datasets:
  buckets: {lathe-eu-work: aws-eu-central-1}
scheduler: {reconcile_every: 1s, reconcile_grace: 1s, leader_ttl: 2s}
worker: {heartbeat_ttl: 3s}
aws: {poll_interval: 300ms, launch_retry: 2s, status_grace: 3s, lease_ttl: 3s}
jobs:
  allowed_roots: [%s, %s]
`, cloudCluster, mototest.Region, net.AMI, strings.Join(net.Subnets, ", "), net.SecurityGroup, net.InstanceProfile, spot, root, r.dir)
	r.cfgPath = filepath.Join(r.dir, "lathed.yaml")
	if err := os.WriteFile(r.cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r.env = []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=" + mototest.Region,
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
	r.player = startPlayer(t, r)
	return r
}

// scheduler starts `lathed scheduler` on a free port and returns its URL.
func (r *cloudRig) scheduler() (string, *daemon) {
	port := redistest.FreePort(r.t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	d := startDaemonEnv(r.t, r.env, r.lathed, "scheduler", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"), "--endpoint-url", r.proxy.URL)
	waitHTTP(r.t, base, d)
	return base, d
}

// worker starts `lathed worker --backend aws --aws-backend aws-eu`.
func (r *cloudRig) worker() *daemon {
	d := startDaemonEnv(r.t, r.env, r.lathed, "worker", "--backend", "aws", "--aws-backend", "aws-eu", "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"), "--endpoint-url", r.proxy.URL)
	if !waitfor.Poll(30*time.Second, func() bool {
		select {
		case <-d.done:
			r.t.Fatalf("aws worker exited:\n%s", d.output())
		default:
		}
		return strings.Contains(d.output(), "aws worker started")
	}) {
		r.t.Fatalf("aws worker did not start:\n%s", d.output())
	}
	return d
}

// spec writes an [eu] job spec (one GPU: routed to aws-eu, no local GPU
// can take it) with the repo's tiny dataset as file:// data, and returns
// its path. extra lines are added.
func (r *cloudRig) spec(name string, extra ...string) string {
	root := repoRoot(r.t)
	lines := []string{"name: " + name, "base_model: tiny-char",
		"dataset: file://" + root + "/configs/examples/data/tiny-train.jsonl",
		"eval_dataset: file://" + root + "/configs/examples/data/tiny-eval.jsonl",
		"lora: {rank: 4, alpha: 8, target_modules: [q_proj, v_proj]}",
		"resources: {gpus: 1}", "residency: [eu]", "max_runtime: 10m"}
	for _, e := range extra { // a line for a key already there replaces it
		k, _, _ := strings.Cut(e, ":")
		replaced := false
		for i, l := range lines {
			if strings.HasPrefix(l, k+":") {
				lines[i], replaced = e, true
			}
		}
		if !replaced {
			lines = append(lines, e)
		}
	}
	p := filepath.Join(r.dir, name+".yaml")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return p
}

func (r *cloudRig) submit(base, spec string) string {
	r.t.Helper()
	out, errOut, code := cli(r.t, r.lathe, base, "submit", spec, "-o", "json")
	if code != 0 {
		r.t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	return decodeJob(r.t, out).ID
}

// instances returns the cluster's instances (any state) of job id, by
// launch order.
func (r *cloudRig) instances(id string) []ec2types.Instance {
	r.t.Helper()
	out, err := r.ec2.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:lathe:cluster"), Values: []string{cloudCluster}},
		{Name: aws.String("tag:lathe:job-id"), Values: []string{id}}}})
	if err != nil {
		r.t.Fatalf("DescribeInstances (moto): %v", err)
	}
	var all []ec2types.Instance
	for _, res := range out.Reservations {
		all = append(all, res.Instances...)
	}
	return all
}

// terminations counts TerminateInstances calls that named instance id.
func (r *cloudRig) terminations(id string) int {
	n := 0
	for _, f := range r.proxy.Forms("TerminateInstances") {
		for k, v := range f {
			if strings.HasPrefix(k, "InstanceId") && len(v) > 0 && v[0] == id {
				n++
			}
		}
	}
	return n
}

func tagOf(in ec2types.Instance, key string) string {
	for _, t := range in.Tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// ec2Player plays the instances: it runs `lathed agent` for each instance
// of the cluster that moto reports pending or running, with the arguments
// of its user data, and kills it when the instance is terminated.
type ec2Player struct {
	r      *cloudRig
	mu     sync.Mutex
	agents map[string]*agentProc // instance id →
	stop   chan struct{}
	done   chan struct{}
}

type agentProc struct {
	cmd  *exec.Cmd
	imds *imdsfake.Server
	job  string
	out  *bytes.Buffer
	mu   sync.Mutex
	done chan struct{}
}

func (a *agentProc) output() string { a.mu.Lock(); defer a.mu.Unlock(); return a.out.String() }

func startPlayer(t *testing.T, r *cloudRig) *ec2Player {
	p := &ec2Player{r: r, agents: map[string]*agentProc{}, stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	t.Cleanup(func() {
		close(p.stop)
		<-p.done
		p.mu.Lock()
		defer p.mu.Unlock()
		for id, a := range p.agents {
			_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
			<-a.done
			if t.Failed() {
				t.Logf("agent on %s (%s):\n%s", id, a.job, a.output())
			}
		}
	})
	return p
}

func (p *ec2Player) loop() {
	defer close(p.done)
	ctx := context.Background()
	for {
		select {
		case <-p.stop:
			return
		case <-time.After(150 * time.Millisecond):
		}
		out, err := p.r.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
			{Name: aws.String("tag:lathe:cluster"), Values: []string{cloudCluster}}}})
		if err != nil {
			continue
		}
		for _, res := range out.Reservations {
			for _, in := range res.Instances {
				id, state := aws.ToString(in.InstanceId), string(in.State.Name)
				p.mu.Lock()
				a := p.agents[id]
				p.mu.Unlock()
				switch {
				case a == nil && (state == "pending" || state == "running"):
					p.start(ctx, id)
				case a != nil && (state == "terminated" || state == "shutting-down"):
					_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL) // the machine is gone
				}
			}
		}
	}
}

func (p *ec2Player) start(ctx context.Context, id string) {
	attr, err := p.r.ec2.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id),
		Attribute: ec2types.InstanceAttributeNameUserData})
	if err != nil || attr.UserData == nil {
		return
	}
	ud, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
	if err != nil {
		return
	}
	job := worker.JobURIFromUserData(string(ud))
	a := &agentProc{imds: imdsfake.New(), job: job, out: &bytes.Buffer{}, done: make(chan struct{})}
	a.cmd = exec.Command(p.r.lathed, "agent", "--job", job, "--endpoint-url", p.r.moto.URL(), "--imds-endpoint", a.imds.URL(),
		"--imds-poll-interval", "200ms", "--no-shutdown", "--work-dir", filepath.Join(p.r.dir, "instances", id))
	a.cmd.Env = append(os.Environ(), p.r.env...)
	a.cmd.Stdout = lockedWriter{&a.mu, a.out}
	a.cmd.Stderr = lockedWriter{&a.mu, a.out}
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if job == "" || a.cmd.Start() != nil {
		return
	}
	go func() { _ = a.cmd.Wait(); a.imds.Close(); close(a.done) }()
	p.mu.Lock()
	p.agents[id] = a
	p.mu.Unlock()
}

// agent returns the agent process playing instance id (nil: none yet).
func (p *ec2Player) agent(id string) *agentProc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agents[id]
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// waitTerminated waits until every instance of job id is terminated.
func (r *cloudRig) waitTerminated(id string, within time.Duration) {
	r.t.Helper()
	waitfor.True(r.t, within, "job "+id+"'s instances terminated", func() bool {
		for _, in := range r.instances(id) {
			if in.State.Name != ec2types.InstanceStateNameTerminated {
				return false
			}
		}
		return true
	})
}

// waitInstance waits until job id has n instances and returns them.
func (r *cloudRig) waitInstance(id string, n int) []ec2types.Instance {
	r.t.Helper()
	return waitfor.Value(r.t, 60*time.Second, fmt.Sprintf("job %s: %d instance(s) launched", id, n),
		func() []ec2types.Instance { return r.instances(id) }, func(in []ec2types.Instance) bool { return len(in) >= n })
}

// TestAWSEndToEnd: an [eu] job with one GPU runs on aws-eu end to end.
// The first choice (g5.xlarge) is refused with InsufficientInstanceCapacity
// (the proxy), so the next choice, g6e.xlarge, is launched, tagged, with
// the agent's user data; the file:// dataset is staged to the work bucket
// and the copy is in the ledger; DescribeInstances fails for a while during
// the run, which neither terminates the instance nor launches another; the
// artifacts arrive at the job's output folder; the instance is terminated
// once; the cost is on the job.
func TestAWSEndToEnd(t *testing.T) {
	r := newCloudRig(t, "never")
	r.proxy.Add(mototest.Fault{Action: "RunInstances", InstanceType: "g5.xlarge", Code: "InsufficientInstanceCapacity", Status: 500})
	base, _ := r.scheduler()
	r.worker()
	id := r.submit(base, r.spec("cloud-e2e", "training: {epochs: 2, batch_size: 8, learning_rate: 0.02, seed: 42, checkpoint_every: 20, eval_every: 20}"))

	insts := r.waitInstance(id, 1)
	in := insts[0]
	if got := string(in.InstanceType); got != "g6e.xlarge" {
		t.Fatalf("launched %s, want g6e.xlarge (g5.xlarge had no capacity)", got)
	}
	for k, want := range map[string]string{"lathe:managed": "true", "lathe:cluster": cloudCluster, "lathe:job-id": id,
		"lathe:attempt": "1", "lathe:backend": "aws-eu"} {
		if got := tagOf(in, k); got != want {
			t.Fatalf("tag %s = %q, want %q", k, got, want)
		}
	}
	// The agent runs; then DescribeInstances fails for a while.
	waitJob(t, base, id, 60*time.Second, "running on the instance", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning })
	r.proxy.Add(mototest.Fault{Action: "DescribeInstances", Code: "Unavailable", Status: 503})
	failing := r.proxy.Count("DescribeInstances")
	waitfor.True(t, 20*time.Second, "the worker describing the instance while the proxy fails it",
		func() bool { return r.proxy.Count("DescribeInstances") >= failing+5 })
	if n := r.terminations(aws.ToString(in.InstanceId)); n != 0 {
		t.Fatalf("the instance was terminated while DescribeInstances failed (%d calls)", n)
	}
	r.proxy.Clear()

	j := waitJob(t, base, id, 120*time.Second, "succeeded", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded {
		t.Fatalf("job ended %s: %s", j.State, j.Error)
	}
	if n := len(r.instances(id)); n != 1 {
		t.Fatalf("%d instances for one attempt", n)
	}
	refusals := 0
	for _, e := range events(t, base, id) {
		if e.Type == worker.EventCloud && strings.Contains(string(e.Data), "g5.xlarge on-demand in subnet-") &&
			strings.Contains(string(e.Data), "InsufficientInstanceCapacity") {
			refusals++
		}
	}
	if refusals != 2 {
		t.Fatalf("%d capacity refusals among the job's events, want 2 (one per subnet)", refusals)
	}
	if got := r.proxy.Count("RunInstances"); got != 3 { // g5 in two subnets refused, g6e launched
		t.Fatalf("RunInstances called %d times, want 3", got)
	}
	iid := aws.ToString(in.InstanceId)
	r.waitTerminated(id, 10*time.Second)
	if n := r.terminations(iid); n != 1 {
		t.Fatalf("instance terminated %d times, want once", n)
	}
	if j.Instance == nil || j.Instance.ID != iid || j.Instance.Type != "g6e.xlarge" || j.Instance.USDPerHour != 1.861 || j.CostUSD <= 0 {
		t.Fatalf("instance and cost on the job: %+v cost %v", j.Instance, j.CostUSD)
	}
	if j.Instance.TerminatedAt == nil {
		t.Fatalf("no termination time on the job's instance: %+v", j.Instance)
	}
	want := 1.861 / 3600 * 60 // 60 s minimum
	if j.CostUSD+1e-9 < want {
		t.Fatalf("cost %v below the 60 s minimum %v", j.CostUSD, want)
	}
	if len(j.Artifacts) == 0 {
		t.Fatal("no artifacts")
	}
	dir := strings.TrimPrefix(j.OutputURI, "file://")
	for _, a := range j.Artifacts {
		if _, err := os.Stat(filepath.Join(dir, a.Path)); err != nil || a.Site != "dc-frankfurt" {
			t.Fatalf("artifact %+v at the output: %v", a, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "adapter_model.safetensors")); err != nil {
		t.Fatalf("adapter not at the output %s: %v", dir, err)
	}
	t.Logf("job %s: %s attempt %d instance %+v cost $%.5f artifacts %d", id, j.State, j.Attempt, *j.Instance, j.CostUSD, len(j.Artifacts))
	if out, errOut, code := cli(t, r.lathe, base, "status", id); code != 0 || !strings.Contains(out, "Instance:") ||
		!strings.Contains(out, iid+" g6e.xlarge on-demand") || !strings.Contains(out, "Cost:") || !strings.Contains(out, "aws-eu (site aws-eu-central-1)") {
		t.Fatalf("lathe status: exit %d\n%s\n%s", code, out, errOut)
	}
	// The leader settles the job: its cost is aws-eu's spend this month.
	waitfor.Value(t, 20*time.Second, fmt.Sprintf("aws-eu's spend settled at the job's cost %v", j.CostUSD), func() string {
		out, errOut, code := cli(t, r.lathe, base, "budgets", "-o", "json")
		if code != 0 {
			t.Fatalf("lathe budgets: exit %d\n%s\n%s", code, out, errOut)
		}
		return out
	}, func(out string) bool {
		var b wire.Budgets
		if json.Unmarshal([]byte(out), &b) != nil {
			t.Fatalf("lathe budgets -o json: %s", out)
		}
		for _, row := range b.Scopes {
			if row.Scope == "backend:aws-eu" && row.ReservedUSD < 1e-9 {
				return row.SpentUSD > j.CostUSD-1e-6 && row.SpentUSD < j.CostUSD+1e-6
			}
		}
		return false
	})
	out, errOut, code := cli(t, r.lathe, base, "audit", "-o", "json")
	if code != 0 || !strings.Contains(out, `"staging"`) || !strings.Contains(out, "s3://lathe-eu-work/runs/"+id+"/data/") {
		t.Fatalf("no staging record in the ledger: exit %d\n%s\n%s", code, out, errOut)
	}
}

// kill9 kills a daemon at once (no cleanup of its own).
func kill9(t *testing.T, d *daemon) {
	t.Helper()
	_ = d.cmd.Process.Kill()
	<-d.done
}

// TestAWSWorkerRestart: the AWS worker is killed (-9) while the job runs on
// its instance and started again: the new worker adopts the attempt and
// re-attaches to the instance (no second RunInstances, no second
// instance), the job completes, and its instance is terminated once.
func TestAWSWorkerRestart(t *testing.T) {
	r := newCloudRig(t, "never")
	base, _ := r.scheduler()
	w := r.worker()
	id := r.submit(base, r.spec("cloud-restart", "training: {epochs: 3, batch_size: 8, learning_rate: 0.02, seed: 42, checkpoint_every: 10, eval_every: 20}"))
	waitJob(t, base, id, 60*time.Second, "running on the instance", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning })
	kill9(t, w)
	if j := getJob(t, base, id); j.State.Terminal() {
		t.Fatalf("the job ended before the worker was killed (%s): make it longer", j.State)
	}
	w2 := r.worker()
	j := waitJob(t, base, id, 120*time.Second, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt != 1 {
		t.Fatalf("job ended %s at attempt %d: %s", j.State, j.Attempt, j.Error)
	}
	if !strings.Contains(w2.output(), "adopted an attempt") {
		t.Fatalf("the second worker did not adopt the attempt:\n%s", w2.output())
	}
	insts := r.instances(id)
	if len(insts) != 1 || r.proxy.Count("RunInstances") != 1 {
		t.Fatalf("%d instances, %d RunInstances calls for one attempt", len(insts), r.proxy.Count("RunInstances"))
	}
	iid := aws.ToString(insts[0].InstanceId)
	r.waitTerminated(id, 10*time.Second)
	if n := r.terminations(iid); n != 1 {
		t.Fatalf("instance terminated %d times, want once", n)
	}
	if len(j.Artifacts) == 0 || j.CostUSD <= 0 {
		t.Fatalf("artifacts %d, cost %v", len(j.Artifacts), j.CostUSD)
	}
}

// TestAWSCancelWhileDown: the job runs on its instance; the scheduler and
// the AWS worker are killed (-9); the job is cancelled through a second
// scheduler; once that scheduler leads, its reconciler terminates the
// instance (its attempt is no longer live) and, no worker holding the
// attempt, ends it cancelled.
func TestAWSCancelWhileDown(t *testing.T) {
	r := newCloudRig(t, "never")
	base, s1 := r.scheduler()
	w := r.worker()
	id := r.submit(base, r.spec("cloud-cancel", "training: {epochs: 20, batch_size: 8, learning_rate: 0.02, seed: 42, checkpoint_every: 20, eval_every: 50}"))
	waitJob(t, base, id, 60*time.Second, "running on the instance", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning })
	kill9(t, w)
	kill9(t, s1)
	base2, s2 := r.scheduler()
	if out, errOut, code := cli(t, r.lathe, base2, "cancel", id); code != 0 {
		t.Fatalf("cancel through the second scheduler: exit %d\n%s\n%s", code, out, errOut)
	}
	iid := aws.ToString(r.instances(id)[0].InstanceId)
	r.waitTerminated(id, 60*time.Second)
	if !waitfor.Poll(10*time.Second, func() bool { return strings.Contains(s2.output(), "terminated an instance without a live attempt") }) {
		t.Fatalf("the reconciler did not log its action:\n%s", s2.output())
	}
	j := waitJob(t, base2, id, 30*time.Second, "cancelled", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateCancelled || r.terminations(iid) != 1 || r.proxy.Count("RunInstances") != 1 {
		t.Fatalf("job %s (%s); instance terminated %d times; %d RunInstances", j.State, j.Error, r.terminations(iid), r.proxy.Count("RunInstances"))
	}
}

// TestAWSSpotInterruption: spot preferred, the job runs on a spot
// instance; once a checkpoint is in S3, that instance's IMDS gives the
// two-minute notice. The agent checkpoints and reports preempted, the
// worker terminates the instance, the job goes back through routing as
// attempt 2 (a preemption, not a failure), a new instance is launched, and
// the trainer resumes from the checkpoint in S3 and succeeds.
func TestAWSSpotInterruption(t *testing.T) {
	r := newCloudRig(t, "prefer")
	base, _ := r.scheduler()
	r.worker()
	id := r.submit(base, r.spec("cloud-spot", "training: {epochs: 8, batch_size: 8, learning_rate: 0.02, seed: 42, checkpoint_every: 5, eval_every: 50}",
		"output: {uri: s3://lathe-eu-work/models}"))
	first := r.waitInstance(id, 1)[0]
	iid := aws.ToString(first.InstanceId)
	if string(first.InstanceType) != "g5.xlarge" {
		t.Fatalf("first instance %s, want the cheapest spot choice g5.xlarge", first.InstanceType)
	}
	waitJob(t, base, id, 90*time.Second, "a checkpoint", func(j jobtype.Job) bool { return countEvents(t, base, id, "checkpoint") > 0 })
	a := r.player.agent(iid)
	if a == nil {
		t.Fatal("no agent plays the first instance")
	}
	a.imds.Interrupt("terminate", time.Now().Add(2*time.Minute))
	j := waitJob(t, base, id, 180*time.Second, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt != 2 || j.Preemptions != 1 {
		t.Fatalf("job %s attempt %d preemptions %d: %s\nfirst agent:\n%s", j.State, j.Attempt, j.Preemptions, j.Error, a.output())
	}
	insts := r.instances(id)
	if len(insts) != 2 {
		t.Fatalf("%d instances, want 2 (one per attempt)", len(insts))
	}
	for _, in := range insts {
		if in.State.Name != ec2types.InstanceStateNameTerminated {
			t.Fatalf("instance %s (attempt %s) is %s", aws.ToString(in.InstanceId), tagOf(in, "lathe:attempt"), in.State.Name)
		}
	}
	// The output is s3:// in an allowed site: the artifacts are there.
	for _, a := range j.Artifacts {
		key := "models/" + id + "/" + a.Path
		obj, err := r.s3.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String("lathe-eu-work"), Key: aws.String(key)})
		if err != nil || aws.ToInt64(obj.ContentLength) != a.Bytes || a.Site != "aws-eu-central-1" {
			t.Fatalf("artifact %+v at s3://lathe-eu-work/%s: %v", a, key, err)
		}
	}
	if len(j.Artifacts) == 0 {
		t.Fatal("no artifacts")
	}
	// Attempt 2 resumed: its first progress step is past the checkpoint.
	firstStep := -1
	for _, e := range events(t, base, id) {
		if e.Type == jobtype.EventProgress && e.Attempt == 2 {
			var p jobtype.Progress
			_ = json.Unmarshal(e.Data, &p)
			firstStep = p.Step
			break
		}
	}
	if firstStep <= 1 {
		t.Fatalf("attempt 2 started at step %d: it did not resume from the checkpoint", firstStep)
	}
}

// TestAWSNeverForOnprem: with the AWS worker running and aws-eu ready to
// launch, an [onprem] job (aws-eu's site lacks onprem) is never staged
// nor launched on any path: at submit it goes local; waiting past its
// max_wait (spill-over) it stays local; preempted by an urgent job it is
// routed again to local; at a config reload (SIGHUP) it stays local;
// cancelled and retried, again local; a task for it
// put by hand on aws-eu's queue does nothing (the store says it is not
// dispatched there); and with its record forged to look dispatched to
// aws-eu, the AWS worker refuses it (failed, reason residency) before
// copying or launching anything. At the end no RunInstances call was made
// and the work bucket holds nothing of these jobs.
func TestAWSNeverForOnprem(t *testing.T) {
	r := newCloudRig(t, "never")
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	up := startDaemonEnv(t, r.env, r.lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"), "--endpoint-url", r.proxy.URL,
		"--gpus", "simulated:dgxh100", "--node", "sim1")
	waitHTTP(t, base, up)
	w := r.worker()
	route := func(id, path string) jobtype.Job {
		t.Helper()
		j := waitJob(t, base, id, 60*time.Second, "routing path "+path, func(j jobtype.Job) bool { return j.Route != nil && j.Route.Path == path })
		if j.Route.Backend != "local" || j.Route.Site != "dc-frankfurt" {
			t.Fatalf("%s decision for an [onprem] job: %+v", path, j.Route)
		}
		return j
	}
	long := "training: {epochs: 40, batch_size: 8, learning_rate: 0.02, seed: 42, checkpoint_every: 5, eval_every: 1000}"
	batch := r.submit(base, r.spec("op-batch", "residency: [onprem]", "resources: {gpus: 8}", "priority: batch", long))
	route(batch, "submit")
	waitJob(t, base, batch, 60*time.Second, "running", func(j jobtype.Job) bool { return j.State == jobtype.StateRunning })
	waiting := r.submit(base, r.spec("op-wait", "residency: [onprem]", "resources: {gpus: 8}", "max_wait: 1s", long))
	route(waiting, "spill-over")
	urgent := r.submit(base, r.spec("op-urgent", "residency: [onprem]", "resources: {gpus: 8}", "priority: urgent", long))
	route(batch, "preemption")
	// A config reload decides every queued job again.
	_ = up.cmd.Process.Signal(syscall.SIGHUP)
	route(waiting, "config reload")
	for _, id := range []string{waiting, urgent, batch} {
		if _, errOut, code := cli(t, r.lathe, base, "cancel", id); code != 0 {
			t.Fatalf("cancel %s: exit %d %s", id, code, errOut)
		}
	}
	waitJob(t, base, batch, 60*time.Second, "cancelled", func(j jobtype.Job) bool { return j.State == jobtype.StateCancelled })
	if _, errOut, code := cli(t, r.lathe, base, "retry", batch); code != 0 {
		t.Fatalf("retry: exit %d %s", code, errOut)
	}
	route(batch, "retry")
	if _, errOut, code := cli(t, r.lathe, base, "cancel", batch); code != 0 {
		t.Fatalf("cancel: exit %d %s", code, errOut)
	}
	j := waitJob(t, base, batch, 60*time.Second, "cancelled", func(j jobtype.Job) bool { return j.State == jobtype.StateCancelled })

	// A task put by hand on aws-eu's queue: the store says no.
	ctx := t.Context()
	client := asynq.NewClientFromRedisClient(r.rs.Client())
	payload, _ := json.Marshal(jobtype.TaskPayload{JobID: waiting, Attempt: 1})
	if _, err := client.EnqueueContext(ctx, asynq.NewTask(jobtype.TaskType, payload), asynq.Queue(jobtype.CloudNode("aws-eu")), asynq.MaxRetry(0)); err != nil {
		t.Fatal(err)
	}
	// A record forged to look dispatched to aws-eu, and its task.
	rdb := r.rs.Client()
	key := "lathe:job:" + batch
	if err := rdb.HSet(ctx, key, "state", "dispatched", "node", jobtype.CloudNode("aws-eu"), "backend", "aws-eu", "cancel_requested", "0").Err(); err != nil {
		t.Fatal(err)
	}
	rdb.ZRem(ctx, "lathe:state:cancelled", batch)
	rdb.ZAdd(ctx, "lathe:state:dispatched", redis.Z{Member: batch})
	payload, _ = json.Marshal(jobtype.TaskPayload{JobID: batch, Attempt: j.Attempt})
	if _, err := client.EnqueueContext(ctx, asynq.NewTask(jobtype.TaskType, payload), asynq.Queue(jobtype.CloudNode("aws-eu")), asynq.MaxRetry(0)); err != nil {
		t.Fatal(err)
	}
	_ = client.Close()
	j = waitJob(t, base, batch, 30*time.Second, "refused by the AWS worker", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateFailed || j.Reason != jobtype.ReasonResidency || !strings.Contains(j.Error, "lacks residency tag(s) onprem") {
		t.Fatalf("forged dispatch to aws-eu: %s %s %q\n%s", j.State, j.Reason, j.Error, w.output())
	}
	if j := getJob(t, base, waiting); j.State != jobtype.StateCancelled {
		t.Fatalf("the hand-queued task changed the job: %s", j.State)
	}
	if n := r.proxy.Count("RunInstances"); n != 0 {
		t.Fatalf("%d RunInstances calls for [onprem] jobs", n)
	}
	for _, id := range []string{batch, waiting, urgent} {
		out, err := r.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("lathe-eu-work"), Prefix: aws.String("runs/" + id + "/")})
		if err != nil || len(out.Contents) != 0 {
			t.Fatalf("work bucket holds %d objects of [onprem] job %s (%v)", len(out.Contents), id, err)
		}
	}
}

// TestAWSNoCapacityWaits: with `lathed up --aws-backend aws-eu` (scheduler,
// local worker without GPUs and the AWS worker in one process), every
// instance type in every subnet and market is refused for capacity: the
// job waits in aws-eu's site (provisioning, the reason among its events),
// never moving elsewhere and launching nothing; when capacity comes back it
// launches there and succeeds.
func TestAWSNoCapacityWaits(t *testing.T) {
	r := newCloudRig(t, "never")
	r.proxy.Add(mototest.Fault{Action: "RunInstances", Code: "InsufficientInstanceCapacity", Status: 500})
	port := redistest.FreePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	up := startDaemonEnv(t, r.env, r.lathed, "up", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--redis-url", r.rs.URL(),
		"--config", r.cfgPath, "--data-dir", filepath.Join(r.dir, "data"), "--endpoint-url", r.proxy.URL,
		"--gpus", "none", "--aws-backend", "aws-eu")
	waitHTTP(t, base, up)
	id := r.submit(base, r.spec("cloud-nocap"))
	waitJob(t, base, id, 60*time.Second, "waiting for capacity", func(j jobtype.Job) bool {
		for _, e := range events(t, base, id) {
			if e.Type == worker.EventCloud && strings.Contains(string(e.Data), "no capacity for any instance type in any subnet of aws-eu") {
				return true
			}
		}
		return false
	})
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		j := getJob(t, base, id)
		if j.State != jobtype.StateProvisioning || j.Route == nil || j.Route.Backend != "aws-eu" || len(r.instances(id)) != 0 {
			t.Fatalf("while no capacity: %s route %+v, %d instances", j.State, j.Route, len(r.instances(id)))
		}
	}
	r.proxy.Clear()
	j := waitJob(t, base, id, 120*time.Second, "ended", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt != 1 || len(r.instances(id)) != 1 {
		t.Fatalf("after capacity came back: %s attempt %d, %d instances: %s", j.State, j.Attempt, len(r.instances(id)), j.Error)
	}
}
