package sim

import (
	"context"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// spotSetup is configs/simulate-spot.yaml (both cloud backends buy spot at
// the on-demand price) with owned GPUs, max_wait 1h.
func spotSetup(t *testing.T, owned int) Setup {
	t.Helper()
	b, err := os.ReadFile("../../configs/simulate-spot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routecfg.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	return Setup{Config: cfg, Owned: owned, GPUName: "NVIDIA H100 80GB HBM3", GPUMemoryMB: 80 * 1024, MaxWait: time.Hour, Seed: 1}
}

// TestSpotInterruptionsSmall: one 10-hour 8-GPU job with no owned GPUs,
// interrupted at 1 per instance-hour, checkpointing every 30 minutes: it
// is interrupted, each time loses less than 30 minutes, is routed again
// (one decision per interruption), ends, and pays for the instance time of
// every attempt: its run time, the work lost and each start-up.
func TestSpotInterruptionsSmall(t *testing.T) {
	for _, startup := range []time.Duration{0, 10 * time.Minute} {
		setup := spotSetup(t, 0)
		setup.SpotInterruptions, setup.CheckpointEvery, setup.CloudStartup = 1, 30*time.Minute, startup
		jobs := []Job{{ID: "long", Duration: 10 * time.Hour, GPUs: 8}}
		res, err := Simulate(context.Background(), setup, jobs)
		if err != nil {
			t.Fatal(err)
		}
		o, n := res.Jobs[0], len(res.Interruptions)
		if n == 0 || o.Stuck || !o.Cloud || len(res.Violations) > 0 {
			t.Fatalf("start-up %s: %d interruptions, outcome %+v, violations %v; want some, and the job done in the cloud", startup, n, o, res.Violations)
		}
		var lost time.Duration
		for _, it := range res.Interruptions {
			if it.Job != "long" || it.Lost < 0 || it.Lost >= 30*time.Minute || it.GPUs != 8 {
				t.Errorf("interruption %+v; want job long, 8 GPUs, under 30m lost", it)
			}
			lost += it.Lost
		}
		if res.Decisions != 1+n {
			t.Errorf("%d routing decisions; want %d (the submit, and one per interruption)", res.Decisions, 1+n)
		}
		// Relaunched at once after each interruption, it held an instance
		// from its submit to its end, at $32 an instance-hour: the run, the
		// work lost, and the start-ups (the last whole; one cut short by an
		// interruption only up to it).
		paid := o.End.Hours() * 32
		if math.Abs(res.CloudCostUSD-paid) > 1e-6 || math.Abs(o.CostUSD-paid) > 1e-6 {
			t.Errorf("start-up %s: cloud cost $%.4f (job $%.4f); want $%.4f", startup, res.CloudCostUSD, o.CostUSD, paid)
		}
		if startup == 0 && o.End != 10*time.Hour+lost {
			t.Errorf("ended at %s; want its run and its lost work, %s", o.End, 10*time.Hour+lost)
		}
		if want := 10 * time.Hour; math.Abs(res.CloudGPUHours-want.Hours()*8) > 1e-6 {
			t.Errorf("cloud GPU-hours %v; want the job's own 80 (lost work is apart)", res.CloudGPUHours)
		}
		s := Summarize(res, jobs, 0, "learned")
		if s.Interruptions != n || math.Abs(s.LostGPUHours-lost.Hours()*8) > 1e-9 || math.Abs(s.LostCostUSD-lost.Hours()*32) > 1e-6 {
			t.Errorf("summary: %d interruptions, %.3f GPU-h lost, $%.2f; want %d, %.3f", s.Interruptions, s.LostGPUHours, s.LostCostUSD, n, lost.Hours()*8)
		}
		if o.End < 10*time.Hour+lost+startup || o.Wait != startup {
			t.Errorf("ended at %s, waited %s: want at least its run, its lost work and a start-up, and a wait of one start-up", o.End, o.Wait)
		}
	}
}

// TestSpotInterruptionsDeterministic: the draws come from the seed; with
// no checkpoint interval the trainer checkpoints on the notice and no
// work is lost; and a backend that does not buy spot is never interrupted.
func TestSpotInterruptionsDeterministic(t *testing.T) {
	jobs, _ := simTrace(t)
	jobs = WithEstimates(jobs[:800], Estimator{Kind: "learned"}, 1)
	run := func(mod func(*Setup)) Result {
		setup := spotSetup(t, 32)
		setup.MaxWait = 2 * time.Hour
		setup.SpotInterruptions, setup.CheckpointEvery = 0.2, time.Hour
		mod(&setup)
		res, err := Simulate(context.Background(), setup, jobs)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Violations) > 0 {
			t.Fatalf("residency violations: %v", res.Violations[:min(3, len(res.Violations))])
		}
		return res
	}
	a, b := run(func(*Setup) {}), run(func(*Setup) {})
	if len(a.Interruptions) == 0 || !slices.Equal(a.Interruptions, b.Interruptions) || a.CloudCostUSD != b.CloudCostUSD {
		t.Fatalf("the same seed: %d and %d interruptions, $%.2f and $%.2f; want the same, and some", len(a.Interruptions), len(b.Interruptions), a.CloudCostUSD, b.CloudCostUSD)
	}
	if c := run(func(s *Setup) { s.Seed = 2 }); slices.Equal(a.Interruptions, c.Interruptions) {
		t.Error("another seed drew the same interruptions")
	}
	onNotice := run(func(s *Setup) { s.CheckpointEvery = 0 })
	if _, lost, _ := interruptionTotals(onNotice.Interruptions); len(onNotice.Interruptions) == 0 || lost != 0 {
		t.Errorf("checkpoint on the notice: %d interruptions, %.2f GPU-hours lost; want some and 0", len(onNotice.Interruptions), lost)
	}
	none := run(func(s *Setup) { s.SpotInterruptions = 0 })
	if len(none.Interruptions) != 0 {
		t.Errorf("rate 0: %d interruptions", len(none.Interruptions))
	}
	_, plain := simTrace(t)
	plain.Owned, plain.MaxWait = 32, 2*time.Hour
	want, err := Simulate(context.Background(), plain, jobs)
	if err != nil {
		t.Fatal(err)
	}
	// Spot at the on-demand price and no interruption: the same run.
	if none.CloudCostUSD != want.CloudCostUSD || !slices.Equal(none.Jobs, want.Jobs) {
		t.Errorf("no interruptions: $%.2f; on demand $%.2f: want the same run", none.CloudCostUSD, want.CloudCostUSD)
	}
}

// TestSpotInterruptionsResidency: interrupted jobs are routed again and
// restarted only where their tags allow: the simulator checks every start
// (checkResidency), the retries' included; [us] jobs only ever ran on
// aws-us, and [onprem] jobs were never interrupted (they never rent).
func TestSpotInterruptionsResidency(t *testing.T) {
	tj, _ := simTraceRaw(t)
	mix, err := ParseMix("--residency-mix", "onprem=0.5,eu=0.3,us=0.2", ValidResidency)
	if err != nil {
		t.Fatal(err)
	}
	jobs, _ := JobsFromTrace(tj[:1000], Draws{Seed: 3, Residency: mix})
	jobs = WithEstimates(jobs, Estimator{Kind: "learned"}, 1)
	setup := spotSetup(t, 64)
	setup.SpotInterruptions, setup.CheckpointEvery, setup.CloudStartup = 0.3, 30*time.Minute, 5*time.Minute
	res, err := Simulate(context.Background(), setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) > 0 {
		t.Fatalf("%d residency violations: %v", len(res.Violations), res.Violations[:min(3, len(res.Violations))])
	}
	tags := map[string][]string{}
	for _, j := range jobs {
		tags[j.ID] = j.Residency
	}
	retried := map[string]bool{}
	for _, it := range res.Interruptions {
		retried[it.Job] = true
		switch tg := strings.Join(tags[it.Job], "+"); {
		case tg == "onprem":
			t.Errorf("[onprem] job %s interrupted on %s", it.Job, it.Backend)
		case tg == "us" && it.Backend != "aws-us":
			t.Errorf("[us] job %s interrupted on %s", it.Job, it.Backend)
		}
	}
	if len(retried) < 5 {
		t.Fatalf("%d jobs interrupted; want a few to check", len(retried))
	}
	for i, o := range res.Jobs {
		if !retried[o.ID] {
			continue
		}
		if o.Stuck || o.Refused {
			t.Errorf("interrupted job %s never ended: %+v", o.ID, o)
		}
		if strings.Join(jobs[i].Residency, "+") == "us" && o.Backend != "aws-us" {
			t.Errorf("[us] job %s ended on %s", o.ID, o.Backend)
		}
	}
}

// TestSimulateStartupInPolicy: --cloud-startup is the cloud backends'
// startup in the policy as in the clock. Job b's local wait (2h59m, past
// max_wait 1h) is shorter than a 4h start-up: it stays local; with a 30m
// start-up it bursts, starts 30m after its submit and pays for them; with
// none it bursts at once.
func TestSimulateStartupInPolicy(t *testing.T) {
	jobs := []Job{
		{ID: "a", Duration: 3 * time.Hour, GPUs: 8, Hint: 3 * time.Hour},
		{ID: "b", Submit: time.Minute, Duration: time.Hour, GPUs: 8, Hint: time.Hour},
	}
	for _, c := range []struct {
		startup time.Duration
		cloud   bool
		wait    time.Duration
		usd     float64
	}{
		{0, true, 0, 32},
		{30 * time.Minute, true, 30 * time.Minute, 32 * 1.5},
		{4 * time.Hour, false, 3*time.Hour - time.Minute, 0},
	} {
		_, setup := simTrace(t)
		setup.Owned, setup.MaxWait, setup.CloudStartup = 8, time.Hour, c.startup
		res, err := Simulate(context.Background(), setup, jobs)
		if err != nil {
			t.Fatal(err)
		}
		b := res.Jobs[1]
		if b.Cloud != c.cloud || b.Wait != c.wait || math.Abs(b.CostUSD-c.usd) > 1e-9 {
			t.Errorf("start-up %s: b cloud %v wait %s cost $%.2f; want cloud %v wait %s cost $%.2f", c.startup, b.Cloud, b.Wait, b.CostUSD, c.cloud, c.wait, c.usd)
		}
	}
}

// TestSpotBadInput: errors name the setting and its value.
func TestSpotBadInput(t *testing.T) {
	jobs := []Job{{ID: "x", Duration: time.Hour, GPUs: 1}}
	_, plain := simTrace(t)
	for _, c := range []struct {
		name string
		mod  func(*Setup)
		want string
	}{
		{"negative rate", func(s *Setup) { *s = spotSetup(t, 8); s.SpotInterruptions = -1 }, "spot interruptions -1 per instance-hour: want 0 to 10"},
		{"no progress kept", func(s *Setup) {
			*s = spotSetup(t, 8)
			s.SpotInterruptions, s.CloudStartup, s.CheckpointEvery = 4, time.Hour, 30*time.Minute
		}, "spot interruptions 4 per instance-hour: over backend aws-eu's start-up 1h0m0s and a checkpoint interval of 30m0s, 6 interruptions are expected"},
		{"NaN rate", func(s *Setup) { *s = spotSetup(t, 8); s.SpotInterruptions = math.NaN() }, "spot interruptions NaN"},
		{"no spot backend", func(s *Setup) { *s = plain; s.SpotInterruptions = 0.05 }, "no cloud backend of the config buys spot"},
		{"negative checkpoint interval", func(s *Setup) { *s = spotSetup(t, 8); s.CheckpointEvery = -time.Minute }, "checkpoint interval -1m0s"},
		{"negative start-up", func(s *Setup) { *s = spotSetup(t, 8); s.CloudStartup = -time.Minute }, "startup"},
	} {
		var s Setup
		c.mod(&s)
		if _, err := Simulate(context.Background(), s, jobs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}
