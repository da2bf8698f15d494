package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
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

// tokenSet is the API's tokens in force and the sha256 of each secret, for
// constant-time comparison. It is never changed once made: SetTokens swaps
// in a new one whole.
type tokenSet struct {
	tokens []plane.Token
	sums   [][32]byte
}

func newTokenSet(ts []plane.Token) *tokenSet {
	set := &tokenSet{tokens: append([]plane.Token(nil), ts...)}
	for _, t := range set.tokens {
		set.sums = append(set.sums, sha256.Sum256([]byte(t.Secret)))
	}
	return set
}

// open reports whether the set is empty: an open API (loopback only).
func (set *tokenSet) open() bool { return len(set.tokens) == 0 }

// tokenSet is the token set in force.
func (s *Server) tokenSet() *tokenSet { return s.tokens.Load() }

// ErrWouldOpen is SetTokens' refusal of an empty token list on an API
// that has tokens: a reload never opens an API.
var ErrWouldOpen = errors.New("no API tokens left: a reload never opens an API that has tokens (restart lathed for an open, loopback-only API)")

// SetTokens replaces the API's tokens at once (a SIGHUP reload): the next
// request is checked against ts alone, so a token left out gets 401 from
// its next request on, and a new one is accepted. A request already
// authenticated keeps its principal to its end (a follow stream included).
// ts is validated first (plane.ValidateTokens); on an error, or an empty
// ts while the API has tokens (ErrWouldOpen), the tokens in force stay.
// An open API given tokens stops being open.
func (s *Server) SetTokens(ts []plane.Token) error {
	if err := plane.ValidateTokens(ts); err != nil {
		return err
	}
	if len(ts) == 0 && !s.tokenSet().open() {
		return ErrWouldOpen
	}
	s.tokens.Store(newTokenSet(ts))
	return nil
}

// authenticate finds the token of a request. Every configured token is
// compared, in constant time, so the time taken says nothing about which
// one (or how much of one) matched. The token set is read once, so a
// request is checked against one set even while SetTokens swaps it. A
// request that passes moves its connection to the authenticated pool of
// the connection limits (connLimiter).
func (s *Server) authenticate(r *http.Request) (plane.Principal, bool) {
	set := s.tokenSet()
	if set.open() {
		markAuthenticated(r.Context())
		return anonymous, true
	}
	h := r.Header.Get("Authorization")
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || secret == "" {
		return plane.Principal{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range set.sums {
		if subtle.ConstantTimeCompare(sum[:], set.sums[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return plane.Principal{}, false
	}
	markAuthenticated(r.Context())
	t := set.tokens[found]
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
