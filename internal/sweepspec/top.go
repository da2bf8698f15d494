package sweepspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// topNodes is what top saw that later checks need.
type topNodes struct {
	job                   *yaml.Node
	search                *yaml.Node // nil: left out (grid)
	trialsNode            *yaml.Node // search.trials as written
	maxParallel, name     bool       // given (and decoded)
	badParams, badSearch  bool       // parameters or search had a problem already
	badName, badPriority  bool
	searchKind, jobSource string // jobSource: the job file's path ("" inline)
}

// top decodes the top-level mapping into s.
func (d *decoder) top(root *yaml.Node, s *Sweep) *topNodes {
	t := &topNodes{}
	d.mapping("", root, func(key, path string, v *yaml.Node) bool {
		before := len(d.errs)
		switch key {
		case "name":
			s.Name, t.name = d.str(path, v)
			if t.name && !validName(s.Name) {
				d.fail(path, v, "must be 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit")
			}
			t.badName = len(d.errs) > before
		case "job":
			t.job = v
		case "parameters":
			s.Parameters = d.parameters(path, v)
			t.badParams = len(d.errs) > before
		case "search":
			t.search = v
			s.Search = d.search(path, v, t)
			t.badSearch = len(d.errs) > before
		case "objective":
			s.Objective = d.objective(path, v)
		case "max_parallel":
			s.MaxParallel, t.maxParallel = d.maxParallel(path, v)
		case "budget_usd":
			s.BudgetUSD = d.budget(path, v)
		case "budget_gpu_hours":
			s.BudgetGPUHours = d.budget(path, v)
		case "priority":
			s.Priority = d.priority(path, v)
			t.badPriority = len(d.errs) > before
		default:
			return false
		}
		return true
	})
	return t
}

// maxParallel decodes max_parallel, 1 to MaxTrials; ok is false when it is
// not such a number (reported).
func (d *decoder) maxParallel(path string, v *yaml.Node) (n int, ok bool) {
	n64, ok := d.integer(path, v)
	if ok && (n64 < 1 || n64 > MaxTrials) {
		d.fail(path, v, fmt.Sprintf("must be between 1 and %d", MaxTrials))
		ok = false
	}
	return int(n64), ok
}

// budget decodes budget_usd or budget_gpu_hours: a number, not negative
// (0: no budget).
func (d *decoder) budget(path string, v *yaml.Node) float64 {
	f, ok := d.number(path, v)
	if ok && f < 0 {
		d.fail(path, v, "must not be negative (0: no budget)")
	}
	return f
}

// priority decodes priority; "" when it is not urgent, normal or batch
// (reported), so that the default stands in for the checks that follow.
func (d *decoder) priority(path string, v *yaml.Node) jobspec.Priority {
	p, ok := d.str(path, v)
	prio := jobspec.Priority(p)
	if ok && !prio.Valid() {
		d.fail(path, v, "must be urgent, normal or batch")
	}
	if !prio.Valid() {
		return ""
	}
	return prio
}

// validName is jobspec's name rule: ^[a-z0-9]([a-z0-9-]*[a-z0-9])?$, at
// most 63 characters.
func validName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := range len(s) {
		if b := s[i]; !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '-') {
			return false
		}
	}
	return true
}

// objective decodes `objective:`; left-out fields get their defaults
// later.
func (d *decoder) objective(path string, n *yaml.Node) Objective {
	var o Objective
	d.mapping(path, n, func(key, child string, v *yaml.Node) bool {
		switch key {
		case "metric":
			m, ok := d.str(child, v)
			if ok && !validMetric(m) {
				d.fail(child, v, "must be 1 to 63 lower-case letters, digits and '_' (a metric the trainer reports, such as eval_loss)")
				m = ""
			}
			o.Metric = m
		case "goal":
			g, ok := d.str(child, v)
			if ok && g != GoalMinimize && g != GoalMaximize {
				d.fail(child, v, "must be minimize or maximize")
				g = ""
			}
			o.Goal = g
		default:
			return false
		}
		return true
	})
	return o
}

// validMetric: ^[a-z0-9_]{1,63}$.
func validMetric(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := range len(s) {
		if b := s[i]; !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '_') {
			return false
		}
	}
	return true
}

// job reads `job:` (a path read with opts.ReadJob, or a mapping) into the
// base job as written, a generic JSON mapping; nil after a problem.
func (d *decoder) job(n *yaml.Node, opts Options) map[string]any {
	if n.Kind == yaml.MappingNode {
		return d.jobMapping("job", "", n)
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		d.fail("job", n, "must be the path of a job spec file, or a job spec mapping, not "+jobspec.KindName(n))
		return nil
	}
	switch path := n.Value; {
	case path == "":
		d.fail("job", n, "must not be empty: the path of a job spec file, or a job spec mapping")
		return nil
	case opts.ReadJob == nil:
		d.fail("job", n, "is a path: give the job inline (the API reads no files; the CLI inlines a path)")
		return nil
	}
	return d.readJob(n, opts.ReadJob)
}

