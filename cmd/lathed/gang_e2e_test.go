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

// run runs ip with args, failing the test with its output.
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
// cannot be made (not root, no CAP_NET_ADMIN), it says so and falls back
// to the root namespace with 127.0.0.2 and 127.0.0.3.
func newGangNet(t *testing.T) gangNet {
	t.Helper()
	pid := os.Getpid()
	sub := pid%200 + 20
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
	if err := ipCmd(steps[0]...); err != nil {
		t.Logf("FALLBACK: network namespaces cannot be made here (%v): both workers run in the root namespace on 127.0.0.2 and 127.0.0.3", err)
		return gangNet{addr: [2]string{"127.0.0.2", "127.0.0.3"}, host: "127.0.0.1"}
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
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1 "+addr, "--port", strconv.Itoa(port), "--dir", dir,
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

// TestGangAcrossNetworkNamespaces: a 2-node × 1-GPU job runs as one
// attempt whose ranks are on the two workers, each in its own network
// namespace, meeting over gloo at rank 0's advertised address; kill -9 of
// rank 1's trainer mid-run ends the attempt for both (rank 0's trainer is
// stopped too), attempt 2 is placed as a gang again and resumes from the
// checkpoint rank 0 wrote, and succeeds with rank 0's artifact.
func TestGangAcrossNetworkNamespaces(t *testing.T) {
	requireTorch(t)
	lathed, lathe := binaries(t)
	root := repoRoot(t)
	nw := newGangNet(t)
	rport := startRedisOn(t, nw.host)
	base := t.TempDir()
	cfg := filepath.Join(base, "lathe.yaml")
	script := filepath.Join(base, "gang_trainer.py")
	writeNodesFile(t, script, gangTrainer)
	writeNodesFile(t, cfg, shortLeases(base, root)+fmt.Sprintf("trainers:\n  gang: [/usr/bin/python3, %s]\n", script))
	reachableByTrainers(t, filepath.Join(base, "checkpoints"))
	if err := os.Chmod(script, 0o644); err != nil {
		t.Fatal(err)
	}
	port := redistest.FreePort(t)
	api := "http://127.0.0.1:" + strconv.Itoa(port)
	sd := startDaemon(t, lathed, "scheduler", "--config", cfg, "--redis-url", fmt.Sprintf("redis://127.0.0.1:%d", rport),
		"--listen", "127.0.0.1:"+strconv.Itoa(port), "--data-dir", filepath.Join(base, "scheduler"))
	waitHTTP(t, api, sd)
	nodes := [2]string{"node-a", "node-b"}
	for i, node := range nodes {
		args := []string{lathed, "worker", "--config", cfg, "--redis-url", fmt.Sprintf("redis://%s:%d", nw.host, rport),
			"--node", node, "--data-dir", filepath.Join(base, node), "--gpus", "simulated:dgxa100", "--advertise-addr", nw.addr[i]}
		if nw.ns[i] != "" {
			startDaemon(t, "ip", append([]string{"netns", "exec", nw.ns[i]}, args...)...)
		} else {
			startDaemon(t, args[0], args[1:]...)
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", rport)})
	defer rc.Close()
	waitfor.NoError(t, 30*time.Second, "both workers up", func() error {
		live, err := rc.Exists(t.Context(), "lathe:node:node-a", "lathe:node:node-b").Result()
		if err == nil && live != 2 {
			err = fmt.Errorf("%d of node-a and node-b live", live)
		}
		return err
	})
	spec := filepath.Join(base, "gang.yaml")
	writeNodesFile(t, spec, fmt.Sprintf(`name: gang
base_model: tiny-char
dataset: file://%s/configs/examples/data/tiny-train.jsonl
trainer: gang
resources: {gpus: 1, nodes: 2}
`, root))
	id := submitID(t, lathe, api, spec)

	// Attempt 1: both ranks up, each in its node's namespace.
	a1 := waitfor.Value(t, 90*time.Second, "both ranks of attempt 1 reported", func() []gangLine { return gangLines(t, api, id) },
		func(ls []gangLine) bool { _, ok := linesOf(ls, 1); return ok })
	r1, _ := linesOf(a1, 1)
	j := getJob(t, api, id)
	if j.Gang == nil || j.Gang.Attempt != 1 || len(j.Gang.Ranks) != 2 || j.Gang.Ranks[0].Node == j.Gang.Ranks[1].Node {
		t.Fatalf("attempt 1's gang: %+v", j.Gang)
	}
	index := map[string]int{nodes[0]: 0, nodes[1]: 1}
	for r, l := range r1 {
		ni := index[j.Gang.Ranks[r].Node]
		if want := netnsID(t, nw.ns[ni]); l.NetNS != want {
			t.Errorf("rank %d on %s ran in %s, want %s (namespace %q)", r, j.Gang.Ranks[r].Node, l.NetNS, want, nw.ns[ni])
		}
		t.Logf("attempt 1 rank %d: node %s, netns %s (%q), rendezvous %s", r, j.Gang.Ranks[r].Node, l.NetNS, nw.ns[ni], l.Master)
	}
	if master := nw.addr[index[j.Gang.Ranks[0].Node]]; !strings.HasPrefix(r1[1].Master, master+":") || r1[0].Master != r1[1].Master {
		t.Errorf("rendezvous %s / %s, want rank 0's address %s", r1[0].Master, r1[1].Master, master)
	}

	// One fate: rank 1's trainer dies; rank 0's is stopped, attempt 2 placed as a gang.
	if err := syscall.Kill(r1[1].PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill rank 1's trainer %d: %v", r1[1].PID, err)
	}
	waitfor.True(t, 60*time.Second, "rank 0's trainer of attempt 1 stopped", func() bool {
		return syscall.Kill(r1[0].PID, 0) != nil
	})
	j = waitJob(t, api, id, 3*time.Minute, "succeeded", func(j jobtype.Job) bool { return j.State.Terminal() })
	if j.State != jobtype.StateSucceeded || j.Attempt != 2 || j.Gang == nil || j.Gang.Attempt != 2 || len(j.Artifacts) != 1 {
		t.Fatalf("job: %s (%s: %s) attempt %d gang %+v artifacts %+v", j.State, j.Reason, j.Error, j.Attempt, j.Gang, j.Artifacts)
	}
	r2, ok := linesOf(gangLines(t, api, id), 2)
	if !ok || r2[0].Start < 1 || r2[1].Start != r2[0].Start {
		t.Fatalf("attempt 2 did not resume from the checkpoint: %+v", r2)
	}
	t.Logf("attempt 2 resumed from step %d on %s and %s", r2[0].Start, j.Gang.Ranks[0].Node, j.Gang.Ranks[1].Node)
}
