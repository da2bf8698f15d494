// Package cron is the pure part of Lathe's schedules (the daemon
// config's schedules: section, docs/sweeps.md "Schedules"): parsing and
// validating the section, the ticks of a cron expression in a time zone,
// which tick a pass should run (Due) and what to do when the last run is
// still going (Decide). No Redis and no clock: every function takes the
// times it looks at.
package cron

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	robfig "github.com/robfig/cron/v3"

	"github.com/lathe-ml/lathe/internal/jobspec"
)

// Kind is what a schedule's tick starts.
type Kind string

// The kinds: a job file (jobspec) or a sweep file (sweepspec).
const (
	KindJob   Kind = "job"
	KindSweep Kind = "sweep"
)

// Concurrency says what a tick does while the schedule's last run is
// still going (Kubernetes CronJob's concurrencyPolicy).
type Concurrency string

// The concurrency policies.
const (
	// Allow starts the new run beside the old one.
	Allow Concurrency = "allow"
	// Forbid skips the tick (recorded as skipped, with the run it waited for).
	Forbid Concurrency = "forbid"
	// Replace cancels the old run, then starts the new one.
	Replace Concurrency = "replace"
)

// Missed says what happens to ticks that passed while no scheduler ran the
// schedule (all down, or longer than StartingDeadline without a leader).
type Missed string

// The missed-tick policies. Neither ever runs more than one tick per pass:
// older missed ticks are never run (no storm after a downtime).
const (
	// Skip runs the latest tick only when it is within StartingDeadline of
	// now; older ticks, and a latest tick past the deadline, are skipped.
	Skip Missed = "skip"
	// Once runs the latest tick once even past StartingDeadline (after a
	// downtime of any length: one run, never one per missed tick).
	Once Missed = "once"
)

// DefaultStartingDeadline is StartingDeadline when the config leaves it
// out: a tick not started within an hour of its time is missed (long
// enough for any leader failover, short enough that a nightly run does
// not start in the working day after an outage).
const DefaultStartingDeadline = time.Hour

// Entry is one item of the schedules: section as written.
type Entry struct {
	Name string `yaml:"name"`
	// Cron is a 5-field expression or a descriptor (@every 10s, @daily,
	// @hourly, @weekly, @monthly, @yearly).
	Cron string `yaml:"cron"`
	// Timezone is an IANA zone; "" is UTC. @every ignores it.
	Timezone string `yaml:"timezone"`
	// Sweep or Job is the file a tick starts (exactly one); a relative
	// path is relative to the config file's folder.
	Sweep string `yaml:"sweep"`
	Job   string `yaml:"job"`
	// Team is the team the runs are submitted for ("": none).
	Team             string `yaml:"team"`
	Concurrency      string `yaml:"concurrency"`
	Missed           string `yaml:"missed"`
	StartingDeadline string `yaml:"starting_deadline"`
}

// Schedule is a validated schedule.
type Schedule struct {
	Name     string
	Cron     string
	Timezone string // "UTC" when the config left it out
	Kind     Kind
	// File is the job or sweep file, absolute when the config's folder was.
	File             string
	Team             string
	Concurrency      Concurrency
	Missed           Missed
	StartingDeadline time.Duration

	loc   *time.Location
	spec  *robfig.SpecSchedule // nil for @every
	every time.Duration        // @every's interval, whole seconds
}

// FieldError is one bad field: its path ("schedules[2].cron"), its value
// and why.
type FieldError struct {
	Field, Value, Message string
}

func (e FieldError) Error() string {
	return fmt.Sprintf("%s: %q: %s", e.Field, e.Value, e.Message)
}

// Error lists every bad field of a schedules: section.
type Error struct{ Fields []FieldError }

