// Package cloud is the seam between Lathe and a cloud backend: the Backend
// interface a backend implements (backends/aws is the first), the Instance
// it reports, and the pure policy that works on instances of any backend
// (Orphans). The reconciler (scheduler) and the cloud worker (worker) use
// only this package; only the backend's own package knows its SDK.
//
// cloudtest is the conformance suite every Backend passes; cloudfake is an
// in-memory Backend for tests. docs/architecture.md ("Adding a cloud
// backend") lists what a new backend adds.
//
// This package imports nothing of Lathe's.
package cloud

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Instance states, in Lathe's vocabulary (EC2's names): a backend maps its
// own states onto these.
const (
	StatePending      = "pending"
	StateRunning      = "running"
	StateShuttingDown = "shutting-down"
	StateTerminated   = "terminated"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
)

// Instance is what Lathe knows of one cloud instance, whichever backend
// launched it. The job fields come from the labels (tags) the backend put
// on it at launch.
type Instance struct {
	// ID is the cloud's id of the instance ("i-…" on EC2).
	ID string
	// Backend is the Lathe backend that launched it (its lathe:backend
	// label); "" when the label is missing.
	Backend string
	// JobID and Attempt are the job attempt it runs; both are zero when its
	// labels name no valid attempt (a missing job, a missing or bad
	// attempt): see JobAttempt.
	JobID   string
	Attempt int
	// Managed is true when the instance carries Lathe's managed label for
	// this cluster: only such an instance is ever terminated.
	Managed bool
	// Type is the instance type ("g5.xlarge").
	Type string
	// State is one of the State constants.
	State string
	// LaunchTime is when the cloud launched it (the start of its cost);
	// zero when unknown.
	LaunchTime time.Time
	// Spot is true for a spot (preemptible) instance.
	Spot bool
	// SubnetID is the network it runs in (an EC2 subnet).
	SubnetID string
}

// JobAttempt returns the instance's job id and attempt; ok is false when
// its labels name no valid attempt (the job id is empty or the attempt is
// not >= 1).
func (i Instance) JobAttempt() (jobID string, attempt int, ok bool) {
	if i.JobID == "" || i.Attempt < 1 {
		return "", 0, false
	}
	return i.JobID, i.Attempt, true
}

// Gone reports whether the instance is terminated or on its way there.
func (i Instance) Gone() bool { return i.State == StateTerminated || i.State == StateShuttingDown }

// Query selects the instances Find returns: always this cluster's managed
// ones, narrowed by the fields set.
type Query struct {
	// JobID and Attempt, when JobID is set, narrow the result to the
	// instances of that job attempt.
	JobID   string
	Attempt int
	// OwnOnly narrows the result to the backend's own instances (its
	// lathe:backend label); false: every backend of the cluster.
	OwnOnly bool
	// Ended includes instances that are terminated or on their way there,
	// while the cloud still lists them; false: only pending, running,
	// stopping or stopped ones (those that may bill, or come back).
	Ended bool
}

// LaunchRequest is what one launch needs: the job attempt it is for, its
// GPU request and the instance's start-up script.
type LaunchRequest struct {
	// JobID and Attempt (from 1) identify the attempt; they become the
	// instance's lathe:job-id and lathe:attempt labels.
	JobID   string
	Attempt int
	// GPUs is the number of GPUs the instance must have (0: any).
	GPUs int
	// GPUMemoryGB is the memory each GPU must have, in GB (10^9 bytes,
	// rounded to 0.1 GB: an A10G's 22888 MiB is 24.0 GB); 0: any.
	GPUMemoryGB float64
	// GPUModels are acceptable models, each matched case-insensitively as a
	// substring of the cloud's GPU name ("A100", "h100"); empty: any.
	GPUModels []string
	// UserData is the instance's start-up script, raw (the backend encodes
	// it as its cloud wants). Never put credentials in it.
	UserData string
}

// Offer is one way to launch: an instance type in a market, at the
// configured price.
type Offer struct {
	// Type is the instance type.
	Type string
	// Spot is true for the spot market, false for on-demand.
	Spot bool
	// USDPerHour is the configured price in that market.
	USDPerHour float64
}

// Market is "spot" or "on-demand".
func (o Offer) Market() string {
	if o.Spot {
		return "spot"
	}
	return "on-demand"
}

func (o Offer) String() string { return o.Type + " " + o.Market() }

