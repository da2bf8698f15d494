package scheduler

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

// Role is what a token may do.
type Role string

// The roles, each including the one before.
const (
	// RoleViewer reads jobs, events, artifacts and queues.
	RoleViewer Role = "viewer"
	// RoleSubmitter also submits jobs for its team, and cancels and
	// retries its team's jobs.
	RoleSubmitter Role = "submitter"
	// RoleAdmin may do everything, to every team's jobs.
	RoleAdmin Role = "admin"
)

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleSubmitter:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Token is one API token from the daemon's config. Secret is never logged
// and never returned by the API.
type Token struct {
	Name   string
	Secret string
	Role   Role
	Team   string
	// AllTeams lets a viewer or submitter read every team's jobs (specs,
	// events, artifacts, GPU series, the list); without it a token reads
	// its own team's only. An admin reads every team's jobs anyway.
	AllTeams bool
}

var tokenNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateTokens checks a token list: names and teams are lower-case words,
// roles known, secrets at least 16 characters and unique, names unique,
// all_teams only on a viewer or submitter.
func ValidateTokens(ts []Token) error {
	names, secrets := map[string]bool{}, map[[32]byte]bool{}
	for i, t := range ts {
		switch {
		case !tokenNameRE.MatchString(t.Name):
			return fmt.Errorf("auth.tokens[%d].name %q: must be a lower-case word ([a-z0-9._-], 1–63)", i, t.Name)
		case names[t.Name]:
			return fmt.Errorf("auth.tokens[%d].name %q: used twice", i, t.Name)
		case t.Role.rank() == 0:
			return fmt.Errorf("auth.tokens[%d].role %q: must be viewer, submitter or admin", i, t.Role)
		case !tokenNameRE.MatchString(t.Team):
			return fmt.Errorf("auth.tokens[%d].team %q: must be a lower-case word", i, t.Team)
		case len(t.Secret) < 16:
			return fmt.Errorf("auth.tokens[%d] (%s): the token must be at least 16 characters", i, t.Name)
		case t.AllTeams && t.Role == RoleAdmin:
			return fmt.Errorf("auth.tokens[%d].all_teams (%s): true on an admin, which reads every team's jobs anyway; all_teams is for a viewer or submitter", i, t.Name)
		}
		h := sha256.Sum256([]byte(t.Secret))
		if secrets[h] {
			return fmt.Errorf("auth.tokens[%d] (%s): the same token is used twice", i, t.Name)
		}
		names[t.Name], secrets[h] = true, true
	}
	return nil
}

// principal is who made a request.
type principal struct {
	Name     string
	Role     Role
	Team     string
	AllTeams bool // reads every team's jobs
}

type principalKey struct{}

// anonymous is the principal of an open deployment (no tokens configured,
// loopback only: cmd refuses to start otherwise).
var anonymous = principal{Name: "anonymous", Role: RoleAdmin}

// authenticate finds the token of a request. Every configured token is
// compared, in constant time, so the time taken says nothing about which
// one (or how much of one) matched.
func (s *apiServer) authenticate(r *http.Request) (principal, bool) {
	if len(s.cfg.Tokens) == 0 {
		return anonymous, true
	}
	h := r.Header.Get("Authorization")
	secret, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || secret == "" {
		return principal{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range s.tokenSums {
		if subtle.ConstantTimeCompare(sum[:], s.tokenSums[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return principal{}, false
	}
	t := s.cfg.Tokens[found]
	return principal{Name: t.Name, Role: t.Role, Team: t.Team, AllTeams: t.AllTeams}, true
}

// withAuth wraps h: 401 without a valid token, 403 below the role needed,
// 415 for a write whose body is not JSON or YAML; all before the handler
// reads a byte of the body.
func (s *apiServer) withAuth(need Role, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lathe"`)
			writeJSON(w, http.StatusUnauthorized, wire.Error{Error: "missing or unknown API token (send Authorization: Bearer <token>; the CLI reads LATHE_TOKEN)", Code: "unauthorized"})
			return
		}
		if p.Role.rank() < need.rank() {
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

func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// mayTouch reports whether p may cancel or retry job: an admin any job, a
// submitter its own team's.
func mayTouch(p principal, job *jobtype.Job) bool {
	return p.Role == RoleAdmin || (p.Role == RoleSubmitter && job.Team == p.Team)
}
