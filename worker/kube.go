package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/backends/kubernetes"
	"github.com/lathe-ml/lathe/backends/slurm"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// EventKube is the job event type of the kubernetes worker's notes: the
// Job made, its state changes, its cancel and its end.
const EventKube = "kubernetes"

// KubeAPI is what the kubernetes worker asks of Kubernetes
// (backends/kubernetes' Client is the one adapter).
type KubeAPI interface {
	// Submit makes the Job of r; existed when one of its name was there.
	Submit(ctx context.Context, r kubernetes.SubmitRequest) (j kubernetes.Job, existed bool, err error)
	// Get asks the API server for a Job (kubernetes.ErrNotFound: none).
	Get(ctx context.Context, name string) (kubernetes.Job, error)
	// Watched returns a Job as the watch last saw it (ErrNotFound: none).
	Watched(name string) (kubernetes.Job, error)
	// List returns the deployment's Jobs as the watch holds them.
	List() ([]kubernetes.Job, error)
	// Delete deletes a Job and its pods; a Job gone is not an error.
	Delete(ctx context.Context, name string) error
	// Logs returns the last limit bytes at most of a Job's pod's log.
	Logs(ctx context.Context, name string, limit int64) (string, error)
}

var _ KubeAPI = (*kubernetes.Client)(nil)

// KubeConfig configures the kubernetes worker of one kubernetes backend:
// the fields of SlurmConfig mean what they mean there (its Slurm is not
// used: Kube is), with the Slurm job read as the attempt's Kubernetes Job.
type KubeConfig struct {
	SlurmConfig
	// Kube makes, watches and deletes the attempts' Jobs. Required.
	Kube KubeAPI
}

// Kube is the kubernetes worker of one kubernetes backend (`lathed worker
// --backend kubernetes`). It is the slurm worker's machinery (Slurm's doc
// says what it does for each attempt) over Kubernetes: each attempt is a
// Job named lathe-JOB-ATTEMPT whose one container runs the batch script of
// the attempt's folder (`lathed slurm-step DIR`, the same step), its state
// is read from a watch of the deployment's Jobs and pods, the failure's
// output from the pod's log, and a cancel deletes the Job. The Job's name
// is the attempt's, so the API server itself refuses a second Job of one
// attempt.
type Kube struct{ *Slurm }

// NewKube returns the kubernetes worker of cfg.Backend; Start runs it.
func NewKube(rdb redis.UniversalClient, store *jobstore.Store, cfg KubeConfig) (*Kube, error) {
	if cfg.Kube == nil {
		return nil, errors.New("worker: kubernetes: a Kubernetes client is required")
	}
	b, _ := cfg.Routing.Backend(cfg.Backend)
	cfg.Slurm = &kubeBatch{api: cfg.Kube, b: b}
	sc, b, err := cfg.SlurmConfig.withDefaults(routecfg.KindKubernetes)
	if err != nil {
		return nil, err
	}
	if b.Kube == nil {
		return nil, fmt.Errorf("worker: kubernetes: backend %q has no namespace or image", b.Name)
	}
	kb := sc.Slurm.(*kubeBatch)
	kb.b, kb.cluster = b, sc.Cluster
	s := newBatchWorker(rdb, store, sc, b, poolWords{System: "Kubernetes", Job: "Kubernetes Job", Cancel: "delete",
		Type: "kubernetes nvidia.com/gpu:", Region: b.Kube.Namespace, EventType: EventKube})
	s.logTail = func(ctx context.Context, id string) string {
		out, err := cfg.Kube.Logs(ctx, id, 64<<10)
		if err != nil {
			s.log.Debug("pod log not read", slog.String("k8s_job", id), slog.Any("err", err))
		}
		return stripControls(out)
	}
	return &Kube{s}, nil
}

// kubeBatch is Kubernetes seen as the slurm worker's SlurmScheduler: a
// Job's name is its id, its state is said in Slurm's words (kubeState),
// and the deployment's label stands for the comment.
type kubeBatch struct {
	api     KubeAPI
	b       routecfg.Backend
	cluster string
}

var _ SlurmScheduler = (*kubeBatch)(nil)

// Submit makes the attempt's Job: its container runs r.Script in r.Dir,
// with r.GPUs nvidia.com/gpu, r.TimeLimit as the active deadline, and the
// backend's image, namespace, selector, tolerations, account, queue and
// volumes. A Job of the name made before (a crash between the Job made and
// its record) is re-used, never made twice.
func (k *kubeBatch) Submit(ctx context.Context, r slurm.SubmitRequest) (string, error) {
	id, attempt, ok := parseSlurmJobName(r.Name)
	if !ok {
		return "", fmt.Errorf("kubernetes: %q is not an attempt's name", r.Name)
	}
	ks := k.b.Kube
	req := kubernetes.SubmitRequest{Name: r.Name, JobID: id, Attempt: attempt, Image: ks.Image, Command: []string{r.Script},
		WorkingDir: r.Dir, GPUs: r.GPUs, NodeSelector: ks.NodeSelector, ServiceAccount: ks.ServiceAccount, QueueName: ks.QueueName,
		ActiveDeadline: r.TimeLimit, VolumeClaim: ks.VolumeClaim, ClaimPath: k.b.WorkDir, HostPaths: ks.HostPaths,
		TTLAfterFinished: 24 * time.Hour, ClaimMounts: claimMounts(r)}
	for _, t := range ks.Tolerations {
		req.Tolerations = append(req.Tolerations, kubernetes.Toleration(t))
	}
	j, _, err := k.api.Submit(ctx, req)
	if err != nil {
		return "", err
	}
	return j.Name, nil
}

