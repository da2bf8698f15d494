package jobspec

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strconv"
	"strings"
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

// The regular expressions Validate's syntax rules stand in for.
var syntaxRules = []struct {
	name string
	re   *regexp.Regexp
	fn   func(string) bool
}{
	{"name", regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`), validName},
	{"target module", regexp.MustCompile(`^[A-Za-z0-9_.]+$`), validTargetModule},
	{"residency tag", regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`), validResidencyTag},
	{"trainer", regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`), validTrainer},
	{"bucket", regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`), validBucket},
	{"ipv4", regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$`), looksIPv4},
}

func checkSyntaxRules(t *testing.T, s string) {
	t.Helper()
	for _, r := range syntaxRules {
		if got, want := r.fn(s), r.re.MatchString(s); got != want {
			t.Errorf("%s rule on %q = %v, regexp says %v", r.name, s, got, want)
		}
	}
}

// TestSyntaxRulesMatchRegexps checks the byte-loop syntax rules against
// their regular expressions: every string of up to 4 bytes over an alphabet
// of each class's edges, and strings either side of each length limit.
func TestSyntaxRulesMatchRegexps(t *testing.T) {
	alphabet := []string{"a", "z", "A", "Z", "0", "9", "-", "_", ".", "/", " ", "\n", "é", "\xff", "`", "{", "@", "[", ":"}
	strs := []string{""}
	for range 4 {
		prev := strs
		for _, p := range prev {
			if len(p) < 4 {
				for _, a := range alphabet {
					strs = append(strs, p+a)
				}
			}
		}
		strs = dedupe(strs)
	}
	for n := 1; n <= 70; n++ {
		for _, fill := range []string{"a", "9", "-", ".", "_"} {
			mid := strings.Repeat(fill, max(n-2, 0))
			for _, ends := range [][2]string{{"a", "a"}, {"0", "9"}, {"-", "a"}, {"a", "-"}, {"a", "."}, {"A", "a"}} {
				strs = append(strs, (ends[0] + mid + ends[1])[:n])
			}
		}
	}
	strs = append(strs, "1.2.3.4", "1.2.3.4.5", "1.2.3", "01.002.3.4444", "1..2.3", ".1.2.3", "1.2.3.", "1.2.3.4\n",
		"192.168.0.1", "a1.2.3.4", "1.2.3.4a", "١.٢.٣.٤", "my-bucket", "my..bucket", "xn--abc", "a.b", "ab", "abc")
	for _, s := range strs {
		checkSyntaxRules(t, s)
	}
}

func dedupe(ss []string) []string {
	seen := make(map[string]bool, len(ss))
	out := ss[:0]
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// FuzzSyntaxRules checks the byte-loop syntax rules against their regular
// expressions on any string.
func FuzzSyntaxRules(f *testing.F) {
	for _, s := range []string{"", "a", "support-bot-lora", "q_proj", "model.layers.0.q_proj", "eu", "reference",
		"lathe-models", "192.168.0.1", "a-", "-a", strings.Repeat("a", 63), strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkSyntaxRules(t, s)
	})
}

// TestDuplicateKeysEitherSideOfSmallMapping checks decodeStruct's duplicate
// detection, a scan of the earlier keys up to smallMapping keys and a map
// beyond, against the rule: a scalar key is a duplicate when an earlier
// scalar key has its text (a complex key's empty Value counts for nothing).
func TestDuplicateKeysEitherSideOfSmallMapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := []string{"x0", "x1", "x2", "x3", `""`, "name", "? [a]"}
	for n := 1; n <= 2*smallMapping+8; n++ {
		for range 20 {
			var src strings.Builder
			var want []FieldError
			seen := map[string]bool{}
			for i := range n {
				k := keys[rng.IntN(len(keys))]
				if k == "x3" {
					k = fmt.Sprintf("y%d", i) // a fresh key, to fill the mapping
				}
				v := fmt.Sprintf("v%d", i)
				if k == "? [a]" {
					fmt.Fprintf(&src, "? [a]\n: %s\n", v)
					want = append(want, FieldError{"[a]", v, "keys must be strings, not a list"})
					continue
				}
				fmt.Fprintf(&src, "%s: %s\n", k, v)
				name, _ := strconv.Unquote(k)
				if name == "" && k != `""` {
					name = k
				}
				switch {
				case seen[name]:
					want = append(want, FieldError{name, v, "duplicate key"})
				case name != "name":
					want = append(want, FieldError{name, v, "unknown field"})
				}
				seen[name] = true
			}
			_, err := Parse([]byte(src.String()))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse(%q) = %v", src.String(), err)
			}
			var got []FieldError
			for _, fe := range ve.Errors {
				switch {
				case fe.Message == "duplicate key", fe.Message == "unknown field", strings.HasPrefix(fe.Message, "keys must"):
					got = append(got, fe)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Parse(%q)\n got %v\nwant %v", src.String(), got, want)
			}
		}
	}
}

// oldList is checker.list as it was, with a map for every list: the
// reference for the scan that short lists now get.
func oldList(c *checker, field string, items []string, unique bool, rule func(string) string) {
	first := make(map[string]int, len(items))
	for i, it := range items {
		f := field + "[" + strconv.Itoa(i) + "]"
		if it == "" {
			c.add(f, "", "must not be empty")
			continue
		}
		if msg := rule(it); msg != "" {
			c.add(f, it, msg)
			continue
		}
		if !unique {
			continue
		}
		if j, dup := first[it]; dup {
			c.add(f, it, fmt.Sprintf("repeats %s[%d]", field, j))
			continue
		}
		first[it] = i
	}
}

func TestCheckerListMatchesMapVersion(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pool := []string{"eu", "us", "", "BAD", "onprem", "x"}
	rule := func(s string) string {
		if !validResidencyTag(s) {
			return "bad tag"
		}
		return ""
	}
	for n := 0; n <= 2*smallList+8; n++ {
		for range 50 {
			items := make([]string, n)
			for i := range items {
				items[i] = pool[rng.IntN(len(pool))]
			}
			for _, unique := range []bool{true, false} {
				var got, want checker
				got.list("residency", items, unique, rule)
				oldList(&want, "residency", items, unique, rule)
				if !reflect.DeepEqual(got.errs, want.errs) {
					t.Fatalf("list(%q, unique %v)\n got %v\nwant %v", items, unique, got.errs, want.errs)
				}
			}
		}
	}
}
