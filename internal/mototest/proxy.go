package mototest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// FaultProxy is a fake EC2 front (a test part, not AWS): it forwards every
// request to moto (EC2 and S3) except the EC2 calls a Fault answers with
// EC2's XML error body, as EC2 would (capacity, throttling, outages moto
// never produces). It counts EC2 actions and keeps their forms.
type FaultProxy struct {
	*httptest.Server
	mu     sync.Mutex
	calls  map[string]int // action → requests seen (answered or forwarded)
	forms  map[string][]url.Values
	faults []Fault
}

// Fault answers requests of Action (and, when set, InstanceType and
// Market) with EC2's XML error Code and HTTP Status, Times times (0:
// always).
type Fault struct {
	Action, InstanceType string
	Market               string // "spot" matches spot requests, "on-demand" the others; "" both
	Code                 string
	Status               int
	Times                int
	used                 int
}

func NewFaultProxy(t *testing.T, target string) *FaultProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{calls: map[string]int{}, forms: map[string][]url.Values{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		action := form.Get("Action")
		p.mu.Lock()
		if action != "" {
			p.calls[action]++
			p.forms[action] = append(p.forms[action], form)
		}
		var hit *Fault
		for i := range p.faults {
			f := &p.faults[i]
			market := "on-demand"
			if form.Get("InstanceMarketOptions.MarketType") == "spot" {
				market = "spot"
			}
			if f.Action == action && (f.InstanceType == "" || f.InstanceType == form.Get("InstanceType")) &&
				(f.Market == "" || f.Market == market) &&
				(f.Times == 0 || f.used < f.Times) {
				f.used++
				hit = f
				break
			}
		}
		p.mu.Unlock()
		if hit == nil {
			rp.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
		w.WriteHeader(hit.Status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>%s</Code><Message>fault injected by the test proxy for %s</Message></Error></Errors><RequestID>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</RequestID></Response>`,
			hit.Code, action)
	}))
	t.Cleanup(p.Close)
	return p
}

// Add adds a rule; the first matching rule answers.
func (p *FaultProxy) Add(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, f)
}

// Count is how many requests of action came (answered or forwarded).
func (p *FaultProxy) Count(action string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[action]
}

// Clear removes every rule.
func (p *FaultProxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = nil
}

// Forms returns the forms of the requests of action, in order.
func (p *FaultProxy) Forms(action string) []url.Values {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]url.Values(nil), p.forms[action]...)
}
