package trainer

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

const (
	// DefaultKillGrace is the time between SIGTERM and SIGKILL when
	// Config.KillGrace is zero.
	DefaultKillGrace = 10 * time.Second
	// DefaultMaxLineBytes is the longest stdout or stderr line kept when
	// Config.MaxLineBytes is zero.
	DefaultMaxLineBytes = 64 << 10
	// DefaultDrainTimeout is how long Run keeps reading the pipes after the
	// process group is gone when Config.DrainTimeout is zero.
	DefaultDrainTimeout = 2 * time.Second
)

// Config says which trainer to run and how. The zero value of each field
// except Argv is usable.
type Config struct {
	// Argv is the program and its arguments. It is never run through a
	// shell. Argv[0] is resolved with exec.LookPath (against the PATH of the
	// calling process) unless it is absolute; a relative path that contains a
	// slash is resolved against the caller's working directory, not Dir.
	// Required.
	Argv []string
	// Env holds extra KEY=VALUE entries, added after a minimal base
	// environment made of PATH, HOME, LANG, LC_ALL, TZ and TMPDIR taken
	// from the calling process where set, and the PassEnv variables. An
	// entry here overrides a base entry of the same key. Nothing else of
	// the caller's environment reaches the trainer: not its API tokens
	// (LATHE_TOKEN*), not its cloud credentials (AWS_*).
	Env []string
	// PassEnv names more variables of the caller's environment the trainer
	// gets (where set), e.g. the AWS credentials of a trainer that reads
	// s3:// itself. Empty: none. A name matching LATHE_TOKEN* is invalid.
	PassEnv []string
	// RunAs, when not nil, runs the trainer as that user and group (and no
	// supplementary group) instead of the caller's: the caller must be
	// root, and must have made what the trainer writes writable by it.
	// Nil: the caller's own user.
	RunAs *Credential
	// Dir is the trainer's working directory; empty means the caller's.
	Dir string
	// KillGrace is how long the group leader has to exit after SIGTERM before
	// the group gets SIGKILL. Zero means DefaultKillGrace; negative is invalid.
	// Too short a grace kills trainers before they have saved a checkpoint.
	KillGrace time.Duration
	// MaxLineBytes is the longest stdout or stderr line kept, in bytes of the
	// trainer's output; the rest of a longer line is dropped (the line itself
	// is delivered, truncated). Zero means DefaultMaxLineBytes; negative is
	// invalid. A truncated event line is no longer valid JSON and arrives as
	// a log line.
	MaxLineBytes int
	// DrainTimeout bounds how long Run keeps reading stdout and stderr after
	// the process group is gone. It only matters without Cgroup, when a
	// process that escaped the group (setsid) still holds a pipe open; lines
	// it writes later are lost. (With Cgroup that process is dead by then.) Zero means DefaultDrainTimeout; negative is invalid.
	DrainTimeout time.Duration
	// Cgroup, when not empty, is the cgroup v2 directory the attempt runs
	// in (see PrepareCgroup for its parent): Run creates it (it must not
	// exist yet), starts the trainer inside it atomically (clone3 into the
	// cgroup, so no child can fork before it is in), and at the end kills
	// every process in it (cgroup.kill), waits until none is left and
	// removes it. A process that leaves the trainer's process group (setsid,
	// setpgid, a double fork) stays in the cgroup: it cannot leave without
	// write access to another cgroup's cgroup.procs, which a trainer running
	// as root has (so run trainers as another user, RunAs). Empty: the
	// process group only, and an escaped process outlives the attempt.
	Cgroup string
	// Watchdog, when not nil, stops the trainer's group when the caller
	// stops feeding it (see Watchdog); nil: no watchdog.
	Watchdog *Watchdog
	// Logger receives the runner's own records; nil discards them.
	Logger *slog.Logger
}

// Credential is a numeric user and group to run a trainer as.
type Credential struct {
	UID, GID uint32
}

// normalise applies defaults and validates cfg.
func (cfg Config) normalise() (Config, error) {
	if len(cfg.Argv) == 0 || cfg.Argv[0] == "" {
		return cfg, fmt.Errorf("%w: empty Argv", ErrInvalidConfig)
	}
	for _, kv := range cfg.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return cfg, fmt.Errorf("%w: Env entry %q is not KEY=VALUE", ErrInvalidConfig, kv)
		}
	}
	for _, k := range cfg.PassEnv {
		if err := CheckPassEnvName(k); err != nil {
			return cfg, fmt.Errorf("%w: PassEnv: %w", ErrInvalidConfig, err)
		}
	}
	if cfg.Cgroup != "" && (!filepath.IsAbs(cfg.Cgroup) || filepath.Clean(cfg.Cgroup) != cfg.Cgroup || cfg.Cgroup == "/") {
		return cfg, fmt.Errorf("%w: Cgroup %q is not a clean absolute path", ErrInvalidConfig, cfg.Cgroup)
	}
	switch {
	case cfg.KillGrace < 0:
		return cfg, fmt.Errorf("%w: negative KillGrace %v", ErrInvalidConfig, cfg.KillGrace)
	case cfg.KillGrace == 0:
		cfg.KillGrace = DefaultKillGrace
	}
	switch {
	case cfg.MaxLineBytes < 0:
		return cfg, fmt.Errorf("%w: negative MaxLineBytes %d", ErrInvalidConfig, cfg.MaxLineBytes)
	case cfg.MaxLineBytes == 0:
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	switch {
	case cfg.DrainTimeout < 0:
		return cfg, fmt.Errorf("%w: negative DrainTimeout %v", ErrInvalidConfig, cfg.DrainTimeout)
	case cfg.DrainTimeout == 0:
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// baseEnvKeys are the variables passed from the caller's environment.
var baseEnvKeys = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// envNameRE is a portable environment variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckPassEnvName refuses a name that cannot be passed to a trainer: not a
// variable name, an API token (LATHE_TOKEN*, never given to a trainer), or
// a variable of the trainer contract, which Lathe sets itself (LATHE_*,
// CUDA_VISIBLE_DEVICES).
func CheckPassEnvName(k string) error {
	switch {
	case !envNameRE.MatchString(k):
		return fmt.Errorf("%q is not an environment variable name", k)
	case strings.HasPrefix(k, "LATHE_TOKEN"):
		return fmt.Errorf("%q: API tokens are never passed to a trainer", k)
	case strings.HasPrefix(k, "LATHE_") || k == "CUDA_VISIBLE_DEVICES":
		return fmt.Errorf("%q is set by Lathe itself (the trainer contract)", k)
	}
	return nil
}

// environ builds the trainer's environment: the base variables and the
// pass variables found in lookup, then extra. Later entries win (os/exec
// keeps the last duplicate).
func environ(lookup func(string) (string, bool), pass, extra []string) []string {
	env := make([]string, 0, len(baseEnvKeys)+len(pass)+len(extra))
	for _, k := range append(append([]string(nil), baseEnvKeys...), pass...) {
		if v, ok := lookup(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}
