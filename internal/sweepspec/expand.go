package sweepspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// pcgStream is the second word of every sweep's PCG state; the first is
// the seed.
const pcgStream = 0x9e3779b97f4a7c15

// maxRedraws is how many draws in a row may repeat a configuration before
// Expand gives up on a space with too few distinct points.
const maxRedraws = 1000

// Expand draws the sweep's trials (grid: every point, the parameters
// sorted by path and the last varying fastest, values in the order given;
// random and asha: Search.Trials draws from a PCG seeded with Search.Seed,
// without replacement in discrete spaces, a continuous draw that repeats
// a configuration drawn again) and builds and validates each one's job
// spec. No two trials share a configuration, and the same Sweep gives the
// same trials. An invalid combination fails the whole Expand with a
// *jobspec.ValidationError naming the trial and the field
// ("trials[3].lora.rank"), its message ending with the trial's
// parameters ("; trial 3 sets lora.rank=0, training.learning_rate=0.01").
// It is Draw, then Build of every trial.
func (s *Sweep) Expand() ([]Trial, error) {
	e, err := s.Draw()
	if err != nil {
		return nil, err
	}
	return e.Build(0, e.Len())
}

// Expansion is a sweep's trials drawn (each one's parameter values, a few
// words a trial) but not yet built: Build builds a range of them, so that
// a caller storing a big sweep in chunks holds one chunk's job specs at a
// time.
type Expansion struct {
	s      *Sweep
	base   map[string]any
	points [][]any
}

// Draw draws the sweep's trials' values, as Expand does, and builds none.
func (s *Sweep) Draw() (*Expansion, error) {
	base, err := s.baseDoc()
	if err != nil {
		return nil, err
	}
	points, err := s.points()
	if err != nil {
		return nil, err
	}
	return &Expansion{s: s, base: base, points: points}, nil
}

// Len is how many trials the sweep has.
func (e *Expansion) Len() int { return len(e.points) }

// Build builds and validates trials from…to-1 (as Expand, which is Build
// of them all): each trial is the same whichever range builds it.
func (e *Expansion) Build(from, to int) ([]Trial, error) {
	if from < 0 || to > len(e.points) || from > to {
		return nil, fmt.Errorf("sweepspec: trials %d to %d of a sweep of %d", from, to, len(e.points))
	}
	trials := make([]Trial, 0, to-from)
	var errs []jobspec.FieldError
	for i := from; i < to; i++ {
		vals := e.points[i]
		params := make([]jobtype.Param, len(vals))
		for j, v := range vals {
			params[j] = jobtype.Param{Path: e.s.Parameters[j].Path, Value: v}
		}
		spec, err := jobspec.Parse(e.s.trialJSON(e.base, TrialName(e.s.Name, i), params))
		if err != nil {
			errs = append(errs, trialErrors(i, params, err)...)
			continue
		}
		trials = append(trials, Trial{Index: i, Params: params, Spec: spec})
	}
	if len(errs) > 0 {
		return nil, invalid(errs)
	}
	return trials, nil
}

// TrialName is trial i's job name: "<sweep>-<i>", the sweep's name cut so
// that the whole is at most 63 characters (the index always stays).
func TrialName(sweep string, i int) string {
	suffix := "-" + strconv.Itoa(i)
	if len(sweep)+len(suffix) > 63 {
		sweep = sweep[:max(0, 63-len(suffix))]
	}
	return sweep + suffix
}

// trialErrors names a trial's problems as trials[i].<field>.
func trialErrors(i int, params []jobtype.Param, err error) []jobspec.FieldError {
	var ve *jobspec.ValidationError
	if !errors.As(err, &ve) {
		return []jobspec.FieldError{{Field: fmt.Sprintf("trials[%d]", i), Message: err.Error()}}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "; trial %d sets ", i)
	for j, p := range params {
		if j > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.Path + "=" + formatValue(p.Value))
	}
	out := make([]jobspec.FieldError, len(ve.Errors))
	for j, fe := range ve.Errors {
		fe.Field = join(fmt.Sprintf("trials[%d]", i), fe.Field)
		fe.Message += b.String()
		out[j] = fe
	}
	return out
}

// formatValue writes a parameter's value for a message.
func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// baseDoc is the base job as a generic JSON mapping: as written, or for a
// Sweep built in Go, Job's canonical JSON.
func (s *Sweep) baseDoc() (map[string]any, error) {
	if s.base != nil {
		return s.base, nil
	}
	if s.Job == nil {
		return nil, errors.New("sweepspec: the sweep has no base job")
	}
	dec := json.NewDecoder(bytes.NewReader(s.Job.JSON()))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("sweepspec: the base job's JSON: %w", err)
	}
	return m, nil
}

// trialJSON is the job spec of a trial named name with params set in the
// base job: the sweep's priority, for asha training.max_steps, and each
// parameter at its path (maps on the way are copied, base is not touched).
func (s *Sweep) trialJSON(base map[string]any, name string, params []jobtype.Param) []byte {
	doc := maps.Clone(base)
	doc["name"] = name
	doc["priority"] = string(s.Priority)
	if s.Search.Kind == SearchASHA && s.Search.ASHA != nil && s.Search.ASHA.MaxSteps > 0 {
		setPath(doc, "training.max_steps", s.Search.ASHA.MaxSteps)
	}
	for _, p := range params {
		setPath(doc, p.Path, p.Value)
	}
	return encodeJSON(doc)
}

