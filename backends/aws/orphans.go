package aws

import (
	"math"
	"time"
)

// Orphans returns the instances the reconciler must terminate: each one
// tagged lathe:managed=true, not already terminated or shutting down,
// launched more than grace before now, that is not the live attempt of its
// job (live maps job id → the attempt that may run now). It fails closed:
// an instance whose job or attempt tag is missing or unparseable, or whose
// launch time is unknown, counts as old and orphaned. Instances without
// lathe:managed=true are never returned. instances must be this cluster's
// (FindManaged's result). Pure: no AWS, no clock.
func Orphans(instances []Instance, live map[string]int, now time.Time, grace time.Duration) []Instance {
	var out []Instance
	for _, in := range instances {
		if in.Tags[TagManaged] != "true" || in.Gone() {
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

// MinBilled is the shortest time Cost bills.
const MinBilled = 60 * time.Second

// Cost is the cost in USD of an instance from launch to end at usdPerHour,
// billed per started second with a 60-second minimum (EC2's rule for
// Linux instances). An end before launch bills the minimum; a negative or
// non-finite price costs 0.
func Cost(launch, end time.Time, usdPerHour float64) float64 {
	if !(usdPerHour > 0) || math.IsInf(usdPerHour, 0) {
		return 0
	}
	d := end.Sub(launch)
	if r := d % time.Second; r > 0 {
		d += time.Second - r // a started second is billed
	}
	if d < MinBilled {
		d = MinBilled
	}
	return d.Seconds() * usdPerHour / 3600
}

// Price returns the configured price per hour of an instance: the spot
// price for a spot instance (the on-demand price when none is configured),
// else the on-demand price; 0 for a type not in the allowed list.
func (b *Backend) Price(inst Instance) float64 {
	for _, t := range b.cfg.InstanceTypes {
		if t.Name != inst.Type {
			continue
		}
		if inst.Spot && t.SpotUSDPerHour > 0 {
			return t.SpotUSDPerHour
		}
		return t.OnDemandUSDPerHour
	}
	return 0
}
