package jobspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// jsonNodeTokens is the Decoder.Token-based jsonNode that Parse used before
// the hand-written one, kept verbatim as the reference it must match.
func jsonNodeTokens(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		if t == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key})
			}
			v, err := jsonNodeTokens(dec)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t, Style: yaml.DoubleQuotedStyle}, nil
	case json.Number:
		tag := "!!float"
		if _, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			tag = "!!int"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: string(t)}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// referenceJSONNode runs jsonNodeTokens the way parseDocument used to.
func referenceJSONNode(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return jsonNodeTokens(dec)
}

// nodeDiff compares two trees field by field (every field of yaml.Node, and
// a nil Content apart from an empty one) and describes the first difference,
// or returns "".
func nodeDiff(a, b *yaml.Node) string {
	type pair struct {
		a, b *yaml.Node
		path string
	}
	stack := []pair{{a, b, "$"}}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if (p.a == nil) != (p.b == nil) {
			return fmt.Sprintf("%s: nil %v vs %v", p.path, p.a == nil, p.b == nil)
		}
		if p.a == nil {
			continue
		}
		sa, sb := *p.a, *p.b
		sa.Content, sb.Content = nil, nil
		if !reflect.DeepEqual(sa, sb) {
			return fmt.Sprintf("%s:\n new %+v\n old %+v", p.path, sa, sb)
		}
		if (p.a.Content == nil) != (p.b.Content == nil) || len(p.a.Content) != len(p.b.Content) {
			return fmt.Sprintf("%s: Content nil %v len %d vs nil %v len %d", p.path,
				p.a.Content == nil, len(p.a.Content), p.b.Content == nil, len(p.b.Content))
		}
		for i := len(p.a.Content) - 1; i >= 0; i-- {
			stack = append(stack, pair{p.a.Content[i], p.b.Content[i], p.path + "/" + strconv.Itoa(i)})
		}
	}
	return ""
}

// checkJSONNode checks that jsonNode agrees with the reference on data: the
// same tree for what json.Valid accepts, and an error, not a panic, for
// anything else.
func checkJSONNode(t *testing.T, data []byte) {
	t.Helper()
	got, err := jsonNode(data)
	if !json.Valid(data) {
		if err == nil {
			t.Fatalf("jsonNode(%q) accepted invalid JSON", data)
		}
		return
	}
	want, werr := referenceJSONNode(data)
	if werr != nil {
		t.Fatalf("reference failed on valid JSON %q: %v", data, werr)
	}
	if err != nil {
		t.Fatalf("jsonNode(%q): %v", data, err)
	}
	if d := nodeDiff(got, want); d != "" {
		t.Fatalf("jsonNode(%q) differs from Decoder.Token at %s", data, d)
	}
}

