// Package routing decides where a job runs: which backend — a local pool of
// lathed workers, or a cloud backend that buys instances — in which site,
// and why. It is policy only, a pure function of a snapshot: no Redis, no
// clock, no I/O, no SDK. The scheduler builds the Snapshot (config, pool
// state, spend, learned step times), calls Decide, and does the rest:
// answers 4xx for a refused job, records the Decision in the ledger, puts
// the job on the chosen backend's queue.
//
// # Config
//
// The config Decide reads is routecfg.Config, which routecfg.ParseConfig
// reads and validates from lathed's config file and indexes once (see
// package routecfg and docs/routing.md). routing imports routecfg;
// routecfg knows nothing of the decisions.
//
// # Pipeline
//
//	Job, Snapshot
//	   │ residency   effective tags = job's, or routing.default_residency
//	   │             (default [onprem]) when it gives none or []
//	   │ locate      dataset, eval dataset, output: file:// → datasets.file_site;
//	   │             s3://bucket → datasets.buckets[bucket]; empty output → file://
//	   ▼
//	for each backend, in config order — the checks, first failure wins:
//	   │ known locations   every URI has a site            ReasonBucketUnknown, ReasonNoSite
//	   │ compute site      backend's site carries the tags  ReasonComputeSite
//	   │ dataset site      …                                ReasonDatasetSite
//	   │ eval dataset site …                                ReasonEvalDatasetSite
//	   │ checkpoint site   checkpoint_uri's site (file:// = the backend's)
//	   │                                                    ReasonCheckpointSite
//	   │ output site       …                                ReasonOutputSite
//	   │ log site          redis_site (raw log lines)        ReasonLogSite
//	   │ ─ prepare ─       GPU fit, instance type, runtime, cost, wait
//	   │ gpu fit           a node / an instance type fits   ReasonNoGPUFit
//	   │ job budget        cost ≤ budget_usd                ReasonJobBudget
//	   │ team budget       cost ≤ team's month left         ReasonTeamBudget
//	   │ backend budget    cost ≤ cloud backend's month left ReasonBackendBudget
//	   ▼
//	Candidates (every backend: feasible, or its Reason)
//	   │ choose      value of time, when the job gives one; else
//	   │             local within max_wait ─► cheapest such local
//	   │             else a feasible cloud ─► cheapest cloud that starts the
//	   │                                      job sooner than local ("burst")
//	   │             else a feasible local ─► least wait, Waiting
//	   │             else                  ─► Refused, every rejection
//	   ▼
//	Decision{Backend, Site, Waiting/Refused, Residency, Reasons, Candidates,
//	         Staging, EstRuntime, EstGPUHours, EstCostUSD, Trade}
//
// # Rules
//
// 1. Residency (hard, never traded). A site is a place with one legal
// standing (dc-frankfurt, aws-eu-central-1) and carries tags. Every place a
// job touches must be in a site that carries every one of its effective
// tags: where it computes (the backend's site), where its dataset and eval
// dataset come from, where its checkpoints go (the backend's
// checkpoint_uri), where its output goes, and where its raw log lines go.
// A local attempt's raw log lines stream into Redis, so redis_site must
// carry every tag of every local job; a cloud attempt's stay in its
// backend's bucket when redis_site lacks a tag. A bucket not listed in datasets.buckets is refused, never
// guessed; so is a URI that is neither file:// nor s3://, and file:// when
// there is no datasets.file_site. A tag no site carries refuses the job
// everywhere. When the dataset (or eval dataset) is in another site than
// the compute site, the decision lists a Staging that copies it there —
// allowed only because both sites carry the tags, which the checks
// established; so are checkpoints, output and raw logs written across
// sites.
//
// 2. GPU fit. Local: some node of the pool has at least job.GPUs healthy
// GPUs whose model contains one of job.GPUModels (case-insensitively; none
// given: any) and whose memory is at least job.GPUMemoryGB; a job of
// job.Nodes > 1 needs that many such nodes; a pool with no state or no GPUs
// fits only a job with no GPUs. Cloud: the instance types with at least
// job.GPUs × job.Nodes such GPUs, one instance per attempt (any type for a
// job with no GPUs); the cheapest estimated cost wins, then the lower
// hourly price, then config order.
//
// 3. Budgets, on the estimated cost: the job's budget_usd (when set), the
// team's month (budgets.teams, or Spend.LimitUSD of TeamSpend, the tighter
// when both are set, minus spent and reserved) on every backend that costs
// anything, local included, and a cloud backend's month
// (budget_usd_per_month, or BackendSpend's limit, likewise). A budget that
// applies while the runtime is unknown refuses (the cost cannot be bounded).
// A cloud over budget does not refuse the job: it waits for local.
//
// 4. Estimates. Runtime: the job's expected_runtime; else max_steps × the
// learned seconds per step of its base model on the backend's GPU model
// (Snapshot.SecondsPerStep, key lower(base)+"|"+lower(model), "cpu" for a
// job with no GPUs; on a local pool the slowest learned model among those
// that fit); else max_runtime, an upper bound; the Reasons say which. Cost:
// local = cost.GPUHours(runtime, gpus) × the backend's $/GPU-hour (flat, or
// cost.TCO.USDPerGPUHour; an unpriced backend costs 0 and says so); cloud =
// runtime hours × the instance's hourly price (on demand, or spot with
// spot: true, prefer or only) — instances are whole, so a 1-GPU job on an 8-GPU type pays
// for 8. Wait on a local pool: Pool.AssumeWait when set (what-if); else,
// when every GPU of the pool serves the job and it is no larger than the
// largest of Pool.Joins, the wait of a new job of its size joining the
// queue at its priority (the last placement round's replay; for a job of
// several nodes, the join of a gang of as many whole nodes or more); else the
// GPU-hours ahead at the job's priority or higher over the pool's healthy
// GPUs, unknown (EstWaitS −1) with none; 0 for a job with no GPUs; plus
// Job.Waited (a spill-over) unless the estimate is 0. A cloud backend's
// wait is its startup (routecfg.Backend.Startup: instance launch to trainer
// start), 0 when the config gives none, plus the staging of the job's
// datasets that lie in another site: their sizes (Job.DatasetSize,
// EvalDatasetSize, learned at admission) ÷ the backend's staging_mbps; a
// size unknown, or no staging_mbps, counts 0 and the reason says so
// ("cloud wait 18m20s: startup 10m0s (…) + staging 50.0 GB at 100 MB/s
// (8m20s)").
//
// 5. Pressure. Among the feasible candidates: a local one whose wait is
// within max_wait (or any, when max_wait is 0: such a job never bursts for
// queue pressure) → the cheapest of those. Else a feasible cloud backend
// whose startup and staging are shorter than the least local wait from now (Job.Waited
// aside) → the cheapest such ("burst: local wait 3h0m0s … exceeds max_wait
// 1h0m0s"); when every feasible cloud backend takes longer to start than the
// local pool takes to start the job, the local one, Waiting ("waiting: …
// but it starts there sooner"). No feasible cloud backend: the feasible
// local with the least wait, Waiting, and the Reasons name why each cloud
// backend could not take the job. No feasible candidate: Refused,
// and the Reasons give every backend's rejection, one line per distinct
// reason ("aws-0, aws-3: compute site lacks …").
//
// 6. Value of time. When the job gives ValuePerHourUSD, the feasible
// candidate with the least cost + wait hours × value wins, and Trade shows
// the numbers of the best local and the best cloud candidate. Only feasible
// candidates take part: residency is never traded.
//
// 7. Determinism. Ties go to config order; nothing in the output depends on
// map iteration order.
//
// # Reasons
//
// Candidate.Reason is one of the Reason* constants, ": ", and the details,
// so callers match with strings.HasPrefix and people read the rest:
//
//	compute site lacks a residency tag: site aws-us-east-1 [cloud us] lacks eu
//	dataset site lacks a residency tag: dataset s3://lathe-us-data/x is in site aws-us-east-1 [cloud us], which lacks eu
//	bucket not listed in datasets.buckets: dataset s3://mystery/x names bucket "mystery"
//	raw logs go to the Redis site, which lacks a tag: site dc-frankfurt [onprem eu] lacks us
//	GPU request does not fit: needs 9 GPUs; the largest matching instance type has 8
//	over the backend's monthly budget: estimated $3.72 > $0.00 left of $5000.00 this month (spent $4000.00, reserved $1000.00)
//
// # Not modelled
//
//   - Spot interruptions (a spot backend is priced at its spot prices; the
//     risk of losing work is not weighed). lathe simulate models them
//     (docs/simulate.md). Staging time is one configured rate per backend,
//     not measured from the AWS worker's copies.
//   - CPU slots: a job with no GPUs always fits a local pool and waits 0.
//   - Where on the pool the job lands: placement (scheduler/placement)
//     decides that; routing only asks whether some node could hold it.
//   - Data transfer cost and time of staging; egress pricing.
//   - A faster GPU's shorter runtime, except through learned seconds per step.
//   - Queue pressure on a cloud backend's account (quotas, capacity).
//
// # Tests
//
// Table tests cover each rule and the scenarios. The residency
// property (no decision puts computation, data, checkpoints, output or raw
// logs in a site lacking a tag) runs on random jobs and snapshots from at
// most 4 tags, 20,000 cases by default; a million:
//
//	go test -run '^$' -bench BenchmarkResidencyProperty -benchtime 1000000x ./scheduler/routing
//	LATHE_ROUTING_PROPERTY_CASES=1000000 go test -run TestResidencyProperty ./scheduler/routing
//
// TestRemovingACheckBreaksResidency removes each residency check in turn
// (Decide's core takes the check list) and shows the property then fails.
// FuzzParseConfig fuzzes the parser; BenchmarkDecide100Backends measures
// decisions per second over 100 backends:
//
//	go test -fuzz FuzzParseConfig -fuzztime 30s ./scheduler/routing
//	go test -run '^$' -bench BenchmarkDecide100Backends -cpu 1 ./scheduler/routing
package routing
