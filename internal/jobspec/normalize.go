package jobspec

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
)

// The built-in defaults Parse gives fields the input leaves out.
const (
	defaultRank         = 8
	defaultDropout      = 0.05
	defaultEpochs       = 1
	defaultLearningRate = 2e-4
	defaultBatchSize    = 8
	defaultSeed         = 42
	defaultPriority     = PriorityNormal
	defaultTrainer      = "reference"
)

// defaultTargetModules is a function so no caller can change the default.
func defaultTargetModules() []string { return []string{"q_proj", "v_proj"} }

// applyParseDefaults fills the fields the input left out (present holds the
// dotted paths of those it set). A field the user set, even to an invalid
// zero, keeps its value so Validate reports it.
func (s *Spec) applyParseDefaults(present map[string]bool) {
	if !present["lora.rank"] {
		s.LoRA.Rank = defaultRank
	}
	if !present["lora.alpha"] {
		r := s.LoRA.Rank
		if r < 1 || r > maxRank {
			r = defaultRank // the bad rank is reported; don't report alpha for it too
		}
		s.LoRA.Alpha = float64(2 * r)
	}
	if !present["lora.dropout"] {
		s.LoRA.Dropout = defaultDropout
	}
	if !present["lora.target_modules"] {
		s.LoRA.TargetModules = defaultTargetModules()
	}
	// max_steps 0 means "run the epochs", so a spec with no epochs and no
	// step limit runs one epoch.
	if !present["training.epochs"] && s.Training.MaxSteps <= 0 {
		s.Training.Epochs = defaultEpochs
	}
	if !present["training.learning_rate"] {
		s.Training.LearningRate = defaultLearningRate
	}
	if !present["training.batch_size"] {
		s.Training.BatchSize = defaultBatchSize
	}
	if !present["training.seed"] {
		s.Training.Seed = defaultSeed
	}
	if !present["output.formats"] {
		s.Output.Formats = []string{FormatSafetensors}
	}
	if !present["priority"] {
		s.Priority = defaultPriority
	}
	if !present["trainer"] {
		s.Trainer = defaultTrainer
	}
}

// Defaults are the daemon's defaults for a job spec, from its config, which
// Normalize applies. The zero Defaults changes nothing but an empty Priority
// or Trainer.
type Defaults struct {
	// Priority replaces an empty Priority; "" means normal.
	Priority Priority
	// Trainer replaces an empty Trainer; "" means "reference".
	Trainer string
	// MaxRuntime replaces a zero MaxRuntime; 0 leaves it unbounded.
	MaxRuntime time.Duration
	// Residency replaces an empty Residency (routing.default_residency,
	// [onprem] in the default config: fail closed). Normalize copies it.
	Residency []string
	// OutputURI replaces an empty Output.URI; it follows the rules of
	// output.uri.
	OutputURI string
}

// DefaultMaxRuntime is the max_runtime of a job that gives none, on a
// deployment whose config sets no jobs.default_max_runtime.
const DefaultMaxRuntime = 24 * time.Hour

// DeploymentDefaults returns d with what a deployment's config leaves out
// filled in as the scheduler fills it: MaxRuntime DefaultMaxRuntime,
// Residency [onprem] (fail closed), Trainer "reference", Priority normal.
// The scheduler and `lathe route --explain --config` both normalise specs
// with it, so that they decide on the same spec.
func DeploymentDefaults(d Defaults) Defaults {
	if d.MaxRuntime <= 0 {
		d.MaxRuntime = DefaultMaxRuntime
	}
	if len(d.Residency) == 0 {
		d.Residency = []string{"onprem"}
	}
	if d.Trainer == "" {
		d.Trainer = defaultTrainer
	}
	if d.Priority == "" {
		d.Priority = defaultPriority
	}
	return d
}

// Normalize applies the daemon's defaults d to the fields s leaves empty:
// Residency, MaxRuntime, Output.URI, Priority and Trainer. It is idempotent
// and keeps no reference to d's slices. It does not validate; call Validate
// afterwards when d itself may be bad.
func (s *Spec) Normalize(d Defaults) {
	if len(s.Residency) == 0 {
		s.Residency = slices.Clone(d.Residency)
		if len(s.Residency) == 0 {
			s.Residency = nil
		}
	}
	if s.MaxRuntime == 0 {
		s.MaxRuntime = Duration(d.MaxRuntime)
	}
	if s.Output.URI == "" {
		s.Output.URI = d.OutputURI
	}
	if s.Priority == "" {
		s.Priority = d.Priority
		if s.Priority == "" {
			s.Priority = defaultPriority
		}
	}
	if s.Trainer == "" {
		s.Trainer = d.Trainer
		if s.Trainer == "" {
			s.Trainer = defaultTrainer
		}
	}
}

// Clone returns a deep copy of s: it shares no slice with s.
func (s *Spec) Clone() *Spec {
	c := *s
	c.LoRA.TargetModules = slices.Clone(s.LoRA.TargetModules)
	c.Resources.GPUModels = slices.Clone(s.Resources.GPUModels)
	c.Residency = slices.Clone(s.Residency)
	c.Output.Formats = slices.Clone(s.Output.Formats)
	return &c
}

// JSON returns s as canonical JSON: compact, keys in the order of the struct
// fields, no HTML escaping, an empty residency or target_modules written as
// [], no trailing newline. Equal specs give equal bytes, and Parse reads the
// bytes of a valid spec back to an equal Spec; this is what the trainer gets
// in LATHE_JOB_FILE and what the job record stores.
//
// JSON cannot write a NaN or an infinity; it writes 0 in their place. Validate
// refuses them, so this only touches a spec that is not valid anyway.
func (s *Spec) JSON() []byte {
	c := s.Clone()
	if c.Residency == nil {
		c.Residency = []string{}
	}
	if c.LoRA.TargetModules == nil {
		c.LoRA.TargetModules = []string{}
	}
	zeroNonFinite(reflect.ValueOf(c).Elem())
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		// Only non-finite floats make encoding/json fail on these types.
		panic("jobspec: encoding a spec: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// zeroNonFinite sets every NaN or infinite float field of the struct v, at
// any depth, to 0.
func zeroNonFinite(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Struct:
			zeroNonFinite(f)
		case reflect.Float32, reflect.Float64:
			if x := f.Float(); math.IsNaN(x) || math.IsInf(x, 0) {
				f.SetFloat(0)
			}
		}
	}
}

// JobOutputURI is job id's own folder under the spec's output.uri: the
// one place a job's output URI is built (admission stores it; an explain
// shows it with id "<id>").
func (s *Spec) JobOutputURI(id string) string {
	return strings.TrimRight(s.Output.URI, "/") + "/" + id
}
