package routing

import (
	"strings"
	"testing"
	"time"
)

// slurmSites has two Slurm pools in sites of different tags.
const slurmSites = `
sites:
  hpc-eu: [onprem, eu]
  hpc-us: [onprem, us]
  ops: [onprem, eu, us]
redis_site: ops
backends:
  slurm-eu: {kind: slurm, site: hpc-eu, partition: gpu, work_dir: /shared/w, price: {usd_per_gpu_hour: 1.5}}
  slurm-us: {kind: slurm, site: hpc-us, partition: gpu, work_dir: /shared/w}
datasets:
  file_site: ops
`

// TestSlurmResidency: a job goes only to a slurm backend whose site
// carries every tag of the job; one whose tags no slurm site carries is
// refused, never sent there.
func TestSlurmResidency(t *testing.T) {
	c := mustParse(t, slurmSites)
	for _, tc := range []struct {
		tags []string
		want string // "" : refused
	}{
		{[]string{"eu"}, "slurm-eu"},
		{[]string{"us"}, "slurm-us"},
		{[]string{"eu", "us"}, ""},
		{[]string{"cloud"}, ""},
	} {
		d := Decide(baseJob(tc.tags...), Snapshot{Config: c})
		if tc.want == "" {
			if !d.Refused {
				t.Errorf("%v: routed to %s, want refused", tc.tags, d.Backend)
			}
			for _, cand := range d.Candidates {
				if cand.Feasible || !strings.HasPrefix(cand.Reason, ReasonComputeSite) {
					t.Errorf("%v: candidate %+v", tc.tags, cand)
				}
			}
			continue
		}
		if d.Refused || d.Backend != tc.want {
			t.Errorf("%v: decision %s refused=%v, want %s", tc.tags, d.Backend, d.Refused, tc.want)
		}
		for _, cand := range d.Candidates {
			if cand.Backend != tc.want && (cand.Feasible || !strings.HasPrefix(cand.Reason, ReasonComputeSite)) {
				t.Errorf("%v: other candidate %+v", tc.tags, cand)
			}
		}
	}
}

// TestSlurmFitAndCost: a slurm backend takes a job of up to gpus_per_node
// GPUs at its price per GPU-hour, runs named trainers, and refuses s3://
// data and GPU models (not built yet).
func TestSlurmFitAndCost(t *testing.T) {
	c := mustParse(t, slurmSites)
	j := baseJob("eu")
	j.GPUs, j.Trainer = 2, "my-script"
	d := Decide(j, Snapshot{Config: c})
	cand := candidate(t, d, "slurm-eu")
	if d.Backend != "slurm-eu" || cand.InstanceType != "gpu:2" {
		t.Fatalf("decision %+v", d)
	}
	if want := 2 * 2 * 1.5; cand.EstCostUSD != want { // 2 h × 2 GPUs × $1.5
		t.Errorf("cost %v, want %v", cand.EstCostUSD, want)
	}
	j.GPUs = 9
	if d := Decide(j, Snapshot{Config: c}); !d.Refused || !strings.HasPrefix(candidate(t, d, "slurm-eu").Reason, ReasonNoGPUFit) {
		t.Errorf("9 GPUs: %+v", d)
	}
	j.GPUs, j.Dataset = 1, "s3://bucket/x"
	if d := Decide(j, Snapshot{Config: c}); !d.Refused {
		t.Errorf("s3 data: %+v", d)
	}
}

// TestSlurmQueueWait: Slurm's pending queue of a backend's partition
// (Snapshot.QueueWait) is the backend's wait, and a job valuing its time
// goes to the backend with the shorter queue.
func TestSlurmQueueWait(t *testing.T) {
	c := mustParse(t, strings.NewReplacer("hpc-us: [onprem, us]", "hpc-us: [onprem, eu, us]",
		"work_dir: /shared/w}", "work_dir: /shared/w, price: {usd_per_gpu_hour: 3}}").Replace(slurmSites))
	j := baseJob("eu")
	j.ValuePerHourUSD = 100
	d := Decide(j, Snapshot{Config: c, QueueWait: map[string]time.Duration{"slurm-eu": 3 * time.Hour}})
	if w := candidate(t, d, "slurm-eu").EstWaitS; w != 3*3600 {
		t.Errorf("slurm-eu wait %v s, want 10800", w)
	}
	if d.Backend != "slurm-us" {
		t.Errorf("went to %s, want slurm-us (dearer, no queue): %+v", d.Backend, d)
	}
	eu := Decide(baseJob("eu"), Snapshot{Config: mustParse(t, slurmSites), QueueWait: map[string]time.Duration{"slurm-eu": 3 * time.Hour}})
	if r := strings.Join(eu.Reasons, "\n"); !strings.Contains(r, "slurm wait 3h0m0s: queue 3h0m0s") || !strings.Contains(r, "× 1 GPUs × $1.50/GPU-hour on slurm backend slurm-eu") {
		t.Errorf("reasons:\n%s", r)
	}
	if d := Decide(j, Snapshot{Config: c}); d.Backend != "slurm-eu" || candidate(t, d, "slurm-eu").EstWaitS != 0 {
		t.Errorf("no queue: want the cheaper slurm-eu: %+v", d)
	}
}

// TestSlurmGPUModel: a slurm backend that gives its GPUs' model and
// memory takes the jobs that ask for them; one that gives none takes no
// job naming a model.
func TestSlurmGPUModel(t *testing.T) {
	c := mustParse(t, strings.Replace(slurmSites, "partition: gpu, work_dir: /shared/w, price:",
		"partition: gpu, gpu_model: NVIDIA A100-SXM4-80GB, gpu_memory_gb: 80, gres_type: a100, work_dir: /shared/w, price:", 1))
	j := baseJob("eu")
	j.GPUModels, j.GPUMemoryGB = []string{"A100"}, 40
	if d := Decide(j, Snapshot{Config: c}); d.Refused || d.Backend != "slurm-eu" {
		t.Errorf("A100 ≥40 GB on an A100 80 GB partition: %+v", d)
	}
	j.GPUModels = []string{"H100"}
	if d := Decide(j, Snapshot{Config: c}); !d.Refused || !strings.HasPrefix(candidate(t, d, "slurm-eu").Reason, ReasonNoGPUFit) {
		t.Errorf("H100 on an A100 partition: %+v", d)
	}
	j = baseJob("us")
	j.GPUModels = []string{"A100"}
	if d := Decide(j, Snapshot{Config: c}); !d.Refused || !strings.HasPrefix(candidate(t, d, "slurm-us").Reason, ReasonNoGPUFit) {
		t.Errorf("a model on a partition that names none: %+v", d)
	}
}
