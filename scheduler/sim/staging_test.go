package sim

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// TestSimulateStagingInPolicy: a cloud job whose dataset lies outside the
// backend's site starts (and is billed) its size ÷ staging_mbps after its
// dispatch, on top of the start-up, and the policy counts the same figure
// in the backend's wait: with 8 owned GPUs held by a for 3 h and a
// max_wait of 1 h, b bursts to aws-eu when staging is shorter than the
// 2h59m local wait ahead of it, and stays on the owned GPUs when it is
// longer. Default residency [eu]: the dataset is on file:// in site dc,
// aws-eu is in aws-eu-central-1.
func TestSimulateStagingInPolicy(t *testing.T) {
	for _, c := range []struct {
		name          string
		setupGB, bGB  float64 // Setup.DatasetBytes, b's own Job.DatasetBytes
		mbps          float64
		startup       time.Duration
		cloud         bool
		wait, estWait time.Duration // b's wait; aws-eu's wait in b's route
		usd           float64
	}{
		{name: "no dataset: bursts at once", mbps: 100, cloud: true, usd: 32},
		{name: "90 GB at 100 MB/s: starts 15 min after its dispatch, billed from launch", setupGB: 90, mbps: 100,
			cloud: true, wait: 15 * time.Minute, estWait: 15 * time.Minute, usd: 32 * 1.25},
		{name: "b's own size: 90 GB, every other job none", bGB: 90, mbps: 100,
			cloud: true, wait: 15 * time.Minute, estWait: 15 * time.Minute, usd: 32 * 1.25},
		{name: "start-up and staging add up: 30 min + 15 min", setupGB: 90, mbps: 100, startup: 30 * time.Minute,
			cloud: true, wait: 45 * time.Minute, estWait: 45 * time.Minute, usd: 32 * 1.75},
		{name: "1.2 TB at 100 MB/s (3h20m) is longer than the owned wait: stays", setupGB: 1200, mbps: 100,
			cloud: false, wait: 3*time.Hour - time.Minute, usd: 0},
		{name: "no staging rate: not timed, bursts at once", setupGB: 1200, cloud: true, usd: 32},
	} {
		t.Run(c.name, func(t *testing.T) {
			jobs := []Job{
				{ID: "a", Duration: 3 * time.Hour, GPUs: 8, Hint: 3 * time.Hour},
				{ID: "b", Submit: time.Minute, Duration: time.Hour, GPUs: 8, Hint: time.Hour, DatasetBytes: int64(c.bGB * 1e9)},
			}
			_, setup := simTrace(t)
			setup.Owned, setup.MaxWait, setup.CloudStartup = 8, time.Hour, c.startup
			setup.DatasetBytes, setup.StagingMBps = int64(c.setupGB*1e9), c.mbps
			sm, err := newSim(setup, jobs)
			if err != nil {
				t.Fatal(err)
			}
			if err := sm.run(context.Background()); err != nil {
				t.Fatal(err)
			}
			res := sm.result()
			b := res.Jobs[1]
			if b.Cloud != c.cloud || b.Wait != c.wait || math.Abs(b.CostUSD-c.usd) > 1e-9 {
				t.Errorf("b cloud %v wait %s cost $%.2f; want cloud %v wait %s cost $%.2f", b.Cloud, b.Wait, b.CostUSD, c.cloud, c.wait, c.usd)
			}
			if len(res.Violations) != 0 {
				t.Errorf("violations: %v", res.Violations)
			}
			if !c.cloud {
				return
			}
			// The policy's own figure: the route b burst under.
			ri := sm.jobs[1].job.Route
			if ri == nil || ri.Backend != "aws-eu" || time.Duration(ri.EstWaitS*float64(time.Second)) != c.estWait {
				t.Errorf("b's route %+v: want aws-eu with an estimated wait of %s", ri, c.estWait)
			}
			if a := res.Jobs[0]; a.Cloud || a.Wait != 0 {
				t.Errorf("a: %+v; want it on the owned GPUs at once", a)
			}
		})
	}
}

// TestStagingBadInput: a negative size or rate is refused with its value.
func TestStagingBadInput(t *testing.T) {
	_, setup := simTrace(t)
	setup.Owned = 8
	for _, c := range []struct {
		name string
		mod  func(s *Setup, j *Job)
		want string
	}{
		{"negative size", func(s *Setup, _ *Job) { s.DatasetBytes = -1 }, "dataset size -1 bytes"},
		{"negative rate", func(s *Setup, _ *Job) { s.StagingMBps = -5 }, `backends.aws-eu.staging_mbps: must be a number of megabytes per second above 0 and at most 1000000: how fast a dataset reaches the backend's site from another site (got "-5")`},
		{"NaN rate", func(s *Setup, _ *Job) { s.StagingMBps = math.NaN() }, `staging_mbps: must be a number of megabytes per second above 0 and at most 1000000: how fast a dataset reaches the backend's site from another site (got "NaN")`},
		{"a job's negative size", func(_ *Setup, j *Job) { j.DatasetBytes = -3 }, "job x: negative submit, duration, gpus or dataset size"},
	} {
		s, j := setup, Job{ID: "x", Duration: time.Hour, GPUs: 1}
		c.mod(&s, &j)
		if _, err := Simulate(context.Background(), s, []Job{j}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.name, err, c.want)
		}
	}
}
