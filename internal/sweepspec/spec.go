// Package sweepspec is the sweep spec (docs/sweeps.md): a strict YAML or
// JSON parser that names every bad field, the parameter spaces, the search
// (grid, random, asha) and its expansion into trials, each a job spec
// validated by jobspec before anything is stored.
package sweepspec

import (
	"errors"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// Search kinds.
const (
	SearchGrid   = "grid"
	SearchRandom = "random"
	SearchASHA   = "asha"
)

// Parameter space kinds.
const (
	KindGrid       = "grid"
	KindChoice     = "choice"
	KindUniform    = "uniform"
	KindLogUniform = "log_uniform"
	KindIntUniform = "int_uniform"
)

// Param is one entry of `parameters:`: the job field's path and its space.
type Param struct {
	Path string
	Kind string
	// Values for grid and choice; Lo and Hi for the uniform kinds.
	Values []any
	Lo, Hi float64
}

// ASHA is `search: asha`'s settings.
type ASHA struct {
	MinSteps        int // the first rung's steps
	MaxSteps        int // the last rung's steps (the job's training.max_steps)
	ReductionFactor int // η, default 3
}

// Median is median stopping (grid and random): a trial whose objective at
// step s is worse than the median of the other trials' at s is stopped,
// once s ≥ GraceSteps and at least MinTrials others reached s.
type Median struct {
	GraceSteps int
	MinTrials  int
}

// Search is `search:`.
type Search struct {
	Kind   string
	Trials int   // random and asha: how many trials; grid: the grid's size
	Seed   int64 // random and asha draws
	ASHA   *ASHA
	Median *Median
}

// Objective is what trials are ranked by.
type Objective struct {
	Metric string // e.g. eval_loss
	Goal   string // minimize | maximize
}

// Sweep is a parsed sweep spec.
type Sweep struct {
	Name string
	// Job is the base job (parsed by jobspec.Parse, not normalised);
	// JobSource is its text (YAML or JSON) as given inline.
	Job        *jobspec.Spec
	Parameters []Param
	Search     Search
	Objective  Objective
	// MaxParallel is how many trials may be admitted at once (default:
	// all).
	MaxParallel    int
	BudgetUSD      float64
	BudgetGPUHours float64
	// Priority of every trial (default batch).
	Priority jobspec.Priority
}

// Trial is one expanded trial: its index, its parameters (in the order of
// Sweep.Parameters) and its job spec (the base job with the parameters
// set, validated, not normalised; for ASHA training.max_steps is the last
// rung's).
type Trial struct {
	Index  int
	Params []jobtype.Param
	Spec   *jobspec.Spec
}

// ErrNotBuilt marks what is not written yet.
var ErrNotBuilt = errors.New("sweepspec: not built yet (issue #13)")

// Options tells Parse how to find a base job given as a path.
type Options struct {
	// ReadJob reads the file a `job:` path names (relative paths are
	// relative to the sweep file: the caller resolves them). Nil: a path
	// is refused ("job: give the job inline; the API does not read files").
	ReadJob func(path string) ([]byte, error)
}

// Parse parses and validates a sweep spec. Errors are a
// *jobspec.ValidationError whose fields name the sweep's fields
// ("parameters.training.learning_rate.log_uniform", "search.trials", …).
func Parse(data []byte, opts Options) (*Sweep, error) { return nil, ErrNotBuilt }

// Expand draws the sweep's trials (grid: every point; random and asha:
// Search.Trials draws with Search.Seed, without replacement in discrete
// spaces) and builds and validates each one's job spec; an invalid
// combination names the trial and the field ("trials[3] (lora.rank=0):
// lora.rank: …"). The same spec gives the same trials.
func (s *Sweep) Expand() ([]Trial, error) { return nil, ErrNotBuilt }

// Inline returns the sweep spec as JSON with a `job:` path replaced by the
// job it names, read with readJob (the CLI sends a sweep this way).
func Inline(data []byte, readJob func(path string) ([]byte, error)) ([]byte, error) {
	return nil, ErrNotBuilt
}
