// Package slurmtest starts a real one-host Slurm cluster for tests: its own
// munged (on a socket of its own, with a fresh key), slurmctld and slurmd,
// in the foreground as children of the test, on free loopback ports, in a
// temporary directory, all stopped at test cleanup. GPUs are GRES backed by
// character devices made with mknod (major 195, as NVIDIA's), so Slurm
// allocates them and sets CUDA_VISIBLE_DEVICES; no GPU is touched. It needs
// root (slurmd runs jobs as their user, mknod) and Debian's slurmctld,
// slurmd, slurm-client and munge: a test fails (never skips) when they are
// missing.
package slurmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// Cluster is one running test cluster.
type Cluster struct {
	// Conf is the path of its slurm.conf: give it to Slurm's commands as
	// SLURM_CONF.
	Conf string
	// Dir holds its config, state, logs and the munge socket.
	Dir string
	// Partition is its one partition.
	Partition string
	// Node is its one node's name.
	Node string
	// GPUs is how many GPUs the node has.
	GPUs int
	tb   testing.TB
}

// Options change the cluster.
type Options struct {
	// GPUs of the node; default 2.
	GPUs int
	// CPUs of the node; default 2 (several jobs share them: CR_Core, one
	// core per job).
	CPUs int
	// Preemption adds the partition UrgentPartition (PriorityTier 10 over
	// Partition's 1) on the same node, whose jobs preempt Partition's
	// (preempt/partition_prio, PreemptMode=CANCEL: a preempted job ends
	// PREEMPTED).
	Preemption bool
	// GRESType, when set, is the GPUs' GRES type (gres.conf Type=, the
	// node's Gres=gpu:TYPE:N).
	GRESType string
}

// UrgentPartition is the preempting partition of Options.Preemption.
const UrgentPartition = "urgent"

// Start starts a cluster and stops it at test cleanup.
func Start(tb testing.TB, o Options) *Cluster {
	tb.Helper()
	for _, bin := range []string{"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "mknod"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Fatalf("slurmtest: %s is not installed (apt-get install -y slurmctld slurmd slurm-client munge): %v", bin, err)
		}
	}
	if os.Geteuid() != 0 {
		tb.Fatalf("slurmtest: a one-host Slurm needs root (slurmd, mknod); running as uid %d", os.Geteuid())
	}
	if o.GPUs <= 0 {
		o.GPUs = 2
	}
	if o.CPUs <= 0 {
		o.CPUs = 2
	}
	dir, err := os.MkdirTemp("", "slurmtest")
	if err != nil {
		tb.Fatal(err)
	}
	// Cleanups run last first: this one after the daemons stopped. Job
	// steps (slurmstepd and the jobs' processes) are not children of
	// slurmd: those that hold a file of the cluster are killed here.
	tb.Cleanup(func() { killHolders(dir, "SLURM_CONF="+filepath.Join(dir, "slurm.conf")); os.RemoveAll(dir) })
	ctld, slurmd := redistest.FreePort(tb), redistest.FreePort(tb)
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Partition: "gpu", Node: "lt" + strconv.Itoa(slurmd), GPUs: o.GPUs, tb: tb}
	if err := c.writeConfig(ctld, slurmd, o); err != nil {
		tb.Fatal(err)
	}
	c.run("munged", "munged", "-F", "-f", "--socket="+c.mungeSocket(), "--key-file="+filepath.Join(dir, "munge.key"),
		"--log-file="+filepath.Join(dir, "munged.log"), "--pid-file="+filepath.Join(dir, "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munged.seed"))
	waitfor.True(tb, 30*time.Second, "munged's socket", func() bool { _, err := os.Stat(c.mungeSocket()); return err == nil })
	c.run("slurmctld", "slurmctld", "-D", "-i", "-f", c.Conf)
	c.run("slurmd", "slurmd", "-D", "-f", c.Conf, "-N", c.Node)
	if !waitfor.Poll(60*time.Second, c.nodeIdle) {
		tb.Fatalf("slurmtest: the Slurm node did not come up idle; logs:\n%s", c.Logs())
	}
	tb.Cleanup(c.cancelAll) // first of the cleanups: while the daemons run
	return c
}

// cancelAll cancels every job of the cluster and waits (a while) until
// Slurm has ended them, so their processes are gone with them.
func (c *Cluster) cancelAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Command(ctx, "scancel", "--user=root"); err != nil {
		return
	}
	waitfor.Poll(30*time.Second, func() bool {
		jobs, err := c.Jobs(ctx)
		if err != nil {
			return true
		}
		for _, j := range jobs {
			if j.State == "RUNNING" || j.State == "PENDING" || j.State == "COMPLETING" {
				return false
			}
		}
		return true
	})
}

// Logs returns the tails of the cluster's daemons' logs.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, name := range []string{"slurmctld.out", "slurmctld.log", "slurmd.out", "slurmd.log", "munged.out"} {
		data, _ := os.ReadFile(filepath.Join(c.Dir, name))
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", name, data)
	}
	return b.String()
}

func (c *Cluster) mungeSocket() string { return filepath.Join(c.Dir, "munge.sock") }

