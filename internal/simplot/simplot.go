package simplot

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Point is one simulated pool size.
type Point struct {
	Owned     int     // owned GPUs
	CostUSD   float64 // total cost over the horizon
	P95WaitS  float64 // p95 wait of all jobs, seconds
	MeanWaitS float64 // mean wait, seconds
}

// Input is one sweep over pool sizes.
type Input struct {
	// Title is drawn above both panels, e.g.
	// "msft-itp-cluster02.csv: owned $1.00/GPU-h, cloud $4.00/GPU-h, max_wait 2h".
	// Empty means no title line.
	Title string
	// Points are the simulated pool sizes, ascending by Owned; at least one.
	Points []Point
	// AllCloudCostUSD is the cost with no owned GPUs (everything rented). It is
	// drawn as a labelled horizontal line in the cost panel.
	AllCloudCostUSD float64
	// BreakEvenOwned is the pool size where total cost equals all-cloud (beyond
	// it owning costs more). It is drawn as a vertical line, and the x axis is
	// widened to show it if it lies outside Points. Zero means there is none in
	// range: no line is drawn and the legend says "no break-even in range".
	BreakEvenOwned float64
	// OptimalOwned is the cost-optimal pool; it must be the Owned of one of
	// Points. It is ringed and labelled "optimum N GPUs".
	OptimalOwned int
	// Reference is optional: the same sizes under another policy (say, a
	// clairvoyant one), drawn dashed in grey in both panels. Nil or empty
	// draws nothing. It must ascend by Owned like Points; its sizes need not
	// match Points, and the x axis covers both.
	Reference []Point
	// OptimalRange, when OptimalRangeLabel is set, is where the optimum
	// falls under resampling (say, 90% of bootstrap resamples of the
	// trace), first ≤ second: a shaded band in the cost panel, labelled
	// OptimalRangeLabel in the legend.
	OptimalRange      [2]int
	OptimalRangeLabel string
}

// The chart is 8×7 inches: legends sit in a strip right of the panels.
const (
	chartWidth  = 8 * vg.Inch
	chartHeight = 7 * vg.Inch
	margin      = vg.Length(10)
	gap         = vg.Length(12)
	titleSize   = vg.Length(13)
	labelSize   = vg.Length(12)
	tickSize    = vg.Length(10.5)
	legendSize  = vg.Length(11)
	// maxLabelledTicks is the most pool sizes that each get their own tick on
	// the x axis; beyond it the axis gets round-number ticks.
	maxLabelledTicks = 16
)

var (
	sans = font.Font{Typeface: "Liberation", Variant: "Sans"}

	colorCost      = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}  // blue
	colorMean      = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}  // green
	colorAllCloud  = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}  // orange
	colorBreakEven = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}  // purple
	colorBand      = color.NRGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0x30} // translucent green (not premultiplied: RGBA{…, A: 0x30} is no color, and vgsvg wrote it as #E9352E9)
	colorOptimum   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}  // red
	colorReference = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}  // grey
	colorGrid      = color.RGBA{R: 0xdd, G: 0xdd, B: 0xdd, A: 0xff}

	dashReference = []vg.Length{vg.Points(6), vg.Points(4)}
	dotBreakEven  = []vg.Length{vg.Points(2), vg.Points(3)}
)

// SVG writes the plot to w. It returns an error naming the field for bad input
// (no points, Points not ascending, NaN/negative numbers, OptimalOwned not among Points).
// Such an error is an *InputError, and nothing is written to w. The same Input
// always gives the same bytes.
func SVG(w io.Writer, in Input) error {
	if err := validate(in); err != nil {
		return err
	}
	cost, costLegend, err := costPanel(in)
	if err != nil {
		return err
	}
	wait, waitLegend, err := waitPanel(in)
	if err != nil {
		return err
	}
	xmin, xmax := xRange(in)
	sizes := poolSizes(in)
	for i, p := range []*plot.Plot{cost, wait} {
		p.X.Min, p.X.Max = xmin, xmax
		p.X.Tick.Marker = ownedTicks{sizes: sizes, labels: i == 1}
	}
	canvas := drawChart(in.Title, []panel{{cost, costLegend}, {wait, waitLegend}})
	return writeSVG(w, canvas)
}

