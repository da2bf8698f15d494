package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/buildinfo"
)

// versionCmd is `lathe version`: the build this binary is, from its build
// information (internal/buildinfo). It talks to no scheduler, so it checks
// -o only, not --server.
func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print lathe's version and the commit it was built from (-o json: an object)",
		Args:  cobra.NoArgs,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if a.output != outTable && a.output != outJSON {
				return usageErrorf("-o must be %q or %q, not %q", outTable, outJSON, a.output)
			}
			return nil
		},
		RunE: runE(func(*cobra.Command, []string) error {
			in := buildinfo.Read("lathe")
			if a.output == outJSON {
				return writeJSON(a.stdout, in)
			}
			_, err := fmt.Fprintln(a.stdout, in)
			return err
		}),
	}
}
