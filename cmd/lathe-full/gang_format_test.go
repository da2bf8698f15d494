package main

import (
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// TestGangRanksRow: `lathe status` of a job that spans nodes shows its
// current attempt's ranks and the rendezvous; an earlier attempt's gang
// shows nothing.
func TestGangRanksRow(t *testing.T) {
	j := &jobtype.Job{Attempt: 2, Gang: &jobtype.Gang{Attempt: 2, Addr: "10.0.0.1", Port: 29500,
		Ranks: []jobtype.GangRank{{Node: "node-a", GPUs: []int{0, 1}}, {Node: "node-b", GPUs: []int{3}}}}}
	var got string
	for _, r := range placementRows(j) {
		if r[0] == "Ranks" {
			got = r[1]
		}
	}
	if want := "0 node-a [0,1], 1 node-b [3]; rendezvous 10.0.0.1:29500"; got != want {
		t.Fatalf("Ranks row %q, want %q", got, want)
	}
	j.Attempt = 3
	for _, r := range placementRows(j) {
		if r[0] == "Ranks" {
			t.Fatalf("a queued next attempt shows the last attempt's ranks: %q", r[1])
		}
	}
}
