package jobspec

import (
	"encoding/json"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true},
		{"0", 0, true},
		{"90m", 90 * time.Minute, true},
		{"2h30m", 150 * time.Minute, true},
		{"1.5h", 90 * time.Minute, true},
		{"+2h", 2 * time.Hour, true},
		{"500ms", 500 * time.Millisecond, true},
		{"2d", 48 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"1.5d", 36 * time.Hour, true},
		{".5d", 12 * time.Hour, true},
		{"1d1d", 48 * time.Hour, true},
		{"1h1d", 25 * time.Hour, true},
		{"0d", 0, true},
		{"+1d", 24 * time.Hour, true},
		{"106751d", 106751 * 24 * time.Hour, true},
		{"2562047h", 2562047 * time.Hour, true},
		{"-2h", 0, false},
		{"-0", 0, false},
		{"-1d", 0, false},
		{"106752d", 0, false},
		{"106751d23h59m59s", 0, false},
		{"2", 0, false},
		{"1d2", 0, false},
		{"d", 0, false},
		{"1dd", 0, false},
		{"1d-2h", 0, false},
		{"1..5d", 0, false},
		{"soon", 0, false},
		{"2 h", 0, false},
		{"1d 2h", 0, false},
		{"1111111111111111111111111111111111111111111111111111111111111111111h", 0, false},
	}
	for _, tc := range cases {
		got, err := ParseDuration(tc.in)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if !tc.ok && err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", tc.in, got)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	var v struct {
		D Duration `json:"d"`
	}
	if err := json.Unmarshal([]byte(`{"d":"1d6h"}`), &v); err != nil || v.D.D() != 30*time.Hour {
		t.Fatalf("Unmarshal 1d6h = %v, %v", v.D, err)
	}
	b, _ := json.Marshal(v)
	if string(b) != `{"d":"30h0m0s"}` {
		t.Errorf("Marshal = %s", b)
	}
	for _, bad := range []string{`{"d":"-1h"}`, `{"d":5}`, `{"d":"x"}`} {
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
	if Duration(0).String() != "" {
		t.Errorf("zero String() = %q", Duration(0).String())
	}
}
