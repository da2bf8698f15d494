package jobstore

import (
	"encoding/json"
	"testing"
)

// topStringsAgrees checks topStrings(raw, "priority", "kind") against
// encoding/json: when it answers, it answers what json.Unmarshal reads.
func topStringsAgrees(t *testing.T, raw string) (ok bool) {
	t.Helper()
	got, ok := topStrings(raw, "priority", "kind")
	if !ok {
		return false
	}
	var want struct {
		Priority string `json:"priority"`
		Kind     string `json:"kind"`
	}
	if err := json.Unmarshal([]byte(raw), &want); err != nil {
		// topStrings stops at the keys it was asked: it may answer for
		// text that is invalid after them, never for a different value.
		return true
	}
	if got[0] != want.Priority || got[1] != want.Kind {
		t.Errorf("topStrings(%q) = %q, encoding/json reads %q, %q", raw, got, want.Priority, want.Kind)
	}
	return true
}

func TestTopStrings(t *testing.T) {
	for _, c := range []struct {
		raw string
		ok  bool
	}{
		{`{"priority":"urgent","kind":"local"}`, true},
		{` { "name" : "a\"}{" , "lora":{"priority":"x","kind":"y"}, "r":["}", {"kind":"z"}], "n": -1.5e3, "b": true,` +
			` "z": null, "priority" : "batch", "kind": "aws"} `, true},
		{`{"env":{"priority":"no"},"x":[1,2,[3]]}`, true}, // neither key at the top: both ""
		{`{"priority":"a\u0062"}`, false},                 // an escape in a value asked
		{`{"pri\u006frity":"urgent"}`, false},             // an escape in a key
		{`{"priority":1}`, false},                         // not a string
		{`["priority","urgent"]`, false},
		{``, false},
		{`{"priority":"urgent"`, false},
		{`{"kind":"local","priority":"normal"}`, true},
	} {
		if ok := topStringsAgrees(t, c.raw); ok != c.ok {
			t.Errorf("topStrings(%q): ok %v, want %v", c.raw, ok, c.ok)
		}
	}
}

// FuzzTopStrings: whatever the text, topStrings never answers otherwise
// than encoding/json.
func FuzzTopStrings(f *testing.F) {
	for _, s := range []string{`{"priority":"urgent","kind":"local"}`, `{"a":{"priority":"x"},"priority":"b"}`,
		`{"s":"\\\"","kind":"k"}`, `{"l":[{"kind":"q"}],"kind":"r","priority":"s"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) { topStringsAgrees(t, raw) })
}
