package jobspec

// Spec is one fine-tuning job as the user wrote it: after Parse with the
// built-in defaults filled in, after Normalize with the daemon's too. Field
// names and JSON/YAML keys follow docs/design.md; Parse takes its schema from the
// json tags below, so a field added here is accepted by Parse at once (and
// needs its rule in Validate). Use Clone to copy one: it holds slices.
type Spec struct {
	// Name is [a-z0-9-], 1–63 characters. Required.
	Name string `json:"name"`
	// BaseModel is "tiny-char" (BaseModelTinyChar, the built-in demo model)
	// or a Hugging Face id. Required.
	BaseModel string `json:"base_model"`
	// Dataset is a file:// (absolute) or s3:// URI of a JSONL file. Required.
	Dataset string `json:"dataset"`
	// EvalDataset is optional; same URI rules as Dataset.
	EvalDataset string `json:"eval_dataset,omitempty"`
	// LoRA holds the adapter's hyperparameters.
	LoRA LoRA `json:"lora"`
	// Training holds the optimisation settings.
	Training Training `json:"training"`
	// Resources is the hardware the job asks for.
	Resources Resources `json:"resources"`
	// Residency holds lower-case tags; every site the job touches must carry
	// all of them. Empty means the daemon's routing.default_residency.
	Residency []string `json:"residency"`
	// Priority is urgent, normal (default) or batch.
	Priority Priority `json:"priority"`
	// MaxWait is how long the job may wait for local capacity before it may
	// burst to a cloud backend (docs/design.md "Routing"). Written like "2h" or
	// "1d12h" (see ParseDuration).
	MaxWait Duration `json:"max_wait,omitempty"`
	// MaxRuntime bounds one attempt's run time; reaching it fails the job
	// with reason "timeout" (no retry). Zero means the daemon's default.
	MaxRuntime Duration `json:"max_runtime,omitempty"`
	// ExpectedRuntime is the submitter's estimate of the run time, used by
	// routing (wait and cost estimates) instead of a learned one; 0 = learn
	// it (steps × seconds per step of finished jobs) or fall back to
	// MaxRuntime.
	ExpectedRuntime Duration `json:"expected_runtime,omitempty"`
	// BudgetUSD caps the job's cost; 0 means no per-job cap.
	BudgetUSD float64 `json:"budget_usd,omitempty"`
	// ValuePerHourUSD is what starting an hour sooner is worth to the
	// submitter: routing then weighs waiting against paying for the cloud
	// (and shows the trade). 0 = plain rules (stay local within MaxWait).
	ValuePerHourUSD float64 `json:"value_per_hour_usd,omitempty"`
	// Trainer names a trainer from the daemon's config; default "reference".
	Trainer string `json:"trainer"`
	// Output says where the artifacts go and in which formats.
	Output Output `json:"output"`
}

// LoRA holds the adapter's hyperparameters.
type LoRA struct {
	Rank          int      `json:"rank"`           // 1–1024; default 8
	Alpha         float64  `json:"alpha"`          // > 0; default 2×rank
	Dropout       float64  `json:"dropout"`        // 0 ≤ d < 1; default 0.05
	TargetModules []string `json:"target_modules"` // default [q_proj, v_proj]
}

// Training holds the optimisation settings.
type Training struct {
	Epochs       int     `json:"epochs"`        // ≥ 1, or MaxSteps ≥ 1; default 1 unless MaxSteps ≥ 1
	LearningRate float64 `json:"learning_rate"` // 0 < lr ≤ 1; default 2e-4
	BatchSize    int     `json:"batch_size"`    // 1–65536; default 8
	MaxSteps     int     `json:"max_steps"`     // 0 = run the epochs
	Seed         int64   `json:"seed"`          // default 42
	// CheckpointEvery is the checkpoint interval in steps; 0 = the trainer's default.
	CheckpointEvery int `json:"checkpoint_every,omitempty"`
	// EvalEvery is the eval interval in steps; 0 = the trainer's default.
	EvalEvery int `json:"eval_every,omitempty"`
	// StopAtStep is the step at which the trainer stops with a final eval
	// and a checkpoint, and no adapter (docs/sweeps.md, ASHA's pause). Lathe
	// sets it in the job file of a sweep trial's attempt, for its rung; a
	// spec a user submits must leave it 0 (Validate refuses anything else).
	// 0 = run to the end.
	StopAtStep int `json:"stop_at_step,omitempty"`
}

// Resources is the hardware a job asks for.
type Resources struct {
	// GPUs is how many GPUs the job needs on each of its nodes, 0–64; 0
	// means a CPU-only job.
	GPUs int `json:"gpus"`
	// Nodes is how many nodes the job spans, each with GPUs GPUs (a gang:
	// all start together or none does); 0 or 1 means one node, up to
	// 64. See NodeCount and TotalGPUs.
	Nodes int `json:"nodes,omitempty"`
	// GPUMemoryGB is the memory each GPU must have, in GB; 0 means any.
	GPUMemoryGB float64 `json:"gpu_memory_gb,omitempty"`
	// GPUModels lists acceptable GPU models ("A100", "H100"); empty means any.
	GPUModels []string `json:"gpu_models,omitempty"`
}

// Output says where the job's artifacts go; a per-job subfolder is made under URI.
// An empty URI means the daemon's default artifact location.
type Output struct {
	// URI is file:///absolute/folder or s3://bucket/prefix.
	URI string `json:"uri,omitempty"`
	// Formats lists the artifact formats to write: "safetensors"
	// (FormatSafetensors, the default), "gguf" (FormatGGUF) and
	// "gguf-merged" (FormatGGUFMerged); the GGUF ones need a base model
	// llama.cpp can represent, so not BaseModelTinyChar.
	Formats []string `json:"formats,omitempty"`
}

// Priority orders the pending set: urgent before normal before batch.
type Priority string

// The priorities, highest first.
const (
	PriorityUrgent Priority = "urgent"
	PriorityNormal Priority = "normal"
	PriorityBatch  Priority = "batch"
)

// Rank is 0 for urgent, 1 for normal, 2 for batch (and 1 for anything else).
func (p Priority) Rank() int {
	switch p {
	case PriorityUrgent:
		return 0
	case PriorityBatch:
		return 2
	default:
		return 1
	}
}

// NodeCount is how many nodes the job spans: Nodes, or 1 when it is not
// set (0).
func (r *Resources) NodeCount() int { return max(r.Nodes, 1) }

// TotalGPUs is every GPU the job holds while it runs: GPUs on each of its
// NodeCount nodes. Cost, GPU-hours and budgets count this, never GPUs alone.
func (r *Resources) TotalGPUs() int { return r.GPUs * r.NodeCount() }
