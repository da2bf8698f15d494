// Package sweepspec is the sweep spec (docs/sweeps.md, "Sweep spec
// reference"): a strict YAML or JSON parser that names every bad field, the
// parameter spaces, the search (grid, random, asha) and its expansion into
// trials, each a job spec validated by jobspec before anything is stored.
//
// The life of a sweep spec:
//
//	s, err := sweepspec.Parse(body, sweepspec.Options{ReadJob: read}) // *jobspec.ValidationError
//	trials, err := s.Expand()  // every trial's job spec, parsed by jobspec; deterministic
//	record.Spec = s.JSON()     // canonical JSON, its base job inline: Parse(s.JSON()) expands the same
//
// The CLI sends Inline's output (the `job:` path replaced by the job it
// names), because the API reads no files.
//
// A trial's job spec is the base job as written (a generic JSON mapping)
// with each parameter set at its path, its name "<sweep>-<index>", the
// sweep's priority and, for asha, training.max_steps; jobspec.Parse then
// fills in its defaults and validates it, so a default that depends on a
// swept field (lora.alpha = 2 × lora.rank) follows the trial's value.
package sweepspec