// LaunchAttempt is one call to the cloud to launch and its outcome: an
// event on the job.
type LaunchAttempt struct {
	// Choice is what was asked for.
	Choice Offer
	// Subnet is where it was asked for.
	Subnet string
	// Code is the cloud's error code; "" when the call launched InstanceID.
	Code string
	// Message is the cloud's error message, if any.
	Message string
	// InstanceID is the launched instance on success.
	InstanceID string
}

func (a LaunchAttempt) String() string {
	s := a.Choice.String() + " in " + a.Subnet + ": "
	if a.Code == "" {
		return s + "launched " + a.InstanceID
	}
	return s + a.Code
}

// LaunchResult is what Launch did.
type LaunchResult struct {
	// Instance is the attempt's instance (launched now, or found).
	Instance Instance
	// Found is true when the instance already existed (found by its
	// labels) and nothing was launched.
	Found bool
	// Attempts are the launch calls made, in order, including the refused
	// ones; set on error too.
	Attempts []LaunchAttempt
}

// Backend is one cloud backend of one Lathe cluster: it launches,
// finds, describes, terminates and prices the instances it manages. An
// implementation is safe for concurrent use, and passes cloudtest.Run.
type Backend interface {
	// Launch makes sure the job attempt of req has one instance and
	// returns it: a live instance of the attempt found by its labels is
	// returned with Found (a handler run again after a crash launches
	// nothing), and a failure to look launches nothing. It returns an error
	// matching ErrNoFit when no instance type can hold the request, and
	// ErrNoCapacity when the cloud refused every choice for capacity.
	Launch(ctx context.Context, req LaunchRequest) (LaunchResult, error)
	// Find returns this cluster's managed instances that q selects, oldest
	// first.
	Find(ctx context.Context, q Query) ([]Instance, error)
	// Describe returns one instance; an error matching ErrNotFound when the
	// cloud does not know the id. Any other error says nothing about the
	// instance: a caller must not terminate or relaunch on it.
	Describe(ctx context.Context, instanceID string) (Instance, error)
	// Terminate terminates an instance this cluster manages. It is
	// idempotent: an instance already terminated, on its way there or
	// unknown is success. One not managed by this cluster is refused with
	// an error matching ErrNotManaged and left alone.
	Terminate(ctx context.Context, instanceID string) error
	// Price is the configured price per hour of an instance in its market
	// (the spot price of a spot instance); 0 for a type not configured.
	Price(inst Instance) float64
	// Cost is what an instance at usdPerHour costs from launch to end, by
	// the cloud's billing rule; 0 for a price that is not > 0.
	Cost(launch, end time.Time, usdPerHour float64) float64
}

// Errors a Backend returns (matched with errors.Is; a backend may return
// its own errors that match them).
var (
	// ErrNoCapacity: every choice was refused for capacity. The job waits
	// in the backend's site; it never moves to another on its own.
	ErrNoCapacity = errors.New("cloud: no capacity")
	// ErrNoFit: no configured instance type has the GPUs the request
	// needs; the job can never run on this backend.
	ErrNoFit = errors.New("cloud: no configured instance type fits")
	// ErrNotFound: the cloud does not know the instance.
	ErrNotFound = errors.New("cloud: instance not found")
	// ErrNotManaged: the instance is not this cluster's; Lathe never
	// terminates what it did not launch.
	ErrNotManaged = errors.New("cloud: instance not managed by this cluster")
)

// RequestProblems lists what is wrong with r for every backend: a job id
// of 1-200 characters, an attempt >= 1, GPUs >= 0 and a finite GPU memory
// >= 0 are required. Empty when r is valid; a backend adds its own limits.
func RequestProblems(r LaunchRequest) []string {
	var bad []string
	if r.JobID == "" || len(r.JobID) > 200 {
		bad = append(bad, fmt.Sprintf("job id %q: want 1-200 characters", r.JobID))
	}
	if r.Attempt < 1 {
		bad = append(bad, fmt.Sprintf("attempt %d: want >= 1", r.Attempt))
	}
	if r.GPUs < 0 {
		bad = append(bad, fmt.Sprintf("gpus %d: want >= 0", r.GPUs))
	}
	if !(r.GPUMemoryGB >= 0) || math.IsInf(r.GPUMemoryGB, 0) {
		bad = append(bad, fmt.Sprintf("gpu memory %v GB: want >= 0", r.GPUMemoryGB))
	}
	return bad
}
