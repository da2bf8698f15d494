package jobspec

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
)

// Duration is a time.Duration written as a string ("90m", "2h"). In JSON it
// is always a string; zero marshals as "".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration, or "" for zero.
func (d Duration) String() string {
	if d == 0 {
		return ""
	}
	return time.Duration(d).String()
}

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string such as "2h30m" or "1d12h" (see
// ParseDuration).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"2h\": %w", err)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// maxDurationLen bounds the text ParseDuration reads; no sensible duration
// needs more, and it keeps hostile inputs cheap.
const maxDurationLen = 64

// ParseDuration parses a non-negative duration: Go syntax (see
// time.ParseDuration: "90m", "2h30m", "1.5h", "0") plus a "d" unit of 24
// hours ("2d", "1d12h", "1.5d"). "" is zero. A negative duration, a value over
// about 292 years or text over 64 bytes is an error.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if len(s) > maxDurationLen {
		return 0, fmt.Errorf("duration %q is too long", s[:16]+"…")
	}
	if s[0] == '-' {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	if !strings.Contains(s, "d") {
		v, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return v, nil
	}
	// Split off the day terms; hand the rest to time.ParseDuration.
	days, others, err := splitDays(s)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	if others != "" {
		v, err := time.ParseDuration(others)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		total = v
	}
	days.Mul(days, new(big.Rat).SetInt64(int64(24*time.Hour)))
	q := new(big.Int).Quo(days.Num(), days.Denom()) // truncates, as time.ParseDuration does
	if !q.IsInt64() || q.Int64() > math.MaxInt64-int64(total) {
		return 0, fmt.Errorf("invalid duration %q: too large", s)
	}
	return total + time.Duration(q.Int64()), nil
}

// splitDays splits s, a duration with a day term, into the sum of its day
// terms and the text of its other terms.
func splitDays(s string) (days *big.Rat, others string, err error) {
	rest := strings.TrimPrefix(s, "+")
	days = new(big.Rat)
	var b strings.Builder
	for rest != "" {
		num, unit, n, ok := nextTerm(rest)
		if !ok {
			return nil, "", fmt.Errorf("invalid duration %q", s)
		}
		switch unit {
		case "":
			return nil, "", fmt.Errorf("invalid duration %q: missing unit", s)
		case "d":
			var r big.Rat
			if _, ok := r.SetString(num); !ok {
				return nil, "", fmt.Errorf("invalid duration %q", s)
			}
			days.Add(days, &r)
		default:
			b.WriteString(rest[:n])
		}
		rest = rest[n:]
	}
	return days, b.String(), nil
}

// nextTerm splits the first term off rest: its number, its unit (the text
// up to the next number; "" when missing) and its length n. ok is false
// when the number has no digit or more than one '.'.
func nextTerm(rest string) (num, unit string, n int, ok bool) {
	i, digits := 0, 0
	for i < len(rest) && isNumByte(rest[i]) {
		if rest[i] != '.' {
			digits++
		}
		i++
	}
	n = i
	for n < len(rest) && !isNumByte(rest[n]) {
		n++
	}
	num, unit = rest[:i], rest[i:n]
	return num, unit, n, digits > 0 && strings.Count(num, ".") <= 1
}

// isNumByte reports whether c is part of a number: a digit or '.'.
func isNumByte(c byte) bool { return c >= '0' && c <= '9' || c == '.' }
