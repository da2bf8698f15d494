package nvmlinventory

import (
	"fmt"
	"slices"
	"strings"
)

// Kind is what a --gpus value asks for.
type Kind string

// The kinds of --gpus values.
const (
	// KindAuto reads real GPUs through NVML; 0 GPUs where the driver is absent.
	KindAuto Kind = "auto"
	// KindNone has 0 GPUs and never loads NVML.
	KindNone Kind = "none"
	// KindSimulated has fake GPUs from one of go-nvml's mock servers.
	KindSimulated Kind = "simulated"
)

// simulatedServers are the go-nvml v0.13.4-1 mock servers --gpus simulated: accepts;
// simulated.go maps each to its constructor (a test checks the two agree).
var simulatedServers = []string{"dgxa100", "dgxb200", "dgxh100", "dgxh200"}

// SimulatedServers returns the names --gpus simulated:<server> accepts, sorted.
func SimulatedServers() []string { return slices.Clone(simulatedServers) }

// Spec is a parsed --gpus value.
type Spec struct {
	// Kind is auto, none or simulated.
	Kind Kind
	// Server is the mock server for KindSimulated ("dgxh100"), empty otherwise.
	Server string
}

// String gives the --gpus value back.
func (s Spec) String() string {
	if s.Kind == KindSimulated {
		return string(KindSimulated) + ":" + s.Server
	}
	return string(s.Kind)
}

// ParseGPUsFlag parses a --gpus value: "auto", "none" or "simulated:<server>" with a
// server from [SimulatedServers]. The error names the flag and the value, and says
// what is accepted.
func ParseGPUsFlag(value string) (Spec, error) {
	switch value {
	case string(KindAuto):
		return Spec{Kind: KindAuto}, nil
	case string(KindNone):
		return Spec{Kind: KindNone}, nil
	}
	server, ok := strings.CutPrefix(value, string(KindSimulated)+":")
	if !ok {
		return Spec{}, fmt.Errorf("--gpus %q: want auto, none or simulated:<server> (servers: %s)",
			value, strings.Join(simulatedServers, ", "))
	}
	if !slices.Contains(simulatedServers, server) {
		return Spec{}, fmt.Errorf("--gpus %q: no simulated server %q; go-nvml's mock has %s",
			value, server, strings.Join(simulatedServers, ", "))
	}
	return Spec{Kind: KindSimulated, Server: server}, nil
}
