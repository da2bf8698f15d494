package routing

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/cost"

	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// baseJob is a 1-GPU, 2-hour job of team ml-research with file:// data.
func baseJob(residency ...string) Job {
	return Job{
		ID: "j1", Team: "ml-research", Residency: residency,
		Dataset: "file:///data/support/train.jsonl", Output: "file:///models/support-bot",
		GPUs: 1, Priority: 1, MaxWait: time.Hour, ExpectedRuntime: 2 * time.Hour,
		BaseModel: "tiny-char", MaxRuntime: 8 * time.Hour,
	}
}

// decideCase is one row of the table tests.
type decideCase struct {
	name    string
	cfg     string // "" = issueConfig
	job     Job
	snap    func(s *Snapshot)
	backend string // "" = refused
	waiting bool
	// cands maps a backend to the prefix of its Reason ("" = feasible).
	cands   map[string]string
	reasons []string // substrings some reason must contain
	check   func(t *testing.T, d Decision)
}

func runCases(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg == "" {
				cfg = issueConfig
			}
			s := baseSnapshot(t, cfg)
			if tc.snap != nil {
				tc.snap(&s)
			}
			d := Decide(tc.job, s)
			defer func() {
				if t.Failed() {
					t.Logf("decision: %+v", d)
					for _, r := range d.Reasons {
						t.Logf("  reason: %s", r)
					}
				}
			}()
			if d.Backend != tc.backend || d.Refused != (tc.backend == "") || d.Waiting != tc.waiting {
				t.Errorf("backend %q refused %v waiting %v; want %q refused %v waiting %v",
					d.Backend, d.Refused, d.Waiting, tc.backend, tc.backend == "", tc.waiting)
			}
			for name, prefix := range tc.cands {
				c := candidate(t, d, name)
				switch {
				case prefix == "" && !c.Feasible:
					t.Errorf("%s infeasible (%s); want feasible", name, c.Reason)
				case prefix != "" && (c.Feasible || !strings.HasPrefix(c.Reason, prefix+": ")):
					t.Errorf("%s: reason %q; want prefix %q", name, c.Reason, prefix)
				}
			}
			for _, want := range tc.reasons {
				if !hasReason(d, want) {
					t.Errorf("no reason contains %q", want)
				}
			}
			if len(d.Candidates) != len(s.Config.Backends) {
				t.Errorf("%d candidates for %d backends", len(d.Candidates), len(s.Config.Backends))
			}
			if tc.check != nil {
				tc.check(t, d)
			}
		})
	}
}

