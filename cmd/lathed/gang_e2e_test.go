package main

// A job that spans two nodes, run for real: two `lathed worker` processes,
// each in a network namespace of its own (a veth pair each onto a bridge
// in the root namespace), a `lathed scheduler` and a redis-server in the
// root namespace listening on the bridge's address too, simulated GPUs
// (go-nvml's mock servers: fakes), and a trainer that is a small
// torch.distributed program under /usr/bin/python3 meeting its other rank
// over gloo at MASTER_ADDR:MASTER_PORT.

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

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/internal/waitfor"
)

// gangNet is where the test's two nodes live: ns[i] is node i's network
// namespace ("" in the fallback: the root namespace), addr[i] its
// address, host the root namespace's address they reach Redis at.
type gangNet struct {
	ns   [2]string
	addr [2]string
	host string
}

// ipCmd runs ip with args; the error carries its output.
func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newGangNet makes two network namespaces named after the test's pid, a
// bridge with 10.77.<n>.254/24 and a veth pair from each namespace onto
// it (10.77.<n>.1 and .2), all removed at cleanup. Where namespaces
// cannot be made (not root, no CAP_NET_ADMIN), or LATHE_GANG_NO_NETNS=1
// asks, it says so and falls back to the root namespace with 127.0.0.2
// and 127.0.0.3.
func newGangNet(t *testing.T) gangNet {
	t.Helper()
	pid := os.Getpid()
	sub := gangSubnet(t, pid%200+20)
	br := fmt.Sprintf("lgb%d", pid)
	g := gangNet{host: fmt.Sprintf("10.77.%d.254", sub)}
	var veths []string
	t.Cleanup(func() {
		for _, ns := range g.ns {
			if ns != "" {
				_ = ipCmd("netns", "del", ns)
			}
		}
		for _, v := range veths {
			_ = ipCmd("link", "del", v)
		}
		_ = ipCmd("link", "del", br)
	})
	steps := [][]string{{"link", "add", br, "type", "bridge"}, {"addr", "add", g.host + "/24", "dev", br}, {"link", "set", br, "up"}}
	var err error
	if os.Getenv("LATHE_GANG_NO_NETNS") == "1" {
		err = fmt.Errorf("LATHE_GANG_NO_NETNS=1 asks for the fallback")
	} else {
		err = ipCmd(steps[0]...)
	}
	switch {
	case err != nil && os.Getenv("LATHE_GANG_NO_NETNS") == "1":
		t.Logf("FALLBACK (asked): both workers run in the root namespace on 127.0.0.2 and 127.0.0.3")
		return gangNet{addr: [2]string{"127.0.0.2", "127.0.0.3"}, host: "127.0.0.1"}
	case err != nil:
		t.Fatalf("network namespaces cannot be made here (%v): the test needs root and ip (iproute2); LATHE_GANG_NO_NETNS=1 runs both workers in the root namespace instead", err)
	}
	for i, x := range []string{"a", "b"} {
		ns, host, peer := fmt.Sprintf("lg%d%s", pid, x), fmt.Sprintf("lg%d%s0", pid, x), fmt.Sprintf("lg%d%s1", pid, x)
		g.ns[i], g.addr[i] = ns, fmt.Sprintf("10.77.%d.%d", sub, i+1)
		veths = append(veths, host)
		steps = append(steps, []string{"netns", "add", ns}, []string{"link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "netns", ns}, []string{"link", "set", host, "master", br, "up"},
			[]string{"-n", ns, "addr", "add", g.addr[i] + "/24", "dev", peer}, []string{"-n", ns, "link", "set", peer, "up"},
			[]string{"-n", ns, "link", "set", "lo", "up"})
	}
	for _, s := range steps[1:] {
		if err := ipCmd(s...); err != nil {
			t.Fatalf("network namespaces: %v", err)
		}
	}
	return g
}

// startRedisOn starts a redis-server listening on 127.0.0.1 and addr, and
// returns its port; it is killed at cleanup.
func startRedisOn(t *testing.T, addr string) int {
	t.Helper()
	port := redistest.FreePort(t)
	dir := t.TempDir()
	bind := "127.0.0.1"
	if addr != bind {
		bind += " " + addr
	}
	cmd := exec.Command("redis-server", "--bind", bind, "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction", "--protected-mode", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer c.Close()
	waitfor.NoError(t, 10*time.Second, "redis-server answers", func() error { return c.Ping(context.Background()).Err() })
	return port
}

// gangTrainer is the job's trainer: ranks meet over gloo from the
// rendezvous environment, check it, all_reduce, and report (a "GANG"
// line: rank, attempt, network namespace, rendezvous, resume step, pid).
// Rank 0 owns the checkpoint: it reads the step to resume from and
// broadcasts it, then writes the next. An attempt that did not resume
// stays in the collective until the test kills a rank; one that resumed
// finishes, rank 0 writing the artifact.
const gangTrainer = `import datetime, json, os, time
import torch
import torch.distributed as dist
e = os.environ
rank, ws, nn = int(e["NODE_RANK"]), int(e["WORLD_SIZE"]), int(e["NNODES"])
ck = os.path.join(e["LATHE_CHECKPOINT_DIR"], "gang-ckpt.json")
start = 0
if rank == 0 and os.path.exists(ck):
    with open(ck) as f:
        start = json.load(f)["step"]
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
assert dist.get_world_size() == ws == 2 and nn == 2 and dist.get_rank() == rank == int(e["RANK"]), dict(e)
assert e["LOCAL_WORLD_SIZE"] == e["NPROC_PER_NODE"] == "1"
t = torch.tensor([float(start)])
dist.broadcast(t, 0)
start = int(t.item())
s = torch.tensor([rank + 1.0])
dist.all_reduce(s)
assert s.item() == 3.0
print("GANG " + json.dumps({"rank": rank, "attempt": int(e["LATHE_ATTEMPT"]), "netns": os.readlink("/proc/self/ns/net"),
      "master": e["MASTER_ADDR"] + ":" + e["MASTER_PORT"], "start": start, "pid": os.getpid()}), flush=True)
if rank == 0:
    with open(ck + ".tmp", "w") as f:
        json.dump({"step": start + 1}, f)
    os.replace(ck + ".tmp", ck)
    print(json.dumps({"event": "checkpoint", "step": start + 1, "path": "gang-ckpt.json"}), flush=True)
if start == 0:
    while True:
        x = torch.ones(1)
        dist.all_reduce(x)
        time.sleep(0.2)
dist.barrier()
if rank == 0:
    with open(os.path.join(e["LATHE_OUTPUT_DIR"], "adapter.bin"), "w") as f:
        f.write("resumed from step %d\n" % start)
    print(json.dumps({"event": "done", "metrics": {"resumed_from": start}}), flush=True)
dist.destroy_process_group()
`

// gangLine is a trainer's GANG report.
type gangLine struct {
	Rank    int    `json:"rank"`
	Attempt int    `json:"attempt"`
	NetNS   string `json:"netns"`
	Master  string `json:"master"`
	Start   int    `json:"start"`
	PID     int    `json:"pid"`
}

// gangLines are the GANG reports in job id's log events.
func gangLines(t *testing.T, base, id string) []gangLine {
	var out []gangLine
	for _, e := range events(t, base, id) {
		if e.Type != jobtype.EventLog {
			continue
		}
		var l jobtype.LogLine
		if json.Unmarshal(e.Data, &l) != nil {
			continue
		}
		if rest, ok := strings.CutPrefix(l.Line, "GANG "); ok {
			var g gangLine
			if json.Unmarshal([]byte(rest), &g) == nil {
				out = append(out, g)
			}
		}
	}
	return out
}

// linesOf are the reports of attempt, by rank (false: not both there yet).
func linesOf(ls []gangLine, attempt int) ([2]gangLine, bool) {
	var by [2]gangLine
	seen := 0
	for _, l := range ls {
		if l.Attempt == attempt && l.Rank >= 0 && l.Rank < 2 && by[l.Rank].PID == 0 {
			by[l.Rank] = l
			seen++
		}
	}
	return by, seen == 2
}

// gangSubnet takes a 10.77.<n>.0/24 for this test process, from start on:
// the first n whose lock file (/tmp/lathe-gang-net-<n>.lock) it can hold,
// held until the test ends, so that two test processes on one machine
// never put the same addresses on their bridges.
func gangSubnet(t *testing.T, start int) int {
	t.Helper()
	for i := range 200 {
		n := 20 + (start-20+i)%200
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("lathe-gang-net-%d.lock", n)), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() })
		return n
	}
	t.Fatal("no free 10.77.<n>.0/24 for the gang test's bridge (every lock file held)")
	return 0
}