// trickyJSON holds hand-written inputs for the equivalence tests, valid and
// not.
var trickyJSON = []string{
	`{}`, `[]`, `{"a":{}}`, `{"a":[]}`, `[[],{},[[]],[{}]]`,
	" \t\r\n{ \t\r\n\"a\" \t\r\n: \t\r\n[ \t\r\n1 \t\r\n, \t\r\n{ } \t\r\n] \t\r\n, \"b\" : null } \t\r\n",
	`{"a":1,"a":2,"a":{"a":"a"}}`,
	`{"":""}`, `{"\u0000":"\u0000"}`,
	`{"s":"\/\\\"\b\f\n\r\t"}`,
	`{"s":"\u00e9\u20AC\uD83D\uDE00 é€😀"}`,
	`{"s":"\uD83D"}`, `{"s":"\uDE00"}`, `{"s":"\uDE00\uD83D"}`, `{"s":"\uD83Dx"}`, `{"s":"\uD83D\u0041"}`,
	`{"s":"\uD83D\uD83D\uDE00"}`, `{"s":"\ufffd\uFFFF\uFEFF"}`,
	"{\"s\":\"\xff\xfe\",\"\xc3\":\"\xed\xa0\x80\",\"t\":\"a\xe2\x82\"}",
	"{\"s\":\"\\n\xff\"}",
	"{\"s\":\"\u2028\u2029\"}",
	`{"n":0,"m":-0,"f":-0.0,"g":0.0,"e":1e400,"h":-1e400,"i":1E+2,"j":1e-2,"k":123.456e-7}`,
	`{"big":9223372036854775807,"over":9223372036854775808,"min":-9223372036854775808,"under":-9223372036854775809}`,
	`{"u64":18446744073709551615,"huge":123456789012345678901234567890,"tiny":5e-324,"sub":1e-400}`,
	`[1,-1,0.5,-0.5,1e5,1E5,1e+5,1e-5,10,100000000000000000000000]`,
	`{"t":true,"f":false,"n":null,"l":[true,false,null]}`,
	`{"a":[[[[[[[[[[1]]]]]]]]]],"b":{"c":{"d":{"e":{}}}}}`,
	`"top string"`, `1`, `true`, `null`, `[1,"a"]`,
	designJSON,
	benchJSONSmall, benchJSONFull,
	// Not JSON: jsonNode must refuse these without panicking.
	``, ` `, `{`, `}`, `[`, `{"a"`, `{"a":`, `{"a":1`, `{"a":1,}`, `[1,]`, `{,}`, `{"a" 1}`, `{a:1}`,
	`{"a":01}`, `{"a":1.}`, `{"a":.1}`, `{"a":1e}`, `{"a":1e+}`, `{"a":-}`, `{"a":+1}`, `{"a":0x10}`,
	`{"a":tru}`, `{"a":nul}`, `{"a":True}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12G4"}`, "{\"a\":\"\t\"}",
	`{"a":"b}`, `{"a":"b\"}`, `{"a":"\`, `{} {}`, `{}x`, `{"a":NaN}`, `{"a":Infinity}`,
	"\xef\xbb\xbf{}", "{}\x00", `[1 2]`, `{"a":1 "b":2}`,
}

// designJSON is the design example as JSON, with escapes.
const designJSON = `{
	"name": "support-bot-lora", "base_model": "tiny-char",
	"dataset": "file:\/\/\/data\/support\/train.jsonl",
	"eval_dataset": "file:///data/support/eval.jsonl",
	"lora": {"rank": 16, "alpha": 32.0, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]},
	"training": {"epochs": 3, "learning_rate": 2e-4, "batch_size": 8, "max_steps": 0, "seed": 42},
	"resources": {"gpus": 1, "gpu_memory_gb": 24, "gpu_models": ["A100", "H100"]},
	"residency": ["onprem", "eu"], "priority": "normal", "max_wait": "2h", "max_runtime": "8h",
	"budget_usd": 50, "trainer": "reference", "output": {"uri": "file:///models/support-bot", "formats": ["safetensors"]}
}`

// fuzzSeeds reads the inputs of a seed corpus under testdata/fuzz.
func fuzzSeeds(t *testing.T, target string) [][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		if len(lines) < 2 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s: not a fuzz corpus file", f)
		}
		for _, l := range lines[1:] {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			if !strings.HasPrefix(l, "[]byte(") || !strings.HasSuffix(l, ")") {
				t.Fatalf("%s: unexpected line %q", f, l)
			}
			s, err := strconv.Unquote(l[len("[]byte(") : len(l)-1])
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, []byte(s))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no seeds in testdata/fuzz/%s", target)
	}
	return out
}

// TestJSONNodeMatchesDecoderToken checks that jsonNode builds, node for node,
// the tree the Decoder.Token-based converter built.
func TestJSONNodeMatchesDecoderToken(t *testing.T) {
	var inputs [][]byte
	for _, s := range trickyJSON {
		inputs = append(inputs, []byte(s))
	}
	inputs = append(inputs, fuzzSeeds(t, "FuzzParse")...)
	inputs = append(inputs, fuzzSeeds(t, "FuzzJSONNode")...)

	// Every spec the round-trip tests use, as Spec.JSON writes it.
	for _, src := range []string{designExample, minimal, minimal + "resources: {gpu_models: [\"\\u00e9<&>\"]}\n"} {
		inputs = append(inputs, mustParse(t, src).JSON())
	}

	// Every one-character string escape and every \u00XX.
	for _, e := range []string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`} {
		inputs = append(inputs, []byte(`{"k`+e+`":"v`+e+`"}`))
	}
	for r := range 0x100 {
		inputs = append(inputs, fmt.Appendf(nil, `{"\u%04x":"\u%04X","x":"%c"}`, r, r, r))
	}
	// Surrogate halves, alone, paired and misordered.
	for _, hi := range []int{0xD7FF, 0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0xE000} {
		for _, lo := range []int{0xD7FF, 0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0xE000} {
			inputs = append(inputs, fmt.Appendf(nil, `["\u%04x\u%04x", "\u%04x", "a\u%04xb"]`, hi, lo, hi, lo))
		}
	}
	// Raw bytes of every value inside a string (the controls are invalid).
	for b := range 0x100 {
		inputs = append(inputs, []byte{'{', '"', 'k', '"', ':', '"', byte(b), '"', '}'})
		inputs = append(inputs, []byte{'[', '"', 'a', byte(b), 0x80, '"', ']'})
	}
	// Numbers either side of every boundary.
	for _, n := range []string{"0", "-0", "1", "-1", "9223372036854775806", "9223372036854775807",
		"9223372036854775808", "-9223372036854775807", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551615", "18446744073709551616", "99999999999999999999999999999999999999",
		"0.0", "1.0", "1e0", "1e308", "1.7976931348623157e308", "1.8e308", "1e400", "-1e400",
		"4.9e-324", "2e-324", "1e-400", "0e0", "0E-0", "-0.0e+0", "2.0e-4", "12345678901234567890123"} {
		inputs = append(inputs, []byte(`{"v":`+n+`,"l":[`+n+`]}`))
	}
	// Nesting up to encoding/json's limit, and one past it.
	for _, d := range []int{1, 2, 100, maxJSONDepth - 1, maxJSONDepth, maxJSONDepth + 1} {
		inputs = append(inputs, []byte(strings.Repeat("[", d)+strings.Repeat("]", d)))
		inputs = append(inputs, []byte(`{"x":`+strings.Repeat("[", d-1)+strings.Repeat("]", d-1)+`}`))
		inputs = append(inputs, []byte(strings.Repeat(`{"a":`, d)+"1"+strings.Repeat("}", d)))
	}
	// Long and wide values.
	inputs = append(inputs, []byte(`{"residency":[`+strings.Repeat(`"eu",`, 100000)+`"eu"]}`))
	inputs = append(inputs, []byte(`{"s":"`+strings.Repeat(`é\n\u00e9`, 10000)+`"}`))
	var wide strings.Builder
	wide.WriteString("{")
	for i := range 5000 {
		fmt.Fprintf(&wide, `"k%d":[%d,%d.5,"v%d",{}],`, i, i, i, i)
	}
	wide.WriteString(`"end":null}`)
	inputs = append(inputs, []byte(wide.String()))

	for _, in := range inputs {
		checkJSONNode(t, in)
		// The same input with whitespace everywhere it may go (not for
		// the deep ones: indenting them is quadratic).
		if json.Valid(in) && len(in) < 8192 {
			var spaced bytes.Buffer
			if err := json.Indent(&spaced, in, " \r\n", "\t "); err != nil {
				t.Fatal(err)
			}
			checkJSONNode(t, spaced.Bytes())
		}
	}
}