// TestIssueScenarios are the scenarios the issue names.
func TestIssueScenarios(t *testing.T) {
	usJob := baseJob("us")
	usJob.Dataset, usJob.Output = "s3://lathe-us-data/support/train.jsonl", "s3://lathe-us-data/models/"
	usFileOut := usJob
	usFileOut.Output = "file:///models/support-bot"
	euUSData := baseJob("eu")
	euUSData.Dataset = "s3://lathe-us-data/support/train.jsonl"
	emptyResidency := baseJob()
	emptyResidency.Residency = []string{}

	runCases(t, []decideCase{{
		name:    "onprem job stays local with an assumed 10h wait",
		job:     baseJob("onprem"),
		snap:    func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(10 * time.Hour); s.Pools["local"] = p },
		backend: "local", waiting: true,
		cands:   map[string]string{"local": "", "aws-eu": ReasonComputeSite, "aws-us": ReasonComputeSite},
		reasons: []string{"waiting: local wait 10h0m0s on local exceeds max_wait 1h0m0s", "aws-eu: " + ReasonComputeSite + ": site aws-eu-central-1 [cloud eu] lacks onprem"},
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "local"); c.EstWaitS != 36000 {
				t.Errorf("local wait %v s, want 36000", c.EstWaitS)
			}
		},
	}, {
		name: "eu job bursts to aws-eu when the local wait (3h) exceeds max_wait (1h)",
		job:  baseJob("eu"),
		snap: func(s *Snapshot) {
			// 8 urgent + 40 normal GPU-hours ahead of a normal job on 16 GPUs: 3h.
			p := s.Pools["local"]
			p.GPUHoursAhead = [3]float64{8, 40, 1000}
			s.Pools["local"] = p
		},
		backend: "aws-eu",
		cands:   map[string]string{"local": "", "aws-eu": "", "aws-us": ReasonComputeSite},
		reasons: []string{"burst: local wait 3h0m0s on local exceeds max_wait 1h0m0s", "cloud wait 0s: startup 0 (backend aws-eu gives no startup", "runtime 2h0m0s: the job's expected_runtime"},
		check: func(t *testing.T, d Decision) {
			c := candidate(t, d, "aws-eu")
			if c.InstanceType != "g6e.xlarge" || math.Abs(c.EstCostUSD-3.72) > 1e-9 || d.EstCostUSD != c.EstCostUSD {
				t.Errorf("aws-eu: %+v; want g6e.xlarge at $3.72", c)
			}
			want := []Staging{
				{What: "dataset", URI: "file:///data/support/train.jsonl", FromSite: "dc-frankfurt", ToSite: "aws-eu-central-1"},
				{What: "output", URI: "file:///models/support-bot", FromSite: "aws-eu-central-1", ToSite: "dc-frankfurt"},
				{What: "raw logs", URI: "redis", FromSite: "aws-eu-central-1", ToSite: "dc-frankfurt"},
			}
			if !reflect.DeepEqual(d.Staging, want) {
				t.Errorf("staging %+v\nwant %+v", d.Staging, want)
			}
			if w := candidate(t, d, "local").EstWaitS; w != 3*3600 {
				t.Errorf("local wait %v s, want 10800", w)
			}
		},
	}, {
		name:    "us job with us data and us output goes to aws-us (Redis in aws-us-east-1)",
		cfg:     withRedisIn("aws-us-east-1"),
		job:     usJob,
		backend: "aws-us",
		cands:   map[string]string{"local": ReasonComputeSite, "aws-eu": ReasonComputeSite, "aws-us": ""},
		reasons: []string{"cloud: no local backend is feasible; the cheapest feasible cloud backend is aws-us"},
		check: func(t *testing.T, d Decision) {
			if len(d.Staging) != 0 {
				t.Errorf("staging %+v; want none (everything in aws-us-east-1)", d.Staging)
			}
		},
	}, {
		name:    "the same us job goes to aws-us with Redis in dc-frankfurt: its raw logs stay in aws-us-east-1 (DESIGN.md)",
		job:     usJob,
		backend: "aws-us",
		cands:   map[string]string{"local": ReasonComputeSite, "aws-eu": ReasonComputeSite, "aws-us": ""},
		reasons: []string{"raw logs stay in site aws-us-east-1 (redis_site dc-frankfurt lacks a tag; only control-plane metadata crosses): the agent keeps them in the backend's bucket"},
	}, {
		name:    "an untagged job is treated as [onprem]",
		job:     baseJob(),
		backend: "local",
		cands:   map[string]string{"local": "", "aws-eu": ReasonComputeSite, "aws-us": ReasonComputeSite},
		reasons: []string{"residency [onprem]: the job gives none, so routing.default_residency applies (fail closed)"},
		check: func(t *testing.T, d Decision) {
			if !reflect.DeepEqual(d.Residency, []string{"onprem"}) {
				t.Errorf("residency %v", d.Residency)
			}
		},
	}, {
		name:    "a residency [] job is treated as [onprem]",
		job:     emptyResidency,
		snap:    func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(5 * time.Hour); s.Pools["local"] = p },
		backend: "local", waiting: true,
		cands:   map[string]string{"local": "", "aws-eu": ReasonComputeSite, "aws-us": ReasonComputeSite},
		reasons: []string{"residency [onprem]: the job gives none"},
	}, {
		name: "an eu job waits for local when aws-eu's budget is spent",
		job:  baseJob("eu"),
		snap: func(s *Snapshot) {
			p := s.Pools["local"]
			p.AssumeWait = dur(3 * time.Hour)
			s.Pools["local"] = p
			s.BackendSpend = map[string]Spend{"aws-eu": {SpentUSD: 4000, ReservedUSD: 1000}}
		},
		backend: "local", waiting: true,
		cands:   map[string]string{"local": "", "aws-eu": ReasonBackendBudget, "aws-us": ReasonComputeSite},
		reasons: []string{"no cloud backend can take the job", "aws-eu: " + ReasonBackendBudget + ": estimated $3.72 > $0.00 left of $5000.00 this month (spent $4000.00, reserved $1000.00)"},
	}, {
		name:    "an eu job whose dataset bucket is in aws-us-east-1 is refused",
		job:     euUSData,
		cands:   map[string]string{"local": ReasonDatasetSite, "aws-eu": ReasonDatasetSite, "aws-us": ReasonComputeSite},
		reasons: []string{"refused: no backend is feasible", "local, aws-eu: " + ReasonDatasetSite + ": dataset s3://lathe-us-data/support/train.jsonl is in site aws-us-east-1 [cloud us], which lacks eu"},
	}, {
		name:    "a us job whose output is file:// on the [onprem eu] site is refused",
		cfg:     withRedisIn("aws-us-east-1"),
		job:     usFileOut,
		cands:   map[string]string{"local": ReasonComputeSite, "aws-eu": ReasonComputeSite, "aws-us": ReasonOutputSite},
		reasons: []string{"aws-us: " + ReasonOutputSite + ": output file:///models/support-bot is in site dc-frankfurt [onprem eu], which lacks us"},
	}})
}

