package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// Interruption is one spot interruption of a cloud job.
type Interruption struct {
	Job     string
	Backend string
	// At is when it came, after the simulation's start.
	At time.Duration
	// GPUs of the job; Lost is the run time lost since its last
	// checkpoint (0 when the trainer checkpointed on the notice); CostUSD
	// what its instance cost while doing that lost work.
	GPUs    int
	Lost    time.Duration
	CostUSD float64
}

// spotRun is what the simulator knows of a job's cloud attempt: when its
// instance launched, and whether (and when) it is interrupted.
type spotRun struct {
	launched    time.Duration // when the attempt's instance launched
	interrupted bool          // its end event is an interruption
	first       bool          // the job had not started before this attempt
	prevStarted *time.Time    // the job's StartedAt before this attempt
}

// MaxSpotInterruptions is the highest rate of spot interruptions per
// instance-hour a simulation takes.
const MaxSpotInterruptions = 10.0

// maxInterruptionsPerStretch bounds the interruptions expected while a
// job cannot keep any progress (a start-up, then the run up to its first
// checkpoint): e^5, about 150 attempts for each. Past it a simulation would
// run on for millions of attempts.
const maxInterruptionsPerStretch = 5.0

// withCloud is cfg with every cloud backend's startup set to startup and
// its staging_mbps to mbps, each when above 0; cfg itself when neither
// is. cfg is not modified.
func withCloud(cfg routecfg.Config, startup time.Duration, mbps float64) routecfg.Config {
	if startup == 0 && mbps == 0 {
		return cfg
	}
	out := cfg
	out.Backends = slices.Clone(cfg.Backends)
	for i := range out.Backends {
		if out.Backends[i].Kind == routecfg.KindLocal {
			continue
		}
		if startup != 0 {
			out.Backends[i].Startup = startup
		}
		if mbps != 0 {
			out.Backends[i].StagingMBps = mbps
		}
	}
	return out
}

// SpotBackends names the cloud backends of cfg that buy spot instances
// (spot: prefer or only): those spot interruptions apply to.
func SpotBackends(cfg routecfg.Config) []string {
	var out []string
	for _, b := range cfg.Backends {
		if b.Kind != routecfg.KindLocal && b.Spot {
			out = append(out, b.Name)
		}
	}
	return out
}

// checkSpot refuses spot interruptions out of range, or where no cloud
// backend buys spot, and a negative checkpoint interval or start-up.
func checkSpot(setup Setup, cfg routecfg.Config) error {
	su := &setup
	switch r := su.SpotInterruptions; {
	case !(r >= 0) || r > MaxSpotInterruptions:
		return fmt.Errorf("%w: spot interruptions %v per instance-hour: want 0 to %v", errSim, r, MaxSpotInterruptions)
	case r > 0 && len(SpotBackends(cfg)) == 0:
		return fmt.Errorf("%w: spot interruptions %v per instance-hour: no cloud backend of the config buys spot (spot: prefer or only), so none would be interrupted", errSim, r)
	case su.CheckpointEvery < 0:
		return fmt.Errorf("%w: checkpoint interval %s: want 0 (on the notice) or more", errSim, su.CheckpointEvery)
	case su.CloudStartup < 0:
		return fmt.Errorf("%w: cloud start-up %s: want 0 or more", errSim, su.CloudStartup)
	case su.DatasetBytes < 0:
		return fmt.Errorf("%w: dataset size %d bytes: want 0 or more", errSim, su.DatasetBytes)
	case !(su.StagingMBps >= 0) || su.StagingMBps > routecfg.MaxStagingMBps:
		return fmt.Errorf("%w: staging rate %v MB/s: want 0 (the config's) to %v", errSim, su.StagingMBps, routecfg.MaxStagingMBps)
	}
	if err := SpotProgress(cfg, su.SpotInterruptions, su.CheckpointEvery); err != nil {
		return fmt.Errorf("%w: spot interruptions %v per instance-hour: %w", errSim, su.SpotInterruptions, err)
	}
	return nil
}

// SpotProgress says whether jobs on cfg's spot backends could make
// progress at rate interruptions per instance-hour with a checkpoint every
// every (0: on the notice): an error naming the backend when more than
// maxInterruptionsPerStretch are expected over its startup and one
// checkpoint interval, the stretch in which a job keeps nothing.
func SpotProgress(cfg routecfg.Config, rate float64, every time.Duration) error {
	for _, b := range cfg.Backends {
		stretch := b.Startup + every
		if n := rate * stretch.Hours(); b.Kind != routecfg.KindLocal && b.Spot && n > maxInterruptionsPerStretch {
			return fmt.Errorf("over backend %s's start-up %s and a checkpoint interval of %s, %.3g interruptions are expected before a job keeps any progress; want at most %v (jobs would hardly ever end)",
				b.Name, b.Startup, every, n, maxInterruptionsPerStretch)
		}
	}
	return nil
}

