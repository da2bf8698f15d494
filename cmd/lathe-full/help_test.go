package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestHelpPlaceholders: no lathe flag's usage backquotes a word (pflag
// would show it as the value's name, as lathed's --redis-url once showed
// "up").
func TestHelpPlaceholders(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				name, _ := pflag.UnquoteUsage(f)
				t.Errorf("%s --%s: usage %q makes the value name %q", c.CommandPath(), f.Name, f.Usage, name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(nil, nil, func(string) string { return "" }))
}