// setPath sets the dotted path in doc to v, copying each mapping on the way
// (a missing or null section becomes a new one).
func setPath(doc map[string]any, path string, v any) {
	segs := strings.Split(path, ".")
	m := doc
	for _, seg := range segs[:len(segs)-1] {
		child, _ := m[seg].(map[string]any)
		child = maps.Clone(child)
		if child == nil {
			child = map[string]any{}
		}
		m[seg] = child
		m = child
	}
	m[segs[len(segs)-1]] = v
}

// points draws every trial's values, in parameter order.
func (s *Sweep) points() ([][]any, error) {
	ps := s.Parameters
	isDiscrete, n := discrete(ps)
	k := s.Search.Trials
	switch {
	case len(ps) == 0:
		return nil, errors.New("sweepspec: the sweep has no parameters")
	case s.Search.Kind == SearchGrid:
		if !isDiscrete || n > MaxTrials {
			return nil, fmt.Errorf("sweepspec: a grid of %d points over %d parameters is not a grid Expand can run (at most %d points, grid and choice only)", n, len(ps), MaxTrials)
		}
		out := make([][]any, n)
		for i := range out {
			out[i] = decodePoint(ps, uint64(i))
		}
		return out, nil
	case s.Search.Kind != SearchRandom && s.Search.Kind != SearchASHA:
		return nil, fmt.Errorf("sweepspec: unknown search kind %q", s.Search.Kind)
	case k < 1 || k > MaxTrials:
		return nil, fmt.Errorf("sweepspec: search.trials is %d; it must be between 1 and %d", k, MaxTrials)
	case isDiscrete && uint64(k) > n:
		return nil, fmt.Errorf("sweepspec: search.trials is %d, more than the %d distinct points of the space", k, n)
	}
	rng := rand.New(rand.NewPCG(uint64(s.Search.Seed), pcgStream))
	if isDiscrete && n < math.MaxUint64 {
		out := make([][]any, k)
		for i, idx := range sampleIndices(rng, n, k) {
			out[i] = decodePoint(ps, idx)
		}
		return out, nil
	}
	return drawDistinct(rng, ps, k)
}

// decodePoint is point idx of a discrete space, read as a mixed-radix
// number whose last digit is the last parameter's value.
func decodePoint(ps []Param, idx uint64) []any {
	vals := make([]any, len(ps))
	for j := len(ps) - 1; j >= 0; j-- {
		size := ps[j].size()
		d := idx % size
		idx /= size
		if ps[j].Kind == KindIntUniform {
			vals[j] = int64(ps[j].Lo) + int64(d)
		} else {
			vals[j] = ps[j].Values[d]
		}
	}
	return vals
}

// sampleIndices draws k distinct indices of [0, n) in random order: the
// first k steps of a Fisher–Yates shuffle of 0…n-1, with only the moved
// entries held (in a map), so it costs O(k) whatever n is.
func sampleIndices(rng *rand.Rand, n uint64, k int) []uint64 {
	moved := make(map[uint64]uint64, k)
	at := func(i uint64) uint64 {
		if v, ok := moved[i]; ok {
			return v
		}
		return i
	}
	out := make([]uint64, k)
	for i := range out {
		j := uint64(i) + rng.Uint64N(n-uint64(i))
		out[i] = at(j)
		moved[j] = at(uint64(i))
	}
	return out
}

// drawDistinct draws k configurations one parameter at a time, drawing
// again one that repeats an earlier one.
func drawDistinct(rng *rand.Rand, ps []Param, k int) ([][]any, error) {
	seen := make(map[string]bool, k)
	out := make([][]any, 0, k)
	for misses := 0; len(out) < k; {
		vals := make([]any, len(ps))
		for j, p := range ps {
			vals[j] = p.draw(rng)
		}
		key := pointKey(vals)
		if seen[key] {
			if misses++; misses > maxRedraws {
				return nil, fmt.Errorf("sweepspec: drew %d distinct configurations of the %d asked for, then only repeats: the space has too few distinct values", len(out), k)
			}
			continue
		}
		misses = 0
		seen[key] = true
		out = append(out, vals)
	}
	return out, nil
}

// pointKey is a configuration's key in drawDistinct: equal for equal
// values (each parameter draws values of one type), written without
// reflection (a JSON encoding of each draw was a third of a 10,000-trial
// sweep's drawing).
func pointKey(vals []any) string {
	b := make([]byte, 0, 24*len(vals))
	for _, v := range vals {
		switch x := v.(type) {
		case float64:
			b = strconv.AppendFloat(append(b, 'f'), x, 'g', -1, 64)
		case int64:
			b = strconv.AppendInt(append(b, 'i'), x, 10)
		case string:
			b = strconv.AppendQuote(append(b, 's'), x)
		default:
			b = append(append(b, 'j'), encodeJSON(x)...)
		}
		b = append(b, 0)
	}
	return string(b)
}

// draw draws one value of p.
func (p Param) draw(rng *rand.Rand) any {
	switch p.Kind {
	case KindGrid, KindChoice:
		return p.Values[rng.IntN(len(p.Values))]
	case KindIntUniform:
		return int64(p.Lo) + rng.Int64N(int64(p.Hi)-int64(p.Lo)+1)
	case KindLogUniform:
		lo, hi := math.Log(p.Lo), math.Log(p.Hi)
		return math.Min(math.Max(math.Exp(lo+rng.Float64()*(hi-lo)), p.Lo), p.Hi)
	}
	v := p.Lo + rng.Float64()*(p.Hi-p.Lo)
	if v > p.Hi {
		v = p.Hi
	}
	return v
}
