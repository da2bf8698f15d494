package jobspec

import (
	"math"
	"strconv"
	"testing"

	"go.yaml.in/yaml/v3"
)

// checkQuickNumbers checks quickInt and quickFloat against yaml.v3's
// Node.Decode on value under each numeric tag and style: when a quick path
// answers, Decode must succeed with the very same value.
func checkQuickNumbers(t *testing.T, value string) {
	t.Helper()
	for _, tag := range []string{"!!int", "!!float", "!!str", ""} {
		for _, style := range []yaml.Style{0, yaml.DoubleQuotedStyle} {
			n := &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Style: style}
			if q, ok := quickInt(n); ok {
				var i int64
				if err := n.Decode(&i); err != nil || i != q {
					t.Errorf("quickInt(%s %q) = %d; Decode = %d, %v", tag, value, q, i, err)
				}
			}
			if q, ok := quickFloat(n); ok {
				var f float64
				if err := n.Decode(&f); err != nil || math.Float64bits(f) != math.Float64bits(q) {
					t.Errorf("quickFloat(%s %q) = %v; Decode = %v, %v", tag, value, q, f, err)
				}
			}
		}
	}
	// And with the tag yaml.v3 gives the value as a plain scalar.
	var doc yaml.Node
	if yaml.Unmarshal([]byte("v: "+value), &doc) == nil && len(doc.Content) == 1 &&
		len(doc.Content[0].Content) == 2 {
		n := doc.Content[0].Content[1]
		if q, ok := quickInt(n); ok {
			var i int64
			if err := n.Decode(&i); err != nil || i != q {
				t.Errorf("quickInt(YAML %q) = %d; Decode = %d, %v", value, q, i, err)
			}
		}
		if q, ok := quickFloat(n); ok {
			var f float64
			if err := n.Decode(&f); err != nil || math.Float64bits(f) != math.Float64bits(q) {
				t.Errorf("quickFloat(YAML %q) = %v; Decode = %v, %v", value, q, f, err)
			}
		}
	}
}

var quickNumbers = []string{
	"0", "-0", "1", "-1", "7", "42", "010", "-010", "00", "+5", "+0", "0x10", "0o17", "0b101", "-0b1", "1_000",
	"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
	"18446744073709551615", "18446744073709551616", "12345678901234567890123", "99999999999999999999",
	"0.0", "-0.0", "0.5", ".5", "-.5", "5.", "1e3", "1E3", "1e+3", "1e-3", "2.0e-4", "2e-4", "1.5e300",
	"1e308", "1.7976931348623157e308", "1.8e308", "1e400", "-1e400", "1e-400", "5e-324", "4.9e-324",
	"0e0", "-0E-0", "9223372036854775807.0", "9.223372036854775807e18", "1e19", "1.0e2_0",
	".nan", ".inf", "-.inf", "NaN", "Infinity", "", " ", "1 ", " 1", "1-", "--1", "0.", "1e", "e1",
	"1.5", "2.5e-1", "12:30", "2001-12-14", "1_0.5", "0755", "08", "09.5", "1..2", "١٢", "½",
}

// TestQuickNumbersMatchDecode checks the fast paths of decodeInt and
// decodeFloat against the yaml.v3 decoding they stand in for.
func TestQuickNumbersMatchDecode(t *testing.T) {
	values := append([]string(nil), quickNumbers...)
	for i := int64(-1000); i <= 1000; i++ {
		values = append(values, strconv.FormatInt(i, 10))
	}
	for _, f := range []float64{0.05, 2e-4, 1.0 / 3, math.Pi, math.MaxFloat64, math.SmallestNonzeroFloat64, 1 << 53, 1<<53 + 1, 1 << 63} {
		for _, fmtc := range []byte{'e', 'E', 'f', 'g'} {
			values = append(values, strconv.FormatFloat(f, fmtc, -1, 64), strconv.FormatFloat(-f, fmtc, -1, 64))
		}
	}
	for _, v := range values {
		checkQuickNumbers(t, v)
	}
	// The quick paths must answer for the spellings JSON uses, or they
	// are no use.
	for _, v := range []string{"0", "-0", "42", "-9223372036854775808"} {
		if _, ok := quickInt(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: v}); !ok {
			t.Errorf("quickInt(!!int %q) did not answer", v)
		}
	}
	for _, v := range []string{"0.05", "2e-4", "-0.0", "1.5E+300"} {
		if _, ok := quickFloat(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: v}); !ok {
			t.Errorf("quickFloat(!!float %q) did not answer", v)
		}
	}
}

// FuzzQuickNumbers checks the fast paths against Node.Decode on any text.
func FuzzQuickNumbers(f *testing.F) {
	for _, v := range quickNumbers {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, value string) {
		checkQuickNumbers(t, value)
	})
}
