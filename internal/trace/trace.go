// Package trace reads and writes job traces: one row per job with when it
// was submitted, how long it ran and how many GPUs it used, the format of
// configs/traces (submit_s,duration_s,gpus, other columns ignored) and of
// `lathe export jobs`, which adds what Lathe knows of its own jobs (GPU
// model, residency, priority, backend, cost). `lathe simulate` replays a
// trace through Lathe's routing and placement (docs/simulate.md).
package trace

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Job is one row of a trace.
type Job struct {
	// SubmitS is when it was submitted, seconds after the trace's start.
	SubmitS float64
	// DurationS is how long it ran, in seconds.
	DurationS float64
	// GPUs it used (0: a CPU-only job).
	GPUs int
	// GPUModel, Residency, Priority, Backend and CostUSD are optional:
	// "" (nil, -1 for CostUSD) when the trace lacks them.
	GPUModel  string
	Residency []string
	// Priority is urgent, normal or batch.
	Priority string
	Backend  string
	CostUSD  float64
	// ID is the job's id in Lathe (export), or "" (the row number stands in).
	ID string
	// Line is the job's line in the file (1 is the header).
	Line int
}

// Limits on what a trace may hold: a bigger one is refused with an error,
// not read into memory.
const (
	MaxJobs      = 1_000_000
	MaxGPUs      = 4096
	MaxDurationS = 10 * 365 * 24 * 3600.0
	maxField     = 256
)

// Columns are the columns Write writes, in order; Read needs the first three
// and takes the others when present.
var Columns = []string{"submit_s", "duration_s", "gpus", "gpu_model", "residency", "priority", "backend", "cost_usd", "job_id"}

// Read reads a CSV trace: a header naming at least submit_s, duration_s and
// gpus, then one job per row. Unknown columns are ignored. Every error names
// the line, the column and the value. The jobs come back sorted by submit
// time (stable: ties keep file order).
func Read(r io.Reader) ([]Job, error) {
	cr := csv.NewReader(bufio.NewReader(r))
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	col, err := readHeader(cr)
	if err != nil {
		return nil, err
	}
	var jobs []Job
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if len(jobs) >= MaxJobs {
			return nil, fmt.Errorf("trace: more than %d jobs: not read further", MaxJobs)
		}
		j, err := parseRow(rec, col, line)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil, errors.New("trace: no jobs after the header")
	}
	slices.SortStableFunc(jobs, func(a, b Job) int { return cmp.Compare(a.SubmitS, b.SubmitS) })
	return jobs, nil
}

// readHeader reads the header row and maps each column's lower-cased name
// to its index; it refuses a repeated name and a missing required column.
func readHeader(cr *csv.Reader) (map[string]int, error) {
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("trace: empty file: want a header with submit_s,duration_s,gpus")
	}
	if err != nil {
		return nil, fmt.Errorf("trace: header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		if _, dup := col[h]; dup && h != "" {
			return nil, fmt.Errorf("trace: header: column %q appears twice", h)
		}
		col[h] = i
	}
	for _, need := range Columns[:3] {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("trace: header: missing column %q (have %q; want submit_s,duration_s,gpus)", need, strings.Join(head, ","))
		}
	}
	return col, nil
}

// row is one record being parsed, with what its errors need to name.
type row struct {
	rec  []string
	col  map[string]int
	line int
}

// get returns the trimmed value of the named column, and whether the row
// has that column.
func (r row) get(name string) (string, bool) {
	i, ok := r.col[name]
	if !ok || i >= len(r.rec) {
		return "", false
	}
	return strings.TrimSpace(r.rec[i]), true
}

// bad is the error for value v of the named column, cut to 40 bytes.
func (r row) bad(name, v, why string) error {
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	return fmt.Errorf("trace: line %d: %s %q: %s", r.line, name, v, why)
}

// num parses the named column as a finite number in [lo, hi].
func (r row) num(name string, lo, hi float64) (float64, error) {
	v, ok := r.get(name)
	if !ok || v == "" {
		return 0, r.bad(name, v, "missing")
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, r.bad(name, v, "not a number")
	}
	if f < lo || f > hi {
		return 0, r.bad(name, v, fmt.Sprintf("out of range [%g, %g]", lo, hi))
	}
	return f, nil
}

