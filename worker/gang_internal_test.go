package worker

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestRendezvousEnv: rank 1 of a 2-node gang of 4 GPUs a node gets rank
// 0's rendezvous, WORLD_SIZE 8 (nodes × GPUs) and torchrun's PET_* flags;
// a torchrun launcher meets the other nodes instead of running standalone.
func TestRendezvousEnv(t *testing.T) {
	g := &jobtype.Gang{Attempt: 2, Ranks: []jobtype.GangRank{{Node: "a"}, {Node: "b"}}, Addr: "10.0.0.1", Port: 29500}
	env := rendezvousEnv(g, 1, 4)
	for _, want := range []string{"MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500", "NODE_RANK=1", "NNODES=2", "WORLD_SIZE=8",
		"NPROC_PER_NODE=4", "LOCAL_WORLD_SIZE=4", "RANK=4", "PET_NNODES=2", "PET_NODE_RANK=1", "PET_MASTER_ADDR=10.0.0.1", "PET_MASTER_PORT=29500"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %v", want, env)
		}
	}
	argv := gangArgv([]string{"py", "-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc_per_node=4", "train.py"})
	if got := strings.Join(argv, " "); got != "py -m torch.distributed.run --nproc_per_node=4 train.py" {
		t.Errorf("gang argv: %s", got)
	}
	if env := socketEnv("127.0.0.1"); !slices.Contains(env, "GLOO_SOCKET_IFNAME=lo") {
		t.Errorf("socket env of 127.0.0.1: %v", env)
	}
}

// TestRankTaskCurrent: a restarted worker's purge keeps a gang rank's task
// while its attempt is current on this node (dispatched, or running once
// rank 0 claimed), and drops it once the attempt moved on.
func TestRankTaskCurrent(t *testing.T) {
	one := 1
	g := &jobtype.Gang{Attempt: 2, Ranks: []jobtype.GangRank{{Node: "a"}, {Node: "b"}}}
	j := &jobtype.Job{State: jobtype.StateRunning, Attempt: 2, Node: "a", Gang: g}
	p := jobtype.TaskPayload{JobID: "j", Attempt: 2, Rank: &one}
	if !taskCurrent(j, p, "b") {
		t.Error("rank 1 of the running attempt on b judged stale")
	}
	if taskCurrent(j, p, "a") {
		t.Error("rank 1's task on a's queue judged current")
	}
	j.Attempt = 3
	if taskCurrent(j, p, "b") {
		t.Error("rank 1 of an attempt that moved on judged current")
	}
}

// TestAdvertiseAddr: --advertise-addr must be a unicast IP; unset, it is
// the host's first non-loopback IPv4 address (loopback without one).
func TestAdvertiseAddr(t *testing.T) {
	for _, bad := range []string{"node-a", "0.0.0.0", "224.0.0.1", "10.0.0.1:80"} {
		_, err := Config{Node: "n", DataDir: t.TempDir(), AdvertiseAddr: bad}.withDefaults()
		if err == nil || !strings.Contains(err.Error(), "advertise address") || !strings.Contains(err.Error(), bad) {
			t.Errorf("advertise %q: %v", bad, err)
		}
	}
	c := Config{Node: "n", DataDir: t.TempDir()}
	if err := c.identity(); err != nil || net.ParseIP(c.AdvertiseAddr) == nil || net.ParseIP(c.AdvertiseAddr).To4() == nil {
		t.Fatalf("default advertise address %q: %v", c.AdvertiseAddr, err)
	}
}

// TestLockRank: a second rank task of one job waits for the first to be
// done; the lock is forgotten once nobody holds it.
func TestLockRank(t *testing.T) {
	w := &Worker{}
	task := asynq.NewTask(jobtype.TaskType, []byte(`{"job_id":"j-1","attempt":1,"rank":1}`))
	unlock := w.lockRank(task)
	got := make(chan struct{})
	go func() { defer w.lockRank(task)(); close(got) }()
	select {
	case <-got:
		t.Fatal("the second rank task did not wait")
	default:
	}
	unlock()
	<-got
	w.rankMu.Lock()
	defer w.rankMu.Unlock()
	if len(w.rankLocks) != 0 {
		t.Fatalf("locks left: %v", w.rankLocks)
	}
}
