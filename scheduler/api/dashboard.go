package api

import (
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// The dashboard (issue #14): one page, index.html with app.js and app.css,
// embedded in the binary and served at "/" (the overview) and at
// "/jobs/{id}" (a job's page: the same index.html, whose script reads the
// location). Every number on it comes from the API, which the script polls
// every 2 s; the page holds no data of its own.
//
// The page and its assets need a viewer token, as the API does (open on
// loopback when no tokens are configured: guard). A browser cannot put a
// bearer token on a page it navigates to, so the dashboard takes the token
// as the password of HTTP Basic authentication (any user name) and answers
// 401 with a Basic challenge: the browser prompts once and then sends the
// same credentials with the script's fetches, which is why the API's reads
// that the page makes (readAPI) take Basic credentials too.

//go:embed ui
var uiFS embed.FS

// dashboardAssets is the path prefix of the page's script and style.
const dashboardAssets = "/ui/"

// dashboardPage serves index.html for "/" and "/jobs/{id}".
func (s opsView) dashboardPage() http.HandlerFunc {
	return s.dashboardAuth(func(w http.ResponseWriter, r *http.Request) {
		serveUIFile(w, r, "index.html")
	})
}

// dashboardAsset serves the files under ui/ at dashboardAssets; 404 for
// any other name (and for index.html, which has its own routes).
func (s opsView) dashboardAsset() http.HandlerFunc {
	return s.dashboardAuth(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, dashboardAssets)
		if name == "" || name == "index.html" || !fs.ValidPath(name) {
			writeJSON(w, http.StatusNotFound, wire.Error{Error: "no dashboard asset " + r.URL.Path, Code: "not_found"})
			return
		}
		serveUIFile(w, r, name)
	})
}

// serveUIFile writes ui/name with its content type and Cache-Control:
// no-cache (the browser revalidates, so a new binary's page is seen at
// once); 404 when there is no such file.
func serveUIFile(w http.ResponseWriter, r *http.Request, name string) {
	b, err := fs.ReadFile(uiFS, path.Join("ui", name))
	if err != nil {
		writeJSON(w, http.StatusNotFound, wire.Error{Error: "no dashboard asset " + r.URL.Path, Code: "not_found"})
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	// The page loads only its own script and style and talks only to
	// its own origin.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

// dashboardAuth wraps h with the viewer check of the API, taking the token
// as a bearer token or as an HTTP Basic password; without a valid one it
// answers 401 with a Basic challenge so that a browser asks for it.
func (s opsView) dashboardAuth(h http.HandlerFunc) http.HandlerFunc {
	inner := s.withAuth(plane.RoleViewer, h)
	return func(w http.ResponseWriter, r *http.Request) {
		r = basicAsBearer(r)
		if _, ok := s.authenticate(r); !ok {
			w.Header().Add("WWW-Authenticate", `Basic realm="lathe", charset="UTF-8"`)
			w.Header().Add("WWW-Authenticate", `Bearer realm="lathe"`)
			writeJSON(w, http.StatusUnauthorized, wire.Error{Error: "missing or unknown API token (the dashboard takes it as the password " +
				"of HTTP Basic authentication, any user name, or as Authorization: Bearer <token>)", Code: "unauthorized"})
			return
		}
		inner(w, r)
	}
}

// readAPI is withAuth(plane.RoleViewer, h) for the API reads the dashboard's
// script makes: it also takes the token as an HTTP Basic password, which
// the browser sends with the script's fetches once the page was opened
// with it. Only reads (GET) are routed through it, so a browser's cached
// credentials never authorise a write.
func (s *Server) readAPI(h http.HandlerFunc) http.HandlerFunc {
	inner := s.withAuth(plane.RoleViewer, h)
	return func(w http.ResponseWriter, r *http.Request) {
		inner(w, basicAsBearer(r))
	}
}
