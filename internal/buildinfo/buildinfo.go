// Package buildinfo says which build a Lathe binary is: the main module's
// version and the version-control stamp the Go toolchain writes into every
// binary it builds (runtime/debug.ReadBuildInfo), in one format for `lathe
// version` and `lathed --version`.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Info is a binary's build stamp. Revision, Time and Modified are empty
// (false) when the binary carries no VCS stamp: a build outside a git work
// tree, or one with -buildvcs=false (GOFLAGS or go env).
type Info struct {
	// Program is the binary's name ("lathe", "lathed").
	Program string `json:"program"`
	// Version is the main module's version: a tag for `go install
	// …@vX.Y.Z`, "(devel)" for a build from a work tree, "unknown" when the
	// binary has no build information.
	Version string `json:"version"`
	// Revision is the commit the binary was built from (vcs.revision).
	Revision string `json:"revision,omitempty"`
	// Time is that commit's time, RFC 3339 in UTC (vcs.time).
	Time string `json:"time,omitempty"`
	// Modified is true when the work tree had changes not in Revision
	// (vcs.modified).
	Modified bool `json:"modified"`
	// GoVersion is the toolchain that built the binary ("go1.26.8").
	GoVersion string `json:"go_version,omitempty"`
}

// Read returns the running binary's Info, named program.
func Read(program string) Info {
	bi, _ := debug.ReadBuildInfo()
	return FromBuildInfo(program, bi)
}

// FromBuildInfo reads Info from bi (nil: a binary without build
// information, whose Version is "unknown").
func FromBuildInfo(program string, bi *debug.BuildInfo) Info {
	in := Info{Program: program, Version: "unknown"}
	if bi == nil {
		return in
	}
	in.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is one line, its fields separated by spaces and the absent ones
// left out:
//
//	lathe (devel) 3aa4d91c0f… 2026-12-06T04:30:00Z modified
func (in Info) String() string {
	parts := []string{in.Program, in.Version}
	for _, p := range []string{in.Revision, in.Time} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if in.Modified {
		parts = append(parts, "modified")
	}
	return strings.Join(parts, " ")
}