// readJob reads the job file the scalar n names.
func (d *decoder) readJob(n *yaml.Node, readJob func(string) ([]byte, error)) map[string]any {
	path := n.Value
	data, err := readJob(path)
	if err != nil {
		d.fail("job", n, "cannot read the job spec: "+err.Error())
		return nil
	}
	if len(data) > MaxSpecBytes {
		d.fail("job", n, fmt.Sprintf("the job spec is %d bytes; the limit is %d", len(data), MaxSpecBytes))
		return nil
	}
	root, errs := parseDocument(data, "a job spec")
	for _, fe := range errs {
		fe.Field = strings.TrimSuffix(join("job", fe.Field), ".")
		fe.Message += " (in " + jobspec.TruncateValue(path) + ")"
		d.add(fe)
	}
	if root == nil {
		return nil
	}
	return d.jobMapping("job", path, root)
}

// jobMapping converts the job spec mapping n into a generic JSON mapping:
// keys as written, numbers as json.Number (as written when that is JSON's
// syntax), so jobspec.Parse later sees the job as its author wrote it.
// Values JSON cannot hold (a timestamp, a non-string key) are reported
// here with jobspec's words. file is the job file's path, "" inline.
func (d *decoder) jobMapping(path, file string, n *yaml.Node) map[string]any {
	before := len(d.errs)
	v := d.generic(path, n)
	if len(d.errs) > before {
		for i := before; i < len(d.errs) && file != ""; i++ {
			d.errs[i].Message += " (in " + jobspec.TruncateValue(file) + ")"
		}
		return nil
	}
	return v.(map[string]any)
}

// generic converts n into encoding/json's generic form.
func (d *decoder) generic(path string, n *yaml.Node) any {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		d.mapping(path, n, func(key, child string, v *yaml.Node) bool {
			m[key] = d.generic(child, v)
			return true
		})
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, c := range n.Content {
			l[i] = d.generic(path+"["+strconv.Itoa(i)+"]", c)
		}
		return l
	}
	if (n.Tag == "!!int" || n.Tag == "!!float") && isJSONNumber(n.Value) || jobspec.OutOfRange(n) {
		// 1e400 unquoted stays a number, which the job spec's parser
		// calls out of range, not a string.
		return json.Number(n.Value)
	}
	v, ok := scalarValue(n)
	if f, isFloat := v.(float64); isFloat && (math.IsNaN(f) || math.IsInf(f, 0)) {
		ok = false
	}
	if !ok {
		d.fail(path, n, "is "+jobspec.KindName(n)+", which a job spec cannot hold (put a string in quotes)")
	}
	return v
}

// isJSONNumber reports whether s is a number in JSON's syntax.
func isJSONNumber(s string) bool {
	if s == "" || !(s[0] == '-' || '0' <= s[0] && s[0] <= '9') {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// defaults fills in what the spec left out: the name (the base job's), the
// priority, the objective, and the search's own defaults.
func (d *decoder) defaults(s *Sweep, t *topNodes) {
	if !t.name && !t.badName {
		if name, ok := s.base["name"].(string); ok && validName(name) {
			s.Name = name
		} else if s.base != nil {
			d.add(jobspec.FieldError{Field: "name", Message: "is required: give the sweep a name, or its job a valid one"})
		}
	}
	if s.Priority == "" {
		s.Priority = DefaultPriority
	}
	if s.Objective.Metric == "" {
		s.Objective.Metric = DefaultMetric
	}
	if s.Objective.Goal == "" {
		s.Objective.Goal = DefaultGoal
	}
	if t.search == nil {
		s.Search.Kind = SearchGrid
	}
}

// baseJob validates the base job as every trial gets it before its
// parameters and returns it; nil after a problem, reported as job.<field>.
func (d *decoder) baseJob(s *Sweep) *jobspec.Spec {
	spec, err := jobspec.Parse(s.trialJSON(s.base, s.Name, nil))
	if err == nil {
		return spec
	}
	ve, ok := err.(*jobspec.ValidationError)
	if !ok {
		d.add(jobspec.FieldError{Field: "job", Message: err.Error()})
		return nil
	}
	for _, fe := range ve.Errors {
		fe.Field = join("job", fe.Field)
		d.add(fe)
	}
	return nil
}

// encodeJSON is json.Marshal without HTML escaping.
func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only a NaN or infinite float64 fails, and Parse lets none in.
		return []byte("null")
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
