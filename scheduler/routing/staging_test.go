package routing

import (
	"strings"
	"testing"
)

// withStaging is issueConfig with aws-eu starting a job after startup and
// moving data into its site at mbps megabytes per second.
func withStaging(startup, mbps string) string {
	return strings.Replace(withStartup(startup, "0s"), "    startup: "+startup+"\n",
		"    startup: "+startup+"\n    staging_mbps: "+mbps+"\n", 1)
}

// sized is baseJob("eu") with its dataset's size known (gb gigabytes),
// and an eval dataset of evalGB when evalGB > 0.
func sized(gb, evalGB float64) Job {
	j := baseJob("eu")
	j.DatasetSize = KnownSize(int64(gb * 1e9))
	if evalGB > 0 {
		j.EvalDataset = "file:///data/support/eval.jsonl"
		j.EvalDatasetSize = KnownSize(int64(evalGB * 1e9))
	}
	return j
}

// TestStagingCountsAsCloudWait: a cloud backend's wait is its startup plus
// the time the job's staged datasets take at its staging_mbps, the
// candidate's EstWaitS shows it, the reason spells it out, and the sum
// decides between bursting and waiting.
func TestStagingCountsAsCloudWait(t *testing.T) {
	runCases(t, []decideCase{{
		name:    "50 GB at 100 MB/s after a 10m start-up: a cloud wait of 18m20s",
		cfg:     withStaging("10m", "100"),
		job:     sized(50, 0),
		snap:    pressure(48), // 3h local
		backend: "aws-eu",
		reasons: []string{
			"the cheapest feasible cloud backend that starts the job sooner (18m20s start-up and staging, against 3h0m0s more local wait) is aws-eu",
			"cloud wait 18m20s: startup 10m0s (backend aws-eu's instance launch to trainer start) + staging 50.0 GB at 100 MB/s (8m20s)",
		},
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "aws-eu"); c.EstWaitS != 600+500 {
				t.Errorf("aws-eu EstWaitS %v, want 1100 (600 s start-up + 50 GB / 100 MB/s)", c.EstWaitS)
			}
		},
	}, {
		name:    "the eval dataset is staged too: 40 + 10 GB",
		cfg:     withStaging("10m", "100"),
		job:     sized(40, 10),
		snap:    pressure(48),
		backend: "aws-eu",
		reasons: []string{"cloud wait 18m20s: startup 10m0s (backend aws-eu's instance launch to trainer start) + staging 50.0 GB at 100 MB/s (8m20s)"},
	}, {
		name: "staging tips the balance: 500 GB (1h23m20s) + 10m start-up is past a 1h30m local wait, so the job stays local",
		cfg:  withStaging("10m", "100"),
		job:  sized(500, 0),
		snap: pressure(24), // 1h30m local
		// the same job with an unknown size would burst (next case)
		backend: "local",
		waiting: true,
		reasons: []string{"but it starts there sooner (1h30m0s more) than on any feasible cloud backend (the cheapest, aws-eu, takes 1h33m20s to start: its startup and staging)"},
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "aws-eu"); c.EstWaitS != 600+5000 {
				t.Errorf("aws-eu EstWaitS %v, want 5600", c.EstWaitS)
			}
		},
	}, {
		name:    "unknown size: counted 0 and said so, the job bursts on the start-up alone",
		cfg:     withStaging("10m", "100"),
		job:     baseJob("eu"),
		snap:    pressure(24),
		backend: "aws-eu",
		reasons: []string{"cloud wait 10m0s: startup 10m0s (backend aws-eu's instance launch to trainer start) + staging 0.0 MB at 100 MB/s (0s); " +
			"the size of dataset file:///data/support/train.jsonl is unknown (a file:// dataset's size is learned at admission, and none was learned for this one), so its staging counts 0"},
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "aws-eu"); c.EstWaitS != 600 {
				t.Errorf("aws-eu EstWaitS %v, want 600", c.EstWaitS)
			}
		},
	}, {
		name: "an s3:// dataset in another site: unknown size, and the reason says s3:// is not read",
		cfg:  strings.Replace(withStaging("10m", "100"), "buckets: {", "buckets: {lathe-dc-data: dc-frankfurt, ", 1),
		job: func() Job {
			j := sized(50, 0)
			j.Dataset = "s3://lathe-dc-data/train.jsonl"
			j.DatasetSize = DataSize{}
			return j
		}(),
		snap:    pressure(48),
		backend: "aws-eu",
		reasons: []string{"the size of dataset s3://lathe-dc-data/train.jsonl is unknown (an s3:// dataset is not read at admission), so its staging counts 0"},
	}, {
		name: "a dataset already in the backend's site is not staged: no staging time, whatever its size",
		cfg:  withStaging("10m", "100"),
		job: func() Job {
			j := sized(500, 0)
			j.Dataset = "s3://lathe-eu-data/train.jsonl"
			return j
		}(),
		snap:    pressure(48),
		backend: "aws-eu",
		reasons: []string{"cloud wait 10m0s: startup 10m0s (backend aws-eu's instance launch to trainer start) + no staging (no dataset lies outside site aws-eu-central-1)"},
	}, {
		name:    "no staging_mbps: staging is not timed, and the reason says so",
		cfg:     withStartup("10m", "0s"),
		job:     sized(500, 0),
		snap:    pressure(24),
		backend: "aws-eu",
		reasons: []string{"cloud wait 10m0s: startup 10m0s (backend aws-eu's instance launch to trainer start); staging 500.0 GB is not timed: backend aws-eu gives no staging_mbps"},
	}})
}

// TestStagingInValueOfTime: with value_per_hour_usd the staging time is
// part of the cloud side's waiting time in the trade.
func TestStagingInValueOfTime(t *testing.T) {
	s := baseSnapshot(t, withStaging("0s", "10"))
	pressure(8)(&s)   // 30m local
	j := sized(36, 0) // 36 GB at 10 MB/s: 1h
	j.ValuePerHourUSD = 100
	d := Decide(j, s)
	if !strings.Contains(d.Trade, "best cloud aws-eu: $3.72 + 1.00 h wait × $100.00/h") {
		t.Errorf("trade %q: want aws-eu's 1 h of staging as its wait", d.Trade)
	}
	if d.Backend != "local" {
		t.Errorf("backend %s, want local (30 min wait beats an hour of staging at $100/h)", d.Backend)
	}
}
