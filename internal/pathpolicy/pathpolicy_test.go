package pathpolicy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAllows(t *testing.T) {
	rs, err := New([]string{"/data", "/srv/models/"})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"/data": true, "/data/a/b.jsonl": true, "/srv/models/x": true,
		"/datax/a": false, "/data/../etc/passwd": false, "/etc/passwd": false, "data/a": false, "/srv/model": false} {
		if got := rs.Allows(p); got != want {
			t.Errorf("Allows(%q) = %v", p, got)
		}
	}
	if _, err := New([]string{"relative"}); err == nil {
		t.Error("a relative root was accepted")
	}
}

func TestCheckResolvedFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(root, 0o755)
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret.jsonl"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(root, "link"))
	rs, _ := New([]string{root})
	if err := rs.CheckResolved(filepath.Join(root, "link", "secret.jsonl")); !errors.Is(err, ErrOutside) {
		t.Fatalf("a link out of the root was allowed: %v", err)
	}
	if err := rs.CheckResolved(filepath.Join(root, "new", "dir", "file")); err != nil {
		t.Fatalf("a not-yet-existing path under the root: %v", err)
	}
}

// TestTeamRoots: a team's roots must be absolute, not empty and, when the
// deployment sets roots, under them; For gives a listed team its own roots
// and every other team the deployment's, with the config key of each.
func TestTeamRoots(t *testing.T) {
	deployment, _ := New([]string{"/data"})
	trs, err := NewTeamRoots(map[string][]string{"alpha": {"/data/alpha/"}, "beta": {"/data/beta", "/data/shared"}}, deployment)
	if err != nil {
		t.Fatal(err)
	}
	for team, want := range map[string]struct {
		key  string
		path string
		ok   bool
	}{
		"alpha": {"teams.alpha.allowed_roots", "/data/beta/x.jsonl", false},
		"beta":  {"teams.beta.allowed_roots", "/data/beta/x.jsonl", true},
		"gamma": {"jobs.allowed_roots", "/data/alpha/x.jsonl", true},
		"":      {"jobs.allowed_roots", "/data/alpha/x.jsonl", true},
	} {
		rs, key := trs.For(team, deployment)
		if key != want.key || rs.Allows(want.path) != want.ok {
			t.Errorf("team %q: roots %v (%s) allow %s = %v, want %v (%s)", team, rs, key, want.path, rs.Allows(want.path), want.ok, want.key)
		}
	}
	if got := Rule(trs["beta"], TeamKey("beta")); got != "an allowed root of team beta (teams.beta.allowed_roots: /data/beta, /data/shared)" {
		t.Errorf("Rule: %s", got)
	}
	for name, c := range map[string]struct {
		teams map[string][]string
		want  string
	}{
		"outside the deployment's": {map[string][]string{"beta": {"/srv/beta"}}, `teams.beta.allowed_roots[0] "/srv/beta": not under jobs.allowed_roots (/data)`},
		"relative":                 {map[string][]string{"beta": {"beta"}}, "teams.beta.allowed_roots[0]"},
		"empty":                    {map[string][]string{"beta": {}}, "teams.beta.allowed_roots: empty"},
	} {
		if _, err := NewTeamRoots(c.teams, deployment); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	// Without jobs.allowed_roots a team's roots are not bounded by the
	// default roots (the data dir and the working folder).
	if _, err := NewTeamRoots(map[string][]string{"beta": {"/srv/beta"}}, nil); err != nil {
		t.Errorf("no deployment roots: %v", err)
	}
}
