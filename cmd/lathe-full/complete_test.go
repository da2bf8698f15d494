package main

import (
	"strings"
	"testing"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// complete runs the shell's hidden completion request, as
// `lathe completion bash` wires it: lathe __complete ARGS... PREFIX. It
// returns the offered lines and the directive line (":4" is
// ShellCompDirectiveNoFileComp).
func complete(t *testing.T, server string, args ...string) ([]string, string) {
	t.Helper()
	r := lathe(t, server, append([]string{"__complete"}, args...)...)
	if r.code != 0 {
		t.Fatalf("lathe __complete %v: exit %d\n%s", args, r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func TestCompletion(t *testing.T) {
	f := newFakeScheduler(t)
	f.addJob(&jobtype.Job{ID: "j-abc", Name: "support-bot", State: jobtype.StateRunning}, nil, nil)
	f.addJob(&jobtype.Job{ID: "j-abd", Name: "evil\x1b[2Jname", State: jobtype.StateFailed}, nil, nil)
	f.addJob(&jobtype.Job{ID: "j-xyz", Name: "other", State: jobtype.StateQueued}, nil, nil)

	got, dir := complete(t, f.srv.URL, "status", "j-ab")
	if dir != ":4" || len(got) != 2 {
		t.Fatalf("status j-ab<Tab>: %q %s, want the two j-ab… ids", got, dir)
	}
	want := map[string]bool{"j-abc\tsupport-bot running": true, "j-abd\tevil[2Jname failed": true}
	for _, g := range got {
		if !want[g] {
			t.Errorf("offered %q (a control character or a wrong description)", g)
		}
	}
	for _, cmd := range []string{"logs", "cancel", "retry", "pull"} {
		if got, _ := complete(t, f.srv.URL, cmd, "j-x"); len(got) != 1 || !strings.HasPrefix(got[0], "j-xyz\t") {
			t.Errorf("%s j-x<Tab>: %q", cmd, got)
		}
	}
	if got, dir := complete(t, f.srv.URL, "status", "j-abc", ""); len(got) != 0 || dir != ":4" {
		t.Errorf("a second argument is no id: %q %s", got, dir)
	}
	if got, _ := complete(t, f.srv.URL, "list", "--state", "s"); strings.Join(got, ",") != "succeeded,stopped" {
		t.Errorf("list --state s<Tab>: %q", got)
	}
	if got, _ := complete(t, f.srv.URL, "pull", "j-abc", "--format", "gguf"); strings.Join(got, ",") != "gguf,gguf-merged" {
		t.Errorf("pull --format gguf<Tab>: %q", got)
	}
	if got, _ := complete(t, f.srv.URL, "queues", "-o", ""); strings.Join(got, ",") != "table,json" {
		t.Errorf("-o <Tab>: %q", got)
	}
	// No scheduler: nothing offered, no error in the shell, no file names.
	if got, dir := complete(t, closedURL(t), "status", ""); len(got) != 0 || dir != ":4" {
		t.Errorf("unreachable scheduler: %q %s", got, dir)
	}
}
