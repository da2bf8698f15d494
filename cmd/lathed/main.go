// Command lathed is Lathe's daemon: `lathed up` (scheduler and local worker
// in one process, with its own Redis), `lathed scheduler` and `lathed worker`;
// `lathed ledger reanchor` moves the ledger's anchor after a restore.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Before anything reads a secret: a trainer of lathed's own user must
	// not read its environment or memory through /proc.
	if err := hardenProcess(); err != nil {
		fmt.Fprintln(os.Stderr, "lathed:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// An error is prefixed with the command that failed ("lathed up: …").
	if cmd, err := newRootCmd(os.Stdout, os.Stderr).ExecuteContextC(ctx); err != nil {
		var code exitCodeError
		if errors.As(err, &code) {
			os.Exit(code.code) // the slurm step's trainer's, said in its status
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.CommandPath(), err)
		os.Exit(1)
	}
}
