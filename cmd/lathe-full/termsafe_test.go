package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

func TestTermSafe(t *testing.T) {
	cases := []struct{ in, want string }{
		{"step 10 loss 2.31", "step 10 loss 2.31"},
		{"tab\tkept, ünïcode kept, 日本語", "tab\tkept, ünïcode kept, 日本語"},
		{"\x1b[2J\x1b[Hcleared", `\x1b[2J\x1b[Hcleared`},
		{"\x1b]52;c;ZXZpbA==\x07", `\x1b]52;c;ZXZpbA==\x07`},
		{"title\x1b]0;pwned\x07", `title\x1b]0;pwned\x07`},
		{"back\rover", `back\x0dover`},
		{"c1 \u009b31m", `c1 \x9b31m`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"bad \xff byte", `bad \xff byte`},
		{"del\x7f", `del\x7f`},
	}
	for _, c := range cases {
		if got := termSafe(c.in); got != c.want {
			t.Errorf("termSafe(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestLogsEscapeTrainerControlText: a trainer's log line, an exit error and
// a metric name with terminal escapes are printed by `lathe logs` (table)
// with the escapes shown, never sent to the terminal.
func TestLogsEscapeTrainerControlText(t *testing.T) {
	mk := func(typ string, v any) jobtype.Event {
		b, _ := json.Marshal(v)
		return jobtype.Event{Type: typ, Data: b}
	}
	evs := []jobtype.Event{
		mk(jobtype.EventLog, jobtype.LogLine{Line: "ok \x1b]52;c;ZXZpbA==\x07 \x1b[1A\x1b[2K"}),
		mk(jobtype.EventState, jobtype.StateChange{From: "running", To: "failed", Error: "exit 1: \x1b[31mred"}),
		mk(jobtype.EventDone, map[string]any{"metrics": map[string]float64{"loss\x1b[8m": 1}}),
	}
	var out strings.Builder
	for _, ev := range evs {
		if err := writeEvent(&out, ev); err != nil {
			t.Fatal(err)
		}
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("lathe logs passed terminal control bytes through:\n%q", out.String())
	}
	if !strings.Contains(out.String(), `\x1b]52`) {
		t.Errorf("the escaped log line is not shown:\n%q", out.String())
	}
}
