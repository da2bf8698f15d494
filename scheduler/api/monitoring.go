package api

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"

	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// asynqmon (issue #14): asynq's own web UI and its JSON API, mounted at
// monitoringRoot behind the API's tokens. asynqmon has no authentication
// of its own, so every request passes the API's edge (guard: loopback Host
// in open mode, no cross-site Origin) and then monitoring's checks:
//
//   - no valid token: 401;
//   - GET and HEAD need a viewer; any other method (pausing a queue,
//     deleting, running, archiving or cancelling a task) needs an admin,
//     403 below it, and a body that is JSON (415 otherwise, as the API);
//   - an admin is served by a full asynqmon, everyone else by a second one
//     built with ReadOnly, which refuses every method but GET on its API
//     (a second layer, should the role check above ever let one through)
//     and renders its UI without the buttons that write.
//
// A browser cannot add a bearer token to the requests asynqmon's page
// makes, so /monitoring also takes the token as the password of HTTP Basic
// authentication (any user name) and asks for it with a Basic challenge:
// the browser prompts once and sends it with every request to this origin.

// monitoringRoot is the path asynqmon is served under (docs/api.md).
const monitoringRoot = "/monitoring"

// sharedRedis is an asynq.RedisConnOpt that hands asynqmon the scheduler's
// own Redis client, so asynqmon opens no connection pool of its own (and
// uses the same address, password, TLS and timeouts). Neither asynqmon
// handler is ever closed: closing one would close the scheduler's client.
type sharedRedis struct{ c redis.UniversalClient }

// MakeRedisClient returns the shared client (asynq.RedisConnOpt).
func (o sharedRedis) MakeRedisClient() interface{} { return o.c }

// monitoring returns the handler of monitoringRoot and everything under it.
func (s opsView) monitoring() http.Handler {
	conn := sharedRedis{c: s.rdb}
	full := asynqmon.New(asynqmon.Options{RootPath: monitoringRoot, RedisConnOpt: conn})
	view := asynqmon.New(asynqmon.Options{RootPath: monitoringRoot, RedisConnOpt: conn, ReadOnly: true})
	// Only an admin reaches the asynqmon that writes, whatever the method.
	serve := func(w http.ResponseWriter, r *http.Request) {
		p := principalOf(r)
		if p.Role != plane.RoleAdmin {
			view.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// Who changed asynq by hand, for the post-mortem.
			s.log.Info("monitoring: asynqmon write", slog.String("token", p.Name),
				slog.String("method", r.Method), slog.String("path", r.URL.Path))
		}
		full.ServeHTTP(w, r)
	}
	insp := asynq.NewInspectorFromRedisClient(s.rdb) // shares the client; never closed
	read, write := s.withAuth(plane.RoleViewer, serve), s.withAuth(plane.RoleAdmin, serve)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = basicAsBearer(r)
		if _, ok := s.authenticate(r); !ok {
			w.Header().Add("WWW-Authenticate", `Basic realm="lathe monitoring", charset="UTF-8"`)
			w.Header().Add("WWW-Authenticate", `Bearer realm="lathe"`)
			writeJSON(w, http.StatusUnauthorized, wire.Error{Error: "missing or unknown API token (send Authorization: Bearer <token>, " +
				"or the token as the password of HTTP Basic authentication)", Code: "unauthorized"})
			return
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if queueMissing(w, r, insp) {
				return
			}
			if isAsynqmonMainJS(r.URL.Path) {
				read(wholeTaskIDs(w, s.log), r)
				return
			}
			read(w, r)
			return
		}
		write(w, r)
	})
}

// monitoringQueues is the prefix of asynqmon's per-queue API.
const monitoringQueues = monitoringRoot + "/api/queues/"

