package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/apiclient"
	"github.com/lathe-ml/lathe/internal/buildinfo"
	"github.com/lathe-ml/lathe/internal/redact"
)

// defaultServer is the scheduler address when neither --server nor
// LATHE_SERVER says otherwise.
const defaultServer = "http://127.0.0.1:8080"

// Output formats of -o.
const (
	outTable = "table"
	outJSON  = "json"
)

// app holds what every command shares: where it writes, the environment,
// the global flags and the clock.
type app struct {
	stdout, stderr io.Writer
	env            func(string) string

	server string // --server
	output string // -o

	// now is the clock used for ages and progress pacing.
	now func() time.Time
	// httpClient is used by the API client; nil means apiclient's default.
	httpClient *http.Client
}

// run executes the lathe command line args and returns the process exit
// code; errors are printed to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, env func(string) string) int {
	root := newRootCmd(stdout, stderr, env)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	server, _ := root.PersistentFlags().GetString("server")
	return report(stderr, server, err)
}

// newRootCmd builds the lathe command tree. Commands write their results to
// stdout and progress and diagnostics to stderr; env stands in for
// os.Getenv (LATHE_SERVER, LATHE_TOKEN).
func newRootCmd(stdout, stderr io.Writer, env func(string) string) *cobra.Command {
	return newApp(stdout, stderr, env).rootCmd()
}

func newApp(stdout, stderr io.Writer, env func(string) string) *app {
	return &app{stdout: stdout, stderr: stderr, env: env, now: time.Now}
}

func (a *app) rootCmd() *cobra.Command {
	server := a.env("LATHE_SERVER")
	if server == "" {
		server = defaultServer
	}
	root := &cobra.Command{
		Use:   "lathe",
		Short: "Submit, watch and fetch LoRA fine-tuning jobs run by a Lathe scheduler",
		Long: `lathe talks to a Lathe scheduler's HTTP API (--server, or LATHE_SERVER;
the token, if any, comes from LATHE_TOKEN).

Exit codes: 0 success; 1 the job failed or was cancelled, or the API refused;
2 usage error, invalid job spec, or a job no backend may run as written
(submit refused with reasons); 3 scheduler unreachable or Redis down.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if a.output != outTable && a.output != outJSON {
				return usageErrorf("-o must be %q or %q, not %q", outTable, outJSON, a.output)
			}
			return checkServer(a.server)
		},
	}
	// --version prints what `lathe version` prints.
	root.Version = buildinfo.Read("lathe").String()
	root.SetVersionTemplate("{{.Version}}\n")
	root.Flags().Bool("version", false, "print lathe's version and the commit it was built from (as lathe version)")
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf("%v\nRun '%s --help' for usage.", err, cmd.CommandPath())
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.server, "server", server, "scheduler URL (env LATHE_SERVER)")
	pf.StringVarP(&a.output, "output", "o", outTable, "output format: table or json")

	root.AddCommand(
		a.submitCmd(),
		a.statusCmd(),
		a.listCmd(),
		a.logsCmd(),
		a.cancelCmd(),
		a.retryCmd(),
		a.pullCmd(),
		a.queuesCmd(),
		a.topCmd(),
		a.schedulesCmd(),
		a.gpusCmd(),
		a.nodesCmd(),
		a.budgetsCmd(),
		a.routeCmd(),
		a.costCmd(),
		a.auditCmd(),
		a.sweepCmd(),
		a.simulateCmd(),
		a.exportCmd(),
		a.versionCmd(),
	)
	a.addCompletions(root)
	return root
}

// checkServer says what is wrong with server (--server or LATHE_SERVER)
// as a usage error, or nil for an http:// or https:// URL with a host. The
// error names the URL redacted, and its cause never quotes a password
// (redact.Parse).
func checkServer(server string) error {
	u, err := redact.Parse(server, url.Parse)
	if err != nil {
		return usageErrorf("--server %q is not an http:// or https:// URL: %v", redact.URL(server), err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("--server %q is not an http:// or https:// URL", redact.URL(server))
	}
	return nil
}

// client returns an API client for --server and LATHE_TOKEN.
func (a *app) client() *apiclient.Client {
	if a.httpClient == nil {
		// nil unless the front handed over an answer it got (frontAnswered);
		// kept, so that it stands for one send however many clients ask.
		a.httpClient = frontAnswered(a.env(frontAnswerEnv))
	}
	return apiclient.New(a.server, a.env("LATHE_TOKEN"), a.httpClient)
}

// runE adapts a command body so that every error it returns carries an exit
// code: errors of no known kind become exitFailed, leaving untyped errors
// to mean cobra's own usage errors.
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		if err == nil || typed(err) {
			return err
		}
		return &exitError{code: exitFailed, err: err}
	}
}

// exactArgs is cobra.ExactArgs with a usage exit code and the names of the
// arguments in the message.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usageErrorf("%s takes %d argument(s) (%v), got %d\nRun '%s --help' for usage.",
				cmd.CommandPath(), len(names), names, len(args), cmd.CommandPath())
		}
		return nil
	}
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
