package sweepspec

import (
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// maxExactInt is the largest magnitude of an int_uniform bound: integers
// up to 2⁵³ are exact as float64.
const maxExactInt = 1 << 53

// fixedFields are the job fields a sweep may not vary, and why.
var fixedFields = map[string]string{
	"name":         "each trial is named <sweep>-<index>",
	"priority":     "set the sweep's priority: it applies to every trial",
	"dataset":      "every trial trains on the same data, or their objectives do not compare (sweep the same job over another dataset in a second sweep)",
	"eval_dataset": "every trial is evaluated on the same data, or their objectives do not compare",
	"residency":    "residency must be the same for every trial: it says where the sweep's data may go, which cannot depend on a hyperparameter",
	"output":       "every trial's artifacts go under the same output, in a folder per trial",
	"trainer":      "every trial runs the same trainer, or their metrics do not compare",
}

// fieldKind is what a scalar job field holds.
type fieldKind int

const (
	fieldString fieldKind = iota
	fieldInt
	fieldFloat
	fieldDuration
)

var durationType = reflect.TypeFor[jobspec.Duration]()

// jobField finds the job spec field at a dotted path in jobspec.Spec's
// schema (its json tags, as jobspec.Parse reads them) and says what it
// holds, or why a sweep cannot set it.
func jobField(path string) (fieldKind, string) {
	top, _, _ := strings.Cut(path, ".")
	if why, ok := fixedFields[top]; ok {
		return 0, "cannot be swept: " + why
	}
	t := reflect.TypeFor[jobspec.Spec]()
	for i, seg := range strings.Split(path, ".") {
		if t.Kind() != reflect.Struct {
			return 0, "is not a field of the job spec: " + strings.Join(strings.Split(path, ".")[:i], ".") + " is not a section"
		}
		f, ok := fieldByTag(t, seg)
		if !ok {
			return 0, "is not a field of the job spec"
		}
		t = f.Type
	}
	switch {
	case t == durationType:
		return fieldDuration, ""
	case t.Kind() == reflect.Struct:
		return 0, "is a section of the job spec, not a field: sweep one of its fields"
	case t.Kind() == reflect.Slice:
		return 0, "is a list: a sweep sets fields that hold one value"
	case t.Kind() == reflect.String:
		return fieldString, ""
	case t.Kind() == reflect.Float64:
		return fieldFloat, ""
	}
	return fieldInt, ""
}

// fieldByTag finds t's field whose json name is name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// parameters decodes `parameters:`, a mapping of job field paths to
// spaces; the result is sorted by path.
func (d *decoder) parameters(path string, n *yaml.Node) []Param {
	var ps []Param
	d.mapping(path, n, func(key, child string, v *yaml.Node) bool {
		kind, why := jobField(key)
		if why != "" {
			d.fail(child, v, why)
			return true
		}
		if p, ok := d.space(child, v, kind); ok {
			p.Path = key
			ps = append(ps, p)
		}
		return true
	})
	slices.SortFunc(ps, func(a, b Param) int { return strings.Compare(a.Path, b.Path) })
	return ps
}

// space decodes one parameter's space: a mapping with exactly one kind.
func (d *decoder) space(path string, n *yaml.Node, field fieldKind) (Param, bool) {
	var p Param
	kinds := 0
	ok := d.mapping(path, n, func(key, child string, v *yaml.Node) bool {
		switch key {
		case KindGrid, KindChoice, KindUniform, KindLogUniform, KindIntUniform:
		default:
			return false
		}
		kinds++
		p.Kind = key
		var good bool
		if key == KindGrid || key == KindChoice {
			p.Values, good = d.values(child, v)
		} else {
			p.Lo, p.Hi, good = d.bounds(child, v, key)
		}
		if good && !compatible(key, field) {
			d.fail(child, v, "does not suit "+fieldNames[field]+" field: use "+suits[field])
			good = false
		}
		if !good {
			p.Kind = "-" // reported
		}
		return true
	})
	switch {
	case !ok:
		return p, false
	case kinds == 0:
		d.fail(path, n, "must give one space: grid, choice, uniform, log_uniform or int_uniform")
		return p, false
	case kinds > 1:
		d.fail(path, n, "must give exactly one space, not several")
		return p, false
	}
	return p, p.Kind != "-"
}

var fieldNames = map[fieldKind]string{fieldString: "a string", fieldInt: "an integer", fieldFloat: "a number", fieldDuration: "a duration"}

var suits = map[fieldKind]string{
	fieldString:   "grid or choice",
	fieldDuration: "grid or choice (of durations such as \"2h\")",
	fieldInt:      "grid, choice or int_uniform",
	fieldFloat:    "grid, choice, uniform, log_uniform or int_uniform",
}

// compatible reports whether a space of kind suits a field.
func compatible(kind string, field fieldKind) bool {
	switch kind {
	case KindUniform, KindLogUniform:
		return field == fieldFloat
	case KindIntUniform:
		return field == fieldFloat || field == fieldInt
	}
	return true
}

// values decodes a grid's or choice's list: 1 to MaxValues distinct
// scalars (string, number, boolean).
func (d *decoder) values(path string, n *yaml.Node) ([]any, bool) {
	if n.Kind != yaml.SequenceNode {
		d.fail(path, n, "must be a list of values, not "+jobspec.KindName(n))
		return nil, false
	}
	if len(n.Content) == 0 || len(n.Content) > MaxValues {
		d.fail(path, n, fmt.Sprintf("must list 1 to %d values, not %d", MaxValues, len(n.Content)))
		return nil, false
	}
	vals := make([]any, len(n.Content))
	seen := make(map[string]int, len(n.Content))
	ok := true
	for i, c := range n.Content {
		item := fmt.Sprintf("%s[%d]", path, i)
		v, good := scalarValue(c)
		if f, isFloat := v.(float64); isFloat && (math.IsNaN(f) || math.IsInf(f, 0)) {
			good = false
		}
		if jobspec.OutOfRange(c) {
			d.fail(item, c, jobspec.MsgOutOfRange)
			ok = false
			continue
		}
		if !good || v == nil {
			d.fail(item, c, "must be a string, a finite number or a boolean, not "+jobspec.KindName(c))
			ok = false
			continue
		}
		key := string(encodeJSON(v))
		if j, dup := seen[key]; dup {
			d.fail(item, c, fmt.Sprintf("repeats item %d: every value must be different", j))
			ok = false
			continue
		}
		seen[key] = i
		vals[i] = v
	}
	return vals, ok
}

// bounds decodes [lo, hi] of a uniform kind.
func (d *decoder) bounds(path string, n *yaml.Node, kind string) (lo, hi float64, ok bool) {
	if n.Kind != yaml.SequenceNode || len(n.Content) != 2 {
		d.fail(path, n, "must be [low, high]")
		return 0, 0, false
	}
	lon, hin := n.Content[0], n.Content[1]
	if kind == KindIntUniform {
		l, ok1 := d.integer(path+"[0]", lon)
		h, ok2 := d.integer(path+"[1]", hin)
		switch {
		case !ok1 || !ok2:
			return 0, 0, false
		case l < -maxExactInt || h > maxExactInt:
			d.fail(path, n, "bounds must be between -2^53 and 2^53")
			return 0, 0, false
		case l > h:
			d.fail(path, n, "low must not be above high")
			return 0, 0, false
		}
		return float64(l), float64(h), true
	}
	lo, ok1 := d.number(path+"[0]", lon)
	hi, ok2 := d.number(path+"[1]", hin)
	switch {
	case !ok1 || !ok2:
		return 0, 0, false
	case lo >= hi:
		d.fail(path, n, "low must be below high")
		return 0, 0, false
	case kind == KindLogUniform && lo <= 0:
		d.fail(path, n, "low must be above 0 (the space is uniform in log(value))")
		return 0, 0, false
	case math.IsInf(hi-lo, 0):
		d.fail(path, n, "high - low must be a finite number")
		return 0, 0, false
	}
	return lo, hi, true
}

// discrete reports whether every parameter takes finitely many values
// (grid, choice, int_uniform), and how many points the space has
// (saturating at math.MaxUint64).
func discrete(ps []Param) (bool, uint64) {
	n := uint64(1)
	for _, p := range ps {
		size := p.size()
		if size == 0 {
			return false, 0
		}
		hi, lo := bits.Mul64(n, size)
		if hi != 0 {
			n = math.MaxUint64
		} else {
			n = lo
		}
	}
	return true, n
}

// size is how many values p takes; 0 for a continuous space.
func (p Param) size() uint64 {
	switch p.Kind {
	case KindGrid, KindChoice:
		return uint64(len(p.Values))
	case KindIntUniform:
		return uint64(int64(p.Hi)-int64(p.Lo)) + 1
	}
	return 0
}