// TestResidencyRules covers rule 1 check by check.
func TestResidencyRules(t *testing.T) {
	evalUS := baseJob("eu")
	evalUS.EvalDataset = "s3://lathe-us-data/eval.jsonl"
	unknownBucket := baseJob("onprem")
	unknownBucket.Dataset = "s3://mystery-bucket/train.jsonl"
	unknownEval := baseJob("onprem")
	unknownEval.EvalDataset = "s3://mystery-bucket/eval.jsonl"
	badScheme := baseJob("onprem")
	badScheme.Dataset = "https://example.com/train.jsonl"
	defaultOutput := baseJob("us")
	defaultOutput.Dataset, defaultOutput.Output = "s3://lathe-us-data/train.jsonl", ""
	euS3 := baseJob("eu")
	euS3.Dataset = "s3://lathe-eu-data/train.jsonl"
	unknownTag := baseJob("eu", "mars")
	twoTags := baseJob("eu", "onprem")
	cloudEU := baseJob("cloud", "eu")
	cloudEU.Dataset, cloudEU.Output = "s3://lathe-eu-data/train.jsonl", "s3://lathe-eu-data/out/"

	ckptInUS := strings.Replace(issueConfig, "checkpoint_uri: s3://lathe-eu-ckpt/", "checkpoint_uri: s3://lathe-us-ckpt/eu-runs", 1)
	redisEverywhere := strings.Replace(issueConfig, "  aws-us-east-1: [cloud, us]\n", "  aws-us-east-1: [cloud, us]\n  control: [onprem, eu, us, cloud]\n", 1)
	redisEverywhere = strings.Replace(redisEverywhere, "redis_site: dc-frankfurt", "redis_site: control", 1)

	runCases(t, []decideCase{{
		name:    "eval dataset in another tag's site",
		job:     evalUS,
		cands:   map[string]string{"local": ReasonEvalDatasetSite, "aws-eu": ReasonEvalDatasetSite, "aws-us": ReasonComputeSite},
		reasons: []string{ReasonEvalDatasetSite + ": eval dataset s3://lathe-us-data/eval.jsonl is in site aws-us-east-1 [cloud us], which lacks eu"},
	}, {
		name:    "unlisted dataset bucket: refused everywhere, never guessed",
		job:     unknownBucket,
		cands:   map[string]string{"local": ReasonBucketUnknown, "aws-eu": ReasonBucketUnknown, "aws-us": ReasonBucketUnknown},
		reasons: []string{`local, aws-eu, aws-us: ` + ReasonBucketUnknown + `: dataset s3://mystery-bucket/train.jsonl names bucket "mystery-bucket"`},
	}, {
		name:  "unlisted eval bucket",
		job:   unknownEval,
		cands: map[string]string{"local": ReasonBucketUnknown, "aws-eu": ReasonBucketUnknown, "aws-us": ReasonBucketUnknown},
	}, {
		name:  "a scheme other than file:// and s3:// has no site",
		job:   badScheme,
		cands: map[string]string{"local": ReasonNoSite, "aws-eu": ReasonNoSite, "aws-us": ReasonNoSite},
	}, {
		name:    "an empty output is the default folder, file:// in datasets.file_site",
		cfg:     withRedisIn("aws-us-east-1"),
		job:     defaultOutput,
		cands:   map[string]string{"aws-us": ReasonOutputSite},
		reasons: []string{"output (the default output folder, file://) is in site dc-frankfurt"},
	}, {
		name:    "checkpoints in a bucket of another site",
		cfg:     ckptInUS,
		job:     cloudEU,
		cands:   map[string]string{"local": ReasonComputeSite, "aws-eu": ReasonCheckpointSite, "aws-us": ReasonComputeSite},
		reasons: []string{"aws-eu: " + ReasonCheckpointSite + ": checkpoints s3://lathe-us-ckpt/eu-runs go to site aws-us-east-1 [cloud us], which lacks eu"},
	}, {
		name:    "a tag no site carries: refused",
		job:     unknownTag,
		cands:   map[string]string{"local": ReasonComputeSite, "aws-eu": ReasonComputeSite, "aws-us": ReasonComputeSite},
		reasons: []string{"local: " + ReasonComputeSite + ": site dc-frankfurt [onprem eu] lacks mars"},
	}, {
		name:    "every tag must be carried: [eu onprem] never leaves dc-frankfurt",
		job:     twoTags,
		snap:    func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(10 * time.Hour); s.Pools["local"] = p },
		backend: "local", waiting: true,
		cands:   map[string]string{"aws-eu": ReasonComputeSite},
		reasons: []string{"site aws-eu-central-1 [cloud eu] lacks onprem"},
	}, {
		name:    "s3 data in its own site: no dataset staging",
		job:     euS3,
		snap:    func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(2 * time.Hour); s.Pools["local"] = p },
		backend: "aws-eu",
		check: func(t *testing.T, d Decision) {
			for _, st := range d.Staging {
				if st.What == "dataset" {
					t.Errorf("dataset staged: %+v", st)
				}
			}
		},
	}, {
		name:    "with Redis in a site carrying every tag, a us job reaches aws-us",
		cfg:     redisEverywhere,
		job:     baseJob("us"),
		backend: "", // its dataset and output are file:// in dc-frankfurt
		cands:   map[string]string{"aws-us": ReasonDatasetSite},
	}, {
		name:    "local dataset staged into the cloud site only because both carry the tags",
		job:     baseJob("eu"),
		snap:    func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(2 * time.Hour); s.Pools["local"] = p },
		backend: "aws-eu",
		reasons: []string{"staging: dataset file:///data/support/train.jsonl moves from site dc-frankfurt to site aws-eu-central-1; both carry [eu]"},
	}})
}

