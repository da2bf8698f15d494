// Command lathe-full is the command-line client of a Lathe scheduler, every
// command of it: it submits LoRA fine-tuning jobs, watches them, cancels
// them and fetches their adapters, through the scheduler's HTTP API only
// (docs/api.md). Users run it as lathe, its front (cmd/lathe), installed
// beside it: the front answers --help and a plain submit itself, which it
// starts fast enough to do at sbatch's pace, and runs lathe-full in its place
// for everything else. It names itself lathe in what it prints.
//
// Usage:
//
//	lathe [--server URL] [-o table|json] COMMAND
//
//	lathe submit FILE [--wait] [--dry-run] [--idempotency-key K]
//	    Check FILE (YAML or JSON, "-" for stdin) locally, then submit it.
//	    Relative dataset, eval_dataset and output.uri paths become file://
//	    URIs relative to FILE's directory. --wait follows the job to its end
//	    (a live progress bar on a terminal, plain lines otherwise; with
//	    -o json only the final Job is printed on stdout). --dry-run prints
//	    the spec as the scheduler normalised it, storing nothing.
//	lathe status ID          one job: state, attempt, node, GPUs, progress, losses, error, artifacts;
//	                         for a queued job its place in line, estimated start and why it waits
//	lathe list [--state S] [--limit N]
//	                         jobs, newest first (ID NAME STATE ATTEMPT STEP LOSS AGE)
//	lathe logs ID [-f]       log lines, and [progress]/[eval]/[checkpoint]/[state] lines
//	lathe cancel ID          ask for cancellation; prints the job's state
//	lathe pull ID [--to DIR] download every artifact (default ./<job-name>-<id>/),
//	                         sha256-verified, written atomically
//	lathe queues             pending set, jobs per state, backend queues
//	lathe gpus               every GPU of every live node (NODE IDX NAME MEM UTIL TEMP HEALTH JOB),
//	                         simulated ones marked, why unhealthy ones are, under the table
//	lathe nodes              live nodes: GPUs free and unhealthy, CPU slots, driver, CUDA, jobs
//	lathe route --explain FILE [--config FILE] [--assume-wait B=DUR]... [--assume-spent B=USD]...
//	                         where the job would run and why: the choice, the reasons, every
//	                         backend (feasible, est. wait and cost, why refused), the staging;
//	                         --config decides offline from lathed's config file (local GPU
//	                         capacity assumed to fit); exit 1 when refused
//	lathe cost FILE [same flags as route]
//	                         est. run time, GPU-hours and cost on every backend
//	lathe cost breakeven [--purchase-usd-per-gpu …] [--cloud-usd-per-gpu-hour …] …
//	                         months after which owning a GPU beats renting it (offline)
//	lathe audit [--job ID] [--after N] [--limit N]
//	                         the routing ledger (SEQ TIME KIND JOB TEAM TOKEN BACKEND PATH)
//	lathe audit verify [--head MAC] | --export FILE --key FILE [--head MAC]
//	                         check the ledger's chain (exit 1 with every problem)
//	lathe audit export [--to FILE]
//	                         the ledger as JSON lines; the head to publish on stderr
//	lathe version            the version and the commit lathe was built from (as --version;
//	                         -o json: an object); needs no scheduler
//
// The scheduler address comes from --server, else LATHE_SERVER, else
// http://127.0.0.1:8080; a bearer token, if the scheduler wants one, from
// LATHE_TOKEN. -o json prints the API's objects (for gpus and nodes, a JSON
// array of them).
//
// Exit codes:
//
//	0  success (submit --wait: the job succeeded)
//	1  the job failed or was cancelled (submit --wait), or the API refused (not found, conflict, …);
//	   route --explain and cost: no backend may run the job; audit verify: the ledger is not intact;
//	   audit export: the export was cut short
//	2  usage error, or an invalid job spec (every bad field is printed as
//	   `error: lora.rank = "-4": must be …`), or a job no backend may run as
//	   written (submit answered 422 refused: every reason is printed as
//	   `refused: …`; nothing was stored)
//	3  no scheduler answered, or it answered that Redis is down (503 unavailable)
//	130 interrupted (a submitted job keeps running)
package main