// panel is one plot of the chart and its legend, drawn to its right.
type panel struct {
	plot   *plot.Plot
	legend plot.Legend
}

// drawChart draws the panels one above the other on a white canvas, under
// title when it is not "", with their data areas aligned and each legend
// beside its panel's data area.
func drawChart(title string, panels []panel) *vgsvg.Canvas {
	canvas := vgsvg.New(chartWidth, chartHeight)
	dc := draw.New(canvas)
	dc.SetColor(color.White) // the legends and title too, for dark-mode viewers
	dc.Fill(dc.Rectangle.Path())
	inner := draw.Crop(dc, margin, -margin, margin, -margin)
	if title != "" {
		inner.Max.Y -= drawTitle(inner, title) + gap
	}
	var legendWidth vg.Length
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		legendWidth = max(legendWidth, legendRect(pn.legend, inner).X)
		plots[i] = []*plot.Plot{pn.plot}
	}
	area := draw.Crop(inner, 0, -(legendWidth + gap), 0, 0)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: gap}
	cells := plot.Align(plots, tiles, area)
	for i, pn := range panels {
		c := cells[i][0]
		pn.plot.Draw(c)
		dataTop := pn.plot.DataCanvas(c).Max.Y
		pn.legend.Draw(draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: area.Max.X + gap, Y: c.Min.Y},
			Max: vg.Point{X: inner.Max.X, Y: dataTop},
		}})
	}
	return canvas
}

// writeSVG writes the canvas to w as SVG, naming fonts a viewer without
// Liberation Sans can stand in for it.
func writeSVG(w io.Writer, canvas *vgsvg.Canvas) error {
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return fmt.Errorf("simplot: render svg: %w", err)
	}
	// vgsvg names the face it measured text with and nothing else; Arial is
	// metric-compatible with Liberation Sans, so a viewer without Liberation
	// lays the text out the same.
	out := bytes.ReplaceAll(buf.Bytes(),
		[]byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("simplot: write svg: %w", err)
	}
	return nil
}

// costPanel is the top panel: total cost against owned GPUs, the all-cloud
// line, the break-even line and the optimum.
func costPanel(in Input) (*plot.Plot, plot.Legend, error) {
	p := newPanel("total cost", false)
	p.Y.Tick.Marker = usdTicks{}
	legend := newLegend()
	p.Add(grid())
	var optRange *band
	if in.OptimalRangeLabel != "" { // first: under the lines
		optRange = &band{lo: float64(in.OptimalRange[0]), hi: float64(in.OptimalRange[1]), fill: colorBand}
		p.Add(optRange)
	}

	allCloud := &rule{at: in.AllCloudCostUSD, style: lineStyle(colorAllCloud, 1.5, nil)}
	p.Add(allCloud)
	var breakEven *rule
	if in.BreakEvenOwned > 0 {
		breakEven = &rule{vertical: true, at: in.BreakEvenOwned, style: lineStyle(colorBreakEven, 1.5, dotBreakEven)}
		p.Add(breakEven)
	}
	main, ref, err := costSeries(in)
	if err != nil {
		return nil, legend, err
	}
	p.Add(ref...)
	p.Add(main...)

	legend.Add("total cost", thumbs(main)...)
	if ref != nil {
		legend.Add("total cost (reference)", thumbs(ref)...)
	}
	legend.Add("all-cloud "+formatUSD(in.AllCloudCostUSD), allCloud)
	if breakEven != nil {
		legend.Add("break-even "+formatGPUs(in.BreakEvenOwned)+" GPUs", breakEven)
	} else {
		legend.Add("no break-even in range")
	}

	if optRange != nil {
		legend.Add(fmt.Sprintf("%s: %d–%d GPUs", in.OptimalRangeLabel, in.OptimalRange[0], in.OptimalRange[1]), optRange)
	}
	p.Add(optimum(in))

	p.Y.Min = math.Min(p.Y.Min, in.AllCloudCostUSD)
	p.Y.Max = math.Max(p.Y.Max, in.AllCloudCostUSD)
	// Room under the lowest cost for the optimum's label: the optimum is
	// the bottom of the curve, and a label above it hid the curve's arms.
	p.Y.Min -= 0.2 * (p.Y.Max - p.Y.Min)
	return p, legend, nil
}

