package jobtype

// Op names the job store operation that makes a state change (the
// jobstore method, or the script it runs).
type Op string

// The store operations that change a job's state. Every other store write
// (append, renew, adopt, set route, annotate) leaves the state as it is.
const (
	OpCreate           Op = "create"            // Create, CreateMany: a new job
	OpDispatch         Op = "dispatch"          // Dispatch: the placer reserved room on a node
	OpClaim            Op = "claim"             // Claim: a local worker takes its attempt
	OpClaimCloud       Op = "claim cloud"       // ClaimCloud: a cloud worker takes its attempt, before launching
	OpStarted          Op = "started"           // Started: the cloud instance's trainer started
	OpFinish           Op = "finish"            // Finish: the attempt ended in a terminal state
	OpRequeue          Op = "requeue"           // Requeue: the attempt ended, the next one is queued
	OpCancel           Op = "cancel"            // Cancel, CancelSweep: the user asked (a queued job, or a paused trial, ends at once)
	OpCancelDispatched Op = "cancel dispatched" // CancelDispatched: the task was removed from its queue
	OpRequestPreempt   Op = "request preempt"   // RequestPreempt: an attempt that has not started makes room
	OpPreempted        Op = "preempted"         // Preempted: a running attempt stopped for an urgent job
	OpCloudPreempted   Op = "cloud preempted"   // CloudPreempted: the cloud took the instance back
	OpReap             Op = "reap"              // Reap: the attempt's lease expired
	OpReleaseDead      Op = "release dead"      // ReleaseDead: the worker's new incarnation killed the trainer
	OpRetry            Op = "retry"             // Retry: a new attempt of a failed or cancelled job
	// Sweep trials (docs/sweeps.md).
	OpPause   Op = "pause"   // Pause: a trial's attempt reached its ASHA rung's step limit and checkpointed
	OpPromote Op = "promote" // Promote: ASHA promotes a paused trial to the next rung (the next attempt resumes)
	OpStop    Op = "stop"    // Stop: the sweep stops a trial that waits (never admitted) or is paused
)

// Transition is one allowed state change: operation Op moves a job from
// From to To. From is "" for OpCreate (no job before). When says when the
// operation makes this change rather than another one ("" always).
type Transition struct {
	Op   Op
	From State
	To   State
	When string
}

// Transition.When of the rows that depend on the durable cancel_requested
// flag: an operation that would start an attempt or make a new one ends the
// job cancelled instead when a cancel was asked.
const (
	WhenCancelAsked = "a cancel was asked"
	WhenNoCancel    = "no cancel was asked"
	// WhenStopAsked: the sweep asked the trial to stop (jobstore.Stop on a
	// dispatched, provisioning or running trial, which also sets
	// cancel_requested): wherever the cancel would end the job cancelled,
	// it ends stopped. A user's cancel asked after it wins (cancelled).
	WhenStopAsked = "a stop was asked"
)

