package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// A job of resources.nodes > 1 runs as a gang: one attempt, one asynq task
// per rank on its node's queue (jobtype.RankTaskID). This worker runs the
// ranks dispatched to it: it claims the rank (rank 0 offers the
// rendezvous: its advertised address and a port free there), starts the
// trainer with torchrun's rendezvous environment (rendezvousEnv), renews
// the rank's lease, and reports. One fate: any rank's end other than
// success ends the whole attempt in the store (Finish, Requeue: the usual
// retry rules), which frees every rank's GPUs; the other ranks' next
// renewal is refused, which stops their trainers (errLost, nothing more
// written). A rank that succeeds is recorded (RankSucceeded); the attempt
// succeeds once every rank has, with rank 0's metrics and artifacts.

// taskRank is the gang rank task t runs, nil for a task that is not a gang's.
func taskRank(t *asynq.Task) *int {
	var p jobtype.TaskPayload
	if json.Unmarshal(t.Payload(), &p) != nil || p.Rank == nil || *p.Rank < 0 {
		return nil
	}
	return p.Rank
}

// lockRank holds, until the returned func is called, the lock of the job
// of gang task t on this node. A gang's attempt can end (another rank
// failed) while this node's rank still stops its trainer and takes its
// folders back; the next attempt's rank here waits for that before it
// claims, so two attempts of one job never overlap on one node.
func (w *Worker) lockRank(t *asynq.Task) func() {
	var p jobtype.TaskPayload
	_ = json.Unmarshal(t.Payload(), &p)
	w.rankMu.Lock()
	if w.rankLocks == nil {
		w.rankLocks = map[string]*rankLock{}
	}
	l := w.rankLocks[p.JobID]
	if l == nil {
		l = &rankLock{}
		w.rankLocks[p.JobID] = l
	}
	l.users++
	w.rankMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		w.rankMu.Lock()
		if l.users--; l.users == 0 {
			delete(w.rankLocks, p.JobID)
		}
		w.rankMu.Unlock()
	}
}

// rankLock is one job's lock in Worker.rankLocks and how many hold or
// wait for it.
type rankLock struct {
	mu    sync.Mutex
	users int
}

// claimRank claims rank of gang attempt of job id; rank 0 offers the
// rendezvous.
func (w *Worker) claimRank(ctx context.Context, id string, attempt, rank int) (jobstore.ClaimOutcome, error) {
	p := jobstore.RankClaim{ClaimParams: jobstore.ClaimParams{ID: id, Attempt: attempt, Node: w.cfg.Node,
		Incarnation: w.incarnation, Lease: w.cfg.LeaseTTL}, Rank: rank}
	if rank == 0 {
		port, err := freePort(w.cfg.AdvertiseAddr)
		if err != nil {
			return 0, fmt.Errorf("worker: rendezvous port on %s: %w", w.cfg.AdvertiseAddr, err)
		}
		p.Addr, p.Port = w.cfg.AdvertiseAddr, port
	}
	return w.store.ClaimRank(ctx, p)
}

// freePort is a TCP port free now on addr (the kernel's pick). Another
// process may take it before the trainer binds it; the attempt then fails
// and is retried with a new port.
func freePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// rendezvous waits until rank 0 has claimed (its claim records the
// address and port), renewing this rank's lease meanwhile, and returns the
// gang as the store has it. A nil gang with a nil end: the attempt moved
// on (nothing to write); a non-nil end: how the attempt ends here.
func (a *localAttempt) rendezvous(ctx context.Context) (*jobtype.Gang, endFunc) {
	w, job, rank := a.w, a.job, *a.rank
	t := time.NewTicker(w.cfg.CancelPoll)
	defer t.Stop()
	for {
		j, err := w.store.Get(ctx, job.ID)
		if err == nil && j.Attempt == a.n && j.Gang != nil && j.Gang.Attempt == a.n && j.Gang.Port > 0 {
			return j.Gang, nil
		}
		if _, err := w.store.RenewRank(ctx, job.ID, a.n, rank, w.incarnation, w.cfg.LeaseTTL); errors.Is(err, jobstore.ErrConflict) || errors.Is(err, jobstore.ErrNotFound) {
			a.log.Info("gang attempt moved on before rank 0 started; nothing to do", slog.Any("err", err))
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, a.requeue("worker shutdown", "the worker stopped while its rank waited for rank 0; resuming from the last checkpoint")
		case <-w.stopCtx.Done():
			return nil, a.requeue("worker shutdown", "the worker stopped while its rank waited for rank 0; resuming from the last checkpoint")
		case <-t.C:
		}
	}
}

