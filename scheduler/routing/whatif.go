package routing

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// WhatIf is an explain's what-ifs: a local backend's queue wait, a
// backend's spend this month, by backend name.
type WhatIf struct {
	Wait  map[string]time.Duration
	Spent map[string]float64
}

// ParseWhatIf reads BACKEND=DURATION waits (a duration ≥ 0, like 3h or 1d)
// and BACKEND=USD spends (a finite number ≥ 0: no Inf, no NaN). Every bad
// one is a field error named assume_wait or assume_spent with the value as
// given. The API (query assume_wait, assume_spent) and the CLI
// (--assume-wait, --assume-spent) both read them here, so they agree. A
// backend given twice keeps the last value.
func ParseWhatIf(waits, spents []string) (WhatIf, []jobspec.FieldError) {
	wi := WhatIf{Wait: map[string]time.Duration{}, Spent: map[string]float64{}}
	var fe []jobspec.FieldError
	for _, v := range waits {
		b, d, ok := strings.Cut(v, "=")
		dur, err := jobspec.ParseDuration(d)
		if !ok || b == "" || d == "" || err != nil || dur < 0 {
			fe = append(fe, jobspec.FieldError{Field: "assume_wait", Value: v, Message: "want BACKEND=DURATION, like local=3h"})
			continue
		}
		wi.Wait[b] = dur
	}
	for _, v := range spents {
		b, u, ok := strings.Cut(v, "=")
		usd, err := strconv.ParseFloat(u, 64)
		if !ok || b == "" || err != nil || usd < 0 || math.IsNaN(usd) || math.IsInf(usd, 0) {
			fe = append(fe, jobspec.FieldError{Field: "assume_spent", Value: v, Message: "want BACKEND=USD, a finite amount ≥ 0, like aws-eu=5000"})
			continue
		}
		wi.Spent[b] = usd
	}
	return wi, fe
}
