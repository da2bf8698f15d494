package simplot

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// InputError is what SVG returns for an Input it will not draw. Field names
// the offending field as a Go expression ("Points[2].Owned"), Value is its
// value as written in the message.
type InputError struct {
	Field   string
	Value   string
	Problem string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("simplot: %s = %s: %s", e.Field, e.Value, e.Problem)
}

// validate checks everything SVG's doc comment promises to reject, in field
// order, and returns the first problem found.
func validate(in Input) error {
	if len(in.Points) == 0 {
		return &InputError{Field: "Points", Value: "[]", Problem: "need at least one pool size"}
	}
	if err := checkPoints("Points", in.Points); err != nil {
		return err
	}
	if err := checkAmount("AllCloudCostUSD", in.AllCloudCostUSD); err != nil {
		return err
	}
	if err := checkAmount("BreakEvenOwned", in.BreakEvenOwned); err != nil {
		return err
	}
	if !hasOwned(in.Points, in.OptimalOwned) {
		sizes := make([]string, len(in.Points))
		for i, p := range in.Points {
			sizes[i] = strconv.Itoa(p.Owned)
		}
		return &InputError{
			Field:   "OptimalOwned",
			Value:   strconv.Itoa(in.OptimalOwned),
			Problem: "not among Points (" + strings.Join(sizes, ", ") + ")",
		}
	}
	if r := in.OptimalRange; r[0] < 0 || r[1] < r[0] {
		return &InputError{Field: "OptimalRange", Value: fmt.Sprintf("%d–%d", r[0], r[1]), Problem: "want 0 ≤ first ≤ second"}
	}
	return checkPoints("Reference", in.Reference)
}

func checkPoints(field string, ps []Point) error {
	for i, p := range ps {
		at := fmt.Sprintf("%s[%d]", field, i)
		if p.Owned < 0 {
			return &InputError{Field: at + ".Owned", Value: strconv.Itoa(p.Owned), Problem: "negative"}
		}
		if i > 0 && p.Owned <= ps[i-1].Owned {
			return &InputError{
				Field:   at + ".Owned",
				Value:   strconv.Itoa(p.Owned),
				Problem: fmt.Sprintf("not above %s[%d].Owned = %d; %s must ascend by Owned", field, i-1, ps[i-1].Owned, field),
			}
		}
		for _, f := range []struct {
			name string
			v    float64
		}{{"CostUSD", p.CostUSD}, {"P95WaitS", p.P95WaitS}, {"MeanWaitS", p.MeanWaitS}} {
			if err := checkAmount(at+"."+f.name, f.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkAmount rejects NaN, infinities and negative values.
func checkAmount(field string, v float64) error {
	value := strconv.FormatFloat(v, 'g', -1, 64)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return &InputError{Field: field, Value: value, Problem: "not a finite number"}
	case v < 0:
		return &InputError{Field: field, Value: value, Problem: "negative"}
	}
	return nil
}

func hasOwned(ps []Point, owned int) bool {
	for _, p := range ps {
		if p.Owned == owned {
			return true
		}
	}
	return false
}
