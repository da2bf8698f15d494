package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/lathe-ml/lathe/internal/wire"
)

// Explanation is the answer of POST /api/v1/route (wire.Explanation): the
// routing decision the scheduler would make for a spec now, and the hash
// of the routing config it was made under. Nothing is stored or recorded.
type Explanation = wire.Explanation

// WhatIf states inputs of an explanation in place of the scheduler's own:
// the wait of a local pool (Wait, by backend) and a backend's spend this
// month (Spent, in USD, by backend; it replaces spent and reserved). Nil
// maps state nothing.
type WhatIf struct {
	Wait  map[string]time.Duration
	Spent map[string]float64
}

// query encodes w as repeated assume_wait=BACKEND=DURATION and
// assume_spent=BACKEND=USD parameters, backends in name order.
func (w WhatIf) query() url.Values {
	q := url.Values{}
	for _, b := range sortedKeys(w.Wait) {
		q.Add("assume_wait", b+"="+w.Wait[b].String())
	}
	for _, b := range sortedKeys(w.Spent) {
		q.Add("assume_spent", b+"="+strconv.FormatFloat(w.Spent[b], 'f', -1, 64))
	}
	return q
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Explain asks where the scheduler would route specJSON (a job spec as a
// JSON object) now, under the what-ifs w (POST /api/v1/route). A bad spec
// or what-if is an *APIError with Code "invalid" and its Fields. A refusal
// is not an error: the Explanation has Refused set and says why.
func (c *Client) Explain(ctx context.Context, specJSON []byte, w WhatIf) (*Explanation, error) {
	if specJSON == nil {
		specJSON = []byte{}
	}
	var e Explanation
	if err := c.call(ctx, http.MethodPost, "/api/v1/route", w.query(), specJSON, nil, &e); err != nil {
		return nil, err
	}
	return &e, nil
}
