package nvmlinventory

import (
	"slices"
	"strings"
	"testing"
)

func TestParseGPUsFlag(t *testing.T) {
	good := map[string]Spec{
		"auto":              {Kind: KindAuto},
		"none":              {Kind: KindNone},
		"simulated:dgxa100": {Kind: KindSimulated, Server: "dgxa100"},
		"simulated:dgxh100": {Kind: KindSimulated, Server: "dgxh100"},
		"simulated:dgxh200": {Kind: KindSimulated, Server: "dgxh200"},
		"simulated:dgxb200": {Kind: KindSimulated, Server: "dgxb200"},
	}
	for value, want := range good {
		got, err := ParseGPUsFlag(value)
		if err != nil || got != want {
			t.Errorf("ParseGPUsFlag(%q) = %+v, %v; want %+v", value, got, err, want)
		}
		if got.String() != value {
			t.Errorf("ParseGPUsFlag(%q).String() = %q", value, got.String())
		}
	}

	bad := []string{"", "Auto", "all", "0", " none", "simulated", "simulated:", "simulated:dgx1", "simulated:DGXH100", "dgxh100", "simulated:dgxh100:x"}
	for _, value := range bad {
		_, err := ParseGPUsFlag(value)
		if err == nil {
			t.Errorf("ParseGPUsFlag(%q) accepted", value)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "--gpus") || !strings.Contains(msg, `"`+value+`"`) {
			t.Errorf("ParseGPUsFlag(%q): error %q does not name the flag and the value", value, msg)
		}
		if !strings.Contains(msg, "dgxh100") {
			t.Errorf("ParseGPUsFlag(%q): error %q does not list the simulated servers", value, msg)
		}
	}
}

func TestSimulatedServersIsACopy(t *testing.T) {
	s := SimulatedServers()
	if !slices.IsSorted(s) || len(s) != 4 {
		t.Fatalf("SimulatedServers() = %v, want 4 sorted names", s)
	}
	s[0] = "changed"
	if SimulatedServers()[0] == "changed" {
		t.Fatal("SimulatedServers returned its own slice")
	}
}