// TestGPUFit covers rule 2.
func TestGPUFit(t *testing.T) {
	job := func(gpus int, mem float64, models ...string) Job {
		j := baseJob("eu")
		j.GPUs, j.GPUMemoryGB, j.GPUModels = gpus, mem, models
		return j
	}
	burst := func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(5 * time.Hour); s.Pools["local"] = p }
	runCases(t, []decideCase{{
		name: "model matched as a case-insensitive substring", job: job(8, 0, "h100"), backend: "local",
		cands: map[string]string{"local": "", "aws-eu": ""},
	}, {
		name: "a model the pool lacks", job: job(1, 0, "A100"), backend: "",
		cands:   map[string]string{"local": ReasonNoGPUFit, "aws-eu": ReasonNoGPUFit},
		reasons: []string{"local: " + ReasonNoGPUFit + ": needs 1 × A100; the most such healthy GPUs on one node is 0", "aws-eu: " + ReasonNoGPUFit + ": needs 1 × A100; no instance type has such GPUs"},
	}, {
		name: "a job never spans nodes", job: job(9, 0), backend: "",
		cands:   map[string]string{"local": ReasonNoGPUFit, "aws-eu": ReasonNoGPUFit},
		reasons: []string{"needs 9 GPUs; the most such healthy GPUs on one node is 8", "needs 9 GPUs; the largest matching instance type has 8"},
	}, {
		name: "memory", job: job(1, 96), backend: "",
		cands: map[string]string{"local": ReasonNoGPUFit, "aws-eu": ReasonNoGPUFit},
	}, {
		name: "unhealthy GPUs do not count", job: job(8, 0),
		snap: func(s *Snapshot) {
			s.Pools["local"] = Pool{HealthyGPUs: 7, Nodes: []PoolNode{{Name: "a", GPUs: []PoolGPU{{Model: "H100", MemoryGB: 80, Healthy: 7}}}}}
		},
		backend: "aws-eu", cands: map[string]string{"local": ReasonNoGPUFit},
	}, {
		name: "a pool with no state fits only gpus: 0 jobs", job: job(1, 0),
		snap:  func(s *Snapshot) { delete(s.Pools, "local") },
		cands: map[string]string{"local": ReasonNoGPUFit}, backend: "aws-eu",
		reasons: []string{"cloud: no local backend is feasible"},
		check: func(t *testing.T, d Decision) {
			if r := candidate(t, d, "local").Reason; r != ReasonNoGPUFit+": needs 1 GPU; the pool has no GPUs (no state for it)" {
				t.Errorf("reason %q", r)
			}
		},
	}, {
		name: "gpus: 0 fits a pool with no state", job: job(0, 0),
		snap:    func(s *Snapshot) { delete(s.Pools, "local") },
		backend: "local",
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "local"); c.EstWaitS != 0 || c.EstCostUSD != 0 {
				t.Errorf("CPU job on local: %+v", c)
			}
		},
	}, {
		name: "cheapest instance type that fits: 1 GPU of any model", job: job(1, 0), snap: burst, backend: "aws-eu",
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "aws-eu"); c.InstanceType != "g6e.xlarge" {
				t.Errorf("type %s", c.InstanceType)
			}
		},
	}, {
		name: "a 1-GPU H100 job pays for the whole 8-GPU instance", job: job(1, 0, "H100"), snap: burst, backend: "aws-eu",
		reasons: []string{"cost $110.08: 2.00 h × $55.04/h (on demand) for a whole p5.48xlarge (8 × H100)"},
		check: func(t *testing.T, d Decision) {
			c := candidate(t, d, "aws-eu")
			if c.InstanceType != "p5.48xlarge" || math.Abs(c.EstCostUSD-110.08) > 1e-9 || math.Abs(d.EstGPUHours-2) > 1e-9 {
				t.Errorf("%+v, %v GPU-hours", c, d.EstGPUHours)
			}
		},
	}, {
		name: "memory picks the larger type", job: job(1, 60), snap: burst, backend: "aws-eu",
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "aws-eu"); c.InstanceType != "p5.48xlarge" {
				t.Errorf("type %s", c.InstanceType)
			}
		},
	}, {
		name: "gpus: 0 on a cloud backend takes the cheapest type", job: job(0, 0),
		snap:    func(s *Snapshot) { delete(s.Pools, "local") },
		backend: "local",
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "aws-eu"); c.InstanceType != "g6e.xlarge" {
				t.Errorf("type %s", c.InstanceType)
			}
		},
	}})
}

