// Package slurm drives a Slurm cluster through its command-line tools:
// sbatch --parsable to submit, squeue --json to watch (every state the
// controller still holds), scancel to cancel. It is the only package that
// runs Slurm's commands; the slurm worker (worker.Slurm) uses it through
// a small interface of its own. The Go Slurm client libraries are not on
// the module proxy, so this speaks to the CLIs; their JSON is openapi
// v0.0.38 (Slurm 22.05), of which it reads only the fields it needs.
package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ErrNotFound is returned for a job the controller does not know (never
// submitted, or ended longer ago than its MinJobAge).
var ErrNotFound = errors.New("slurm: job not known to the controller")

// Job states, as squeue writes job_state.
const (
	StatePending     = "PENDING"
	StateRunning     = "RUNNING"
	StateCompleting  = "COMPLETING"
	StateCompleted   = "COMPLETED"
	StateFailed      = "FAILED"
	StateCancelled   = "CANCELLED"
	StateTimeout     = "TIMEOUT"
	StateNodeFail    = "NODE_FAIL"
	StatePreempted   = "PREEMPTED"
	StateOutOfMemory = "OUT_OF_MEMORY"
	StateBootFail    = "BOOT_FAIL"
	StateDeadline    = "DEADLINE"
	StateRequeued    = "REQUEUED"
	StateSuspended   = "SUSPENDED"
)

// Ended reports whether state is one a job does not leave (requeued jobs
// leave REQUEUED and PREEMPTED ones may be requeued: those are ended for
// the attempt, as Slurm runs them again only under a new start).
func Ended(state string) bool {
	switch state {
	case StateCompleted, StateFailed, StateCancelled, StateTimeout, StateNodeFail, StatePreempted,
		StateOutOfMemory, StateBootFail, StateDeadline:
		return true
	}
	return false
}

// Config says how to run Slurm's commands.
type Config struct {
	// Conf is the slurm.conf the commands use (SLURM_CONF); empty: theirs
	// (SLURM_CONF of this process, or /etc/slurm/slurm.conf).
	Conf string
	// Timeout bounds one command; default 30s.
	Timeout time.Duration
}

// CLI runs Slurm's commands.
type CLI struct{ cfg Config }

// New returns a CLI for cfg.
func New(cfg Config) *CLI {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	return &CLI{cfg: cfg}
}

// SubmitRequest is one batch job.
type SubmitRequest struct {
	// Name is the job name (sbatch --job-name); it carries the Lathe job id
	// and attempt, so a job submitted before a crash can be found by it.
	Name      string
	Partition string
	// Account; empty: the user's default.
	Account string
	// GPUs asked of one node (--gres=gpu:N); 0: none.
	GPUs int
	// GRESType, when set, is the GPUs' GRES type (--gres=gpu:TYPE:N).
	GRESType string
	// Script is the path of the batch script.
	Script string
	// Dir is the job's working directory (--chdir); Output its stdout and
	// stderr (--output).
	Dir, Output string
	// TimeLimit (--time, whole minutes rounded up); 0: the partition's.
	TimeLimit time.Duration
	// Comment (--comment) marks the job as one deployment's; empty: none.
	Comment string
	// Checkpoints is the attempt's checkpoint folder and Data the files
	// its trainer reads in place (dataset, eval dataset): with Dir, all
	// of the shared storage the step needs. sbatch ignores them (a Slurm
	// job sees the whole file system); a Kubernetes pool mounts only
	// these of its work_dir volume.
	Checkpoints string
	Data        []string
}

// Args is the sbatch command line of r (without the command name).
func (r SubmitRequest) Args() []string {
	args := []string{"--parsable", "--job-name=" + r.Name, "--partition=" + r.Partition,
		"--nodes=1", "--ntasks=1", "--no-requeue", "--chdir=" + r.Dir, "--output=" + r.Output}
	if r.Account != "" {
		args = append(args, "--account="+r.Account)
	}
	if g := r.GRES(); g != "" {
		args = append(args, "--gres="+g)
	}
	if r.Comment != "" {
		args = append(args, "--comment="+r.Comment)
	}
	if r.TimeLimit > 0 {
		args = append(args, "--time="+strconv.FormatInt(int64((r.TimeLimit+time.Minute-1)/time.Minute), 10))
	}
	return append(args, r.Script)
}

// GRES is the request's --gres value (gpu:N or gpu:TYPE:N); "" without
// GPUs.
func (r SubmitRequest) GRES() string {
	switch {
	case r.GPUs <= 0:
		return ""
	case r.GRESType != "":
		return "gpu:" + r.GRESType + ":" + strconv.Itoa(r.GPUs)
	}
	return "gpu:" + strconv.Itoa(r.GPUs)
}

// Submit submits r and returns its job id.
func (c *CLI) Submit(ctx context.Context, r SubmitRequest) (string, error) {
	out, err := c.run(ctx, "sbatch", r.Args()...)
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return "", fmt.Errorf("slurm: sbatch --parsable printed %q, not a job id", out)
	}
	return id, nil
}

