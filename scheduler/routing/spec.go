package routing

import "github.com/lathe-ml/lathe/internal/jobspec"

// JobFromSpec is the routing view of a normalised spec: what the scheduler
// decides on at submit, on every later attempt and in an explain, and what
// `lathe route --explain --config` decides on offline (one function, so the
// two agree). outputURI is where the job's output goes (its per-job folder,
// or "<id>" in an explain); "" means spec.Output.URI.
func JobFromSpec(spec *jobspec.Spec, id, team, outputURI string) Job {
	if outputURI == "" {
		outputURI = spec.Output.URI
	}
	return Job{ID: id, Team: team, Residency: spec.Residency, Dataset: spec.Dataset, EvalDataset: spec.EvalDataset,
		Output: outputURI, GPUs: spec.Resources.GPUs, Nodes: spec.Resources.Nodes, GPUMemoryGB: spec.Resources.GPUMemoryGB, GPUModels: spec.Resources.GPUModels,
		Priority: spec.Priority.Rank(), MaxWait: spec.MaxWait.D(), BudgetUSD: spec.BudgetUSD,
		ExpectedRuntime: spec.ExpectedRuntime.D(), MaxSteps: spec.Training.MaxSteps, BaseModel: spec.BaseModel,
		MaxRuntime: spec.MaxRuntime.D(), ValuePerHourUSD: spec.ValuePerHourUSD, Trainer: spec.Trainer}
}
