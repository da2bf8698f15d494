package kubernetes

import (
	"strings"
	"time"
	"unicode"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// States of an attempt's Job, as Lathe reads them (Job.State).
const (
	// StatePending: not running yet (unscheduled, suspended by Kueue,
	// pulling its image).
	StatePending = "Pending"
	// StateRunning: its pod runs.
	StateRunning = "Running"
	// StateSucceeded: the Job completed (its pod exited 0).
	StateSucceeded = "Succeeded"
	// StateFailed: the Job failed, its pod having exited non-zero (or
	// never run).
	StateFailed = "Failed"
	// StateDeadlineExceeded: the Job ran past activeDeadlineSeconds.
	StateDeadlineExceeded = "DeadlineExceeded"
	// StateDisrupted: its pod was evicted, preempted or lost with its node
	// (a DisruptionTarget condition, or the kubelet's Evicted, Preempting,
	// NodeLost or Shutdown): no fault of the trainer.
	StateDisrupted = "Disrupted"
	// StateDeleting: the Job is being deleted (a cancel).
	StateDeleting = "Deleting"
)

// Ended reports whether state is one a Job does not leave.
func Ended(state string) bool {
	switch state {
	case StateSucceeded, StateFailed, StateDeadlineExceeded, StateDisrupted, StateDeleting:
		return true
	}
	return false
}

// Job is what Lathe reads of an attempt's Job and its pod. Every string in
// it comes from the cluster and is bounded and stripped of control
// characters (Reason, Message, Node); the labels are the Job's own.
type Job struct {
	Name, UID string
	Labels    map[string]string
	State     string
	// Reason and Message say why (a condition's reason and message, or the
	// pod's); Node is the pod's node.
	Reason, Message, Node string
	// ExitCode is the container's, when it ended (-1 otherwise).
	ExitCode int
	// Created is when the Job was made; Start when its container started
	// (zero before); End when it ended (zero before).
	Created, Start, End time.Time
}

// Summarize reads job and its pods (those of the Job, any order) into a
// Job.
func Summarize(job *batchv1.Job, pods []*corev1.Pod) Job {
	j := Job{Name: job.Name, UID: string(job.UID), Labels: job.Labels, ExitCode: -1, Created: job.CreationTimestamp.Time}
	pod := latestPod(pods)
	if pod != nil {
		readPod(&j, pod)
	}
	switch cond := endCondition(job); {
	case job.DeletionTimestamp != nil:
		j.State, j.Reason = StateDeleting, "deleted"
	case cond == nil:
		j.State = pendingOrRunning(job, pod)
		if job.Spec.Suspend != nil && *job.Spec.Suspend {
			j.Reason = "suspended (waiting for admission)"
		}
	default:
		j.State, j.Reason, j.Message = endState(cond, pod), bounded(cond.Reason), bounded(cond.Message)
		if j.End.IsZero() {
			j.End = cond.LastTransitionTime.Time
		}
	}
	return j
}

// endCondition is the Job's Complete, SuccessCriteriaMet, Failed or
// FailureTarget condition that is true, or nil.
func endCondition(job *batchv1.Job) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet, batchv1.JobFailed, batchv1.JobFailureTarget:
			if c.Status == corev1.ConditionTrue {
				return c
			}
		}
	}
	return nil
}

// endState maps a Job's end condition (and its pod) onto a state.
func endState(c *batchv1.JobCondition, pod *corev1.Pod) string {
	switch {
	case c.Type == batchv1.JobComplete || c.Type == batchv1.JobSuccessCriteriaMet:
		return StateSucceeded
	case c.Reason == batchv1.JobReasonDeadlineExceeded:
		return StateDeadlineExceeded
	case c.Reason == batchv1.JobReasonPodFailurePolicy && strings.Contains(c.Message, string(corev1.DisruptionTarget)),
		pod != nil && disrupted(pod):
		return StateDisrupted
	}
	return StateFailed
}

func pendingOrRunning(job *batchv1.Job, pod *corev1.Pod) string {
	if pod != nil && pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil {
		return StateRunning
	}
	return StatePending
}

// disrupted reports whether pod ended for no fault of its container.
func disrupted(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	switch pod.Status.Reason {
	case "Evicted", "Preempting", "NodeLost", "Shutdown", "Terminated", "UnexpectedAdmissionError":
		return true
	}
	return false
}

// readPod reads the node, start, end and exit code of pod into j.
func readPod(j *Job, pod *corev1.Pod) {
	j.Node = bounded(pod.Spec.NodeName)
	if pod.Status.Reason != "" {
		j.Reason, j.Message = bounded(pod.Status.Reason), bounded(pod.Status.Message)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		if r := cs.State.Running; r != nil {
			j.Start = r.StartedAt.Time
		}
		if t := cs.State.Terminated; t != nil {
			j.Start, j.End, j.ExitCode = t.StartedAt.Time, t.FinishedAt.Time, int(t.ExitCode)
		}
	}
	if j.Start.IsZero() && pod.Status.Phase == corev1.PodRunning && pod.Status.StartTime != nil {
		j.Start = pod.Status.StartTime.Time
	}
}

// latestPod is the pod made last (a Job of backoffLimit 0 has one, but a
// pod deleted by a disruption may be replaced while the Job ends).
func latestPod(pods []*corev1.Pod) *corev1.Pod {
	var p *corev1.Pod
	for _, q := range pods {
		if p == nil || q.CreationTimestamp.After(p.CreationTimestamp.Time) {
			p = q
		}
	}
	return p
}

// maxText bounds every string read from the cluster.
const maxText = 512

// bounded is s, read from the cluster (hostile), cut to maxText bytes on a
// rune boundary with control characters replaced.
func bounded(s string) string {
	if len(s) > maxText {
		s = strings.ToValidUTF8(s[:maxText], "") + "…"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
