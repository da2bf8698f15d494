package sweepspec

import (
	"fmt"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// MaxTrials is the most trials one sweep has. It must equal
// jobstore.MaxSweepTrials (this package does not import the store).
const MaxTrials = 10000

// MaxValues is the most values one grid or choice space lists.
const MaxValues = 1000

// MaxSpecBytes is the largest sweep spec Parse accepts, and the largest
// job file ReadJob may return (1 MiB, as jobspec.MaxSpecBytes).
const MaxSpecBytes = jobspec.MaxSpecBytes

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

// Goals of an objective.
const (
	GoalMinimize = "minimize"
	GoalMaximize = "maximize"
)

// Defaults Parse fills in.
const (
	DefaultMetric          = "eval_loss"
	DefaultGoal            = GoalMinimize
	DefaultPriority        = jobspec.PriorityBatch
	DefaultReductionFactor = 3
	DefaultMedianMinTrials = 3
)

// Param is one entry of `parameters:`: the job field's path and its space.
type Param struct {
	Path string
	Kind string
	// Values for grid and choice: string, int64 (a number written as an
	// integer), float64 or bool, distinct, in the order given. Lo and Hi
	// for the uniform kinds (int_uniform: whole numbers, both included).
	Values []any
	Lo, Hi float64
}

// ASHA is `search: {kind: asha}`'s settings.
type ASHA struct {
	MinSteps        int // the first rung's steps
	MaxSteps        int // the last rung's steps (every trial's training.max_steps)
	ReductionFactor int // η, default 3
}

// Median is median stopping (grid and random): a trial whose objective at
// step s is worse than the median of the other trials' at s is stopped,
// once s ≥ GraceSteps (default 0) and at least MinTrials (default 3)
// others reached s.
type Median struct {
	GraceSteps int
	MinTrials  int
}

// Search is `search:`.
type Search struct {
	Kind   string
	Trials int   // random and asha: how many trials; grid: the grid's size
	Seed   int64 // random and asha draws (default 0)
	ASHA   *ASHA // asha only
	Median *Median
}

// Objective is what trials are ranked by.
type Objective struct {
	Metric string // default eval_loss
	Goal   string // minimize (default) | maximize
}

// Sweep is a parsed sweep spec.
type Sweep struct {
	Name string
	// Job is the base job as every trial gets it before its parameters
	// (its name the sweep's, the sweep's priority, for asha
	// training.max_steps), parsed by jobspec.Parse, not normalised.
	Job *jobspec.Spec
	// Parameters, sorted by path.
	Parameters []Param
	Search     Search
	Objective  Objective
	// MaxParallel is how many trials may be admitted at once (default:
	// all).
	MaxParallel    int
	BudgetUSD      float64 // 0: none
	BudgetGPUHours float64 // 0: none
	// Priority of every trial (default batch).
	Priority jobspec.Priority

	// base is the base job as written, as a generic JSON mapping (numbers
	// as json.Number): what each trial's parameters are set in. Nil for a
	// Sweep built in Go: Job's canonical JSON stands in.
	base map[string]any
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

// Options tells Parse how to find a base job given as a path.
type Options struct {
	// ReadJob reads the file a `job:` path names (relative paths are
	// relative to the sweep file: the caller resolves them, and rewrites
	// the job's relative data paths as `lathe submit` does). Nil: a path
	// is refused ("job: is a path: give the job inline (the API reads no
	// files; …)"), as the API must.
	ReadJob func(path string) ([]byte, error)
}

// Parse parses and validates a sweep spec, YAML or JSON, strictly:
// unknown keys, wrong types, duplicate keys, anchors and aliases are
// errors. Every error is a *jobspec.ValidationError listing every problem,
// each naming the sweep's field ("parameters.training.learning_rate.log_uniform",
// "search.trials", "job.lora.rank"), or, for an input over MaxSpecBytes,
// one that wraps jobspec.ErrTooLarge. The base job must be a valid job
// spec on its own (with the sweep's name and priority); whether each
// combination of parameters makes a valid job is Expand's to say.
func Parse(data []byte, opts Options) (*Sweep, error) {
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("sweepspec: %w: %d bytes, the limit is %d", jobspec.ErrTooLarge, len(data), MaxSpecBytes)
	}
	root, errs := parseDocument(data, "a sweep spec")
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	d := &decoder{}
	s := &Sweep{}
	nodes := d.top(root, s)
	if nodes.job == nil {
		d.add(jobspec.FieldError{Field: "job", Message: "is required: a path to a job spec file, or a job spec mapping"})
	} else {
		s.base = d.job(nodes.job, opts)
	}
	if len(s.Parameters) == 0 && !nodes.badParams {
		d.add(jobspec.FieldError{Field: "parameters", Message: "is required: at least one job field and its space"})
	}
	d.defaults(s, nodes)
	d.checkSearch(s, nodes)
	if s.base != nil && s.Name != "" {
		s.Job = d.baseJob(s)
	}
	if len(d.errs) > 0 {
		return nil, invalid(d.errs)
	}
	return s, nil
}

// invalid wraps problems in a *jobspec.ValidationError, capped at
// maxErrors.
func invalid(errs []jobspec.FieldError) error {
	if len(errs) > maxErrors {
		n := len(errs) - maxErrors
		errs = append(errs[:maxErrors:maxErrors], jobspec.FieldError{Message: fmt.Sprintf("and %d more problems", n)})
	}
	return &jobspec.ValidationError{Errors: errs}
}
