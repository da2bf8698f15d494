package scheduler_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/scheduler"
	"github.com/lathe-ml/lathe/scheduler/api"
)

// The dashboard (issue #14): its page and assets against a real
// redis-server, with and without tokens.

// get answers the status, content type, Cache-Control and body of GET url.
func get(t *testing.T, url string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, resp.Header, sb.String()
}

// TestDashboardServesPage: open mode on loopback serves the page at "/"
// and "/jobs/{id}" and its assets, each with its content type and
// no-cache, and none of them names an external URL.
func TestDashboardServesPage(t *testing.T) {
	b := setup(t, scheduler.Config{})
	files := map[string]string{"/": "text/html", "/jobs/j-1": "text/html", "/ui/app.js": "text/javascript", "/ui/app.css": "text/css"}
	for p, ct := range files {
		code, h, body := get(t, b.url+p, nil)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), ct) || h.Get("Cache-Control") != "no-cache" {
			t.Fatalf("GET %s: %d, Content-Type %q, Cache-Control %q; want 200, %s, no-cache", p, code, h.Get("Content-Type"), h.Get("Cache-Control"), ct)
		}
		if strings.Contains(body, "http://") || strings.Contains(body, "https://") || strings.Contains(body, "//cdn") {
			t.Fatalf("GET %s names an external URL", p)
		}
		if ct == "text/html" && !strings.Contains(body, `<script src="/ui/app.js">`) {
			t.Fatalf("GET %s is not the dashboard page: %.200s", p, body)
		}
	}
	// The panels of issue #14 are on the page, read their endpoints, and
	// the script never parses a string as HTML (server strings go in as
	// text or attributes).
	_, _, page := get(t, b.url+"/", nil)
	_, _, script := get(t, b.url+"/ui/app.js", nil)
	for _, id := range []string{`id="job-table"`, `id="loss-chart"`, `id="decision-table"`, `id="decisions-note"`, `id="gpu-util-chart"`, `id="gpu-mem-chart"`, `id="budget-table"`, `id="hist-queue"`, `id="hist-wait"`, `id="hist-throughput"`, `id="hist-gpu"`,
		`<script src="/ui/vendor/uPlot.iife.min.js"></script>`, `href="/ui/vendor/uPlot.min.css"`} {
		if !strings.Contains(page, id) {
			t.Errorf("the page has no %s", id)
		}
	}
	for _, use := range []string{"/api/v1/decisions?limit=", "loss_series=true", "'/gpu'", "r.loss_series", "'/api/v1/budgets'", "'/api/v1/history'", "new uPlot("} {
		if !strings.Contains(script, use) {
			t.Errorf("app.js does not read %s", use)
		}
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(script, bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
	for _, p := range []string{"/ui/", "/ui/index.html", "/ui/nope.js", "/ui/../api.go"} {
		if code, _, _ := get(t, b.url+p, nil); code != 404 {
			t.Fatalf("GET %s: %d, want 404", p, code)
		}
	}
	if code, _, _ := get(t, b.url+"/monitoring/", nil); code != 200 {
		t.Fatalf("/monitoring/ next to the dashboard: %d", code)
	}
}

// TestDashboardVendoredUPlot: the chart library is uPlot as npm ships it
// (the sha256 in ui/vendor/README.md, the files served as the page's
// other assets), naming no URL but its own in its licence comment, and
// parsing no string as HTML or code, so the page's strict CSP holds.
func TestDashboardVendoredUPlot(t *testing.T) {
	b := setup(t, scheduler.Config{})
	readme, err := os.ReadFile("api/ui/vendor/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, ct := range map[string]string{"uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"} {
		code, h, body := get(t, b.url+"/ui/vendor/"+name, nil)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), ct) || h.Get("Cache-Control") != "no-cache" ||
			!strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Fatalf("GET /ui/vendor/%s: %d, Content-Type %q, Cache-Control %q, CSP %q", name, code, h.Get("Content-Type"), h.Get("Cache-Control"), h.Get("Content-Security-Policy"))
		}
		sum := sha256.Sum256([]byte(body))
		if line := hex.EncodeToString(sum[:]) + "  " + name; !strings.Contains(string(readme), line) {
			t.Errorf("served %s has sha256 %x, not the one in ui/vendor/README.md", name, sum)
		}
		rest := body
		if name == "uPlot.iife.min.js" {
			first, after, _ := strings.Cut(body, "\n")
			if first != "/*! https://github.com/leeoniya/uPlot (v1.6.32) */" {
				t.Errorf("uPlot's first line is %q, want its licence comment", first)
			}
			rest = after
		}
		if strings.Contains(rest, "http://") || strings.Contains(rest, "https://") || strings.Contains(rest, "//cdn") {
			t.Errorf("/ui/vendor/%s names a URL outside its licence comment", name)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
			if strings.Contains(body, bad) {
				t.Errorf("/ui/vendor/%s uses %s", name, bad)
			}
		}
	}
}

