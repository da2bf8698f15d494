// Command lathe is the front of Lathe's command-line client. It answers the
// two calls a user's shell loop makes most, and makes fastest:
//
//	lathe --help                                (also -h, help, no arguments)
//	lathe submit FILE [--server URL] [-o table|json] [--idempotency-key K]
//
// and hands every other command line, unchanged, to lathe-full (the whole
// client: cmd/lathe-full), which it looks for beside its own executable,
// then on PATH, and runs in its place (exec). The two are one client: the
// front prints what lathe-full prints, byte for byte, and the exit code is
// the same.
//
// Why two binaries: a Go program pays at every start for the package
// initialisers of everything it links. lathe-full links net/http, cobra,
// the simulator, gonum/plot and bubbletea, and costs ~4 ms a start here;
// this front links the job-spec parser and net alone and starts in about a
// third of that, so `for f in *.yaml; do lathe submit "$f"; done` runs at
// sbatch's pace (docs/benchmarks.md).
//
// The front does only the successful case itself. It reads and checks the
// spec with the same parser as lathe-full (internal/jobspec, paths resolved
// by internal/specpath) and posts it over one HTTP/1.1 connection. Whenever
// anything else happens (a flag it does not know, a spec with problems, an
// https:// server, no answer, an answer other than 200/201) it hands the
// command line to lathe-full, which says what is wrong in its own words.
// When the front had already sent the job, it hands over what it got of
// the send: the answer, which lathe-full takes as its own send's
// (LATHE_FRONT_ANSWER), so one submit is one request, however it is
// answered (a refusal is recorded once in the routing ledger); and the
// idempotency key it sent (--idempotency-key), so that where lathe-full
// sends again (no answer came, or a 503) it gets the same job, never a
// second one.
package main

import (
	_ "embed"
	"os"
	"strconv"
	"strings"
)

// rootHelp is `lathe-full --help` with LATHE_SERVER unset. A test in
// cmd/lathe-full holds the two equal (go test ./cmd/lathe-full -run
// TestFrontHelp -update rewrites it).
//
//go:embed help.txt
var rootHelp string

// defaultServer is the scheduler address when neither --server nor
// LATHE_SERVER says otherwise (lathe-full's defaultServer).
const defaultServer = "http://127.0.0.1:8080"

func main() {
	args := os.Args[1:]
	env := withoutAnswer(os.Environ())
	if isRootHelp(args) {
		os.Stdout.WriteString(helpText(os.Getenv("LATHE_SERVER")))
		os.Exit(0)
	}
	if s, ok := parseSubmit(args, os.Getenv("LATHE_SERVER")); ok {
		code, handled := s.run(os.Getenv("LATHE_TOKEN"), os.Stdout)
		if handled {
			os.Exit(code)
		}
		if s.sent && s.madeKey {
			// lathe-full sends the same job again with the same key, if it
			// sends it: the scheduler answers with the job the first send
			// made, if any.
			args = append(args, "--idempotency-key", s.key)
		}
		if s.answer != "" {
			env = append(env, answerEnv+"="+s.answer)
		}
	}
	os.Exit(handOver(args, env))
}

// answerEnv is lathe-full's frontAnswerEnv: the answer the front got to
// the submit it sent, which lathe-full takes as its own send's.
const answerEnv = "LATHE_FRONT_ANSWER"

// withoutAnswer is env without answerEnv: lathe-full reads only an answer
// this front got.
func withoutAnswer(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, answerEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// isRootHelp reports whether args ask for the root command's help.
func isRootHelp(args []string) bool {
	if len(args) == 0 {
		return true
	}
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "--help", "-h", "help":
		return true
	}
	return false
}

// helpText is rootHelp with server (LATHE_SERVER; empty: unset) as the
// --server flag's default, as cobra prints it.
func helpText(server string) string {
	if server == "" {
		return rootHelp
	}
	return strings.Replace(rootHelp, "(default "+strconv.Quote(defaultServer)+")",
		"(default "+strconv.Quote(server)+")", 1)
}
