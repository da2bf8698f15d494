package cloud

import "time"

// Orphans returns the instances the reconciler must terminate: each one
// managed by this cluster, not already terminated or shutting down,
// launched more than grace before now, that is not the live attempt of its
// job (live maps job id → the attempt that may run now). It fails closed:
// an instance that names no valid job attempt, or whose launch time is
// unknown, counts as old and orphaned. Instances not Managed are never
// returned. Pure: no cloud, no clock.
func Orphans(instances []Instance, live map[string]int, now time.Time, grace time.Duration) []Instance {
	var out []Instance
	for _, in := range instances {
		if !in.Managed || in.Gone() {
			continue
		}
		if !in.LaunchTime.IsZero() && now.Sub(in.LaunchTime) <= grace {
			continue
		}
		job, attempt, ok := in.JobAttempt()
		if ok {
			if a, isLive := live[job]; isLive && a == attempt {
				continue
			}
		}
		out = append(out, in)
	}
	return out
}
