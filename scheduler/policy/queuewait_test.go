package policy

import (
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/poolstate"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// TestQueueWaits: the queue wait a slurm backend's worker reports in its
// heartbeat reaches the routing snapshot, by backend name; other nodes'
// and unknown backends' do not.
func TestQueueWaits(t *testing.T) {
	c := routecfg.Config{Backends: []routecfg.Backend{{Name: "hpc", Kind: routecfg.KindSlurm}, {Name: "aws-eu", Kind: routecfg.KindAWS}}}
	nodes := []poolstate.NodeStatus{
		{Node: poolstate.Node{Name: "cloud:hpc", Backend: "slurm", QueueWaitS: 90}},
		{Node: poolstate.Node{Name: "cloud:aws-eu", Backend: "aws", QueueWaitS: 30}},
		{Node: poolstate.Node{Name: "cloud:gone", Backend: "slurm", QueueWaitS: 30}},
	}
	got := queueWaits(c, nodes)
	if len(got) != 1 || got["hpc"] != 90*time.Second {
		t.Errorf("queueWaits = %v", got)
	}
}
