package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestHelpRedisURLPlaceholder: `lathed up --help` names --redis-url's value
// "url" (pflag takes the first backquoted word of a usage as the value's
// name; it once read "--redis-url up").
func TestHelpRedisURLPlaceholder(t *testing.T) {
	var out, errb bytes.Buffer
	root := newRootCmd(&out, &errb)
	root.SetArgs([]string{"up", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--redis-url url ") {
		t.Errorf("lathed up --help lacks %q:\n%s", "--redis-url url", out.String())
	}
}

// TestHelpPlaceholders: every flag of every lathed command whose usage has
// a backquoted word (pflag's value name) is one listed here, with that
// name: a word quoted for emphasis would become the value's name.
func TestHelpPlaceholders(t *testing.T) {
	var out, errb bytes.Buffer
	checkPlaceholders(t, newRootCmd(&out, &errb), map[string]string{"redis-url": "url"})
}

// checkPlaceholders checks the flags of cmd and its subcommands against
// want (flag name → the value name its usage backquotes).
func checkPlaceholders(t *testing.T, cmd *cobra.Command, want map[string]string) {
	t.Helper()
	check := func(f *pflag.Flag) {
		if !strings.Contains(f.Usage, "`") {
			return
		}
		name, _ := pflag.UnquoteUsage(f)
		if w, ok := want[f.Name]; !ok || name != w {
			t.Errorf("%s --%s: usage %q makes the value name %q (want %q)", cmd.CommandPath(), f.Name, f.Usage, name, w)
		}
	}
	cmd.LocalFlags().VisitAll(check)
	for _, c := range cmd.Commands() {
		checkPlaceholders(t, c, want)
	}
}
