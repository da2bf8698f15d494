package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// completionTimeout bounds the API call that completes a job id: a shell
// waits on it at every <Tab>, and an unreachable scheduler must not hang it.
const completionTimeout = 2 * time.Second

// completionJobs is how many of the newest jobs a <Tab> offers.
const completionJobs = 200

// addCompletions gives the shell (lathe completion bash|zsh|fish|powershell)
// more than command names: job ids for the commands that take one (from
// the scheduler, the newest completionJobs the token may read, each with
// its name and state), the states of list --state, the formats of
// pull --format and -o's two values.
func (a *app) addCompletions(root *cobra.Command) {
	_ = root.RegisterFlagCompletionFunc("output", fixedCompletion(outTable, outJSON))
	states := make([]string, len(jobtype.States))
	for i, s := range jobtype.States {
		states[i] = string(s)
	}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "status", "logs", "cancel", "retry":
			c.ValidArgsFunction = a.completeJobID
		case "pull":
			c.ValidArgsFunction = a.completeJobID
			_ = c.RegisterFlagCompletionFunc("format", fixedCompletion(pullFormatNames...))
		case "list":
			_ = c.RegisterFlagCompletionFunc("state", fixedCompletion(states...))
		}
	}
}

// fixedCompletion completes a flag from a fixed list; never file names.
func fixedCompletion(values ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, v := range values {
			if strings.HasPrefix(v, prefix) {
				out = append(out, v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeJobID offers the ids of the newest jobs that start with what was
// typed, as "id<TAB>name state" (the shell shows the part after the tab as
// a description). Only the first argument is an id. A scheduler that does
// not answer within completionTimeout completes nothing, silently: the
// shell is no place for an error message.
func (a *app) completeJobID(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, completionTimeout)
	defer cancel()
	list, err := a.client().List(ctx, "", "", completionJobs)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, j := range list.Jobs {
		if j == nil || !strings.HasPrefix(j.ID, prefix) {
			continue
		}
		desc := strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return -1 // a name is the user's text: no control characters into a shell
			}
			return r
		}, j.Name+" "+string(j.State))
		out = append(out, j.ID+"\t"+desc)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