func parseRow(rec []string, col map[string]int, line int) (Job, error) {
	r := row{rec: rec, col: col, line: line}
	j := Job{Line: line, CostUSD: -1}
	if err := r.required(&j); err != nil {
		return j, err
	}
	for _, name := range []string{"gpu_model", "priority", "backend", "job_id", "residency"} {
		if v, _ := r.get(name); len(v) > maxField {
			return j, r.bad(name, v, fmt.Sprintf("longer than %d bytes", maxField))
		}
	}
	j.GPUModel, _ = r.get("gpu_model")
	j.Backend, _ = r.get("backend")
	j.ID, _ = r.get("job_id")
	var err error
	if j.Priority, err = r.priority(); err != nil {
		return j, err
	}
	if j.Residency, err = r.residency(); err != nil {
		return j, err
	}
	if v, ok := r.get("cost_usd"); ok && v != "" {
		if j.CostUSD, err = r.num("cost_usd", 0, 1e12); err != nil {
			return j, err
		}
	}
	return j, nil
}

// required fills the three columns every row must have: submit_s,
// duration_s and a whole number of gpus.
func (r row) required(j *Job) error {
	var err error
	if j.SubmitS, err = r.num("submit_s", 0, MaxDurationS); err != nil {
		return err
	}
	if j.DurationS, err = r.num("duration_s", 0, MaxDurationS); err != nil {
		return err
	}
	g, err := r.num("gpus", 0, MaxGPUs)
	if err != nil {
		return err
	}
	if g != math.Trunc(g) {
		v, _ := r.get("gpus")
		return r.bad("gpus", v, "not a whole number")
	}
	j.GPUs = int(g)
	return nil
}

// priority returns the lower-cased priority column, "" when absent or empty.
func (r row) priority() (string, error) {
	p, _ := r.get("priority")
	if p == "" {
		return "", nil
	}
	switch p = strings.ToLower(p); p {
	case "urgent", "normal", "batch":
		return p, nil
	}
	return "", r.bad("priority", p, "want urgent, normal or batch")
}

// residency returns the residency column's tags, lower-cased and without
// repeats; nil when absent or empty.
func (r row) residency() ([]string, error) {
	rs, _ := r.get("residency")
	var tags []string
	for _, t := range strings.FieldsFunc(rs, func(r rune) bool { return r == ' ' || r == ';' || r == '|' }) {
		t = strings.ToLower(t)
		if !validTag(t) {
			return nil, r.bad("residency", rs, "tags are lower-case words [a-z0-9-] separated by spaces or ';'")
		}
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	return tags, nil
}

func validTag(t string) bool {
	if t == "" || len(t) > 63 {
		return false
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Write writes jobs as a CSV trace with the header Columns. Text fields
// that a spreadsheet would take for a formula (starting with = + - @ or a
// tab) are written with a leading ' so that opening an export runs nothing.
func Write(w io.Writer, jobs []Job) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(Columns); err != nil {
		return fmt.Errorf("trace: write: %w", err)
	}
	row := make([]string, len(Columns))
	for _, j := range jobs {
		row[0] = strconv.FormatFloat(j.SubmitS, 'f', -1, 64)
		row[1] = strconv.FormatFloat(j.DurationS, 'f', -1, 64)
		row[2] = strconv.Itoa(j.GPUs)
		row[3] = textField(j.GPUModel)
		row[4] = textField(strings.Join(j.Residency, ";"))
		row[5] = textField(j.Priority)
		row[6] = textField(j.Backend)
		row[7] = ""
		if j.CostUSD >= 0 {
			row[7] = strconv.FormatFloat(j.CostUSD, 'f', 4, 64)
		}
		row[8] = textField(j.ID)
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("trace: write: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("trace: write: %w", err)
	}
	return nil
}

func textField(s string) string {
	if s != "" && strings.ContainsAny(s[:1], "=+-@\t\r") {
		return "'" + s
	}
	return s
}
