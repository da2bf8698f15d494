package buildinfo

import (
	"encoding/json"
	"runtime/debug"
	"testing"
)

// TestFormat: Info from fabricated debug.BuildInfo values, as one line and
// as JSON.
func TestFormat(t *testing.T) {
	const rev = "3aa4d91c0ff2b7e1d5a6c9e0f1a2b3c4d5e6f708"
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/lathe-ml/lathe", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-06T04:30:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}}
	for name, tc := range map[string]struct {
		bi       *debug.BuildInfo
		line     string
		jsonText string
	}{
		"stamped, modified": {stamped, "lathe (devel) " + rev + " 2026-12-06T04:30:00Z modified",
			`{"program":"lathe","version":"(devel)","revision":"` + rev + `","time":"2026-12-06T04:30:00Z","modified":true,"go_version":"go1.26.8"}`},
		"tagged, clean": {&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-12-06T04:30:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			"lathe v1.2.3 " + rev + " 2026-12-06T04:30:00Z",
			`{"program":"lathe","version":"v1.2.3","revision":"` + rev + `","time":"2026-12-06T04:30:00Z","modified":false,"go_version":"go1.26.8"}`},
		"no vcs stamp": {&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"lathe (devel)", `{"program":"lathe","version":"(devel)","modified":false,"go_version":"go1.26.8"}`},
		"no build info": {nil, "lathe unknown", `{"program":"lathe","version":"unknown","modified":false}`},
	} {
		t.Run(name, func(t *testing.T) {
			in := FromBuildInfo("lathe", tc.bi)
			if got := in.String(); got != tc.line {
				t.Errorf("String() = %q, want %q", got, tc.line)
			}
			b, err := json.Marshal(in)
			if err != nil || string(b) != tc.jsonText {
				t.Errorf("JSON = %s (%v), want %s", b, err, tc.jsonText)
			}
		})
	}
}

// TestRead: the test binary's own build information is read (a test
// binary has it; its main module version is "(devel)" or empty).
func TestRead(t *testing.T) {
	in := Read("x")
	if in.Program != "x" || in.Version == "" || in.GoVersion == "" {
		t.Errorf("Read = %+v", in)
	}
}