// TestBudgets covers rule 3.
func TestBudgets(t *testing.T) {
	h100 := baseJob("eu")
	h100.GPUModels = []string{"H100"}
	h100Budget := h100
	h100Budget.BudgetUSD = 50
	noRuntime := h100
	noRuntime.ExpectedRuntime, noRuntime.MaxRuntime = 0, 0
	noRuntime.MaxSteps = 100
	wait := func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(5 * time.Hour); s.Pools["local"] = p }

	runCases(t, []decideCase{{
		name: "job budget: aws-eu's whole instance costs too much; the job waits for local",
		job:  h100Budget, snap: wait, backend: "local", waiting: true,
		cands:   map[string]string{"local": "", "aws-eu": ReasonJobBudget},
		reasons: []string{"aws-eu: " + ReasonJobBudget + ": estimated $110.08 > budget_usd $50.00"},
	}, {
		name: "team budget applies to local too",
		job:  h100,
		snap: func(s *Snapshot) {
			wait(s)
			s.TeamSpend = map[string]Spend{"ml-research": {SpentUSD: 1999}}
		},
		backend: "",
		cands:   map[string]string{"local": ReasonTeamBudget, "aws-eu": ReasonTeamBudget},
		reasons: []string{`local: ` + ReasonTeamBudget + `: team "ml-research": estimated $2.20 > $1.00 left of $2000.00 this month (spent $1999.00, reserved $0.00)`},
	}, {
		name: "the snapshot's tighter limit wins",
		job:  h100,
		snap: func(s *Snapshot) {
			wait(s)
			s.BackendSpend = map[string]Spend{"aws-eu": {LimitUSD: 100}}
		},
		backend: "local", waiting: true,
		cands: map[string]string{"aws-eu": ReasonBackendBudget},
	}, {
		name: "a team without a budget is not limited",
		job:  func() Job { j := h100; j.Team = "other"; return j }(),
		snap: func(s *Snapshot) {
			wait(s)
			s.TeamSpend = map[string]Spend{"other": {SpentUSD: 1e9}}
		},
		backend: "aws-eu",
	}, {
		name: "an unpriced local backend has no cost, so no budget applies",
		cfg:  strings.Replace(issueConfig, "    price: {usd_per_gpu_hour: 1.10}\n", "", 1),
		job:  func() Job { j := baseJob("eu"); j.BudgetUSD = 0.01; return j }(),
		snap: func(s *Snapshot) {
			s.TeamSpend = map[string]Spend{"ml-research": {SpentUSD: 5000}}
		},
		backend: "local",
		reasons: []string{"cost $0.00: local backend local is unpriced"},
	}, {
		name: "an unknown runtime cannot be held to a budget",
		job:  noRuntime, snap: wait, backend: "",
		cands:   map[string]string{"local": ReasonTeamBudget, "aws-eu": ReasonTeamBudget},
		reasons: []string{"the runtime is unknown (no expected_runtime, learned rate or max_runtime)"},
	}})
}

// TestEstimates covers rule 4.
func TestEstimates(t *testing.T) {
	learned := baseJob("eu")
	learned.ExpectedRuntime, learned.MaxSteps = 0, 1000
	rates := map[string]float64{"tiny-char|nvidia h100 80gb hbm3": 3.6, "tiny-char|l40s": 7.2, "tiny-char|cpu": 50}
	maxOnly := learned
	epochs := learned
	epochs.MaxSteps = 0
	cpu := learned
	cpu.GPUs = 0
	urgent := baseJob("onprem")
	urgent.Priority = 0
	batch := baseJob("onprem")
	batch.Priority = 2
	ahead := func(s *Snapshot) {
		p := s.Pools["local"]
		p.GPUHoursAhead = [3]float64{16, 32, 64}
		s.Pools["local"] = p
	}
	tco := strings.Replace(issueConfig, "price: {usd_per_gpu_hour: 1.10}",
		"price: {tco: {purchase_usd_per_gpu: 30000, amortisation_months: 36, power_kw_per_gpu: 1.0, usd_per_kwh: 0.25, pue: 1.3, ops_overhead_pct: 20, utilisation: 0.7}}", 1)
	tcoPrice := cost.TCO{PurchaseUSDPerGPU: 30000, AmortisationMonths: 36, PowerKWPerGPU: 1, USDPerKWh: 0.25, PUE: 1.3, OpsOverheadPct: 20, Utilisation: 0.7}.USDPerGPUHour()
	spot := strings.Replace(issueConfig, "    spot: false\n", "    spot: true\n", 1)
	spot = strings.Replace(spot, "on_demand_usd_per_hour: 1.86}\n  aws-us", "on_demand_usd_per_hour: 1.86, spot_usd_per_hour: 0.9}\n  aws-us", 1)

	runCases(t, []decideCase{{
		name: "learned seconds per step of the backend's GPU model",
		job:  learned, snap: func(s *Snapshot) { s.SecondsPerStep = rates }, backend: "local",
		reasons: []string{"runtime 1h0m0s: max_steps 1000 × 3.6 s/step learned for tiny-char on NVIDIA H100 80GB HBM3"},
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "local"); c.EstRuntimeS != 3600 || math.Abs(c.EstCostUSD-1.1) > 1e-9 {
				t.Errorf("local %+v", c)
			}
			if c := candidate(t, d, "aws-eu"); c.EstRuntimeS != 7200 || c.InstanceType != "g6e.xlarge" {
				t.Errorf("aws-eu %+v", c)
			}
		},
	}, {
		name: "no learned rate: max_runtime, an upper bound",
		job:  maxOnly, backend: "local",
		reasons: []string{"runtime 8h0m0s: max_runtime, an upper bound (no expected_runtime, and no learned seconds per step for tiny-char on local)"},
	}, {
		name: "no max_steps: the step count is unknown, whatever was learned",
		job:  epochs, snap: func(s *Snapshot) { s.SecondsPerStep = rates }, backend: "local",
		reasons: []string{"runtime 8h0m0s: max_runtime, an upper bound (no expected_runtime, and no max_steps: the spec runs epochs"},
	}, {
		name: "a job with no GPUs learns from \"cpu\"",
		job:  cpu, snap: func(s *Snapshot) { s.SecondsPerStep = rates }, backend: "local",
		reasons: []string{"max_steps 1000 × 50 s/step learned for tiny-char on cpu"},
	}, {
		name: "TCO price", cfg: tco, job: baseJob("eu"), backend: "local",
		check: func(t *testing.T, d Decision) {
			if want := 2 * tcoPrice; math.Abs(d.EstCostUSD-want) > 1e-9 || want <= 0 {
				t.Errorf("cost %v, want %v", d.EstCostUSD, want)
			}
		},
	}, {
		name: "spot prices", cfg: spot, job: baseJob("eu"),
		snap: func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(5 * time.Hour); s.Pools["local"] = p }, backend: "aws-eu",
		reasons: []string{"$0.90/h (spot)"},
		check: func(t *testing.T, d Decision) {
			if c := candidate(t, d, "aws-eu"); !c.Spot || math.Abs(c.EstCostUSD-1.8) > 1e-9 {
				t.Errorf("%+v", c)
			}
		},
	}, {
		name: "an urgent job waits only behind urgent work", job: urgent, snap: ahead, backend: "local",
		check: func(t *testing.T, d Decision) {
			if w := candidate(t, d, "local").EstWaitS; w != 3600 {
				t.Errorf("wait %v s, want 3600 (16 GPU-h / 16 GPUs)", w)
			}
		},
	}, {
		name: "a batch job waits behind everything", job: batch, snap: ahead, backend: "local", waiting: true,
		check: func(t *testing.T, d Decision) {
			if w := candidate(t, d, "local").EstWaitS; w != 7*3600 {
				t.Errorf("wait %v s, want 25200 (112 GPU-h / 16 GPUs)", w)
			}
		},
	}, {
		name: "healthy GPUs counted from the nodes when HealthyGPUs is 0", job: urgent,
		snap:    func(s *Snapshot) { ahead(s); p := s.Pools["local"]; p.HealthyGPUs = 0; s.Pools["local"] = p },
		backend: "local",
		check: func(t *testing.T, d Decision) {
			if w := candidate(t, d, "local").EstWaitS; w != 3600 {
				t.Errorf("wait %v", w)
			}
		},
	}, {
		name: "a CPU job on a pool with no healthy GPUs", job: cpu,
		snap:    func(s *Snapshot) { s.Pools["local"] = Pool{GPUHoursAhead: [3]float64{5, 5, 5}} },
		backend: "local",
	}})
}