// costSeries are the cost curves: the policy's and the reference's (none
// when not given).
func costSeries(in Input) (main, ref []plot.Plotter, err error) {
	if len(in.Reference) > 0 {
		if ref, err = series(in.Reference, costOf, colorReference, dashReference, draw.CircleGlyph{}); err != nil {
			return nil, nil, err
		}
	}
	main, err = series(in.Points, costOf, colorCost, nil, draw.CircleGlyph{})
	return main, ref, err
}

// waitPanel is the bottom panel: p95 and mean wait, in hours.
func waitPanel(in Input) (*plot.Plot, plot.Legend, error) {
	p := newPanel("wait (hours)", true)
	legend := newLegend()
	p.Add(grid())

	type curve struct {
		name  string
		y     func(Point) float64
		color color.Color
		glyph draw.GlyphDrawer
	}
	curves := []curve{
		{"p95 wait", func(pt Point) float64 { return pt.P95WaitS / 3600 }, colorCost, draw.CircleGlyph{}},
		{"mean wait", func(pt Point) float64 { return pt.MeanWaitS / 3600 }, colorMean, draw.TriangleGlyph{}},
	}
	// Reference curves go in first so the sweep's own curves are drawn over them.
	var refThumbs [][]plot.Thumbnailer
	for _, c := range curves {
		if len(in.Reference) == 0 {
			break
		}
		ref, err := series(in.Reference, c.y, colorReference, dashReference, c.glyph)
		if err != nil {
			return nil, legend, err
		}
		p.Add(ref...)
		refThumbs = append(refThumbs, thumbs(ref))
	}
	for _, c := range curves {
		s, err := series(in.Points, c.y, c.color, nil, c.glyph)
		if err != nil {
			return nil, legend, err
		}
		p.Add(s...)
		legend.Add(c.name, thumbs(s)...)
	}
	for i, t := range refThumbs {
		legend.Add(curves[i].name+" (reference)", t...)
	}
	p.Y.Min = 0
	if p.Y.Max <= 0 {
		p.Y.Max = 1 // every wait is zero: show 0..1 h rather than -1..1
	}
	return p, legend, nil
}

func costOf(p Point) float64 { return p.CostUSD }

// series is one curve: a line through the points and a glyph at each.
func series(ps []Point, y func(Point) float64, c color.Color, dashes []vg.Length, glyph draw.GlyphDrawer) ([]plot.Plotter, error) {
	xys := make(plotter.XYs, len(ps))
	for i, p := range ps {
		xys[i] = plotter.XY{X: float64(p.Owned), Y: y(p)}
	}
	line, points, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, fmt.Errorf("simplot: build series: %w", err)
	}
	line.LineStyle = lineStyle(c, 2, dashes)
	points.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(3), Shape: glyph}
	return []plot.Plotter{line, points}, nil
}

// thumbs returns the legend thumbnails of a series.
func thumbs(ps []plot.Plotter) []plot.Thumbnailer {
	out := make([]plot.Thumbnailer, 0, len(ps))
	for _, p := range ps {
		if t, ok := p.(plot.Thumbnailer); ok {
			out = append(out, t)
		}
	}
	return out
}

// optimum marks the cost-optimal pool with a ring and the label
// "optimum N GPUs".
func optimum(in Input) *callout {
	c := &callout{text: fmt.Sprintf("optimum %d GPUs", in.OptimalOwned)}
	for _, p := range in.Points {
		if p.Owned == in.OptimalOwned {
			c.at = plotter.XY{X: float64(p.Owned), Y: p.CostUSD}
		}
	}
	return c
}

// callout is a ring around one data point with a label below it (above
// it when the point is at the bottom of the data area): the optimum is the
// curve's lowest point, so below it the label hides no curve. The label
// sits on a pale box so a curve passing behind it does not strike it
// through, and is shifted sideways to stay inside the data area.
type callout struct {
	at   plotter.XY
	text string
}

const calloutRadius = vg.Length(7)

