package simplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
)

// sweep is a plausible 32..256/32 sweep: cost falls to an optimum at 128
// owned GPUs and then rises past all-cloud; waits fall as the pool grows.
func sweep() Input {
	return Input{
		Title: "msft-itp-cluster02.csv: owned $1.00/GPU-h, cloud $4.00/GPU-h, max_wait 2h",
		Points: []Point{
			{Owned: 32, CostUSD: 231_000, P95WaitS: 7200, MeanWaitS: 1800},
			{Owned: 64, CostUSD: 198_500, P95WaitS: 6100, MeanWaitS: 1300},
			{Owned: 96, CostUSD: 181_200, P95WaitS: 4800, MeanWaitS: 900},
			{Owned: 128, CostUSD: 176_400, P95WaitS: 3300, MeanWaitS: 600},
			{Owned: 160, CostUSD: 189_900, P95WaitS: 2100, MeanWaitS: 350},
			{Owned: 192, CostUSD: 212_300, P95WaitS: 1200, MeanWaitS: 200},
			{Owned: 224, CostUSD: 240_800, P95WaitS: 600, MeanWaitS: 90},
			{Owned: 256, CostUSD: 271_000, P95WaitS: 300, MeanWaitS: 40},
		},
		AllCloudCostUSD: 246_000,
		BreakEvenOwned:  228.4,
		OptimalOwned:    128,
	}
}

// render runs SVG and fails the test on error.
func render(t *testing.T, in Input) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := SVG(&buf, in); err != nil {
		t.Fatalf("SVG: %v", err)
	}
	return buf.Bytes()
}

// svgText parses out as XML, checks the root is <svg>, and returns the
// character data of every <text> element, one per element.
func svgText(t *testing.T, out []byte) []string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(out))
	var (
		texts  []string
		root   string
		inText bool
		cur    strings.Builder
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("output is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			if tok.Name.Local == "text" {
				inText = true
				cur.Reset()
			}
		case xml.CharData:
			if inText {
				cur.Write(tok)
			}
		case xml.EndElement:
			if tok.Name.Local == "text" {
				inText = false
				texts = append(texts, cur.String())
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element is %q, want svg", root)
	}
	return texts
}

func hasText(texts []string, want string) bool {
	for _, s := range texts {
		if strings.Contains(s, want) {
			return true
		}
	}
	return false
}

func TestSVGDrawsTheLabelledParts(t *testing.T) {
	in := sweep()
	out := render(t, in)
	texts := svgText(t, out)
	for _, want := range []string{
		in.Title,
		"optimum 128 GPUs",
		"all-cloud $246k",
		"break-even 228.4 GPUs",
		"total cost",
		"p95 wait",
		"mean wait",
		"owned GPUs",
		"wait (hours)",
		"$220k", // a dollar tick on the cost axis
		"256",   // a pool-size tick on the x axis
	} {
		if !hasText(texts, want) {
			t.Errorf("no <text> contains %q; texts: %q", want, texts)
		}
	}
	if hasText(texts, "no break-even") {
		t.Errorf("says there is no break-even although BreakEvenOwned = %v", in.BreakEvenOwned)
	}
	if hasText(texts, "reference") {
		t.Errorf("has a reference legend entry although Reference is nil")
	}
	if !bytes.Contains(out, []byte("'Liberation Sans',Arial")) {
		t.Errorf("text does not fall back to Arial when Liberation Sans is missing")
	}
}

func TestSVGWithoutBreakEvenSaysSo(t *testing.T) {
	in := sweep()
	in.BreakEvenOwned = 0
	texts := svgText(t, render(t, in))
	if !hasText(texts, "no break-even in range") {
		t.Errorf("no <text> says there is no break-even; texts: %q", texts)
	}
	if hasText(texts, "break-even 0") {
		t.Errorf("labels a break-even at 0 GPUs")
	}
}

func TestSVGDrawsReference(t *testing.T) {
	in := sweep()
	for _, p := range in.Points {
		p.CostUSD *= 0.9
		p.P95WaitS *= 0.5
		p.MeanWaitS *= 0.5
		in.Reference = append(in.Reference, p)
	}
	out := render(t, in)
	texts := svgText(t, out)
	for _, want := range []string{"total cost (reference)", "p95 wait (reference)", "mean wait (reference)"} {
		if !hasText(texts, want) {
			t.Errorf("no <text> contains %q", want)
		}
	}
	if !bytes.Contains(out, []byte("stroke-dasharray")) {
		t.Errorf("nothing is dashed although Reference is set")
	}
}

func TestSVGOnePoint(t *testing.T) {
	in := Input{
		Title:           `trace "a" < b & c`, // must come out escaped
		Points:          []Point{{Owned: 64, CostUSD: 1000}},
		AllCloudCostUSD: 1000,
		OptimalOwned:    64,
	}
	texts := svgText(t, render(t, in))
	for _, want := range []string{in.Title, "optimum 64 GPUs"} {
		if !hasText(texts, want) {
			t.Errorf("no <text> contains %q; texts: %q", want, texts)
		}
	}
}

