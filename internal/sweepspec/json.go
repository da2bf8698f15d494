package sweepspec

import (
	"strconv"
	"strings"
)

// sweepJSON is the canonical JSON shape of a sweep spec: every field
// written, defaults filled in, the base job inline as written.
type sweepJSON struct {
	Name           string                    `json:"name"`
	Job            map[string]any            `json:"job"`
	Parameters     map[string]map[string]any `json:"parameters"`
	Search         searchJSON                `json:"search"`
	Objective      objectiveJSON             `json:"objective"`
	MaxParallel    int                       `json:"max_parallel"`
	BudgetUSD      float64                   `json:"budget_usd"`
	BudgetGPUHours float64                   `json:"budget_gpu_hours"`
	Priority       string                    `json:"priority"`
}

type searchJSON struct {
	Kind            string      `json:"kind"`
	Trials          *int        `json:"trials,omitempty"`
	Seed            *int64      `json:"seed,omitempty"`
	MinSteps        *int        `json:"min_steps,omitempty"`
	MaxSteps        *int        `json:"max_steps,omitempty"`
	ReductionFactor *int        `json:"reduction_factor,omitempty"`
	Median          *medianJSON `json:"median,omitempty"`
}

type medianJSON struct {
	GraceSteps int `json:"grace_steps"`
	MinTrials  int `json:"min_trials"`
}

type objectiveJSON struct {
	Metric string `json:"metric"`
	Goal   string `json:"goal"`
}

// JSON returns the sweep as canonical JSON: every field written with its
// defaults filled in, keys in a fixed order, the base job inline as its
// author wrote it (so that jobspec's defaults still follow the swept
// fields). Parse(s.JSON()) gives a Sweep that expands to the same trials;
// it is what the sweep's record stores (jobtype.Sweep.Spec).
func (s *Sweep) JSON() []byte {
	out := sweepJSON{
		Name:           s.Name,
		Parameters:     make(map[string]map[string]any, len(s.Parameters)),
		Search:         searchJSON{Kind: s.Search.Kind},
		Objective:      objectiveJSON{Metric: s.Objective.Metric, Goal: s.Objective.Goal},
		MaxParallel:    s.MaxParallel,
		BudgetUSD:      s.BudgetUSD,
		BudgetGPUHours: s.BudgetGPUHours,
		Priority:       string(s.Priority),
	}
	out.Job, _ = s.baseDoc() // nil (null) only for a Sweep without a job
	for _, p := range s.Parameters {
		var space any = jsonValues(p.Values)
		switch p.Kind {
		case KindUniform, KindLogUniform:
			space = []float64{p.Lo, p.Hi}
		case KindIntUniform:
			space = []int64{int64(p.Lo), int64(p.Hi)}
		}
		out.Parameters[p.Path] = map[string]any{p.Kind: space}
	}
	if s.Search.Kind != SearchGrid {
		out.Search.Trials, out.Search.Seed = &s.Search.Trials, &s.Search.Seed
	}
	if a := s.Search.ASHA; a != nil && s.Search.Kind == SearchASHA {
		out.Search.MinSteps, out.Search.MaxSteps, out.Search.ReductionFactor = &a.MinSteps, &a.MaxSteps, &a.ReductionFactor
	}
	if m := s.Search.Median; m != nil {
		out.Search.Median = &medianJSON{GraceSteps: m.GraceSteps, MinTrials: m.MinTrials}
	}
	return encodeJSON(out)
}

// Inline parses the sweep spec in data (a `job:` path read with readJob)
// and returns it as canonical JSON (Sweep.JSON), its job inline: what the
// CLI sends, since the API reads no files. Its errors are Parse's.
func Inline(data []byte, readJob func(path string) ([]byte, error)) ([]byte, error) {
	s, err := Parse(data, Options{ReadJob: readJob})
	if err != nil {
		return nil, err
	}
	return s.JSON(), nil
}

// jsonValues are a grid's or choice's values for JSON, a float64 that is
// a whole number written with ".0" so that it reads back as a float64, not
// an int64.
func jsonValues(vals []any) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		if f, ok := v.(float64); ok {
			v = jsonFloat(f)
		}
		out[i] = v
	}
	return out
}

// jsonFloat is a float64 whose JSON always reads back as one.
type jsonFloat float64

// MarshalJSON writes f in the shortest form that reads back the same,
// with ".0" when that form would read as an integer.
func (f jsonFloat) MarshalJSON() ([]byte, error) {
	s := strconv.FormatFloat(float64(f), 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return []byte(s), nil
}
