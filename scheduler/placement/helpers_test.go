package placement

import (
	"fmt"
	"slices"
	"time"
)

// t0 is every test snapshot's Now.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	h100 = "NVIDIA H100 80GB HBM3"
	a100 = "NVIDIA A100-SXM4-40GB"
)

// gpuNode returns a node with n free, healthy GPUs named model.
func gpuNode(name string, n int, model string, memMB uint64) Node {
	nd := Node{Name: name}
	for i := range n {
		nd.GPUs = append(nd.GPUs, GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Name: model, MemoryTotalMB: memMB, Healthy: true})
	}
	return nd
}

// h100Node returns a node with n free H100s.
func h100Node(name string, n int) Node { return gpuNode(name, n, h100, 81559) }

// run marks GPUs idx of nd held by a running job and lists it.
func run(nd Node, id string, prio int, endsIn time.Duration, preemptible bool, idx ...int) Node {
	nd = cloneNode(nd)
	for _, i := range idx {
		for g := range nd.GPUs {
			if nd.GPUs[g].Index == i {
				nd.GPUs[g].JobID = id
			}
		}
	}
	nd.Running = append(nd.Running, Running{JobID: id, Priority: prio, GPUs: idx, EndsAt: t0.Add(endsIn), Preemptible: preemptible})
	return nd
}

// job returns a pending GPU job of any model.
func job(id string, prio, gpus int, est time.Duration) Job {
	return Job{ID: id, Priority: prio, Request: Request{GPUs: gpus}, Estimate: est}
}

// cpuJob returns a pending CPU-only job.
func cpuJob(id string, slots int, est time.Duration) Job {
	return Job{ID: id, Priority: PriorityNormal, Request: Request{CPUSlots: slots}, Estimate: est}
}

func cloneNode(n Node) Node {
	n.GPUs = slices.Clone(n.GPUs)
	n.Running = slices.Clone(n.Running)
	return n
}

func cloneSnapshot(s Snapshot) Snapshot {
	s.Nodes = slices.Clone(s.Nodes)
	for i := range s.Nodes {
		s.Nodes[i] = cloneNode(s.Nodes[i])
	}
	s.Pending = slices.Clone(s.Pending)
	return s
}

// apply returns s with the assignments as running jobs (ending at Now +
// Estimate; a job with no estimate holds its GPUs and slots but is not
// listed, so they never free) and only the given pending jobs.
func apply(s Snapshot, as []Assignment, pending ...Job) Snapshot {
	jobs := jobsByID(s)
	out := cloneSnapshot(s)
	for _, a := range as {
		j := jobs[a.JobID]
		members := a.Gang
		if members == nil {
			members = []Member{{Node: a.Node, GPUs: a.GPUs}}
		}
		for _, m := range members {
			for ni := range out.Nodes {
				nd := &out.Nodes[ni]
				if nd.Name != m.Node {
					continue
				}
				for g := range nd.GPUs {
					if slices.Contains(m.GPUs, nd.GPUs[g].Index) {
						nd.GPUs[g].JobID = a.JobID
					}
				}
				nd.CPUSlotsUsed += a.CPUSlots
				if j.Estimate <= 0 {
					continue // held with no expected end: listed nowhere
				}
				nd.Running = append(nd.Running, Running{JobID: a.JobID, Priority: j.Priority, GPUs: m.GPUs, CPUSlots: a.CPUSlots, EndsAt: s.Now.Add(j.Estimate)})
			}
		}
	}
	out.Pending = pending
	return out
}

func waitOf(p Plan, id string) (Wait, bool) {
	for _, w := range p.Waits {
		if w.JobID == id {
			return w, true
		}
	}
	return Wait{}, false
}

func assignOf(p Plan, id string) (Assignment, bool) {
	for _, a := range p.Assign {
		if a.JobID == id {
			return a, true
		}
	}
	return Assignment{}, false
}

// jobsByID is s's pending jobs by id.
func jobsByID(s Snapshot) map[string]Job {
	jobs := make(map[string]Job, len(s.Pending))
	for _, j := range s.Pending {
		jobs[j.ID] = j
	}
	return jobs
}