// queueMissing answers a read of asynqmon's per-queue API
// (/monitoring/api/queues/{qname}[/…]) whose queue asynq does not know,
// and reports whether it did. asynqmon answers those with a 500 (its
// handler turns every Inspector error into one, queue not found
// included), which reads as a broken server. Here a name that is a known
// queue followed by ":pause" or ":resume" (the POST actions, opened with
// GET) gets 405 with Allow: POST; any other unknown name 404. Queue names
// hold ':' (node:<name>, cloud:<backend>), so the name is the whole path
// segment, never split at a colon.
func queueMissing(w http.ResponseWriter, r *http.Request, insp *asynq.Inspector) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, monitoringQueues)
	if !ok || rest == "" {
		return false
	}
	qname, _, _ := strings.Cut(rest, "/")
	queues, err := insp.Queues()
	if err != nil {
		return false // asynqmon answers with its own error
	}
	known := func(q string) bool { return slices.Contains(queues, q) }
	if known(qname) {
		return false
	}
	for _, action := range []string{":pause", ":resume"} {
		if q, ok := strings.CutSuffix(qname, action); ok && known(q) {
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, wire.Error{Error: "asynq queue " + q + ": " + action[1:] + " takes POST (an admin's token)", Code: "method_not_allowed"})
			return true
		}
	}
	writeJSON(w, http.StatusNotFound, wire.Error{Error: "asynq knows no queue " + strconv.Quote(qname) + " (a queue exists once a task was put on it)", Code: "not_found"})
	return true
}

// basicAsBearer returns r with an HTTP Basic password moved into a bearer
// token, so authenticate compares it like any token; r itself when it
// carries no Basic credentials (or bad ones, which then fail as no token).
func basicAsBearer(r *http.Request) *http.Request {
	h := r.Header.Get("Authorization")
	scheme, enc, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return r
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return r
	}
	_, secret, ok := strings.Cut(string(dec), ":")
	if !ok || secret == "" {
		return r
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+secret)
	return r2
}

// asynqmon's UI shows a task id cut at its first '-' (its uuidPrefix
// helper: asynq's own ids are UUIDs), which turns every Lathe task id,
// <job>:<attempt> with a job id "j-…", into "j". wholeTaskIDs serves the
// UI's script (asynqmon's build, main.<hash>.chunk.js) with that helper
// answering the whole id. uuidPrefixJS is the helper's body in asynqmon
// v0.7.2's build; a later build without it is served as it is (ids cut
// again, logged), and TestMonitoringWholeTaskIDs fails so the pattern is
// updated.
var (
	uuidPrefixJS = []byte(`{var t=e.indexOf("-");return-1===t?e:e.substr(0,t)}`)
	wholeIDJS    = []byte(`{return e}`)
)

// isAsynqmonMainJS reports whether path is asynqmon's UI script.
func isAsynqmonMainJS(path string) bool {
	name, ok := strings.CutPrefix(path, monitoringRoot+"/static/js/main.")
	return ok && strings.HasSuffix(name, ".chunk.js") && !strings.Contains(name, "/")
}

// wholeTaskIDs returns w as a ResponseWriter that rewrites asynqmon's UI
// script on its way out (taskIDWriter).
func wholeTaskIDs(w http.ResponseWriter, log *slog.Logger) http.ResponseWriter {
	return &taskIDWriter{w: w, log: log, h: http.Header{}}
}

// taskIDWriter holds the header of asynqmon's answer for its UI script
// until the body comes, and writes the body with uuidPrefixJS replaced by
// wholeIDJS and no Content-Length (the length changes). asynqmon writes a
// static file in one Write, so the helper is never split across two.
type taskIDWriter struct {
	w    http.ResponseWriter
	log  *slog.Logger
	h    http.Header
	code int
}

func (t *taskIDWriter) Header() http.Header { return t.h }

func (t *taskIDWriter) WriteHeader(code int) { t.code = code }

func (t *taskIDWriter) Write(b []byte) (int, error) {
	n := len(b)
	if t.code == 0 || t.code == http.StatusOK {
		if bytes.Contains(b, uuidPrefixJS) {
			b = bytes.Replace(b, uuidPrefixJS, wholeIDJS, 1)
		} else {
			t.log.Warn("monitoring: asynqmon's UI script has no uuidPrefix helper to replace; task ids show cut at their first '-'")
		}
	}
	if t.h != nil {
		for k, v := range t.h {
			if k != "Content-Length" {
				t.w.Header()[k] = v
			}
		}
		t.h = nil
		if t.code != 0 {
			t.w.WriteHeader(t.code)
		}
	}
	if _, err := t.w.Write(b); err != nil {
		return 0, err
	}
	return n, nil
}
