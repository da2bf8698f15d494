package routing

import (
	"math"
	"strings"
	"testing"
	"time"
)

// withStartup is issueConfig with aws-eu (and aws-us) starting a job only
// after the given start-up.
func withStartup(eu, us string) string {
	c := strings.Replace(issueConfig, "    spot: false\n", "    spot: false\n    startup: "+eu+"\n", 1)
	return strings.Replace(c, "    checkpoint_uri: s3://lathe-us-ckpt/runs\n", "    checkpoint_uri: s3://lathe-us-ckpt/runs\n    startup: "+us+"\n", 1)
}

// pressure sets the local pool's wait for a normal 1-GPU job on 16 GPUs:
// gpuHours ahead of it.
func pressure(gpuHours float64) func(s *Snapshot) {
	return func(s *Snapshot) {
		p := s.Pools["local"]
		p.GPUHoursAhead = [3]float64{0, gpuHours, 0}
		s.Pools["local"] = p
	}
}

// TestStartupCountsAsCloudWait: a cloud backend's startup is its wait.
// A job whose local wait is past max_wait but shorter than the start-up
// stays local (it starts sooner there); one whose local wait is longer
// than the start-up bursts; and the start-up is the candidate's EstWaitS.
func TestStartupCountsAsCloudWait(t *testing.T) {
	usJob := baseJob("us")
	usJob.Dataset, usJob.Output = "s3://lathe-us-data/support/train.jsonl", "s3://lathe-us-data/models/"
	runCases(t, []decideCase{{
		name:    "local wait 1h30m past max_wait 1h but shorter than aws-eu's 2h start-up: stays local",
		cfg:     withStartup("2h", "0s"),
		job:     baseJob("eu"),
		snap:    pressure(24), // 24 GPU-hours on 16 GPUs: 1h30m
		backend: "local",
		waiting: true,
		cands:   map[string]string{"local": "", "aws-eu": "", "aws-us": ReasonComputeSite},
		reasons: []string{"waiting: local wait 1h30m0s on local exceeds max_wait 1h0m0s, but it starts there sooner (1h30m0s more) than on any feasible cloud backend (the cheapest, aws-eu, takes 2h0m0s to start: its startup and staging)"},
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "aws-eu"); c.EstWaitS != 7200 {
				t.Errorf("aws-eu EstWaitS %v, want 7200 (its startup)", c.EstWaitS)
			}
		},
	}, {
		name:    "local wait 3h past max_wait and longer than aws-eu's 10m start-up: bursts",
		cfg:     withStartup("10m", "0s"),
		job:     baseJob("eu"),
		snap:    pressure(48),
		backend: "aws-eu",
		cands:   map[string]string{"local": "", "aws-eu": "", "aws-us": ReasonComputeSite},
		reasons: []string{
			"burst: local wait 3h0m0s on local exceeds max_wait 1h0m0s; the cheapest feasible cloud backend that starts the job sooner (10m0s start-up and staging, against 3h0m0s more local wait) is aws-eu",
			"cloud wait 10m0s: startup 10m0s (backend aws-eu's instance launch to trainer start); staging is not timed: backend aws-eu gives no staging_mbps",
		},
	}, {
		name:    "no startup: the cloud wait counts as 0, as before",
		cfg:     withStartup("0s", "0s"),
		job:     baseJob("eu"),
		snap:    pressure(48),
		backend: "aws-eu",
		reasons: []string{"burst: local wait 3h0m0s on local exceeds max_wait 1h0m0s; the cheapest feasible cloud backend is aws-eu", "cloud wait 0s: startup 0 (backend aws-eu gives no startup"},
	}, {
		name: "a job that may only go to the cloud goes there whatever its start-up",
		cfg:  strings.Replace(withStartup("0s", "5h"), "redis_site: dc-frankfurt", "redis_site: aws-us-east-1", 1),
		job:  usJob,
		snap: pressure(48),
		// no local backend is feasible: nothing to wait for
		backend: "aws-us",
		reasons: []string{"cloud: no local backend is feasible; the cheapest feasible cloud backend is aws-us", "cloud wait 5h0m0s"},
	}})
}

// TestStartupSpillOver: a job re-decided after it waited max_wait
// compares the local wait still ahead of it (not the time it waited) with
// the start-up: 20 minutes more locally beats a 30-minute start-up.
func TestStartupSpillOver(t *testing.T) {
	s := baseSnapshot(t, withStartup("30m", "0s"))
	pressure(16.0 / 3)(&s) // 20 min on 16 GPUs
	j := baseJob("eu")
	j.Waited = time.Hour
	d := Decide(j, s)
	if d.Backend != "local" || !d.Waiting {
		t.Fatalf("backend %s waiting %v, want local (20m more beats a 30m start-up); reasons %q", d.Backend, d.Waiting, d.Reasons)
	}
	pressure(16)(&s) // 1h more
	if d = Decide(j, s); d.Backend != "aws-eu" {
		t.Fatalf("backend %s, want aws-eu (1h more locally, 30m start-up); reasons %q", d.Backend, d.Reasons)
	}
}

// TestStartupInValueOfTime: with value_per_hour_usd the start-up is the
// cloud side's waiting time in the trade.
func TestStartupInValueOfTime(t *testing.T) {
	s := baseSnapshot(t, withStartup("3h", "0s"))
	pressure(32)(&s) // local: 2h
	j := baseJob("eu")
	j.ValuePerHourUSD = 100
	d := Decide(j, s)
	// local: 2 GPU-h × $1.10 + 2h × $100 = $202.20; aws-eu: $3.72 + 3h × $100 = $303.72
	if d.Backend != "local" || !strings.Contains(d.Trade, "best cloud aws-eu: $3.72 + 3.00 h wait × $100.00/h = $303.72") {
		t.Fatalf("backend %s, trade %q; want local, the cloud side waiting its 3h start-up", d.Backend, d.Trade)
	}
	s = baseSnapshot(t, withStartup("0s", "0s"))
	pressure(32)(&s)
	if d = Decide(j, s); d.Backend != "aws-eu" || math.Abs(d.EstCostUSD-3.72) > 1e-9 {
		t.Fatalf("with no start-up: backend %s, want aws-eu; trade %q", d.Backend, d.Trade)
	}
}
