package plane

import (
	"crypto/sha256"
	"fmt"
	"regexp"

	"github.com/lathe-ml/lathe/internal/jobtype"
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

// Rank orders the roles: viewer 1, submitter 2, admin 3; 0 for none.
func (r Role) Rank() int {
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
		case t.Role.Rank() == 0:
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

// Principal is who asks: a token's name, role and team, or a schedule
// ("schedule:<name>", submitter for its team).
type Principal struct {
	Name     string
	Role     Role
	Team     string
	AllTeams bool // reads every team's jobs
}

// MayTouch reports whether p may cancel or retry job: an admin any job, a
// submitter its own team's.
func MayTouch(p Principal, job *jobtype.Job) bool {
	return p.Role == RoleAdmin || (p.Role == RoleSubmitter && job.Team == p.Team)
}
