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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "lathed:", err)
		os.Exit(1)
	}
}
