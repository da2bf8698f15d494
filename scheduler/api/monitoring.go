package api

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"

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
			read(w, r)
			return
		}
		write(w, r)
	})
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
