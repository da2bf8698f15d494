package scheduler

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/routing"
)

// TestWireDecisionSameJSON: the API's wire.Decision is routing.Decision's
// JSON field for field, filled in and with nil slices (null on the wire),
// and no field of routing's is left out of the conversion.
func TestWireDecisionSameJSON(t *testing.T) {
	for name, pair := range map[string][2]any{
		"Decision":  {routing.Decision{}, wire.Decision{}},
		"Candidate": {routing.Candidate{}, wire.Candidate{}},
		"Staging":   {routing.Staging{}, wire.Staging{}},
	} {
		if a, b := reflect.TypeOf(pair[0]).NumField(), reflect.TypeOf(pair[1]).NumField(); a != b {
			t.Errorf("%s: routing has %d fields, wire %d", name, a, b)
		}
	}
	full := routing.Decision{Backend: "aws-eu", Site: "aws-eu-central-1", Refused: true, Waiting: true,
		Residency: []string{"eu"}, Reasons: []string{"why"},
		Candidates: []routing.Candidate{{Backend: "local", Site: "dc", Kind: "local", Feasible: true, Reason: "r",
			EstWaitS: -1, EstCostUSD: 2.2, EstRuntimeS: 7200, InstanceType: "g6e.xlarge", Spot: true}},
		Staging:    []routing.Staging{{What: "dataset", URI: "s3://b/k", FromSite: "a", ToSite: "b"}},
		EstRuntime: 2 * time.Hour, EstGPUHours: 2, EstCostUSD: 3.72, Trade: "trade"}
	for name, d := range map[string]routing.Decision{"full": full, "zero": {}, "empty slices": {Residency: []string{}, Candidates: []routing.Candidate{}, Staging: []routing.Staging{}}} {
		want, _ := json.Marshal(d)
		got, _ := json.Marshal(d.Wire())
		if string(got) != string(want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}
