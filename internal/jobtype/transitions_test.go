package jobtype_test

import (
	"os"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// transitionsMarkdown renders jobtype.Transitions as the table of
// docs/architecture.md ("States and transitions"): one line per operation,
// target state and condition, its source states joined.
func transitionsMarkdown() string {
	type key struct {
		op   jobtype.Op
		to   jobtype.State
		when string
	}
	var order []key
	from := map[key][]string{}
	for _, t := range jobtype.Transitions {
		k := key{t.Op, t.To, t.When}
		if _, ok := from[k]; !ok {
			order = append(order, k)
		}
		f := string(t.From)
		if f == "" {
			f = "(new)"
		}
		from[k] = append(from[k], "`"+f+"`")
	}
	var b strings.Builder
	b.WriteString("| operation | from | to | when |\n|---|---|---|---|\n")
	for _, k := range order {
		b.WriteString("| " + string(k.op) + " | " + strings.Join(from[k], ", ") + " | `" + string(k.to) + "` | " + k.when + " |\n")
	}
	return b.String()
}

// TestTransitionsDocumented checks that docs/architecture.md shows the
// table as it is in the code.
func TestTransitionsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := transitionsMarkdown(); !strings.Contains(string(doc), want) {
		t.Errorf("docs/architecture.md, \"States and transitions\", must hold the table of jobtype.Transitions:\n%s", want)
	}
}

func TestTransitionsWellFormed(t *testing.T) {
	seen := map[jobtype.Transition]bool{}
	for _, tr := range jobtype.Transitions {
		if seen[tr] {
			t.Errorf("row given twice: %+v", tr)
		}
		seen[tr] = true
		if (tr.From == "") != (tr.Op == jobtype.OpCreate) || (tr.From != "" && !tr.From.Valid()) || !tr.To.Valid() {
			t.Errorf("bad row %+v", tr)
		}
		if tr.From.Terminal() && tr.Op != jobtype.OpRetry {
			t.Errorf("row %+v leaves a terminal state other than by retry", tr)
		}
		if !jobtype.Allowed(tr.Op, tr.From, tr.To) {
			t.Errorf("Allowed(%+v) is false", tr)
		}
	}
	if jobtype.Allowed(jobtype.OpFinish, jobtype.StateQueued, jobtype.StateSucceeded) {
		t.Error("finish from queued is allowed")
	}
}