// launch starts job i's attempt on cloud backend b: its instance launches
// now, and the trainer starts after the backend's startup and the
// staging of its dataset, which the routing decision counted as its wait.
func (sm *simulation) launch(i int, b routecfg.Backend) {
	sj := &sm.jobs[i]
	sj.spot = spotRun{launched: sm.now, first: !sj.started, prevStarted: sj.job.StartedAt}
	sm.begin(i, b, b.Startup+stagingDelay(&sm.jobs[i], b))
}

// stagingDelay is how long job sj's dataset takes to reach cloud backend b's
// site: its size ÷ b's staging_mbps when it lies in another site; 0 when
// the job names no dataset, the dataset is in b's site, or b gives no
// staging_mbps. Each launch stages it again (a new instance, perhaps in
// another site), as routing counts it in every decision.
func stagingDelay(sj *simJob, b routecfg.Backend) time.Duration {
	if sj.dataBytes <= 0 || !(b.StagingMBps > 0) || sj.dataSite == b.Site {
		return 0
	}
	return time.Duration(float64(sj.dataBytes) / (b.StagingMBps * 1e6) * float64(time.Second))
}

// billed is how long sj's cloud instance has run by now: from its
// launch, start-up included.
func (sj *simJob) billed(now time.Duration) time.Duration {
	return now - sj.spot.launched
}

// spotEnd is when job i's attempt on b, launched now, ends: end, or an
// interruption before it. The time to an interruption is exponential at
// Setup.SpotInterruptions per instance-hour from the launch, on a backend
// that buys spot; each job's attempt draws from its own stream of
// Setup.Seed, so one job's draws do not shift another's.
func (sm *simulation) spotEnd(i int, b routecfg.Backend, end time.Duration) time.Duration {
	sj := &sm.jobs[i]
	sj.spot.interrupted = false
	rate := sm.setup.SpotInterruptions
	if rate <= 0 || b.Kind == routecfg.KindLocal || !b.Spot {
		return end
	}
	rng := rand.New(rand.NewPCG(sm.setup.Seed, uint64(i)<<32|uint64(uint32(sj.job.Attempt))))
	x := rng.ExpFloat64() / rate // hours
	if !(x < (end - sm.now).Hours()) {
		return end
	}
	sj.spot.interrupted = true
	return sm.now + time.Duration(math.Round(x*float64(time.Hour)))
}

// interrupt handles job i's end event when it is a spot interruption and
// reports whether it was. As the live path does (the agent's IMDS notice,
// the AWS worker's CloudPreempted): the instance is paid for what it ran,
// the job keeps the work up to its last checkpoint, and it goes back to
// queued as its next attempt with one more preemption, so the next round
// routes it again (policy.ReroutePath: "preemption") through
// policy.DecideRoute, and a start anywhere is checked for residency again.
func (sm *simulation) interrupt(i int) bool {
	sj := &sm.jobs[i]
	if !sj.spot.interrupted {
		return false
	}
	sj.spot.interrupted = false
	ranHere := max(0, sm.now-sj.runStart) // 0: interrupted during start-up
	progress := sj.ran + ranHere
	saved := progress
	if ce := sm.setup.CheckpointEvery; ce > 0 {
		saved = max(sj.ran, progress/ce*ce)
	}
	lost := progress - saved
	price := sm.instancePrice(sj.out.Backend, sj.insType)
	cost := sj.billed(sm.now).Hours() * price
	sj.out.CostUSD += cost
	sm.res.CloudCostUSD += cost
	sm.res.CloudGPUHours += (ranHere - lost).Hours() * float64(sj.in.GPUs)
	sm.res.Interruptions = append(sm.res.Interruptions, Interruption{Job: sj.in.ID, Backend: sj.out.Backend, At: sm.now,
		GPUs: sj.in.GPUs, Lost: lost, CostUSD: lost.Hours() * price})
	sj.ran = saved
	if ranHere == 0 && sm.now < sj.runStart {
		// Reclaimed before its trainer started: no start to count.
		sj.job.StartedAt = sj.spot.prevStarted
		if sj.spot.first {
			sj.started, sj.out.Wait, sj.out.Start = false, 0, 0
		}
	}
	sj.runStart = sm.now
	sj.job.State = jobtype.StateQueued
	sj.job.UpdatedAt = sm.at() // it joined the queue again now (queuedSince)
	sj.job.Backend = ""
	sj.job.Preemptions++
	sj.job.Attempt++ // the store's requeue: the next attempt
	sm.redecide = true
	sm.enqueue(i)
	return true
}

// interruptionTotals is how many interruptions there were, the GPU-hours
// they lost and what that lost work cost.
func interruptionTotals(in []Interruption) (n int, lostGPUHours, lostUSD float64) {
	for _, it := range in {
		lostGPUHours += it.Lost.Hours() * float64(it.GPUs)
		lostUSD += it.CostUSD
	}
	return len(in), lostGPUHours, lostUSD
}
