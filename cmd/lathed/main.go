// Command lathed is Lathe's daemon: `lathed up` (scheduler and local worker
// in one process, with its own Redis), `lathed scheduler` and `lathed worker`.
package main

import (
	"context"
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
	if err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "lathed:", err)
		os.Exit(1)
	}
}
