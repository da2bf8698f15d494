// Package aws is Lathe's EC2 launcher: it chooses the GPU instance type a job
// needs within a backend's allowed list, launches exactly one instance per
// job attempt (found again by its tags after a crash), describes and
// terminates instances, and offers all of it to the reconciler and the cloud
// worker as a cloud.Backend (Backend.Cloud).
//
// Only this package knows *ec2.Client, and only through ec2API, the few calls
// it makes. Policy that needs no AWS (Cost, the order of choices) is
// pure and tested without it; Orphans, the reconciler's policy, is
// internal/cloud's, for every backend.
//
// The pipeline of one launch:
//
//	Request ──ChooseTypes──▶ []Choice (cheapest first; spot, then on-demand)
//	   │
//	   ├─ find by tags (managed, cluster, job, attempt) ──▶ found: return it
//	   │     (an error here launches nothing)
//	   └─ for each choice, for each subnet: RunInstances
//	          capacity error ─▶ next subnet, then next choice
//	          throttled      ─▶ same again after backoff with jitter (bounded)
//	          other error    ─▶ return it
//	       nothing left     ─▶ *NoCapacityError (errors.Is ErrNoCapacity):
//	                           the job waits in this backend's site
package aws