// Plot implements plot.Plotter.
func (o *callout) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	pt := vg.Point{X: trX(o.at.X), Y: trY(o.at.Y)}
	ring := lineStyle(colorOptimum, 2, nil)
	c.SetLineStyle(ring)
	var path vg.Path
	path.Move(vg.Point{X: pt.X + calloutRadius, Y: pt.Y})
	path.Arc(pt, calloutRadius, 0, 2*math.Pi)
	path.Close()
	c.Stroke(path)

	sty := textStyle(legendSize)
	sty.Color = colorOptimum
	sty.XAlign = draw.XCenter
	sty.YAlign = draw.YTop
	const pad = vg.Length(2)
	at := vg.Point{X: pt.X, Y: pt.Y - calloutRadius - vg.Points(4)}
	box := sty.Rectangle(o.text)
	if at.Y+box.Min.Y-pad < c.Min.Y { // no room below: put it above
		sty.YAlign = draw.YBottom
		at.Y = pt.Y + calloutRadius + vg.Points(4)
		box = sty.Rectangle(o.text)
	}
	if over := at.X + box.Max.X + pad - c.Max.X; over > 0 {
		at.X -= over
	}
	if under := c.Min.X - (at.X + box.Min.X - pad); under > 0 {
		at.X += under
	}
	bg := vg.Rectangle{
		Min: vg.Point{X: at.X + box.Min.X - pad, Y: at.Y + box.Min.Y - pad},
		Max: vg.Point{X: at.X + box.Max.X + pad, Y: at.Y + box.Max.Y + pad},
	}
	c.SetColor(color.NRGBA{R: 0xff, G: 0xff, B: 0xff, A: 0xe0})
	c.Fill(bg.Path())
	c.FillText(sty, at, o.text)
}

// rule is a line across the whole data area: horizontal at y = at, or
// vertical at x = at. It does not widen the axes; callers do.
type rule struct {
	vertical bool
	at       float64
	style    draw.LineStyle
}

// Plot implements plot.Plotter.
func (r *rule) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	if r.vertical {
		x := trX(r.at)
		c.StrokeLine2(r.style, x, c.Min.Y, x, c.Max.Y)
		return
	}
	y := trY(r.at)
	c.StrokeLine2(r.style, c.Min.X, y, c.Max.X, y)
}

// band shades the x range [lo, hi] across a panel (at least a few points
// wide, so that a range of one pool size shows).
type band struct {
	lo, hi float64
	fill   color.Color
}

// Plot implements plot.Plotter.
func (b *band) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x0, x1 := trX(b.lo), trX(b.hi)
	if x1-x0 < 4 {
		mid := (x0 + x1) / 2
		x0, x1 = mid-2, mid+2
	}
	c.FillPolygon(b.fill, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
}

// Thumbnail implements plot.Thumbnailer.
func (b *band) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(b.fill, []vg.Point{c.Min, {X: c.Max.X, Y: c.Min.Y}, c.Max, {X: c.Min.X, Y: c.Max.Y}})
}

// Thumbnail implements plot.Thumbnailer. It is a horizontal stroke whichever
// way the rule runs: a legend entry is too short to show a vertical one.
func (r *rule) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(r.style, c.Min.X, y, c.Max.X, y)
}

// newPanel is a plot with the fonts and axis labels both panels share. Only
// the bottom panel labels the x axis; the top one keeps its ticks unlabelled.
func newPanel(yLabel string, bottom bool) *plot.Plot {
	p := plot.New()
	p.Y.Label.Text = yLabel
	p.Y.Label.TextStyle.Font = font.From(sans, labelSize)
	p.X.Label.TextStyle.Font = font.From(sans, labelSize)
	p.X.Tick.Label.Font = font.From(sans, tickSize)
	p.Y.Tick.Label.Font = font.From(sans, tickSize)
	if bottom {
		p.X.Label.Text = "owned GPUs"
	}
	return p
}

// grid is a light grid behind the data, on the major ticks.
func grid() *plotter.Grid {
	g := plotter.NewGrid()
	g.Vertical = lineStyle(colorGrid, 0.5, nil)
	g.Horizontal = lineStyle(colorGrid, 0.5, nil)
	return g
}

func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle = textStyle(legendSize)
	l.Top = true
	l.Left = true
	l.ThumbnailWidth = vg.Points(24)
	l.Padding = vg.Points(3)
	return l
}

