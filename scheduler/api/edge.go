package api

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// The API's edge (issue #11): what a request must be before a handler
// looks at it. In order: a loopback Host in open mode (DNS rebinding), no
// cross-site Origin (CSRF), a token (withAuth, before any body byte is
// read), a JSON or YAML body on writes; every refusal closes the
// connection without reading the rest of the body.

// guard wraps the API's mux with the checks every request passes first.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Open mode serves loopback only; a page whose own name resolves to
		// 127.0.0.1 (DNS rebinding) still sends its name as Host.
		if s.tokenSet().open() && !loopbackHost(r.Host) {
			writeJSON(w, http.StatusMisdirectedRequest, wire.Error{Error: fmt.Sprintf("Host %q is not a loopback name: "+
				"an API without tokens answers only to localhost, 127.0.0.1 or [::1] (configure auth.tokens to serve other names)", r.Host), Code: "misdirected"})
			return
		}
		if why := crossSite(r); why != "" {
			writeJSON(w, http.StatusForbidden, wire.Error{Error: "cross-site request refused: " + why, Code: "forbidden"})
			return
		}
		// No handler reads more than a batch's limit; this bounds a read a
		// handler forgets to bound.
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes*16)
		h.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine's loopback
// interface: localhost or a loopback IP literal, with any port.
func loopbackHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// crossSite says why r comes from another site's page ("" when it does
// not): an Origin whose host (and port) is not the request's own Host, or
// the browser's own Sec-Fetch-Site: cross-site. Clients that are not
// browsers send neither.
func crossSite(r *http.Request) string {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return "Sec-Fetch-Site: cross-site"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Sprintf("Origin %q is not this API's own (Host %q)", origin, r.Host)
	}
	return ""
}

// bodyTypes are the media types a write may carry: a job spec is JSON or
// YAML. None of them is one a browser may send cross-site without a CORS
// preflight, which this API never answers.
var bodyTypes = map[string]bool{
	"application/json": true, "application/yaml": true, "application/x-yaml": true,
	"text/yaml": true, "text/x-yaml": true,
}

// badBodyType says what is wrong with a write's Content-Type ("" when
// nothing): a request with a body, or with a Content-Type, must be JSON or
// YAML; a write without a body (cancel, retry) needs none.
func badBodyType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if r.ContentLength == 0 {
			return ""
		}
		return "a request body needs Content-Type: application/json (or application/yaml)"
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || !bodyTypes[mt] {
		return fmt.Sprintf("Content-Type %q: must be application/json or application/yaml", ct)
	}
	return ""
}

// refusing makes the answer being written the connection's last, and stops
// the server reading what is left of the request body (net/http would
// drain up to 256 KiB of it, at the client's pace, before closing).
func refusing(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// closesConn lists the answers after which the connection is closed at
// once: the request's body is not wanted.
func closesConn(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge,
		http.StatusUnsupportedMediaType, http.StatusMisdirectedRequest:
		return true
	}
	return false
}

// longResponse prepares a response that may take longer than the server's
// timeouts (a follow stream, an artifact, a ledger export): the request is
// read, so the read deadline goes (the server's read deadline would
// otherwise cancel the request's context), and the returned writer moves
// the write deadline WriteTimeout past each write, so it bounds one stalled
// write rather than the whole response.
func (s *Server) longResponse(w http.ResponseWriter) *deadlineWriter {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	return &deadlineWriter{w: w, rc: rc, d: s.cfg.WriteTimeout}
}

// deadlineWriter writes to a response, moving its write deadline first.
type deadlineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (dw *deadlineWriter) extend() { _ = dw.rc.SetWriteDeadline(time.Now().Add(dw.d)) }

func (dw *deadlineWriter) Write(p []byte) (int, error) {
	dw.extend()
	return dw.w.Write(p)
}

// Flush sends what is buffered; an error means the client is gone.
func (dw *deadlineWriter) Flush() error {
	dw.extend()
	return dw.rc.Flush()
}

var _ io.Writer = (*deadlineWriter)(nil)

// mayRead reports whether p may read job (its spec, events, artifacts, GPU
// series): an admin or an all-teams token any job, others their team's.
func mayRead(p plane.Principal, job *jobtype.Job) bool { return mayReadTeam(p, job.Team) }

// mayReadTeam reports whether p may read a job of team.
func mayReadTeam(p plane.Principal, team string) bool {
	return p.Role == plane.RoleAdmin || p.AllTeams || team == p.Team
}

// idemScope prefixes an Idempotency-Key with whose it is: the token and
// its team, so a key never answers with another token's job, nor with a
// job of the token's former team after its team was changed in the config.
func idemScope(p plane.Principal) string { return p.Team + "/" + p.Name + ":" }

// notFound is the answer for a job that does not exist, and for one the
// token may not read: the same words, so the answer does not tell them
// apart.
func notFound(id string) error {
	return fmt.Errorf("jobstore: get %s: %w", id, jobstore.ErrNotFound)
}

// readJob gets job id for a read by the request's principal; it answers
// (404 for another team's job, as for none) and returns false when the
// request may not have it.
func (s *Server) readJob(ctx context.Context, w http.ResponseWriter, r *http.Request, id string) (*jobtype.Job, bool) {
	job, err := s.store.Get(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	if !mayRead(principalOf(r), job) {
		s.fail(w, r, notFound(id))
		return nil, false
	}
	return job, true
}

// validStreamID reports whether v is a Redis stream id: MS or MS-SEQ,
// each an unsigned 64-bit number.
func validStreamID(v string) bool {
	ms, seq, hasSeq := strings.Cut(v, "-")
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return false
	}
	if hasSeq {
		if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// boolParam reads query parameter name as true or false (absent: false);
// any other value is answered with a 400 naming it, and ok false.
func boolParam(w http.ResponseWriter, r *http.Request, name string) (v, ok bool) {
	switch q := r.URL.Query().Get(name); q {
	case "", "false":
		return false, true
	case "true":
		return true, true
	default:
		writeJSON(w, http.StatusBadRequest, wire.Error{Error: "bad " + name, Code: "invalid",
			Fields: []jobspec.FieldError{{Field: name, Value: q, Message: "must be true or false"}}})
		return false, false
	}
}