// writeConfig writes the munge key, the GPU devices, slurm.conf, gres.conf
// and cgroup.conf.
func (c *Cluster) writeConfig(ctld, slurmd int, o Options) error {
	key := make([]byte, 1024)
	f, err := os.Open("/dev/urandom")
	if err != nil {
		return err
	}
	_, err = f.Read(key)
	f.Close()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "munge.key"), key, 0o400); err != nil {
		return err
	}
	for i := 0; i < o.GPUs; i++ {
		dev := filepath.Join(c.Dir, "nvidia"+strconv.Itoa(i))
		if err := syscall.Mknod(dev, syscall.S_IFCHR|0o600, int(195<<8|i)); err != nil {
			return fmt.Errorf("slurmtest: mknod %s: %w", dev, err)
		}
	}
	for _, d := range []string{"state", "spool"} {
		if err := os.Mkdir(filepath.Join(c.Dir, d), 0o755); err != nil {
			return err
		}
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	files := map[string]string{
		"slurm.conf":  c.slurmConf(host, ctld, slurmd, o),
		"gres.conf":   fmt.Sprintf("NodeName=%s Name=gpu%s File=%s/nvidia[0-%d]\n", c.Node, typeOf(o, " Type="), c.Dir, o.GPUs-1),
		"cgroup.conf": "CgroupPlugin=autodetect\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) slurmConf(host string, ctld, slurmd int, o Options) string {
	d := c.Dir
	return strings.Join([]string{
		"ClusterName=lathetest",
		fmt.Sprintf("SlurmctldHost=%s(127.0.0.1)", host),
		"SlurmctldPort=" + strconv.Itoa(ctld),
		"SlurmdPort=" + strconv.Itoa(slurmd),
		"AuthType=auth/munge",
		"AuthInfo=socket=" + c.mungeSocket(),
		"CredType=cred/munge",
		"SlurmUser=root", "SlurmdUser=root",
		"StateSaveLocation=" + d + "/state", "SlurmdSpoolDir=" + d + "/spool",
		"SlurmctldPidFile=" + d + "/slurmctld.pid", "SlurmdPidFile=" + d + "/slurmd.pid",
		"SlurmctldLogFile=" + d + "/slurmctld.log", "SlurmdLogFile=" + d + "/slurmd.log",
		"ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
		"JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
		"SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
		"SchedulerType=sched/backfill", "GresTypes=gpu", "MpiDefault=none",
		"ReturnToService=2", "MinJobAge=600", "KillWait=5",
		"SlurmctldTimeout=30", "SlurmdTimeout=30",
		fmt.Sprintf("NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=1000 Gres=gpu%s:%d State=UNKNOWN", c.Node, host, o.CPUs, typeOf(o, ":"), o.GPUs),
		fmt.Sprintf("PartitionName=%s Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1", c.Partition),
	}, "\n") + "\n" + preemption(o)
}

// typeOf is prefix and Options.GRESType, or "" without one.
func typeOf(o Options, prefix string) string {
	if o.GRESType == "" {
		return ""
	}
	return prefix + o.GRESType
}

// preemption is the slurm.conf of Options.Preemption ("" without).
func preemption(o Options) string {
	if !o.Preemption {
		return ""
	}
	return "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL\n" +
		"PartitionName=" + UrgentPartition + " Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10\n"
}

// run starts a daemon of the cluster in the foreground and stops it
// (SIGTERM, then SIGKILL) at cleanup.
func (c *Cluster) run(name string, argv ...string) {
	c.tb.Helper()
	out, err := os.Create(filepath.Join(c.Dir, name+".out"))
	if err != nil {
		c.tb.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "SLURM_CONF="+c.Conf)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.tb.Fatalf("slurmtest: start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(done) }()
	c.tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
}

// killHolders kills (SIGKILL) every process but this one whose working
// directory or an open file lies under dir, or whose environment holds
// env (the SLURM_CONF its jobs inherit from sbatch): the cluster's job
// steps and whatever their jobs left.
func killHolders(dir, env string) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if holds(pid, dir) || hasEnv(pid, env) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// hasEnv reports whether process pid's environment holds the entry env.
func hasEnv(pid int, env string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for _, e := range strings.Split(string(b), "\x00") {
		if e == env {
			return true
		}
	}
	return false
}

func holds(pid int, dir string) bool {
	base := "/proc/" + strconv.Itoa(pid)
	if cwd, err := os.Readlink(base + "/cwd"); err == nil && strings.HasPrefix(cwd, dir+"/") {
		return true
	}
	fds, _ := os.ReadDir(base + "/fd")
	for _, fd := range fds {
		if t, err := os.Readlink(base + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(t, dir+"/") {
			return true
		}
	}
	return false
}

// Command runs one of Slurm's commands against the cluster and returns its
// output.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("slurmtest: %s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Env is this process's environment with SLURM_CONF set to the cluster's.
func (c *Cluster) Env() []string { return append(os.Environ(), "SLURM_CONF="+c.Conf) }

func (c *Cluster) nodeIdle() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Command(ctx, "sinfo", "-h", "-N", "-n", c.Node, "-o", "%T")
	if err != nil || strings.TrimSpace(string(out)) == "" {
		return false
	}
	for _, state := range strings.Fields(string(out)) { // a line per partition
		if state != "idle" {
			return false
		}
	}
	return true
}

// Job is what squeue says of one job (the fields tests look at).
type Job struct {
	ID          int    `json:"job_id"`
	Name        string `json:"name"`
	State       string `json:"job_state"`
	Partition   string `json:"partition"`
	Account     string `json:"account"`
	TRESPerNode string `json:"tres_per_node"`
	ExitCode    int    `json:"exit_code"`
}

// Jobs lists every job the controller still knows (all states).
func (c *Cluster) Jobs(ctx context.Context) ([]Job, error) {
	out, err := c.Command(ctx, "squeue", "--json", "--states=all")
	if err != nil {
		return nil, err
	}
	var r struct {
		Jobs []Job `json:"jobs"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("slurmtest: squeue --json: %w", err)
	}
	return r.Jobs, nil
}