// TestPressure covers rules 5 and 6.
func TestPressure(t *testing.T) {
	wait := func(h time.Duration) func(s *Snapshot) {
		return func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(h); s.Pools["local"] = p }
	}
	noMax := baseJob("eu")
	noMax.MaxWait = 0
	valued := baseJob("eu")
	valued.ValuePerHourUSD = 100
	cheapTime := baseJob("eu")
	cheapTime.ValuePerHourUSD = 0.1
	valuedOnprem := baseJob("onprem")
	valuedOnprem.ValuePerHourUSD = 100

	runCases(t, []decideCase{{
		name: "within max_wait: local", job: baseJob("eu"), snap: wait(time.Hour), backend: "local",
		reasons: []string{"local: estimated wait 1h0m0s on local is within max_wait 1h0m0s"},
	}, {
		name: "max_wait 0 never bursts for pressure", job: noMax, snap: wait(10 * time.Hour), backend: "local",
		reasons: []string{"max_wait is not set, so the job never bursts for queue pressure; local estimated wait 10h0m0s"},
	}, {
		name: "a worth-while hour bursts", job: valued, snap: wait(3 * time.Hour), backend: "aws-eu",
		reasons: []string{"residency is never traded"},
		check: func(t *testing.T, d Decision) {
			want := "value of time $100.00/h: best local local: $2.20 + 3.00 h wait × $100.00/h = $302.20; best cloud aws-eu: $3.72 + 0.00 h wait × $100.00/h = $3.72 → aws-eu"
			if d.Trade != want {
				t.Errorf("trade\n %s\nwant\n %s", d.Trade, want)
			}
		},
	}, {
		name: "a cheap hour waits, past max_wait", job: cheapTime, snap: wait(3 * time.Hour), backend: "local", waiting: true,
		check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Trade, "best local local: $2.20 + 3.00 h wait × $0.10/h = $2.50") || !strings.HasSuffix(d.Trade, "→ local") {
				t.Errorf("trade %s", d.Trade)
			}
		},
	}, {
		name: "value never trades residency", job: valuedOnprem, snap: wait(30 * time.Hour), backend: "local", waiting: true,
		check: func(t *testing.T, d Decision) {
			if !strings.Contains(d.Trade, "best cloud: none feasible") {
				t.Errorf("trade %s", d.Trade)
			}
		},
	}, {
		name: "no healthy GPUs: the wait is unknown and a job bursts", job: baseJob("eu"),
		snap: func(s *Snapshot) {
			s.Pools["local"] = Pool{Nodes: []PoolNode{{Name: "a", GPUs: []PoolGPU{{Model: "H100", MemoryGB: 80, Healthy: 0}}}}}
		},
		backend: "aws-eu", cands: map[string]string{"local": ReasonNoGPUFit},
	}})
}