// Transitions is the job state machine: every state change a store
// operation may make, and no other. The Lua scripts in internal/jobstore
// are its only writers, and jobstore's tests drive every operation from
// every state against a real Redis to check that each change they make is
// a row here and that each row is made (docs/architecture.md, "States and
// transitions", renders it).
var Transitions = []Transition{
	{OpCreate, "", StateQueued, ""},
	{OpDispatch, StateQueued, StateDispatched, WhenNoCancel},
	{OpClaim, StateDispatched, StateRunning, WhenNoCancel},
	{OpClaim, StateDispatched, StateCancelled, WhenCancelAsked},
	{OpClaim, StateDispatched, StateStopped, WhenStopAsked},
	{OpClaimCloud, StateDispatched, StateProvisioning, WhenNoCancel},
	{OpClaimCloud, StateDispatched, StateCancelled, WhenCancelAsked},
	{OpClaimCloud, StateDispatched, StateStopped, WhenStopAsked},
	{OpStarted, StateProvisioning, StateRunning, ""},
	{OpFinish, StateDispatched, StateSucceeded, ""},
	{OpFinish, StateDispatched, StateFailed, ""},
	{OpFinish, StateDispatched, StateCancelled, ""},
	{OpFinish, StateDispatched, StateStopped, WhenStopAsked},
	{OpFinish, StateProvisioning, StateSucceeded, ""},
	{OpFinish, StateProvisioning, StateFailed, ""},
	{OpFinish, StateProvisioning, StateCancelled, ""},
	{OpFinish, StateProvisioning, StateStopped, WhenStopAsked},
	{OpFinish, StateRunning, StateSucceeded, ""},
	{OpFinish, StateRunning, StateFailed, ""},
	{OpFinish, StateRunning, StateCancelled, ""},
	{OpFinish, StateRunning, StateStopped, WhenStopAsked},
	{OpRequeue, StateDispatched, StateQueued, WhenNoCancel},
	{OpRequeue, StateDispatched, StateCancelled, WhenCancelAsked},
	{OpRequeue, StateDispatched, StateStopped, WhenStopAsked},
	{OpRequeue, StateProvisioning, StateQueued, WhenNoCancel},
	{OpRequeue, StateProvisioning, StateCancelled, WhenCancelAsked},
	{OpRequeue, StateProvisioning, StateStopped, WhenStopAsked},
	{OpRequeue, StateRunning, StateQueued, WhenNoCancel},
	{OpRequeue, StateRunning, StateCancelled, WhenCancelAsked},
	{OpRequeue, StateRunning, StateStopped, WhenStopAsked},
	{OpCancel, StateQueued, StateCancelled, "a dispatched, provisioning or running job gets cancel_requested instead; its owner ends it"},
	{OpCancel, StatePaused, StateCancelled, ""},
	{OpCancelDispatched, StateDispatched, StateCancelled, ""},
	{OpCancelDispatched, StateDispatched, StateStopped, WhenStopAsked},
	{OpRequestPreempt, StateDispatched, StateQueued, "a running attempt gets preempt_requested instead; its worker calls Preempted"},
	{OpPreempted, StateRunning, StateQueued, WhenNoCancel},
	{OpPreempted, StateRunning, StateCancelled, WhenCancelAsked},
	{OpPreempted, StateRunning, StateStopped, WhenStopAsked},
	{OpCloudPreempted, StateProvisioning, StateQueued, WhenNoCancel},
	{OpCloudPreempted, StateProvisioning, StateCancelled, WhenCancelAsked},
	{OpCloudPreempted, StateProvisioning, StateStopped, WhenStopAsked},
	{OpCloudPreempted, StateRunning, StateQueued, WhenNoCancel},
	{OpCloudPreempted, StateRunning, StateCancelled, WhenCancelAsked},
	{OpCloudPreempted, StateRunning, StateStopped, WhenStopAsked},
	{OpReap, StateRunning, StateQueued, WhenNoCancel},
	{OpReap, StateRunning, StateCancelled, WhenCancelAsked},
	{OpReap, StateRunning, StateStopped, WhenStopAsked},
	{OpReleaseDead, StateRunning, StateQueued, WhenNoCancel},
	{OpReleaseDead, StateRunning, StateCancelled, WhenCancelAsked},
	{OpReleaseDead, StateRunning, StateStopped, WhenStopAsked},
	{OpRetry, StateFailed, StateQueued, "the cancel request is cleared"},
	{OpRetry, StateCancelled, StateQueued, "the cancel request is cleared"},
	{OpPause, StateRunning, StatePaused, WhenNoCancel},
	{OpPause, StateRunning, StateCancelled, WhenCancelAsked},
	{OpPause, StateRunning, StateStopped, WhenStopAsked},
	{OpPromote, StatePaused, StateQueued, WhenNoCancel},
	{OpStop, StateQueued, StateStopped, "a dispatched, provisioning or running trial gets stop_requested instead; its owner ends it stopped"},
	{OpStop, StatePaused, StateStopped, ""},
}

// Allowed reports whether op may move a job from from to to (a row of
// Transitions).
func Allowed(op Op, from, to State) bool {
	for _, t := range Transitions {
		if t.Op == op && t.From == from && t.To == to {
			return true
		}
	}
	return false
}