// claimMounts are the paths of the shared storage an attempt's pod gets:
// its folder and checkpoint folder, writable, and its data, read-only.
// Another attempt's folder is not among them: a hostile trainer sees only
// its own.
func claimMounts(r slurm.SubmitRequest) []kubernetes.Mount {
	ms := []kubernetes.Mount{{Path: r.Dir}}
	if r.Checkpoints != "" {
		ms = append(ms, kubernetes.Mount{Path: r.Checkpoints})
	}
	for _, p := range r.Data {
		ms = append(ms, kubernetes.Mount{Path: p, ReadOnly: true})
	}
	return ms
}

// Job asks the API server for a Job.
func (k *kubeBatch) Job(ctx context.Context, id string) (slurm.Job, error) {
	j, err := k.api.Get(ctx, id)
	if errors.Is(err, kubernetes.ErrNotFound) {
		return slurm.Job{}, slurm.ErrNotFound
	}
	if err != nil {
		return slurm.Job{}, err
	}
	return k.asSlurm(j), nil
}

// Jobs reads the watch: the Jobs it holds of ids (one it has not seen yet
// is left out, and asked of the API server by the caller).
func (k *kubeBatch) Jobs(_ context.Context, ids []string) (map[string]slurm.Job, error) {
	out := make(map[string]slurm.Job, len(ids))
	for _, id := range ids {
		if j, err := k.api.Watched(id); err == nil {
			out[id] = k.asSlurm(j)
		}
	}
	return out, nil
}

// FindByName returns the Job of the name, if the API server holds one.
func (k *kubeBatch) FindByName(ctx context.Context, name string) ([]slurm.Job, error) {
	j, err := k.Job(ctx, name)
	if errors.Is(err, slurm.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []slurm.Job{j}, nil
}

// Cancel deletes the Job (its pods in the background).
func (k *kubeBatch) Cancel(ctx context.Context, id string) error { return k.api.Delete(ctx, id) }

// errNoQueueEstimate: the kubernetes worker does not estimate its queue.
var errNoQueueEstimate = errors.New("kubernetes: the queue wait is not estimated")

// QueueWait is not estimated for a Kubernetes pool (routing adds none).
func (k *kubeBatch) QueueWait(context.Context, string) (time.Duration, error) {
	return 0, errNoQueueEstimate
}

// InPartition returns the deployment's Jobs in the namespace, as the watch
// holds them.
func (k *kubeBatch) InPartition(context.Context, string) ([]slurm.Job, error) {
	jobs, err := k.api.List()
	if err != nil {
		return nil, err
	}
	out := make([]slurm.Job, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, k.asSlurm(j))
	}
	return out, nil
}

// asSlurm is Job j in the slurm worker's terms.
func (k *kubeBatch) asSlurm(j kubernetes.Job) slurm.Job {
	reason := j.State
	if j.Reason != "" {
		reason += ": " + j.Reason
	}
	return slurm.Job{ID: j.Name, Name: j.Name, State: kubeState(j.State), Reason: reason, Nodes: j.Node, ExitCode: j.ExitCode,
		StartTime: j.Start, EndTime: j.End, SubmitTime: j.Created, Comment: slurmComment(j.Labels[kubernetes.LabelCluster])}
}

// kubeState maps a Job's state onto the slurm worker's:
//
//	Pending → PENDING, Running → RUNNING
//	Succeeded → COMPLETED (the step's status decides, as in Slurm)
//	Failed → FAILED (the step's status and exit code decide: retried, or failed for good on exit 3)
//	DeadlineExceeded → TIMEOUT (failed: timeout)
//	Disrupted (evicted, preempted, node lost) → PREEMPTED (a preemption: queued again)
//	Deleting → CANCELLED (cancelled when Lathe asked, else retried)
func kubeState(s string) string {
	switch s {
	case kubernetes.StateRunning:
		return slurm.StateRunning
	case kubernetes.StateSucceeded:
		return slurm.StateCompleted
	case kubernetes.StateFailed:
		return slurm.StateFailed
	case kubernetes.StateDeadlineExceeded:
		return slurm.StateTimeout
	case kubernetes.StateDisrupted:
		return slurm.StatePreempted
	case kubernetes.StateDeleting:
		return slurm.StateCancelled
	}
	return slurm.StatePending
}

// stripControls replaces the control characters of s, read from a pod's
// log (hostile: the image's output), but newlines and tabs, with spaces.
func stripControls(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && r != '\t' && unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