// Job is what the controller says of one job.
type Job struct {
	ID          string
	Name        string
	State       string
	Reason      string // state_reason
	ExitCode    int
	Partition   string
	Account     string
	TRESPerNode string
	Nodes       string
	Comment     string
	Restarts    int
	// TimeLimit is its time limit; 0 when unlimited or unknown.
	TimeLimit  time.Duration
	SubmitTime time.Time
	StartTime  time.Time // zero until it started
	EndTime    time.Time // zero until it ended
}

// squeueJob is a job of squeue --json (openapi v0.0.38).
type squeueJob struct {
	JobID       int64  `json:"job_id"`
	Name        string `json:"name"`
	JobState    string `json:"job_state"`
	StateReason string `json:"state_reason"`
	ExitCode    int    `json:"exit_code"`
	Partition   string `json:"partition"`
	Account     string `json:"account"`
	TRESPerNode string `json:"tres_per_node"`
	Nodes       string `json:"nodes"`
	RestartCnt  int    `json:"restart_cnt"`
	Comment     string `json:"comment"`
	SubmitTime  int64  `json:"submit_time"`
	TimeLimit   int64  `json:"time_limit"` // minutes
	StartTime   int64  `json:"start_time"`
	EndTime     int64  `json:"end_time"`
}

func (j squeueJob) job() Job {
	out := Job{ID: strconv.FormatInt(j.JobID, 10), Name: j.Name, State: j.JobState, Reason: j.StateReason, ExitCode: j.ExitCode,
		Partition: j.Partition, Account: j.Account, TRESPerNode: j.TRESPerNode, Nodes: j.Nodes, Restarts: j.RestartCnt, Comment: j.Comment}
	if j.SubmitTime > 0 {
		out.SubmitTime = time.Unix(j.SubmitTime, 0).UTC()
	}
	if j.TimeLimit > 0 && j.TimeLimit < 365*24*60 { // larger: INFINITE
		out.TimeLimit = time.Duration(j.TimeLimit) * time.Minute
	}
	if j.StartTime > 0 && j.JobState != StatePending {
		out.StartTime = time.Unix(j.StartTime, 0).UTC()
	}
	if j.EndTime > 0 && Ended(j.JobState) {
		out.EndTime = time.Unix(j.EndTime, 0).UTC()
	}
	return out
}

// Job returns job id in any state the controller still holds; ErrNotFound
// when it holds none.
func (c *CLI) Job(ctx context.Context, id string) (Job, error) {
	if _, err := strconv.Atoi(id); err != nil {
		return Job{}, fmt.Errorf("slurm: job id %q is not a number", id)
	}
	jobs, err := c.squeue(ctx, "--states=all", "--jobs="+id)
	if errors.Is(err, errInvalidJob) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, err
	}
	for _, j := range jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return Job{}, ErrNotFound
}

// Jobs returns those of ids the controller still holds, in any state, by
// id, in one squeue call. An id it does not hold is left out (when squeue
// refuses the whole list for it, the map is empty: ask Job for each).
func (c *CLI) Jobs(ctx context.Context, ids []string) (map[string]Job, error) {
	out := map[string]Job{}
	if len(ids) == 0 {
		return out, nil
	}
	for _, id := range ids {
		if _, err := strconv.Atoi(id); err != nil {
			return nil, fmt.Errorf("slurm: job id %q is not a number", id)
		}
	}
	jobs, err := c.squeue(ctx, "--states=all", "--jobs="+strings.Join(ids, ","))
	if errors.Is(err, errInvalidJob) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for _, j := range jobs {
		if want[j.ID] {
			out[j.ID] = j
		}
	}
	return out, nil
}

// FindByName returns the jobs called name, in any state the controller
// still holds.
func (c *CLI) FindByName(ctx context.Context, name string) ([]Job, error) {
	jobs, err := c.squeue(ctx, "--states=all", "--name="+name)
	return filter(jobs, func(j Job) bool { return j.Name == name }), err
}

