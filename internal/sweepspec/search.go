package sweepspec

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// searchKeys are the keys of `search:` and the kinds each belongs to.
var searchKeys = []struct{ key, kinds string }{
	{"kind", "grid random asha"},
	{"trials", "random asha"},
	{"seed", "random asha"},
	{"min_steps", "asha"},
	{"max_steps", "asha"},
	{"reduction_factor", "asha"},
	{"median", "grid random"},
}

// search decodes `search:`: a kind alone (`search: grid`) or a mapping.
func (d *decoder) search(path string, n *yaml.Node, t *topNodes) Search {
	var s Search
	if n.Kind == yaml.ScalarNode {
		if s.Kind = d.searchKind(path, n); s.Kind != "" {
			d.searchRequired(&s, path, nil)
		}
		return s
	}
	given := map[string]*yaml.Node{}
	if !d.mapping(path, n, func(key, _ string, v *yaml.Node) bool {
		for _, k := range searchKeys {
			if k.key == key {
				given[key] = v
				return true
			}
		}
		return false
	}) {
		return s
	}
	kn := given["kind"]
	if kn == nil {
		d.add(jobspec.FieldError{Field: path + ".kind", Message: "is required: grid, random or asha"})
		return s
	}
	if s.Kind = d.searchKind(path+".kind", kn); s.Kind == "" {
		return s
	}
	for _, k := range searchKeys[1:] {
		v := given[k.key]
		if v == nil {
			continue
		}
		child := path + "." + k.key
		if !strings.Contains(k.kinds, s.Kind) {
			d.fail(child, v, "is not a setting of "+article(s.Kind)+" search (only of "+strings.ReplaceAll(k.kinds, " ", " and ")+" searches)")
			continue
		}
		d.searchSetting(&s, k.key, child, v, t)
	}
	d.searchRequired(&s, path, given)
	return s
}

// searchKind decodes the kind.
func (d *decoder) searchKind(path string, n *yaml.Node) string {
	kind, ok := d.str(path, n)
	if ok && kind != SearchGrid && kind != SearchRandom && kind != SearchASHA {
		d.fail(path, n, "must be grid, random or asha")
		return ""
	}
	return kind
}

// searchSetting decodes one setting of a search of s.Kind.
func (d *decoder) searchSetting(s *Search, key, path string, v *yaml.Node, t *topNodes) {
	if key == "median" {
		s.Median = d.median(path, v)
		return
	}
	i, ok := d.integer(path, v)
	if !ok {
		return
	}
	atLeast := func(lo, hi int64) (int, bool) {
		if i < lo || i > hi {
			d.fail(path, v, "must be between "+strconv.FormatInt(lo, 10)+" and "+strconv.FormatInt(hi, 10))
			return 0, false
		}
		return int(i), true
	}
	if s.Kind == SearchASHA && s.ASHA == nil {
		s.ASHA = &ASHA{ReductionFactor: DefaultReductionFactor}
	}
	switch key {
	case "trials":
		s.Trials, _ = atLeast(1, MaxTrials)
		t.trialsNode = v
	case "seed":
		s.Seed = i
	case "min_steps":
		s.ASHA.MinSteps, _ = atLeast(1, 1<<31-1)
	case "max_steps":
		s.ASHA.MaxSteps, _ = atLeast(2, 1<<31-1)
	case "reduction_factor":
		s.ASHA.ReductionFactor, _ = atLeast(2, 100)
	}
}

// searchRequired reports the settings a search of s.Kind needs and lacks,
// and asha's min_steps < max_steps.
func (d *decoder) searchRequired(s *Search, path string, given map[string]*yaml.Node) {
	need := func(key, why string) {
		if given[key] == nil {
			d.add(jobspec.FieldError{Field: path + "." + key, Message: "is required for " + article(s.Kind) + " search: " + why})
		}
	}
	if s.Kind == SearchRandom || s.Kind == SearchASHA {
		need("trials", "how many trials to draw")
	}
	if s.Kind != SearchASHA {
		return
	}
	if s.ASHA == nil {
		s.ASHA = &ASHA{ReductionFactor: DefaultReductionFactor}
	}
	need("min_steps", "the first rung's steps")
	need("max_steps", "the last rung's steps (every trial's training.max_steps)")
	if a := s.ASHA; a.MinSteps > 0 && a.MaxSteps > 0 && a.MaxSteps <= a.MinSteps {
		d.fail(path+".max_steps", given["max_steps"], fmt.Sprintf("must be above min_steps (%d)", a.MinSteps))
	}
}

// median decodes `search.median:`.
func (d *decoder) median(path string, n *yaml.Node) *Median {
	m := &Median{MinTrials: DefaultMedianMinTrials}
	d.mapping(path, n, func(key, child string, v *yaml.Node) bool {
		if key != "grace_steps" && key != "min_trials" {
			return false
		}
		i, ok := d.integer(child, v)
		switch {
		case !ok:
		case key == "grace_steps" && (i < 0 || i > 1<<31-1):
			d.fail(child, v, "must be at least 0 (the steps before a trial may be stopped)")
		case key == "min_trials" && (i < 1 || i > MaxTrials):
			d.fail(child, v, fmt.Sprintf("must be between 1 and %d", MaxTrials))
		case key == "grace_steps":
			m.GraceSteps = int(i)
		default:
			m.MinTrials = int(i)
		}
		return true
	})
	return m
}

// checkSearch checks the search against the parameters (grid: grid and
// choice spaces only, at most MaxTrials points; random and asha: no more
// trials than a discrete space has points; asha: training.max_steps is
// its own) and fills in Trials for grid and the default max_parallel.
func (d *decoder) checkSearch(s *Sweep, t *topNodes) {
	if t.badSearch || t.badParams || len(s.Parameters) == 0 {
		return
	}
	isDiscrete, points := discrete(s.Parameters)
	switch s.Search.Kind {
	case SearchGrid:
		dims := make([]string, 0, len(s.Parameters))
		axes := true
		for _, p := range s.Parameters {
			if p.Kind != KindGrid && p.Kind != KindChoice {
				d.add(jobspec.FieldError{Field: "parameters." + p.Path + "." + p.Kind,
					Message: "a grid search takes grid and choice spaces only (draw from " + p.Kind + " with search kind random or asha)"})
				axes = false
			}
			dims = append(dims, strconv.Itoa(len(p.Values)))
		}
		switch {
		case !axes:
			return // reported
		case points > MaxTrials:
			d.add(jobspec.FieldError{Field: "parameters", Value: strings.Join(dims, " × "),
				Message: fmt.Sprintf("the grid has %d points; a sweep has at most %d trials", points, MaxTrials)})
			return
		}
		s.Search.Trials = int(points)
	case SearchASHA:
		for _, p := range s.Parameters {
			if p.Path == "training.max_steps" {
				d.add(jobspec.FieldError{Field: "parameters.training.max_steps",
					Message: "cannot be swept by an asha search: asha sets every trial's training.max_steps to search.max_steps"})
			}
		}
		fallthrough
	case SearchRandom:
		if isDiscrete && s.Search.Trials > 0 && uint64(s.Search.Trials) > points {
			d.fail("search.trials", t.trialsNode, fmt.Sprintf(
				"is more than the %d distinct points of the parameters' space: no two trials may share a configuration", points))
		}
	}
	if !t.maxParallel && s.Search.Trials > 0 {
		s.MaxParallel = s.Search.Trials
	}
}

// article puts "a" or "an" before a search kind.
func article(kind string) string {
	if kind == SearchASHA {
		return "an " + kind
	}
	return "a " + kind
}