// legendRect is the size of the legend once drawn.
func legendRect(l plot.Legend, c draw.Canvas) vg.Point {
	return l.Rectangle(c).Size()
}

func textStyle(size vg.Length) text.Style {
	return text.Style{Color: color.Black, Font: font.From(sans, size), Handler: plot.DefaultTextHandler}
}

func lineStyle(c color.Color, width float64, dashes []vg.Length) draw.LineStyle {
	return draw.LineStyle{Color: c, Width: vg.Points(width), Dashes: dashes}
}

// drawTitle writes the title centred at the top of c, shrinking the font
// when it would not fit the width, and returns the height it took.
func drawTitle(c draw.Canvas, title string) vg.Length {
	sty := textStyle(titleSize)
	sty.XAlign = draw.XCenter
	sty.YAlign = draw.YTop
	if w, avail := sty.Width(title), c.Size().X; w > avail {
		sty.Font.Size = max(vg.Points(7), titleSize*avail/w)
	}
	c.FillText(sty, vg.Point{X: c.Center().X, Y: c.Max.Y}, title)
	return sty.Height(title)
}

// xRange is the x span both panels share: every pool size in Points and
// Reference, and the break-even if there is one.
func xRange(in Input) (lo, hi float64) {
	lo, hi = float64(in.Points[0].Owned), float64(in.Points[len(in.Points)-1].Owned)
	if n := len(in.Reference); n > 0 {
		lo = math.Min(lo, float64(in.Reference[0].Owned))
		hi = math.Max(hi, float64(in.Reference[n-1].Owned))
	}
	if in.BreakEvenOwned > 0 {
		lo, hi = math.Min(lo, in.BreakEvenOwned), math.Max(hi, in.BreakEvenOwned)
	}
	if in.OptimalRangeLabel != "" {
		lo, hi = math.Min(lo, float64(in.OptimalRange[0])), math.Max(hi, float64(in.OptimalRange[1]))
	}
	return lo, hi
}

// ownedTicks puts a tick at each simulated pool size when there are at most
// maxLabelledTicks of them, and round-number ticks otherwise. Without labels
// it draws the same ticks unlabelled (the top panel).
type ownedTicks struct {
	sizes  []int // every pool size in Points and Reference, ascending, no repeats
	labels bool
}

// Ticks implements plot.Ticker.
func (t ownedTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	if len(t.sizes) <= maxLabelledTicks {
		for _, n := range t.sizes {
			ticks = append(ticks, plot.Tick{Value: float64(n), Label: strconv.Itoa(n)})
		}
	} else {
		ticks = plot.DefaultTicks{}.Ticks(lo, hi)
	}
	if !t.labels {
		for i := range ticks {
			ticks[i].Label = ""
		}
	}
	return ticks
}

// poolSizes is every Owned in Points and Reference, ascending, no repeats.
func poolSizes(in Input) []int {
	sizes := make([]int, 0, len(in.Points)+len(in.Reference))
	for _, p := range in.Points {
		sizes = append(sizes, p.Owned)
	}
	for _, p := range in.Reference {
		sizes = append(sizes, p.Owned)
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// usdTicks labels round-number ticks in dollars: "$212k", "$1.5M".
type usdTicks struct{}

// Ticks implements plot.Ticker.
func (usdTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = usdTick(ticks[i].Value)
		}
	}
	return ticks
}

// usdTick writes a tick value exactly enough to tell neighbouring ticks apart.
func usdTick(v float64) string {
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	unit, suffix := 1.0, ""
	switch {
	case v >= 1e6:
		unit, suffix = 1e6, "M"
	case v >= 1e3:
		unit, suffix = 1e3, "k"
	}
	x := math.Round(v/unit*1e3) / 1e3 // drop float noise such as 0.30000000000000004
	return sign + "$" + strconv.FormatFloat(x, 'f', -1, 64) + suffix
}

// formatUSD writes an amount to three significant figures: "$212k", "$1.23M".
func formatUSD(v float64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return usdTick(r)
}

// formatGPUs writes a (possibly interpolated) pool size: "181" or "180.5".
func formatGPUs(v float64) string {
	if math.Abs(v-math.Round(v)) < 0.05 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