// TestSVGOptimalRange: the optimum's range under resampling is a band
// with its own legend entry; without one there is none.
func TestSVGOptimalRange(t *testing.T) {
	in := sweep()
	in.OptimalRange, in.OptimalRangeLabel = [2]int{96, 160}, "optimum in 90% of 20 resamples"
	if texts := svgText(t, render(t, in)); !hasText(texts, "optimum in 90% of 20 resamples: 96–160 GPUs") {
		t.Errorf("no legend for the range; texts: %q", texts)
	}
	// The band is a colour (every colour the SVG names is #RRGGBB: a
	// premultiplied colour with a channel over its alpha was written
	// #E9352E9, which a browser draws black), and it lies under the
	// cost line: drawn before it.
	svg := string(render(t, in))
	for _, m := range regexp.MustCompile(`(fill|stroke):(#[^;"]*)`).FindAllStringSubmatch(svg, -1) {
		if !regexp.MustCompile(`^#[0-9A-F]{6}$`).MatchString(m[2]) {
			t.Errorf("%s colour %q is not #RRGGBB", m[1], m[2])
		}
	}
	bandAt, lineAt := strings.Index(svg, "fill-opacity:0.18824"), strings.Index(svg, "stroke:#1F77B4")
	if bandAt < 0 || lineAt < 0 || bandAt > lineAt {
		t.Errorf("the band (at %d) is not drawn before the cost line (at %d)", bandAt, lineAt)
	}
	in.OptimalRange, in.OptimalRangeLabel = [2]int{}, ""
	if texts := svgText(t, render(t, in)); hasText(texts, "resamples") {
		t.Errorf("a legend for a range not given; texts: %q", texts)
	}
}

func TestSVGIsDeterministic(t *testing.T) {
	in := sweep()
	in.Reference = in.Points
	a, b := render(t, in), render(t, in)
	if !bytes.Equal(a, b) {
		t.Fatalf("two renders of the same Input differ (%d and %d bytes)", len(a), len(b))
	}
}

func TestSVGRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Input)
		field string
		value string
	}{
		{"no points", func(in *Input) { in.Points = nil }, "Points", "[]"},
		{"not ascending", func(in *Input) { in.Points[2].Owned = 64 }, "Points[2].Owned", "64"},
		{"negative owned", func(in *Input) { in.Points[0].Owned = -32 }, "Points[0].Owned", "-32"},
		{"NaN cost", func(in *Input) { in.Points[3].CostUSD = math.NaN() }, "Points[3].CostUSD", "NaN"},
		{"infinite p95", func(in *Input) { in.Points[1].P95WaitS = math.Inf(1) }, "Points[1].P95WaitS", "+Inf"},
		{"negative mean", func(in *Input) { in.Points[4].MeanWaitS = -1.5 }, "Points[4].MeanWaitS", "-1.5"},
		{"negative all-cloud", func(in *Input) { in.AllCloudCostUSD = -1 }, "AllCloudCostUSD", "-1"},
		{"NaN break-even", func(in *Input) { in.BreakEvenOwned = math.NaN() }, "BreakEvenOwned", "NaN"},
		{"negative break-even", func(in *Input) { in.BreakEvenOwned = -3 }, "BreakEvenOwned", "-3"},
		{"optimum not a point", func(in *Input) { in.OptimalOwned = 100 }, "OptimalOwned", "100"},
		{"range upside down", func(in *Input) { in.OptimalRange = [2]int{160, 96} }, "OptimalRange", "160–96"},
		{"reference not ascending", func(in *Input) {
			in.Reference = []Point{{Owned: 64}, {Owned: 32}}
		}, "Reference[1].Owned", "32"},
		{"reference NaN", func(in *Input) {
			in.Reference = []Point{{Owned: 64, CostUSD: math.NaN()}}
		}, "Reference[0].CostUSD", "NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sweep()
			in.Points = append([]Point(nil), in.Points...)
			tc.edit(&in)
			var buf bytes.Buffer
			err := SVG(&buf, in)
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("SVG error = %v, want an *InputError", err)
			}
			if ie.Field != tc.field || ie.Value != tc.value {
				t.Errorf("InputError names %s = %s, want %s = %s", ie.Field, ie.Value, tc.field, tc.value)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field+" = "+tc.value) {
				t.Errorf("message %q does not name %s = %s", msg, tc.field, tc.value)
			}
			if buf.Len() != 0 {
				t.Errorf("wrote %d bytes for bad input", buf.Len())
			}
		})
	}
}

func TestFormatUSD(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		tick string
		text string
	}{
		{0, "$0", "$0"},
		{950, "$950", "$950"},
		{212_345, "$212.345k", "$212k"},
		{200_000, "$200k", "$200k"},
		{0.30000000000000004 * 1e3, "$300", "$300"},
		{1_234_567, "$1.235M", "$1.23M"},
		{999_600, "$999.6k", "$1M"},
	} {
		if got := usdTick(tc.v); got != tc.tick {
			t.Errorf("usdTick(%v) = %q, want %q", tc.v, got, tc.tick)
		}
		if got := formatUSD(tc.v); got != tc.text {
			t.Errorf("formatUSD(%v) = %q, want %q", tc.v, got, tc.text)
		}
	}
}

// TestWritePreview writes the sample sweep to the file named by
// SIMPLOT_PREVIEW, for looking at by eye; it is skipped when that is unset.
func TestWritePreview(t *testing.T) {
	path := os.Getenv("SIMPLOT_PREVIEW")
	if path == "" {
		t.Skip("set SIMPLOT_PREVIEW=/tmp/x.svg to write a preview")
	}
	in := sweep()
	for _, p := range in.Points {
		p.CostUSD *= 0.93
		p.P95WaitS *= 0.6
		p.MeanWaitS *= 0.6
		in.Reference = append(in.Reference, p)
	}
	if err := os.WriteFile(path, render(t, in), 0o644); err != nil {
		t.Fatal(err)
	}
}