// TestTiesAndDeterminism: ties go by config order, and the decision does not
// depend on map iteration order.
func TestTiesAndDeterminism(t *testing.T) {
	cfg := strings.Replace(issueConfig, "  aws-us:\n", `  aws-eu-2:
    kind: aws
    site: aws-eu-central-1
    region: eu-central-1
    checkpoint_uri: s3://lathe-eu-ckpt/two
    instance_types:
      g6e.xlarge:  {gpus: 1, gpu_model: L40S, gpu_memory_gb: 48, on_demand_usd_per_hour: 1.86}
  aws-us:
`, 1)
	s := baseSnapshot(t, cfg)
	p := s.Pools["local"]
	p.AssumeWait = dur(5 * time.Hour)
	s.Pools["local"] = p
	s.BackendSpend = map[string]Spend{"aws-eu": {SpentUSD: 1}, "aws-eu-2": {SpentUSD: 2}, "aws-us": {}}
	s.TeamSpend = map[string]Spend{"ml-research": {SpentUSD: 3}, "b": {}, "c": {}}
	s.SecondsPerStep = map[string]float64{"a|b": 1, "c|d": 2, "e|f": 3}
	first := Decide(baseJob("eu"), s)
	if first.Backend != "aws-eu" {
		t.Fatalf("tie went to %s, want aws-eu (first in config order)", first.Backend)
	}
	var names []string
	for _, c := range first.Candidates {
		names = append(names, c.Backend)
	}
	if want := []string{"local", "aws-eu", "aws-eu-2", "aws-us"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("candidates %v, want config order %v", names, want)
	}
	for range 50 {
		if d := Decide(baseJob("eu"), s); !reflect.DeepEqual(d, first) {
			t.Fatalf("decision changed:\n%+v\n%+v", d, first)
		}
	}
}

// TestImplicitConfig: no routing config routes every job to the workers of
// lathed, unpriced, as before routing existed.
func TestImplicitConfig(t *testing.T) {
	for _, src := range []string{"", "data_dir: /x\n", "routing: {default_residency: [onprem]}\n"} {
		c := mustParse(t, src)
		d := Decide(baseJob(), Snapshot{Config: c, Pools: map[string]Pool{routecfg.ImplicitBackend: h100Pool(1)}})
		if d.Backend != routecfg.ImplicitBackend || d.Site != routecfg.ImplicitSite || d.Refused || len(d.Staging) != 0 || !hasReason(d, "unpriced") {
			t.Errorf("%q: %+v", src, d)
		}
		if d := Decide(baseJob("eu"), Snapshot{Config: c}); !d.Refused {
			t.Errorf("%q: an [eu] job was not refused: %+v", src, d)
		}
	}
	// The zero Config behaves like an empty file.
	d := Decide(baseJob(), Snapshot{Pools: map[string]Pool{routecfg.ImplicitBackend: h100Pool(1)}})
	if d.Backend != routecfg.ImplicitBackend {
		t.Errorf("zero Config: %+v", d)
	}
	if (routecfg.Config{}).Hash() != mustParse(t, "").Hash() {
		t.Errorf("zero Config hashes unlike an empty file")
	}
}

// TestInvalidConfigInGo: a Config built by hand that fails validation
// refuses every job with ReasonConfigInvalid.
func TestInvalidConfigInGo(t *testing.T) {
	c := routecfg.Config{Sites: []routecfg.Site{{Name: "a", Tags: []string{"onprem"}}}, RedisSite: "nowhere",
		Backends: []routecfg.Backend{{Name: "l", Kind: routecfg.KindLocal, Site: "a"}}}
	d := Decide(baseJob(), Snapshot{Config: c})
	if !d.Refused || len(d.Reasons) != 1 || !strings.HasPrefix(d.Reasons[0], ReasonConfigInvalid+": ") || !strings.Contains(d.Reasons[0], "redis_site") {
		t.Fatalf("%+v", d)
	}
	c.RedisSite = "a"
	if d := Decide(baseJob(), Snapshot{Config: c, Pools: map[string]Pool{"l": h100Pool(1)}}); d.Backend != "l" {
		t.Fatalf("valid Config built in Go: %+v", d)
	}
}

// TestLocalS3: a local pool uses file:// only, so a job with s3:// data is
// infeasible there with ReasonLocalS3 (not feasible with no reason, then
// refused after the decision): a cloud backend its tags allow takes it; with
// none, the refusal gives every backend's reason.
func TestLocalS3(t *testing.T) {
	euData := func(j Job) Job { j.Dataset = "s3://lathe-eu-data/support/train.jsonl"; j.MaxWait = 0; return j }
	euOut := func(j Job) Job { j.Output = "s3://lathe-eu-data/out/j1"; return j }
	runCases(t, []decideCase{{
		name: "eu job, eu bucket data, no max_wait: aws-eu", job: euData(baseJob("eu")), backend: "aws-eu",
		cands: map[string]string{"local": ReasonLocalS3, "aws-eu": "", "aws-us": ReasonComputeSite},
	}, {
		name: "eu job, eu bucket output: aws-eu", job: euOut(baseJob("eu")), backend: "aws-eu",
		cands: map[string]string{"local": ReasonLocalS3, "aws-eu": ""},
	}, {
		name: "eu job, eu bucket data, aws-eu's budget spent: refused, local says why", job: euData(baseJob("eu")),
		snap: func(s *Snapshot) {
			s.BackendSpend = map[string]Spend{"aws-eu": {LimitUSD: 5000, SpentUSD: 5000}}
		},
		cands:   map[string]string{"local": ReasonLocalS3, "aws-eu": ReasonBackendBudget, "aws-us": ReasonComputeSite},
		reasons: []string{"local: " + ReasonLocalS3 + ": s3://lathe-eu-data/support/train.jsonl: staging S3 onto local workers is not built yet"},
	}})
}

