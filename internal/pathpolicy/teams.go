package pathpolicy

import (
	"fmt"
	"slices"
	"strings"
)

// TeamRoots are the allowed roots of the teams that have their own (the
// config's teams.<name>.allowed_roots). A team listed here may use only
// its own roots, for every path its jobs read or write and for the files
// of its schedules; a team not listed uses the deployment's
// (jobs.allowed_roots). Nil: no team has its own.
type TeamRoots map[string]Roots

// NewTeamRoots cleans and checks the teams' roots: each list is not empty,
// each root is absolute and, when deployment is set (jobs.allowed_roots
// was given), lies under one of deployment's roots by its text, so a team
// root never widens what the deployment allows. The error names the key
// (teams.<team>.allowed_roots[i]).
func NewTeamRoots(teams map[string][]string, deployment Roots) (TeamRoots, error) {
	if len(teams) == 0 {
		return nil, nil
	}
	out := make(TeamRoots, len(teams))
	names := make([]string, 0, len(teams))
	for team := range teams {
		names = append(names, team)
	}
	slices.Sort(names)
	for _, team := range names {
		key := TeamKey(team)
		if team == "" {
			return nil, fmt.Errorf("teams: a team with an empty name")
		}
		list := teams[team]
		if len(list) == 0 {
			return nil, fmt.Errorf("%s: empty: give at least one folder, or leave the team out to use jobs.allowed_roots", key)
		}
		rs, err := New(list)
		if err != nil {
			return nil, fmt.Errorf("teams.%s.%w", team, err)
		}
		for i, r := range rs {
			if deployment != nil && !deployment.Allows(r) {
				return nil, fmt.Errorf("%s[%d] %q: not under jobs.allowed_roots (%s): a team's roots narrow the deployment's, never widen them",
					key, i, r, strings.Join(deployment, ", "))
			}
		}
		out[team] = rs
	}
	return out, nil
}

// TeamKey is the config key of team's roots: teams.<team>.allowed_roots.
func TeamKey(team string) string { return "teams." + team + ".allowed_roots" }

// DeploymentKey is the config key of the deployment's roots.
const DeploymentKey = "jobs.allowed_roots"

// For returns the roots team's jobs may use, and the config key they come
// from: the team's own when it has an entry, else deployment (which may
// be nil: no restriction).
func (t TeamRoots) For(team string, deployment Roots) (Roots, string) {
	if rs, ok := t[team]; ok && team != "" {
		return rs, TeamKey(team)
	}
	return deployment, DeploymentKey
}

// Rule says, for a refusal, which roots a path must lie under: "an allowed
// root of team beta (teams.beta.allowed_roots: /data/beta)" or "an
// allowed root of this deployment (jobs.allowed_roots: /data)".
func Rule(rs Roots, key string) string {
	who := "this deployment"
	if team, ok := strings.CutPrefix(key, "teams."); ok {
		who = "team " + strings.TrimSuffix(team, ".allowed_roots")
	}
	return fmt.Sprintf("an allowed root of %s (%s: %s)", who, key, strings.Join(rs, ", "))
}