// TestJSONNodeDepth checks that the depth guard matches encoding/json's
// limit: what json.Valid accepts converts, one level more is refused.
func TestJSONNodeDepth(t *testing.T) {
	ok := []byte(strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth))
	if !json.Valid(ok) {
		t.Fatalf("json.Valid refuses depth %d", maxJSONDepth)
	}
	if _, err := jsonNode(ok); err != nil {
		t.Fatalf("depth %d: %v", maxJSONDepth, err)
	}
	deep := []byte("[" + string(ok) + "]")
	if json.Valid(deep) {
		t.Fatalf("json.Valid accepts depth %d", maxJSONDepth+1)
	}
	if _, err := jsonNode(deep); err == nil {
		t.Fatalf("jsonNode accepted depth %d", maxJSONDepth+1)
	}
}

// FuzzJSONNode checks jsonNode against the Decoder.Token converter on every
// input json.Valid accepts, and that it refuses the others without panicking.
func FuzzJSONNode(f *testing.F) {
	for _, s := range trickyJSON {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkJSONNode(t, data)
	})
}

// BenchmarkJSONNode compares jsonNode with the Decoder.Token converter it
// replaced, on the full spec.
func BenchmarkJSONNode(b *testing.B) {
	data := []byte(benchJSONFull)
	b.Run("tokens", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := referenceJSONNode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonNode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
