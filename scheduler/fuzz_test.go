package scheduler_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/redistest"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
	"github.com/lathe-ml/lathe/scheduler/apitest"
)

// FuzzSubmit throws arbitrary bodies and query strings at the API (a real
// Redis behind it): it must never panic, and it answers only 201 (stored),
// 200 (dry run), 400 (with a JSON error) or 413.
//
//	go test -run '^$' -fuzz FuzzSubmit -fuzztime 60s ./scheduler/
func FuzzSubmit(f *testing.F) {
	for _, s := range []string{goodSpec, `{}`, `[]`, `null`, `{"name":1}`, "name: x\nbase_model: y\n", `{"lora":{"rank":1e400}}`,
		`{"name":"a","base_model":"b","dataset":"file:///x","residency":["EU"]}`, "\x00\xff", `{"name":"a"` + strings.Repeat(`,"x":1`, 50) + `}`} {
		f.Add(s, "")
		f.Add(s, "dry_run=true")
	}
	srv := redistest.Start(f)
	rdb := srv.Client()
	h := apitest.New(rdb, jobstore.New(rdb, jobstore.Config{}), scheduler.Config{Logger: quiet, Trainers: []string{"reference"}, Defaults: jobspec.Defaults{OutputURI: "file:///tmp/lathe-fuzz-out"}}, api.Config{MaxBodyBytes: 64 << 10}).API.Handler()
	f.Fuzz(func(t *testing.T, body, query string) {
		req := httptest.NewRequest("POST", "/api/v1/jobs", strings.NewReader(body))
		req.URL.RawQuery = query    // any bytes, as a client could send them
		req.Host = "127.0.0.1:8080" // open mode answers loopback names only
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusCreated, http.StatusOK, http.StatusRequestEntityTooLarge:
		case http.StatusBadRequest:
			if !strings.Contains(rec.Body.String(), `"code":"invalid"`) {
				t.Fatalf("400 without a JSON error: %s", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for body %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}
