package aws

import (
	"math"
	"time"
)

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
