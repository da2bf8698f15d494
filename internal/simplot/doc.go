// Package simplot draws the chart that `lathe simulate --plot` writes: the
// result of replaying one job trace against several sizes of an owned GPU
// pool, as an SVG.
//
// The chart has two panels that share one x axis, the number of owned GPUs.
// The top panel shows total cost in dollars, with the all-cloud cost (no owned
// GPUs, everything rented) as a horizontal line, the break-even pool size as a
// vertical line (or a legend entry saying there is none in range) and the
// cost-optimal pool marked with its own glyph and an "optimum N GPUs" label.
// The bottom panel shows the p95 and mean wait in hours. An optional reference
// sweep (the same sizes under another policy) is drawn dashed in grey in both
// panels. Each panel has its legend to its right, outside the data area, so
// no legend hides a curve.
//
// Drawing is done with gonum.org/v1/plot and its SVG backend (vg/vgsvg); this
// package only validates the input, lays out the panels and formats the axes.
// The output depends on nothing but the Input: two calls with the same Input
// write the same bytes.
package simplot