// socketEnv names the interface that holds this node's advertised address
// for gloo and NCCL (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME): without it
// they pick the address the host name resolves to, often loopback, which
// the other nodes cannot reach. None when no interface holds it.
func socketEnv(addr string) []string {
	ip := net.ParseIP(addr)
	ifs, err := net.Interfaces()
	if ip == nil || err != nil {
		return nil
	}
	for _, in := range ifs {
		addrs, _ := in.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return []string{"GLOO_SOCKET_IFNAME=" + in.Name, "NCCL_SOCKET_IFNAME=" + in.Name}
			}
		}
	}
	return nil
}

// rendezvousEnv is torchrun's rendezvous for rank of gang g, each node
// running gpus GPUs: MASTER_ADDR and MASTER_PORT (rank 0's), NODE_RANK,
// NNODES, NPROC_PER_NODE and LOCAL_WORLD_SIZE (= gpus), WORLD_SIZE (nodes
// × gpus), and RANK (NODE_RANK × gpus) with LOCAL_RANK 0: right for a
// trainer that runs one process per node; one that runs a process per
// GPU starts them under torchrun, which sets RANK and LOCAL_RANK for each
// (a trainer with launcher torchrun gets its flags as PET_*).
func rendezvousEnv(g *jobtype.Gang, rank, gpus int) []string {
	if gpus < 1 {
		gpus = 1
	}
	n := len(g.Ranks)
	return []string{
		"MASTER_ADDR=" + g.Addr,
		"MASTER_PORT=" + strconv.Itoa(g.Port),
		"NODE_RANK=" + strconv.Itoa(rank),
		"NNODES=" + strconv.Itoa(n),
		"NPROC_PER_NODE=" + strconv.Itoa(gpus),
		"LOCAL_WORLD_SIZE=" + strconv.Itoa(gpus),
		"WORLD_SIZE=" + strconv.Itoa(n*gpus),
		"RANK=" + strconv.Itoa(rank*gpus),
		"LOCAL_RANK=0",
		// torchrun's own flags, for a trainer launched under it (gangArgv).
		"PET_NNODES=" + strconv.Itoa(n),
		"PET_NODE_RANK=" + strconv.Itoa(rank),
		"PET_MASTER_ADDR=" + g.Addr,
		"PET_MASTER_PORT=" + strconv.Itoa(g.Port),
	}
}

// gangSucceeded records this rank's success: rank 0 publishes the
// artifacts first and gives the metrics; the attempt ends succeeded when
// the last rank's success is recorded.
func (a *localAttempt) gangSucceeded(r trainerRun) endFunc {
	rank := *a.rank
	var metrics map[string]float64
	var arts []jobtype.Artifact
	if rank == 0 {
		var end endFunc
		if arts, end = a.publishArtifacts(r); end != nil {
			return end
		}
		metrics = r.sink.metrics()
		a.w.recordStepTime(a.job, r.res, r.sink, a.log)
	}
	return func(ctx context.Context) error {
		ended, err := a.store.RankSucceeded(ctx, a.job.ID, a.n, rank, a.w.incarnation, metrics, arts)
		if err == nil && !ended {
			a.log.Info("rank succeeded; the attempt succeeds once every rank has")
		}
		return err
	}
}

// renewer is how the attempt's lease is renewed: the attempt's (Renew) or,
// for a gang, this rank's (RenewRank).
func (a *localAttempt) renewer() func(ctx context.Context) (bool, error) {
	w, id, n := a.w, a.job.ID, a.n
	if a.rank == nil {
		return func(ctx context.Context) (bool, error) {
			return w.store.Renew(ctx, id, n, w.incarnation, w.cfg.LeaseTTL)
		}
	}
	rank := *a.rank
	return func(ctx context.Context) (bool, error) {
		return w.store.RenewRank(ctx, id, n, rank, w.incarnation, w.cfg.LeaseTTL)
	}
}

// rankOnNode makes job's GPUs those of rank on this node: the record's
// node and gpus are rank 0's, and rank r's GPU indices on its own node
// may differ (pinning rank 0's would put this trainer on GPUs another
// job holds here). A rank the gang does not place on node is refused.
func rankOnNode(job *jobtype.Job, rank int, node string) error {
	g := job.Gang
	if g == nil || rank < 0 || rank >= len(g.Ranks) || g.Ranks[rank].Node != node {
		return fmt.Errorf("rank %d of job %s's gang attempt is not placed on node %s: refused before anything ran", rank, job.ID, node)
	}
	job.GPUs = slices.Clone(g.Ranks[rank].GPUs)
	return nil
}