func (e *Error) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Error()
	}
	return "schedules: " + strings.Join(parts, "; ")
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Parse validates entries (the schedules: section of the config file in
// folder dir) and returns the schedules in order. Every bad field is
// reported, as an *Error.
func Parse(entries []Entry, dir string) ([]Schedule, error) {
	var fes []FieldError
	seen := map[string]int{}
	out := make([]Schedule, 0, len(entries))
	for i, e := range entries {
		p := fmt.Sprintf("schedules[%d]", i)
		s, bad := parseEntry(e, p, dir)
		if j, dup := seen[e.Name]; dup && e.Name != "" {
			bad = append(bad, FieldError{p + ".name", e.Name, fmt.Sprintf("used by schedules[%d] already: names are unique", j)})
		}
		seen[e.Name] = i
		fes = append(fes, bad...)
		out = append(out, s)
	}
	if len(fes) > 0 {
		return nil, &Error{Fields: fes}
	}
	return out, nil
}

// parseEntry validates one entry, its fields named under prefix p.
func parseEntry(e Entry, p, dir string) (Schedule, []FieldError) {
	var fes []FieldError
	bad := func(field, value, msg string) { fes = append(fes, FieldError{p + "." + field, value, msg}) }
	s := Schedule{Name: e.Name, Cron: strings.TrimSpace(e.Cron), Team: e.Team, Timezone: e.Timezone,
		Concurrency: Concurrency(e.Concurrency), Missed: Missed(e.Missed), StartingDeadline: DefaultStartingDeadline}
	if !nameRE.MatchString(e.Name) {
		bad("name", e.Name, "want 1 to 63 of [a-z0-9-], starting and ending with a letter or digit")
	}
	s.parseWhen(e, bad)
	s.parseTarget(e, dir, bad)
	s.parsePolicies(e, bad)
	return s, fes
}

// reporter records a problem with one field of an entry.
type reporter func(field, value, msg string)

// parseWhen sets the schedule's location (UTC when not given, or when the
// zone is not known) and its parsed cron expression, which must tick.
func (s *Schedule) parseWhen(e Entry, bad reporter) {
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	loc, err := loadLocation(s.Timezone)
	if err != nil {
		bad("timezone", e.Timezone, err.Error())
		loc = time.UTC
	}
	s.loc = loc
	if err := s.parseCron(); err != nil {
		bad("cron", e.Cron, err.Error())
	} else if s.Next(time.Unix(0, 0)).IsZero() {
		bad("cron", e.Cron, "never comes (no tick within five years)")
	}
}

// parseTarget sets the file a tick starts, a job or a sweep (exactly one),
// resolved against dir.
func (s *Schedule) parseTarget(e Entry, dir string, bad reporter) {
	switch {
	case e.Sweep != "" && e.Job != "":
		bad("sweep", e.Sweep, "give sweep or job, not both (job is "+e.Job+")")
	case e.Sweep == "" && e.Job == "":
		bad("job", "", "give the file a tick starts: job: <job.yaml> or sweep: <sweep.yaml>")
	case e.Sweep != "":
		s.Kind, s.File = KindSweep, resolve(dir, e.Sweep)
	default:
		s.Kind, s.File = KindJob, resolve(dir, e.Job)
	}
}

// parsePolicies checks concurrency, missed and starting_deadline and sets
// the defaults of those not given (forbid, skip, DefaultStartingDeadline).
func (s *Schedule) parsePolicies(e Entry, bad reporter) {
	switch s.Concurrency {
	case "":
		s.Concurrency = Forbid
	case Allow, Forbid, Replace:
	default:
		bad("concurrency", e.Concurrency, "want allow, forbid or replace")
	}
	switch s.Missed {
	case "":
		s.Missed = Skip
	case Skip, Once:
	default:
		bad("missed", e.Missed, "want skip or once")
	}
	if e.StartingDeadline != "" {
		d, err := jobspec.ParseDuration(e.StartingDeadline)
		switch {
		case err != nil:
			bad("starting_deadline", e.StartingDeadline, "not a duration like 10m or 1h")
		case d < time.Second:
			bad("starting_deadline", e.StartingDeadline, "must be at least 1s")
		default:
			s.StartingDeadline = d
		}
	}
}

func loadLocation(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, errors.New("name an IANA zone (Europe/Berlin, UTC): Local depends on the machine")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, errors.New("not an IANA time zone (like Europe/Berlin or UTC)")
	}
	return loc, nil
}

func resolve(dir, path string) string {
	if filepath.IsAbs(path) || dir == "" {
		return path
	}
	return filepath.Join(dir, path)
}

// parseCron parses s.Cron with robfig/cron's standard parser (5 fields,
// or a descriptor) in s.loc.
func (s *Schedule) parseCron() error {
	if s.Cron == "" {
		return errors.New("empty: want 5 fields (minute hour day-of-month month day-of-week) or @every 10s, @hourly, @daily …")
	}
	if strings.HasPrefix(s.Cron, "CRON_TZ=") || strings.HasPrefix(s.Cron, "TZ=") {
		return errors.New("set the zone with timezone:, not in the expression")
	}
	cs, err := robfig.ParseStandard(s.Cron)
	if err != nil {
		return err
	}
	switch c := cs.(type) {
	case *robfig.SpecSchedule:
		c.Location = s.loc
		s.spec = c
	case robfig.ConstantDelaySchedule:
		if d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(s.Cron, "@every"))); err != nil || d < time.Second || d%time.Second != 0 {
			return errors.New("@every wants whole seconds, at least 1s")
		}
		s.every = c.Delay
	default:
		return fmt.Errorf("unsupported schedule type %T", cs)
	}
	return nil
}
