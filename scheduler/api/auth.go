package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/lathe-ml/lathe/internal/wire"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

type principalKey struct{}

// anonymous is the principal of an open deployment (no tokens configured,
// loopback only: cmd refuses to start otherwise).
var anonymous = plane.Principal{Name: "anonymous", Role: plane.RoleAdmin}

// authenticate finds the token of a request. Every configured token is
// compared, in constant time, so the time taken says nothing about which
// one (or how much of one) matched.
func (s *Server) authenticate(r *http.Request) (plane.Principal, bool) {
	if len(s.cfg.Tokens) == 0 {
		return anonymous, true
	}
	h := r.Header.Get("Authorization")
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || secret == "" {
		return plane.Principal{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range s.tokenSums {
		if subtle.ConstantTimeCompare(sum[:], s.tokenSums[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return plane.Principal{}, false
	}
	t := s.cfg.Tokens[found]
	return plane.Principal{Name: t.Name, Role: t.Role, Team: t.Team, AllTeams: t.AllTeams}, true
}

// withAuth wraps h: 401 without a valid token, 403 below the role needed,
// 415 for a write whose body is not JSON or YAML; all before the handler
// reads a byte of the body.
func (s *Server) withAuth(need plane.Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lathe"`)
			writeJSON(w, http.StatusUnauthorized, wire.Error{Error: "missing or unknown API token (send Authorization: Bearer <token>; the CLI reads LATHE_TOKEN)", Code: "unauthorized"})
			return
		}
		if p.Role.Rank() < need.Rank() {
			writeJSON(w, http.StatusForbidden, wire.Error{Error: fmt.Sprintf("token %s has role %s; this needs %s", p.Name, p.Role, need), Code: "forbidden"})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if why := badBodyType(r); why != "" {
				writeJSON(w, http.StatusUnsupportedMediaType, wire.Error{Error: why, Code: "unsupported_media_type"})
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

func principalOf(r *http.Request) plane.Principal {
	p, _ := r.Context().Value(principalKey{}).(plane.Principal)
	return p
}
