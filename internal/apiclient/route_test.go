package apiclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestExplainSendsSpecAndWhatIfs(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/route" || string(body) != `{"name":"x"}` ||
			strings.Join(q["assume_wait"], ",") != "local=3h0m0s,spare=1m30s" || strings.Join(q["assume_spent"], ",") != "aws-eu=5000.25" {
			t.Errorf("request %s %s %s", r.Method, r.URL, body)
		}
		io.WriteString(w, `{"backend":"aws-eu","site":"aws-eu-central-1","refused":false,"waiting":false,"reasons":["r1"],
			"candidates":[{"backend":"aws-eu","feasible":true,"est_cost_usd":3.72}],"est_runtime_ns":7200000000000,"config_hash":"h1"}`)
	}))
	e, err := c.Explain(context.Background(), []byte(`{"name":"x"}`), WhatIf{
		Wait:  map[string]time.Duration{"spare": 90 * time.Second, "local": 3 * time.Hour},
		Spent: map[string]float64{"aws-eu": 5000.25},
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.Backend != "aws-eu" || e.ConfigHash != "h1" || e.EstRuntime != 2*time.Hour || len(e.Candidates) != 1 || e.Candidates[0].EstCostUSD != 3.72 {
		t.Errorf("explanation %+v", e)
	}
}

func TestRefusedAnswerCarriesReasons(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, `{"error":"no backend may run this job; nothing was stored","code":"refused","reasons":["a","b"],"decision":{"refused":true}}`)
	}))
	_, err := c.Submit(context.Background(), []byte(`{}`), "", false)
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 422 || ae.Code != CodeRefused || strings.Join(ae.Reasons, ",") != "a,b" {
		t.Fatalf("err %v (%#v)", err, ae)
	}
	if !strings.Contains(err.Error(), "; a; b") {
		t.Errorf("Error() %q does not list the reasons", err.Error())
	}
}

func TestAuditVerifyConflictIsAReport(t *testing.T) {
	status := http.StatusConflict
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/audit/verify" || r.URL.Query().Get("head") != "abc" {
			t.Errorf("request %s", r.URL)
		}
		w.WriteHeader(status)
		switch status {
		case http.StatusConflict:
			io.WriteString(w, `{"Records":3,"Head":"h","Problems":[{"Seq":2,"StreamID":"2-0","What":"record 2: MAC mismatch"}]}`)
		case http.StatusOK:
			io.WriteString(w, `{"Records":3,"Head":"h","Problems":null}`)
		default:
			io.WriteString(w, `{"error":"admin role needed","code":"forbidden"}`)
		}
	}))
	rep, err := c.AuditVerify(context.Background(), "abc")
	if err != nil || rep.Records != 3 || len(rep.Problems) != 1 || rep.Problems[0].Seq != 2 {
		t.Errorf("409: %+v, %v", rep, err)
	}
	status = http.StatusOK
	if rep, err = c.AuditVerify(context.Background(), "abc"); err != nil || len(rep.Problems) != 0 || rep.Head != "h" {
		t.Errorf("200: %+v, %v", rep, err)
	}
	status = http.StatusForbidden
	var ae *APIError
	if _, err = c.AuditVerify(context.Background(), "abc"); !errors.As(err, &ae) || ae.Status != 403 {
		t.Errorf("403: %v", err)
	}
}

func TestAuditExportTrailers(t *testing.T) {
	var head, records string
	trailers := true
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Lathe-Ledger-Head, X-Lathe-Ledger-Records")
		io.WriteString(w, "{\"seq\":1}\n{\"seq\":2}\n")
		if trailers {
			w.Header().Set("X-Lathe-Ledger-Head", head)
			w.Header().Set("X-Lathe-Ledger-Records", records)
		}
	}))
	head, records = "m2", "2"
	var buf bytes.Buffer
	h, n, err := c.AuditExport(context.Background(), &buf)
	if err != nil || h != "m2" || n != 2 || buf.String() != "{\"seq\":1}\n{\"seq\":2}\n" {
		t.Errorf("complete: %q %d %v %q", h, n, err, buf.String())
	}
	head, records = "", "0" // an empty ledger
	if h, n, err = c.AuditExport(context.Background(), io.Discard); err != nil || h != "" || n != 0 {
		t.Errorf("empty: %q %d %v", h, n, err)
	}
	head, records = "", "2"
	if _, _, err = c.AuditExport(context.Background(), io.Discard); !errors.Is(err, ErrExportIncomplete) {
		t.Errorf("no head for 2 records: %v", err)
	}
	trailers = false
	if _, _, err = c.AuditExport(context.Background(), io.Discard); !errors.Is(err, ErrExportIncomplete) {
		t.Errorf("no trailers: %v", err)
	}
}

func TestAuditQuery(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "after=7&job=j-1&limit=10" {
			t.Errorf("query %q", r.URL.RawQuery)
		}
		io.WriteString(w, `{"records":[{"seq":8,"kind":"decision","body":{"path":"submit"},"prev":"p","mac":"m"}]}`)
	}))
	recs, err := c.Audit(context.Background(), AuditQuery{JobID: "j-1", After: 7, Limit: 10})
	if err != nil || len(recs) != 1 || recs[0].Seq != 8 || string(recs[0].Body) != `{"path":"submit"}` {
		t.Errorf("%+v %v", recs, err)
	}
}