// netnsID is the "net:[inode]" of namespace ns ("": this process's).
func netnsID(t *testing.T, ns string) string {
	t.Helper()
	if ns == "" {
		s, err := os.Readlink("/proc/self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+ns, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

// gangPool is the scheduler, the two workers (each in its namespace) and
// Redis of a gang test.
type gangPool struct {
	api, lathe, lathed, cfg, spec string
	nw                            gangNet
	rport                         int
	nodes                         [2]string
	workers                       [2]*daemon
	rc                            *redis.Client
}

// startGangPool starts the pool and waits for both workers.
func startGangPool(t *testing.T) *gangPool {
	t.Helper()
	requireTorch(t)
	p := &gangPool{nodes: [2]string{"node-a", "node-b"}}
	var root string
	p.lathed, p.lathe = binaries(t)
	root = repoRoot(t)
	p.nw = newGangNet(t)
	p.rport = startRedisOn(t, p.nw.host)
	base := t.TempDir()
	p.cfg = filepath.Join(base, "lathe.yaml")
	script := filepath.Join(base, "gang_trainer.py")
	writeNodesFile(t, script, gangTrainer)
	writeNodesFile(t, p.cfg, shortLeases(base, root)+fmt.Sprintf("trainers:\n  gang: [/usr/bin/python3, %s]\n", script))
	reachableByTrainers(t, filepath.Join(base, "checkpoints"))
	port := redistest.FreePort(t)
	p.api = "http://127.0.0.1:" + strconv.Itoa(port)
	sd := startDaemon(t, p.lathed, "scheduler", "--config", p.cfg, "--redis-url", fmt.Sprintf("redis://127.0.0.1:%d", p.rport),
		"--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(base, "scheduler"))
	waitHTTP(t, p.api, sd)
	for i := range p.nodes {
		p.startWorker(t, i, filepath.Join(base, p.nodes[i]))
	}
	p.rc = redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p.rport)})
	t.Cleanup(func() { p.rc.Close() })
	p.waitNodes(t)
	p.spec = filepath.Join(base, "gang.yaml")
	writeNodesFile(t, p.spec, fmt.Sprintf(`name: gang
base_model: tiny-char
dataset: file://%s/configs/examples/data/tiny-train.jsonl
trainer: gang
resources: {gpus: 1, nodes: 2}
`, root))
	return p
}

// startWorker starts node i's worker in its namespace, on data dir dir.
func (p *gangPool) startWorker(t *testing.T, i int, dir string) {
	t.Helper()
	args := []string{p.lathed, "worker", "--config", p.cfg, "--redis-url", fmt.Sprintf("redis://%s:%d", p.nw.host, p.rport),
		"--node", p.nodes[i], "--data-dir", dir, "--gpus", "simulated:dgxa100", "--advertise-addr", p.nw.addr[i]}
	if p.nw.ns[i] != "" {
		p.workers[i] = startDaemon(t, "ip", append([]string{"netns", "exec", p.nw.ns[i]}, args...)...)
	} else {
		p.workers[i] = startDaemon(t, args[0], args[1:]...)
	}
}

// waitNodes waits until both workers heartbeat.
func (p *gangPool) waitNodes(t *testing.T) {
	t.Helper()
	waitfor.NoError(t, 30*time.Second, "both workers up", func() error {
		live, err := p.rc.Exists(t.Context(), "lathe:node:node-a", "lathe:node:node-b").Result()
		if err == nil && live != 2 {
			err = fmt.Errorf("%d of node-a and node-b live", live)
		}
		return err
	})
}

// ranksUp waits for both ranks of attempt of job id to report, and
// returns their reports.
func (p *gangPool) ranksUp(t *testing.T, id string, attempt int) [2]gangLine {
	t.Helper()
	ls := waitfor.Value(t, 90*time.Second, fmt.Sprintf("both ranks of attempt %d reported", attempt), func() []gangLine { return gangLines(t, p.api, id) },
		func(ls []gangLine) bool { _, ok := linesOf(ls, attempt); return ok })
	r, _ := linesOf(ls, attempt)
	return r
}

// gone waits until process pid has exited.
func gone(t *testing.T, what string, pid int) {
	t.Helper()
	waitfor.True(t, 60*time.Second, what, func() bool { return syscall.Kill(pid, 0) != nil })
}

// succeedsResumed waits for job id to succeed, at attempt 2 when exact
// (else any later one), resumed from a checkpoint, with rank 0's artifact.
func (p *gangPool) succeedsResumed(t *testing.T, id string, exact bool) {
	t.Helper()
	j := waitJob(t, p.api, id, 3*time.Minute, "succeeded", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt < 2 || (exact && j.Attempt != 2) || j.Gang == nil || j.Gang.Attempt != j.Attempt || len(j.Artifacts) != 1 {
		t.Fatalf("job: %s (%s: %s) attempt %d gang %+v artifacts %+v", j.State, j.Reason, j.Error, j.Attempt, j.Gang, j.Artifacts)
	}
	last, ok := linesOf(gangLines(t, p.api, id), j.Attempt)
	if !ok || last[0].Start < 1 || last[1].Start != last[0].Start {
		t.Fatalf("attempt %d did not resume from the checkpoint: %+v", j.Attempt, last)
	}
	t.Logf("attempt %d resumed from step %d on %s and %s", j.Attempt, last[0].Start, j.Gang.Ranks[0].Node, j.Gang.Ranks[1].Node)
}

// TestGangAcrossNetworkNamespaces: a 2-node × 1-GPU job runs as one
// attempt whose ranks are on the two workers, each in its own network
// namespace, meeting over gloo at rank 0's advertised address; kill -9 of
// rank 1's trainer mid-run ends the attempt for both (rank 0's trainer is
// stopped too), attempt 2 is placed as a gang again and resumes from the
// checkpoint rank 0 wrote, and succeeds with rank 0's artifact.
func TestGangAcrossNetworkNamespaces(t *testing.T) {
	p := startGangPool(t)
	id := submitID(t, p.lathe, p.api, p.spec)
	r1 := p.ranksUp(t, id, 1)
	j := getJob(t, p.api, id)
	if j.Gang == nil || j.Gang.Attempt != 1 || len(j.Gang.Ranks) != 2 || j.Gang.Ranks[0].Node == j.Gang.Ranks[1].Node {
		t.Fatalf("attempt 1's gang: %+v", j.Gang)
	}
	index := map[string]int{p.nodes[0]: 0, p.nodes[1]: 1}
	for r, l := range r1 {
		ni := index[j.Gang.Ranks[r].Node]
		if want := netnsID(t, p.nw.ns[ni]); l.NetNS != want {
			t.Errorf("rank %d on %s ran in %s, want %s (namespace %q)", r, j.Gang.Ranks[r].Node, l.NetNS, want, p.nw.ns[ni])
		}
		t.Logf("attempt 1 rank %d: node %s, netns %s (%q), rendezvous %s", r, j.Gang.Ranks[r].Node, l.NetNS, p.nw.ns[ni], l.Master)
	}
	if master := p.nw.addr[index[j.Gang.Ranks[0].Node]]; !strings.HasPrefix(r1[1].Master, master+":") || r1[0].Master != r1[1].Master {
		t.Errorf("rendezvous %s / %s, want rank 0's address %s", r1[0].Master, r1[1].Master, master)
	}
	// One fate: rank 1's trainer dies; rank 0's is stopped, attempt 2 placed as a gang.
	if err := syscall.Kill(r1[1].PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill rank 1's trainer %d: %v", r1[1].PID, err)
	}
	gone(t, "rank 0's trainer of attempt 1 stopped", r1[0].PID)
	p.succeedsResumed(t, id, true)
}

// TestGangWorkerKilled: kill -9 of the worker running rank 1 ends the
// attempt for both ranks (rank 0's trainer stopped); once that node's
// worker is back (a new incarnation, which keeps its queue's current rank
// tasks), the next attempt runs on both nodes and resumes from the
// checkpoint.
func TestGangWorkerKilled(t *testing.T) {
	p := startGangPool(t)
	id := submitID(t, p.lathe, p.api, p.spec)
	r1 := p.ranksUp(t, id, 1)
	j := getJob(t, p.api, id)
	victim := 0
	if j.Gang.Ranks[1].Node == p.nodes[1] {
		victim = 1
	}
	w := p.workers[victim]
	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-w.done
	gone(t, "rank 1's trainer of attempt 1 gone with its worker", r1[1].PID)
	gone(t, "rank 0's trainer of attempt 1 stopped", r1[0].PID)
	p.startWorker(t, victim, filepath.Join(filepath.Dir(p.cfg), p.nodes[victim]))
	p.waitNodes(t)
	// Attempt 2 may be dispatched while the dead worker's heartbeat lives
	// on, and reaped when its rank 1 is not claimed within a lease of rank
	// 0's claim: the job succeeds at attempt 2 or later, resumed.
	p.succeedsResumed(t, id, false)
}

// TestGangCancel: lathe cancel of a running gang stops both ranks' trainers
// and ends the job cancelled with no GPU held on either node.
func TestGangCancel(t *testing.T) {
	p := startGangPool(t)
	id := submitID(t, p.lathe, p.api, p.spec)
	r1 := p.ranksUp(t, id, 1)
	if _, e, code := cli(t, p.lathe, p.api, "cancel", id); code != 0 {
		t.Fatalf("cancel: %d %s", code, e)
	}
	gone(t, "rank 0's trainer stopped", r1[0].PID)
	gone(t, "rank 1's trainer stopped", r1[1].PID)
	j := waitJob(t, p.api, id, time.Minute, "cancelled", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateCancelled || j.Attempt != 1 {
		t.Fatalf("job %s at attempt %d, want cancelled at 1", j.State, j.Attempt)
	}
	for _, n := range p.nodes {
		if held, err := p.rc.HLen(t.Context(), "lathe:node:"+n+":reserved").Result(); err != nil || held != 0 {
			t.Errorf("node %s holds %d reservations (%v) after the cancel", n, held, err)
		}
	}
}
