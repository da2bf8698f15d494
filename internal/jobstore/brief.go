package jobstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobtype"
)

// A brief record (GetManyBrief) decodes of its two largest JSON fields
// only what a view of every active job shows: the spec's priority and the
// route's backend, site and kind. encoding/json scans all of each (and
// parses the route's time) for those few strings, which was most of an
// overview's time with 2,200 active jobs; topStrings reads the top level
// of the object and skips the nested values as text.

// decodeBrief sets j's spec and route from their JSON, brief.
func decodeBrief(j *jobtype.Job, spec, route string) []error {
	var errs []error
	if spec != "" {
		sp, err := briefSpec(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("field spec: %w", err))
		}
		j.Spec = sp
	}
	if route != "" {
		r, err := briefRoute(route)
		if err != nil {
			errs = append(errs, fmt.Errorf("field route: %w", err))
		}
		j.Route = r
	}
	return errs
}

// briefSpec is the spec's priority.
func briefSpec(raw string) (jobspec.Spec, error) {
	if v, ok := topStrings(raw, "priority"); ok {
		return jobspec.Spec{Priority: jobspec.Priority(v[0])}, nil
	}
	var p struct {
		Priority jobspec.Priority `json:"priority"`
	}
	err := json.Unmarshal([]byte(raw), &p)
	return jobspec.Spec{Priority: p.Priority}, err
}

// briefRoute is the route's backend, site and kind.
func briefRoute(raw string) (*jobtype.RouteInfo, error) {
	if v, ok := topStrings(raw, "backend", "site", "kind"); ok {
		return &jobtype.RouteInfo{Backend: v[0], Site: v[1], Kind: v[2]}, nil
	}
	var r struct{ Backend, Site, Kind string }
	err := json.Unmarshal([]byte(raw), &r)
	return &jobtype.RouteInfo{Backend: r.Backend, Site: r.Site, Kind: r.Kind}, err
}

// topStrings returns the values of keys among the members of the JSON
// object raw ("" for a key it lacks), reading only its top level: nested
// values are skipped as text, not decoded. ok is false for anything it
// does not read plainly, where encoding/json might read otherwise: not an
// object, an escape in a key or in a value asked, a value asked that is
// not a string, a key asked twice or in another case (encoding/json
// matches keys case-insensitively, the last one winning), a syntax error
// at the top level. The caller then decodes with encoding/json.
func topStrings(raw string, keys ...string) (vals []string, ok bool) {
	vals = make([]string, len(keys))
	seen := make([]bool, len(keys))
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	for i = skipSpace(raw, i+1); i < len(raw) && raw[i] != '}'; {
		key, next, ok := plainString(raw, i)
		if !ok {
			return nil, false
		}
		if i = skipSpace(raw, next); i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
		k := -1
		for n, want := range keys {
			if strings.EqualFold(key, want) {
				if key != want || seen[n] {
					return nil, false
				}
				k, seen[n] = n, true
			}
		}
		if k >= 0 {
			if vals[k], i, ok = plainString(raw, i); !ok {
				return nil, false
			}
		} else if i, ok = skipValue(raw, i); !ok {
			return nil, false
		}
		if i = skipSpace(raw, i); i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
		} else if i >= len(raw) || raw[i] != '}' {
			return nil, false
		}
	}
	return vals, i < len(raw) && skipSpace(raw, i+1) == len(raw)
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the string at s[i] that has no escape, no control
// character and only valid UTF-8 (what encoding/json reads as it is): its
// text and the index after its closing quote.
func plainString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\\' || c < 0x20:
			return "", 0, false
		case c == '"':
			v := s[i+1 : j]
			return v, j + 1, utf8.ValidString(v)
		}
	}
	return "", 0, false
}

// skipValue returns the index after the JSON value at s[i]: a string (with
// escapes), an object or array (nested, strings in them skipped as
// strings) or a literal.
func skipValue(s string, i int) (int, bool) {
	depth := 0
	for ; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			j := i + 1
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' {
					j++
				}
			}
			if j >= len(s) {
				return 0, false
			}
			i = j
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, true // the end of the enclosing object: a literal ended here
			}
			depth--
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i, true
			}
		}
		if depth == 0 && (s[i] == '"' || s[i] == '}' || s[i] == ']') {
			return i + 1, true
		}
	}
	return i, depth == 0
}
