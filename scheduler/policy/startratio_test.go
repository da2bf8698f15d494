package policy

import (
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/scheduler/routing/routecfg"
)

// TestStartRatio: a first attempt routed local at submit with a wait
// estimate of a minute or more says how its wait came out against it;
// a later attempt, a route decided again, a cloud route, a small estimate
// or none say nothing.
func TestStartRatio(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	job := func(mod func(j *jobtype.Job)) *jobtype.Job {
		j := &jobtype.Job{Attempt: 1, CreatedAt: at, Route: &jobtype.RouteInfo{Kind: routecfg.KindLocal, Path: "submit", EstWaitS: 1200}}
		if mod != nil {
			mod(j)
		}
		return j
	}
	if r, ok := StartRatio(job(nil), at.Add(30*time.Minute)); !ok || r != 1.5 {
		t.Errorf("30 min against 20: %v %v; want 1.5", r, ok)
	}
	for name, mod := range map[string]func(j *jobtype.Job){
		"second attempt": func(j *jobtype.Job) { j.Attempt = 2 },
		"spill-over":     func(j *jobtype.Job) { j.Route.Path = "spill-over" },
		"cloud":          func(j *jobtype.Job) { j.Route.Kind = routecfg.KindAWS },
		"59 s estimate":  func(j *jobtype.Job) { j.Route.EstWaitS = 59 },
		"no route":       func(j *jobtype.Job) { j.Route = nil },
	} {
		if r, ok := StartRatio(job(mod), at.Add(30*time.Minute)); ok {
			t.Errorf("%s: ratio %v; want none", name, r)
		}
	}
}