// InPartition returns the jobs of partition the controller still holds,
// in any state.
func (c *CLI) InPartition(ctx context.Context, partition string) ([]Job, error) {
	jobs, err := c.squeue(ctx, "--states=all", "--partition="+partition)
	return filter(jobs, func(j Job) bool { return j.Partition == partition }), err
}

// Pending returns the jobs that wait in partition (PENDING). (squeue
// 22.05 ignores --states with --json: the filter is applied here.)
func (c *CLI) Pending(ctx context.Context, partition string) ([]Job, error) {
	jobs, err := c.squeue(ctx, "--partition="+partition)
	return filter(jobs, func(j Job) bool { return j.State == StatePending && j.Partition == partition }), err
}

func filter(jobs []Job, keep func(Job) bool) []Job {
	var out []Job
	for _, j := range jobs {
		if keep(j) {
			out = append(out, j)
		}
	}
	return out
}

// Cancel asks Slurm to cancel job id (scancel); a job already ended is not
// an error.
func (c *CLI) Cancel(ctx context.Context, id string) error {
	if _, err := strconv.Atoi(id); err != nil {
		return fmt.Errorf("slurm: job id %q is not a number", id)
	}
	_, err := c.run(ctx, "scancel", id)
	if errors.Is(err, errInvalidJob) {
		return nil
	}
	return err
}

// errInvalidJob is what the commands say of a job id they do not know.
var errInvalidJob = errors.New("slurm: invalid job id")

func (c *CLI) squeue(ctx context.Context, args ...string) ([]Job, error) {
	out, err := c.run(ctx, "squeue", append([]string{"--json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var r struct {
		Errors []json.RawMessage `json:"errors"`
		Jobs   []squeueJob       `json:"jobs"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("slurm: squeue --json: %w", err)
	}
	jobs := make([]Job, 0, len(r.Jobs))
	for _, j := range r.Jobs {
		jobs = append(jobs, j.job())
	}
	return jobs, nil
}

// run runs one command with the config's SLURM_CONF and timeout; a
// failure carries its stderr.
func (c *CLI) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if c.cfg.Conf != "" {
		cmd.Env = append(os.Environ(), "SLURM_CONF="+c.cfg.Conf)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "Invalid job id") {
			return nil, fmt.Errorf("%w: %s", errInvalidJob, msg)
		}
		return nil, fmt.Errorf("slurm: %s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// GPUs is how many GPUs per node the job asks (its gres:gpu[:type]:N in
// tres_per_node); 0 when none.
func (j Job) GPUs() int {
	for _, part := range strings.Split(j.TRESPerNode, ",") {
		f := strings.Split(strings.TrimPrefix(part, "gres:"), ":")
		if len(f) >= 2 && f[0] == "gpu" {
			n, err := strconv.Atoi(f[len(f)-1])
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// PartitionGPUs is how many GPUs the nodes of partition have in all
// (sinfo's node count × gres, per group of alike nodes).
func (c *CLI) PartitionGPUs(ctx context.Context, partition string) (int, error) {
	out, err := c.run(ctx, "sinfo", "-h", "--partition="+partition, "-o", "%D %G")
	if err != nil {
		return 0, err
	}
	total := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		nodes, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		total += nodes * Job{TRESPerNode: f[1]}.GPUs()
	}
	return total, nil
}

// DefaultPendingLimit is the time a pending job without a time limit is
// taken to hold its GPUs, in QueueWait.
const DefaultPendingLimit = time.Hour

// QueueWait estimates how long a new job waits in partition: the GPU-hours
// its pending jobs ask (GPUs × time limit, DefaultPendingLimit where they
// give none) over the partition's GPUs. Time limits are upper bounds of
// run times, so it errs long; running jobs are not counted.
func (c *CLI) QueueWait(ctx context.Context, partition string) (time.Duration, error) {
	pending, err := c.Pending(ctx, partition)
	if err != nil {
		return 0, err
	}
	gpus, err := c.PartitionGPUs(ctx, partition)
	if err != nil || gpus == 0 {
		return 0, err
	}
	var gpuTime time.Duration
	for _, j := range pending {
		limit := j.TimeLimit
		if limit <= 0 {
			limit = DefaultPendingLimit
		}
		gpuTime += time.Duration(max(j.GPUs(), 1)) * limit
	}
	return gpuTime / time.Duration(gpus), nil
}
