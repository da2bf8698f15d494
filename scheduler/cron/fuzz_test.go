package cron

import (
	"testing"
	"time"
)

// FuzzParse: no cron expression, zone or deadline makes Parse, Next,
// Latest or Due panic; a schedule that parses has Next after and Latest
// at or before the time asked.
func FuzzParse(f *testing.F) {
	for _, c := range []string{"0 2 * * *", "@every 10s", "@daily", "*/5 1-3 * JAN-MAR MON", "0 0 29 2 *", "@every 1000000h", "61 * * * *", "@every -1s", "* * * * * *"} {
		f.Add(c, "Europe/Berlin", "10m")
	}
	f.Fuzz(func(t *testing.T, cronExpr, tz, deadline string) {
		ss, err := Parse([]Entry{{Name: "f", Cron: cronExpr, Timezone: tz, Job: "j.yaml", StartingDeadline: deadline}}, "/d")
		if err != nil {
			return
		}
		s := ss[0]
		now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
		if n := s.Next(now); !n.IsZero() && !n.After(now) {
			t.Fatalf("%q: Next(%s) = %s", cronExpr, now, n)
		}
		if l := s.Latest(now); !l.IsZero() && l.After(now) {
			t.Fatalf("%q: Latest(%s) = %s", cronExpr, now, l)
		}
		_ = s.Due(now.Add(-time.Hour), now)
		_ = s.Due(time.Time{}, now)
	})
}
