package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/buildinfo"
)

// addVersion gives root a --version flag and a version command, both
// printing the build this binary is (internal/buildinfo) to stdout.
func addVersion(root *cobra.Command, stdout io.Writer) {
	line := buildinfo.Read("lathed").String()
	root.Version = line
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print lathed's version and the commit it was built from (as lathed version)")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print lathed's version and the commit it was built from",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(stdout, line)
			return err
		},
	})
}