// TestDashboardNeedsTokens: with tokens the page, its assets and the API
// reads it makes are 401 without one (with a Basic challenge); a viewer's
// token opens them as a bearer token or as a Basic password; a Basic
// password does not authorise a write.
func TestDashboardNeedsTokens(t *testing.T) {
	b := setup(t, scheduler.Config{}, api.Config{Tokens: monTokens})
	for _, p := range []string{"/", "/jobs/j-1", "/ui/app.js"} {
		code, h, _ := get(t, b.url+p, nil)
		if code != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
			t.Fatalf("GET %s without a token: %d %q, want 401 and a Basic challenge", p, code, h.Values("WWW-Authenticate"))
		}
		if code, _, _ := get(t, b.url+p, bearer("not-a-token-at-all-xx")); code != 401 {
			t.Fatalf("GET %s with a bad token: %d, want 401", p, code)
		}
	}
	basic := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("me:"+monViewer))}
	for _, p := range []string{"/", "/jobs/j-1", "/ui/app.js", "/ui/app.css", "/api/v1/overview", "/api/v1/jobs?limit=200", "/api/v1/sweeps"} {
		for _, h := range []map[string]string{bearer(monViewer), basic} {
			if code, _, body := get(t, b.url+p, h); code != 200 {
				t.Fatalf("viewer GET %s: %d %.200s", p, code, body)
			}
		}
	}
	// The job page's GPU charts read /api/v1/jobs/{id}/gpu with the page's
	// Basic credentials too (another team's job is a 404, as with a bearer token).
	mine, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "mine", BaseModel: "tiny-char", Dataset: "file:///d/t.jsonl"}, Team: "a"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, _, err := b.store.Create(b.ctx, jobstore.NewJob{Spec: &jobspec.Spec{Name: "theirs", BaseModel: "tiny-char", Dataset: "file:///d/t.jsonl"}, Team: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, body := get(t, b.url+"/api/v1/jobs/"+mine.ID+"/gpu", basic); code != 200 || !strings.Contains(body, `"points":[]`) {
		t.Fatalf("viewer GET its job's GPU series with Basic: %d %.200s", code, body)
	}
	if code, _, _ := get(t, b.url+"/api/v1/jobs/"+theirs.ID+"/gpu", basic); code != 404 {
		t.Fatalf("viewer GET another team's GPU series with Basic: %d, want 404", code)
	}
	if code, _, _ := get(t, b.url+"/api/v1/jobs/"+mine.ID+"/gpu", nil); code != 401 {
		t.Fatalf("GPU series without a token: %d, want 401", code)
	}
	adminBasic := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("me:"+monAdmin)), "Content-Type": "application/json"}
	if code, _ := do(t, "POST", b.url+"/api/v1/jobs", `{}`, adminBasic); code != 401 {
		t.Fatalf("POST /api/v1/jobs with Basic credentials: %d, want 401 (Basic is for reads)", code)
	}
}
