package routing

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestStayOdds: with enough start ratios (how recent local starts' waits
// came out against the wait estimated at their submit), a job that a
// cloud backend could also take stays for the local pool when the odds of
// a start within the max_wait it has left are at least left ÷ (left +
// its run time), and bursts otherwise, whichever side of max_wait the
// point estimate lies on:
//   - an estimate of 1 h within max_wait 2 h: a 10-minute job rents unless
//     the pool is all but sure (it needs 92%; 80% of starts came within
//     twice their estimate), a 72-hour job stays;
//   - an estimate of 3 h, past max_wait: the 72-hour job still stays (it
//     needs 3%; 20% of starts came in under 0.67× their estimate), the
//     10-minute job bursts;
//   - with fewer than minStartRatios ratios the estimate against max_wait
//     decides, as before;
//   - a job with value_per_hour_usd is decided by its own value of an
//     hour, never by the odds.
func TestStayOdds(t *testing.T) {
	// 25 starts: 5 at half their estimate, 15 on it, 5 at three times it.
	var ratios []float64
	for i := range 25 {
		ratios = append(ratios, []float64{0.5, 1, 1, 1, 3}[i%5])
	}
	slices.Sort(ratios)
	decide := func(waitS float64, run time.Duration, rs []float64) Decision {
		s := baseSnapshot(t, issueConfig)
		p := s.Pools["local"]
		p.Joins[1] = []JoinWait{{GPUs: 1, WaitS: waitS}}
		s.Pools["local"] = p
		s.StartRatios = rs
		j := baseJob("eu")
		j.MaxWait, j.ExpectedRuntime, j.MaxRuntime = 2*time.Hour, run, 2*run
		return Decide(j, s)
	}
	for _, tc := range []struct {
		name   string
		waitS  float64
		run    time.Duration
		ratios []float64
		local  bool
		reason string
	}{
		{"1h estimate, short job", 3600, 10 * time.Minute, ratios, false, "burst: 80% of the last 25 local starts came within 2.00×"},
		{"1h estimate, long job", 3600, 72 * time.Hour, ratios, true, "stay: 80% of the last 25 local starts came within 2.00×"},
		{"3h estimate, long job", 3 * 3600, 72 * time.Hour, ratios, true, "stay: 20% of the last 25 local starts came within 0.67×"},
		{"3h estimate, short job", 3 * 3600, 10 * time.Minute, ratios, false, "burst: 20%"},
		{"too few ratios, 1h", 3600, 10 * time.Minute, ratios[:minStartRatios-1], true, "is within max_wait"},
		{"too few ratios, 3h", 3 * 3600, 72 * time.Hour, ratios[:minStartRatios-1], false, "exceeds max_wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.waitS, tc.run, tc.ratios)
			if local := d.Backend == "local"; local != tc.local || !hasReason(d, tc.reason) {
				t.Errorf("chose %q; want local %v with a reason holding %q; reasons:\n%s", d.Backend, tc.local, tc.reason, strings.Join(d.Reasons, "\n"))
			}
		})
	}
	// A job that states its value of an hour is decided by that trade,
	// never by the odds.
	s := baseSnapshot(t, issueConfig)
	p := s.Pools["local"]
	p.Joins[1] = []JoinWait{{GPUs: 1, WaitS: 3600}}
	s.Pools["local"] = p
	s.StartRatios = ratios
	j := baseJob("eu")
	j.MaxWait, j.ExpectedRuntime, j.ValuePerHourUSD = 2*time.Hour, 10*time.Minute, 0.01
	if d := Decide(j, s); hasReason(d, "local starts came within") {
		t.Errorf("value_per_hour_usd set: the odds decided; reasons:\n%s", strings.Join(d.Reasons, "\n"))
	}
}
