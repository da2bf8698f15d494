package sim

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Reference replays jobs through a clairvoyant reference policy (issue #15;
// the tests compare Simulate with it, and `lathe simulate --reference`
// prints it beside the policy): conservative backfilling over a pool of
// setup.Owned GPUs (any job of at most Owned GPUs fits; no nodes), knowing
// every job's duration in advance. Jobs are taken in submit order; each
// gets the earliest start at or after its submit at which its GPUs are free
// for its whole duration, given every reservation made before it (so no job
// delays an earlier one); a job whose start would be later than MaxWait
// after its submit is rented at submit instead (wait 0), on the cheapest
// instance type of a cloud backend whose sites carry its tags. A job the
// owned pool may not hold (its tags, its size) is rented; one that neither
// may take is refused. It is the best a policy that never reorders and
// never preempts could do with perfect knowledge, not a lower bound on
// every policy. Costs are counted as Simulate counts them.
func Reference(setup Setup, jobs []Job) (Result, error) {
	sm, err := newSim(setup, jobs)
	if err != nil {
		return Result{}, err
	}
	owned := setup.Owned
	localTags := sm.tags[sm.local.Site]
	for i := range sm.jobs {
		sj := &sm.jobs[i]
		tags := sm.effective(sj.in)
		sj.job.OutputURI = sj.output
		price, backend := sm.cheapestCloud(sj.in.GPUs, tags)
		localOK := carriesAll(localTags, tags) && sj.in.GPUs <= owned
		rent := func() {
			sj.out.Backend, sj.out.Site, sj.out.Cloud = backend.Name, backend.Site, true
			sj.out.Start, sj.out.End = sj.in.Submit, sj.in.Submit+sj.in.Duration
			sj.out.CostUSD = sj.in.Duration.Hours() * price
			sm.res.CloudCostUSD += sj.out.CostUSD
			sm.res.CloudGPUHours += sj.in.Duration.Hours() * float64(sj.in.GPUs)
			sm.checkResidency(sj, backend)
		}
		if !localOK {
			if math.IsInf(price, 1) {
				sj.out.Refused, sj.out.Reason = true, "no owned GPUs or cloud backend may take it"
			} else {
				rent()
			}
			continue
		}
		start := sm.prof.earliest(sj.in.Submit, sj.in.Duration, sj.in.GPUs, owned, setup.MaxWait, !math.IsInf(price, 1))
		if start < 0 {
			rent()
			continue
		}
		sm.prof.reserve(start, sj.in.Duration, sj.in.GPUs)
		sj.out.Backend, sj.out.Site = sm.local.Name, sm.local.Site
		sj.out.Wait, sj.out.Start, sj.out.End = start-sj.in.Submit, start, start+sj.in.Duration
		sm.res.OwnedBusyGPUHours += sj.in.Duration.Hours() * float64(sj.in.GPUs)
		sm.checkResidency(sj, sm.local)
	}
	return sm.result(), nil
}

// cheapestCloud is the cheapest $/hour of an instance type with at least
// gpus GPUs on a cloud backend whose site and checkpoints carry tags, and
// that backend; +Inf when there is none.
func (sm *deployment) cheapestCloud(gpus int, tags []string) (float64, routecfg.Backend) {
	best, at := math.Inf(1), routecfg.Backend{}
	for _, b := range sm.clouds {
		if !carriesAll(sm.tags[b.Site], tags) {
			continue
		}
		if ck := b.CheckpointURI; strings.HasPrefix(ck, "s3://") {
			bucket, _, _ := strings.Cut(strings.TrimPrefix(ck, "s3://"), "/")
			if !carriesAll(sm.tags[sm.buckets[bucket]], tags) {
				continue
			}
		}
		for _, t := range b.InstanceTypes {
			if t.GPUs >= gpus && t.USDPerHour(b.Spot) < best {
				best, at = t.USDPerHour(b.Spot), b
			}
		}
	}
	return best, at
}

// profile is a step function of the owned GPUs in use: used[k] from
// times[k] until times[k+1] (the last, forever).
type profile struct {
	times []time.Duration
	used  []int
	first int // breakpoints before it are in the past of every later submit
}

// split makes t a breakpoint and returns its index.
func (p *profile) split(t time.Duration) int {
	if len(p.times) == 0 {
		p.times, p.used = []time.Duration{0}, []int{0}
	}
	k, found := slices.BinarySearch(p.times, t)
	if found {
		return k
	}
	k-- // times[k] < t
	p.times = slices.Insert(p.times, k+1, t)
	p.used = slices.Insert(p.used, k+1, p.used[k])
	return k + 1
}

// earliest is the first start at or after submit at which gpus GPUs are
// free for dur; −1 when it would be later than submit+maxWait and canRent.
func (p *profile) earliest(submit, dur time.Duration, gpus, owned int, maxWait time.Duration, canRent bool) time.Duration {
	if len(p.times) == 0 {
		p.times, p.used = []time.Duration{0}, []int{0}
	}
	for p.first+1 < len(p.times) && p.times[p.first+1] <= submit {
		p.first++
	}
	for k := p.first; k < len(p.times); k++ {
		t := max(p.times[k], submit)
		if canRent && t-submit > maxWait {
			return -1
		}
		ok := true
		for m := k; m < len(p.times) && (p.times[m] < t+dur || m == k); m++ {
			if p.used[m]+gpus > owned {
				ok = false
				break
			}
		}
		if ok {
			return t
		}
	}
	return -1 // not reached: the last step is free once every job ends
}

// reserve counts gpus GPUs in use from start for dur.
func (p *profile) reserve(start, dur time.Duration, gpus int) {
	if dur <= 0 {
		return
	}
	a, b := p.split(start), p.split(start+dur)
	for m := a; m < b; m++ {
		p.used[m] += gpus
	}
}