// TestCloudTrainer: the cloud agent runs only the reference trainer (named
// trainers on instances are not built), so a job naming another trainer is
// infeasible on every cloud backend, saying so, and stays on the local pool
// or is refused; it never runs the wrong trainer on an instance.
func TestCloudTrainer(t *testing.T) {
	axolotl := func(j Job) Job { j.Trainer = "axolotl"; return j }
	euData := func(j Job) Job { j.Dataset = "s3://lathe-eu-data/support/train.jsonl"; j.MaxWait = 0; return j }
	runCases(t, []decideCase{{
		name: "eu job, reference trainer, s3 data: aws-eu", job: euData(baseJob("eu")), backend: "aws-eu",
		cands: map[string]string{"local": ReasonLocalS3, "aws-eu": ""},
	}, {
		name: "eu job, named trainer, s3 data: refused, each backend says why", job: axolotl(euData(baseJob("eu"))),
		cands: map[string]string{"local": ReasonLocalS3, "aws-eu": ReasonCloudTrainer, "aws-us": ReasonComputeSite},
	}, {
		name: "eu job, named trainer, file data: local", job: axolotl(baseJob("eu")), backend: "local",
		cands: map[string]string{"local": "", "aws-eu": ReasonCloudTrainer},
	}})
}

// TestGangFit: a job of Nodes nodes × GPUs fits the local pool only when
// that many nodes each have the GPUs, and a cloud backend only when one
// instance type holds all of them (it launches one instance per attempt);
// cost and GPU-hours count nodes × GPUs.
func TestGangFit(t *testing.T) {
	gang := func(nodes, gpus int) Job {
		j := baseJob("eu")
		j.GPUs, j.Nodes = gpus, nodes
		return j
	}
	runCases(t, []decideCase{{
		name: "two nodes of 8 on a pool of two 8-GPU nodes", job: gang(2, 8), backend: "local",
		cands:   map[string]string{"local": "", "aws-eu": ReasonNoGPUFit},
		reasons: []string{"32.00 GPU-hours × $1.10/GPU-hour"},
		check: func(t *testing.T, d Decision) {
			want := ReasonNoGPUFit + ": needs 2 nodes of 8 GPUs, 16 GPUs on one instance (a cloud backend launches one instance per attempt); the largest matching instance type has 8"
			if r := candidate(t, d, "aws-eu").Reason; r != want {
				t.Errorf("aws-eu: %q; want %q", r, want)
			}
			if d.EstGPUHours != 32 || math.Abs(d.EstCostUSD-32*1.10) > 1e-9 {
				t.Errorf("2 nodes × 8 GPUs × 2 h: %.2f GPU-hours, $%.2f; want 32, $35.20", d.EstGPUHours, d.EstCostUSD)
			}
		},
	}, {
		name: "three nodes of 8 on a pool of two", job: gang(3, 8), backend: "",
		cands:   map[string]string{"local": ReasonNoGPUFit, "aws-eu": ReasonNoGPUFit},
		reasons: []string{"local: " + ReasonNoGPUFit + ": needs 3 nodes of 8 GPUs; only 2 of the pool's nodes have that many such healthy GPUs"},
	}, {
		name: "a node short of GPUs does not count", job: gang(2, 8),
		snap: func(s *Snapshot) {
			s.Pools["local"] = Pool{HealthyGPUs: 15, Nodes: []PoolNode{{Name: "a", GPUs: []PoolGPU{{Model: "H100", MemoryGB: 80, Healthy: 8}}},
				{Name: "b", GPUs: []PoolGPU{{Model: "H100", MemoryGB: 80, Healthy: 7}}}}}
		},
		backend: "", cands: map[string]string{"local": ReasonNoGPUFit},
		reasons: []string{"only 1 of the pool's nodes"},
	}, {
		name: "two nodes of 4 fit one 8-GPU instance", job: gang(2, 4),
		snap:    func(s *Snapshot) { p := s.Pools["local"]; p.AssumeWait = dur(5 * time.Hour); s.Pools["local"] = p },
		backend: "aws-eu", cands: map[string]string{"local": "", "aws-eu": ""},
		check: func(t *testing.T, d Decision) {
			if d.EstGPUHours != 16 {
				t.Errorf("2 nodes × 4 GPUs × 2 h: %.2f GPU-hours; want 16", d.EstGPUHours)
			}
		},
	}})
}
