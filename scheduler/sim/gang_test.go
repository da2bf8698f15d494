package sim

import (
	"cmp"
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// TestSimulateGangs: on 8-GPU owned nodes, a job of more GPUs than a node
// never runs on owned GPUs without Setup.Gangs (it must rent); with it,
// such jobs run there as gangs of whole nodes. With no cloud backend every
// job of the shared trace's first 1,500 runs on 64 owned GPUs, none stuck
// or refused (a gang is placed, all or nothing, once its nodes drain), and
// the owned GPU-hours used are exactly each job's duration × its GPUs
// (every size above 8 is a multiple of 8: a gang holds its nodes for its
// run, no more, no less).
func TestSimulateGangs(t *testing.T) {
	all, setup := simTrace(t)
	jobs := all[:1500]
	setup.Owned, setup.NodeGPUs = 64, 8
	big := func(res Result) (owned, total int) {
		for x, o := range res.Jobs {
			if jobs[x].GPUs > 8 {
				total++
				if !o.Cloud && !o.Refused && !o.Stuck {
					owned++
				}
			}
		}
		return owned, total
	}
	for _, gangs := range []bool{false, true} {
		setup.Gangs = gangs
		res, err := Simulate(context.Background(), setup, jobs)
		if err != nil {
			t.Fatal(err)
		}
		owned, total := big(res)
		if total == 0 || (owned > 0) != gangs || len(res.Violations) > 0 {
			t.Errorf("gangs %v: %d of %d jobs above 8 GPUs ran on owned GPUs, violations %v", gangs, owned, total, res.Violations)
		}
	}

	setup = noCloud(t, setup)
	setup.Gangs = true
	res, err := Simulate(context.Background(), setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for x, o := range res.Jobs {
		if o.Cloud || o.Refused || o.Stuck {
			t.Fatalf("job %s (%d GPUs): cloud %v refused %v stuck %v (%s); want it run on owned GPUs", o.ID, jobs[x].GPUs, o.Cloud, o.Refused, o.Stuck, o.Reason)
		}
		want += jobs[x].Duration.Hours() * float64(jobs[x].GPUs)
	}
	if owned, total := big(res); owned != total || total == 0 {
		t.Errorf("no cloud: %d of %d jobs above 8 GPUs ran on owned GPUs", owned, total)
	}
	if d := res.OwnedBusyGPUHours - want; d > 1e-6*want || d < -1e-6*want {
		t.Errorf("owned GPU-hours used %.3f; want Σ duration × GPUs = %.3f", res.OwnedBusyGPUHours, want)
	}
	if most := mostInUse(jobs, res); most > setup.Owned {
		t.Errorf("%d owned GPUs in use at once; the pool has %d", most, setup.Owned)
	}
}

// mostInUse is the most GPUs the jobs of res held at once, each from its
// start to its end (no job was preempted).
func mostInUse(jobs []Job, res Result) int {
	type edge struct {
		at   time.Duration
		gpus int
	}
	var es []edge
	for x, o := range res.Jobs {
		es = append(es, edge{o.Start, jobs[x].GPUs}, edge{o.End, -jobs[x].GPUs})
	}
	slices.SortFunc(es, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.gpus, b.gpus)) })
	most, now := 0, 0
	for _, e := range es {
		now += e.gpus
		most = max(most, now)
	}
	return most
}

// TestSimulateGangPreemptedOnce: an urgent gang that needs both nodes of
// a batch gang stops it once, though placement names it a victim on each
// node: it is preempted once, resumes after the urgent one, and the owned
// GPU-hours count each run once.
func TestSimulateGangPreemptedOnce(t *testing.T) {
	_, setup := simTrace(t)
	setup = noCloud(t, setup)
	setup.Owned, setup.NodeGPUs, setup.Gangs = 16, 8, true
	jobs := []Job{
		{ID: "batch", Submit: 0, Duration: 10 * time.Hour, GPUs: 16, Priority: jobspec.PriorityBatch, Hint: 10 * time.Hour},
		{ID: "urgent", Submit: time.Hour, Duration: time.Hour, GPUs: 16, Priority: jobspec.PriorityUrgent, Hint: time.Hour},
		// The simulator runs a round only after an event (docs/simulate.md):
		// this arrival is the round that starts the urgent job once the
		// batch one has stopped.
		{ID: "tick", Submit: time.Hour + time.Minute, Duration: time.Minute},
	}
	res, err := Simulate(context.Background(), setup, jobs)
	if err != nil {
		t.Fatal(err)
	}
	b, u := res.Jobs[0], res.Jobs[1]
	if b.Preemptions != 1 || u.Start != time.Hour+time.Minute || b.End != 11*time.Hour+time.Minute {
		t.Errorf("batch preempted %d times, ends %v; urgent starts %v; want once, 11h1m, 1h1m", b.Preemptions, b.End, u.Start)
	}
	if want := 16.0 * (10 + 1); math.Abs(res.OwnedBusyGPUHours-want) > 1e-9 {
		t.Errorf("owned GPU-hours %v; want %v", res.OwnedBusyGPUHours, want)
	}
}
