package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobspec"
	"github.com/lathe-ml/lathe/internal/jobstore"
	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/pathpolicy"
	"github.com/lathe-ml/lathe/internal/specpath"
	"github.com/lathe-ml/lathe/internal/sweepspec"
	"github.com/lathe-ml/lathe/scheduler/cron"
	"github.com/lathe-ml/lathe/scheduler/plane"
)

// The schedule duty (leader only, every pass): for each schedule
// of Config.Schedules it reads the schedule's state from the store,
// decides the tick to run now (cron.Due: at most one a pass, the
// latest), applies the concurrency policy to the last run (forbid skips
// the tick, replace cancels the run, allow goes on), claims the tick
// (jobstore.ClaimTick: one run per tick however many schedulers), and
// starts the run under the id derived from the schedule and the tick
// (jobstore.TickID), recording each step in the schedule's state.
//
// Crash safety: the state says "claimed" from the claim until the run is
// stored. A pass that finds it so (the leader died in between) stores the
// run (the id is derived, so a run stored already is found, not stored
// twice), unless the tick is past its starting_deadline by then.

// scheduleEvery is how often the duty runs: every pass of the leader
// loop (0). Passes come PlaceInterval apart (500 ms by default), and the
// loop also wakes when the next tick of a schedule comes due
// (scheduleRunner.nextTick), so an idle leader starts a tick as it comes
// due, whatever PlaceInterval is.
const scheduleEvery = 0

// maxScheduledFile caps a schedule's job file (and a scheduled sweep's
// base job file) as a submit's body is capped.
const maxScheduledFile = 1 << 20

// SetSchedules replaces the schedules the leader runs (a config reload).
// The schedules' states stay in the store: a schedule kept under its name
// carries on from its last tick.
func (s *Scheduler) SetSchedules(ss []cron.Schedule) {
	cp := append([]cron.Schedule(nil), ss...)
	s.scheds.Store(&cp)
	s.log.Info("schedules loaded", slog.Int("schedules", len(cp)))
}

// schedules is the schedules in force.
func (s *Scheduler) Schedules() []cron.Schedule {
	if p := s.scheds.Load(); p != nil {
		return *p
	}
	return nil
}

// scheduleRunner is the leader's schedule duty.
type scheduleRunner struct {
	store     *jobstore.Store
	log       *slog.Logger
	schedules func() []cron.Schedule
	defaults  jobspec.Defaults
	admit     admitter
	sawRedis  func(error)
	now       func() time.Time
}

// scheduleRunnerParams is what a scheduleRunner is built from.
type scheduleRunnerParams struct {
	Store     *jobstore.Store
	Log       *slog.Logger
	Schedules func() []cron.Schedule // the schedules in force
	Defaults  jobspec.Defaults       // Config.Defaults, for a scheduled job's spec
	Admit     admitter               // starts a run, cancels the last one
	SawRedis  func(error)            // notes a Redis error this scheduler saw
	Now       func() time.Time       // the clock; nil: time.Now
}

// admitter is what the schedule duty needs of the admission path
// (admit.go, sweeps.go): a schedule's file read for its team
// (readScheduleFile, below), a scheduled job or sweep admitted under its
// derived id, and the last run cancelled (concurrency: replace).
type admitter interface {
	admitRun(ctx context.Context, p plane.Principal, id string, spec *jobspec.Spec) (*jobtype.Job, bool, error)
	admitSweep(ctx context.Context, req plane.SweepRequest) (*jobtype.Sweep, bool, error)
	readScheduleFile(team, path string, limit int64) ([]byte, error)
	Cancel(ctx context.Context, id string) (*jobtype.Job, error)
	CancelSweep(ctx context.Context, id string) (*jobtype.Sweep, int, error)
}

// admitterOf is s's admission path and cancels, as the schedule duty
// needs them.
func admitterOf(s *Scheduler) admitter {
	return struct {
		*admission
		*Scheduler
	}{s.admit, s}
}

func newScheduleRunner(p scheduleRunnerParams) *scheduleRunner {
	return &scheduleRunner{store: p.Store, log: p.Log, schedules: p.Schedules, defaults: p.Defaults, admit: p.Admit,
		sawRedis: p.SawRedis, now: p.Now}
}

func (d *scheduleRunner) run(ctx context.Context) {
	for _, sch := range d.schedules() {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.pass(rctx, sch, d.clock())
		cancel()
		if err != nil {
			d.sawRedis(err)
			d.log.Warn("schedule pass", slog.String("schedule", sch.Name), slog.Any("err", err))
		}
	}
}

// nextTick is the earliest tick strictly after now of the schedules in
// force (zero: none): the leader loop wakes for it. Ticks are caught up one
// a pass, so a pass that left older ticks due wakes nothing sooner: they
// run on the passes that follow, PlaceInterval apart.
func (d *scheduleRunner) nextTick(now time.Time) time.Time {
	var next time.Time
	for _, sch := range d.schedules() {
		if n := sch.Next(now); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return next
}

func (d *scheduleRunner) clock() time.Time {
	if d.now != nil {
		return d.now()
	}
	return time.Now()
}

// pass handles one schedule at now.
func (d *scheduleRunner) pass(ctx context.Context, sch cron.Schedule, now time.Time) error {
	st, err := d.store.ScheduleStateOf(ctx, sch.Name)
	if err != nil {
		return err
	}
	if st.Outcome == jobstore.TickClaimed {
		return d.resume(ctx, sch, st, now)
	}
	dec := sch.Due(st.Tick, now)
	switch dec.Action {
	case cron.None:
		return nil
	case cron.SkipTick:
		return d.record(ctx, sch, st, dec.Tick, jobstore.TickSkipped, "", dec.Why)
	}
	runID := jobstore.TickID(runPrefix(sch.Kind), sch.Name, dec.Tick)
	going, why, err := d.going(ctx, st.RunID)
	if err != nil {
		return err
	}
	if sch.Decide(going) == cron.SkipForbid {
		return d.record(ctx, sch, st, dec.Tick, jobstore.TickSkipped, "",
			fmt.Sprintf("concurrency: forbid: the last run %s is still %s", st.RunID, why))
	}
	won, existing, err := d.store.ClaimTick(ctx, sch.Name, dec.Tick, runID)
	if err != nil {
		return err
	}
	if !won && existing != runID {
		// Claimed under another id (the schedule's kind changed meanwhile):
		// that claim is the tick's run.
		return d.record(ctx, sch, st, dec.Tick, jobstore.TickSkipped, existing, "tick claimed as "+existing+" by another scheduler")
	}
	if dec.Why != "" {
		d.log.Info("schedule: older ticks not run", slog.String("schedule", sch.Name), slog.String("why", dec.Why))
	}
	claimed := st
	claimed.Tick, claimed.Outcome, claimed.Message, claimed.TickRunID, claimed.Kind = dec.Tick, jobstore.TickClaimed, dec.Why, runID, string(sch.Kind)
	claimed.UpdatedAt = time.Time{}
	if _, err := d.store.SetScheduleState(ctx, sch.Name, claimed); err != nil {
		return err
	}
	return d.start(ctx, sch, claimed, now)
}

// resume finishes a claimed tick whose outcome was never recorded.
func (d *scheduleRunner) resume(ctx context.Context, sch cron.Schedule, st jobstore.ScheduleState, now time.Time) error {
	if now.Sub(st.Tick) > sch.StartingDeadline && sch.Missed != cron.Once {
		exists, err := d.exists(ctx, st.TickRunID)
		switch {
		case err != nil:
			return err
		case exists:
			return d.started(ctx, sch, st, jobstore.TickStarted, "")
		}
		return d.record(ctx, sch, st, st.Tick, jobstore.TickSkipped, st.TickRunID,
			"claimed but not started within starting_deadline "+sch.StartingDeadline.String()+" (the leader stopped in between)")
	}
	d.log.Info("schedule: resuming a claimed tick", slog.String("schedule", sch.Name), slog.String("run_id", st.TickRunID))
	return d.start(ctx, sch, st, now)
}

// start starts the claimed tick st.Tick's run st.TickRunID (after
// cancelling the last run under concurrency: replace) and records the
// outcome. A store it could not reach leaves the state claimed, for the
// next pass.
func (d *scheduleRunner) start(ctx context.Context, sch cron.Schedule, st jobstore.ScheduleState, now time.Time) error {
	outcome, msg := jobstore.TickStarted, ""
	going, why, err := d.going(ctx, st.RunID)
	if err != nil {
		return err
	}
	if going && sch.Decide(true) == cron.ReplaceRun {
		if err := d.cancel(ctx, st.RunID); err != nil {
			return err
		}
		outcome, msg = jobstore.TickReplaced, fmt.Sprintf("cancelled the last run %s (%s)", st.RunID, why)
	}
	var serr error
	existed := false
	if sch.Kind == cron.KindSweep {
		serr = d.startSweep(ctx, sch, st.TickRunID, st.Tick)
	} else {
		existed, serr = d.startJob(ctx, sch, st.TickRunID)
	}
	if serr != nil {
		if jobstore.Unreachable(serr) {
			return serr
		}
		d.log.Error("schedule: run not started", slog.String("schedule", sch.Name), slog.String("run_id", st.TickRunID), slog.Any("err", serr))
		return d.record(ctx, sch, st, st.Tick, jobstore.TickFailed, st.TickRunID, serr.Error())
	}
	what := "schedule: run started"
	if existed {
		what = "schedule: run stored already (by another scheduler, or before a crash)"
	}
	d.log.Info(what, slog.String("schedule", sch.Name), slog.String("run_id", st.TickRunID),
		slog.Time("tick", st.Tick), slog.Duration("late", now.Sub(st.Tick)))
	return d.started(ctx, sch, st, outcome, msg)
}

// started records st's tick as started (or replaced): its run becomes the
// schedule's last run.
func (d *scheduleRunner) started(ctx context.Context, sch cron.Schedule, st jobstore.ScheduleState, outcome, msg string) error {
	st.Outcome, st.Message, st.Kind = outcome, msg, string(sch.Kind)
	st.RunID, st.RunTick, st.UpdatedAt = st.TickRunID, st.Tick, time.Time{}
	_, err := d.store.SetScheduleState(ctx, sch.Name, st)
	return err
}

// record records tick as decided with outcome (skipped, failed) and why;
// the schedule's last run stays.
func (d *scheduleRunner) record(ctx context.Context, sch cron.Schedule, st jobstore.ScheduleState, tick time.Time, outcome, runID, why string) error {
	st.Tick, st.Outcome, st.Message, st.TickRunID, st.Kind, st.UpdatedAt = tick, outcome, why, runID, string(sch.Kind), time.Time{}
	if outcome == jobstore.TickSkipped {
		d.log.Info("schedule: tick skipped", slog.String("schedule", sch.Name), slog.Time("tick", tick), slog.String("why", why))
	}
	_, err := d.store.SetScheduleState(ctx, sch.Name, st)
	return err
}

// startJob reads the schedule's job file (readScheduleFile) and admits it
// as run id, for the plane.Principal schedule:<name> of the schedule's
// team; existed says the run was stored already. Its error says what went
// wrong without a value of the file (startError).
func (d *scheduleRunner) startJob(ctx context.Context, sch cron.Schedule, id string) (existed bool, err error) {
	what := "job file " + sch.File
	body, err := d.admit.readScheduleFile(sch.Team, sch.File, maxScheduledFile)
	if err != nil {
		return false, startFailed(what, "", sch.File, err)
	}
	spec, err := jobspec.Parse(specpath.Resolve(body, filepath.Dir(sch.File)))
	if err != nil {
		return false, startFailed(what, "lathe submit --dry-run", sch.File, err)
	}
	spec.Normalize(d.defaults)
	p := plane.Principal{Name: "schedule:" + sch.Name, Role: plane.RoleSubmitter, Team: sch.Team}
	_, existed, err = d.admit.admitRun(ctx, p, id, spec)
	if err != nil {
		return existed, startFailed(what, "lathe submit --dry-run", sch.File, err)
	}
	return existed, nil
}

// going reports whether run id has not ended, and its state
// (jobstore.RunGoing).
func (d *scheduleRunner) going(ctx context.Context, id string) (bool, string, error) {
	return d.store.RunGoing(ctx, id)
}

// exists reports whether run id is in the store.
func (d *scheduleRunner) exists(ctx context.Context, id string) (bool, error) {
	var err error
	if jobstore.ValidSweepID(id) {
		_, err = d.store.GetSweep(ctx, id)
	} else {
		_, err = d.store.Get(ctx, id)
	}
	if errors.Is(err, jobstore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// cancel cancels run id: a job as POST /cancel does, a sweep with every
// trial that has not ended.
func (d *scheduleRunner) cancel(ctx context.Context, id string) error {
	if jobstore.ValidSweepID(id) {
		_, _, err := d.admit.CancelSweep(ctx, id)
		return err
	}
	_, err := d.admit.Cancel(ctx, id)
	var ce *jobstore.ConflictError
	if errors.As(err, &ce) {
		return nil // it ended meanwhile
	}
	return err
}

// runPrefix is the run id prefix of a kind ("j-" a job, "s-" a sweep).
func runPrefix(k cron.Kind) string {
	if k == cron.KindSweep {
		return "s-"
	}
	return "j-"
}

// startSweep admits the sweep file of sch as sweep runID for
// tick, for the plane.Principal schedule:<name> of the schedule's team. The
// sweep file and a base job it names by path (a relative path is relative
// to the sweep file) are read as datasets are (readScheduleFile): under
// the team's allowed roots, never through a link swapped in, never
// lathed's own files. runID is derived from the tick, so a second start
// (another scheduler, a new leader after a crash between the tick's claim
// and this) finds the sweep stored and stores nothing. Its error says what
// went wrong without a value of the files (startError).
func (d *scheduleRunner) startSweep(ctx context.Context, sch cron.Schedule, runID string, tick time.Time) error {
	what := "sweep file " + sch.File
	body, err := d.admit.readScheduleFile(sch.Team, sch.File, sweepspec.MaxSpecBytes)
	if err != nil {
		return startFailed(what, "", sch.File, err)
	}
	dir := filepath.Dir(sch.File)
	var jobErr error // reading the base job: its own message, without the path the sweep file gives
	sp, err := sweepspec.Parse(body, sweepspec.Options{ReadJob: func(path string) ([]byte, error) {
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		b, err := d.admit.readScheduleFile(sch.Team, path, maxScheduledFile)
		if err != nil {
			jobErr = err
			return nil, err
		}
		return specpath.Resolve(b, filepath.Dir(path)), nil
	}})
	if jobErr != nil {
		return startFailed(what+": its base job (job:)", "", sch.File, jobErr)
	}
	if err != nil {
		return startFailed(what, "lathe sweep submit --dry-run", sch.File, err)
	}
	p := plane.Principal{Name: "schedule:" + sch.Name, Role: plane.RoleSubmitter, Team: sch.Team}
	t := tick.UTC()
	sw, existed, err := d.admit.admitSweep(ctx, plane.SweepRequest{Spec: sp, ID: runID, Who: p, Schedule: sch.Name, Tick: &t})
	if err != nil {
		return startFailed(what, "lathe sweep submit --dry-run", sch.File, err)
	}
	d.log.Info("schedule: sweep admitted", slog.String("schedule", sch.Name), slog.String("sweep_id", sw.ID),
		slog.Int("trials", sw.Trials), slog.Bool("existed", existed))
	return nil
}

// Schedule files are read as datasets are, and their errors never show
// what is in them. The leader (often root) reads a schedule's job or
// sweep file, and the base job a sweep file names, at each tick; the
// schedule's message is shown by GET /api/v1/schedules and the log. So
// the file is opened with pathpolicy.Roots.Open under the allowed roots
// of the schedule's team (or the deployment's), never lathed's own files
// (Config.DataDeny), never through a link that appears after the check,
// a regular file of at most the limit; and an error names the file (the
// config's path), the field and the rule, never a value read from it.

// fileError is a schedule file that could not be read: why says so in
// Lathe's own words (no path read from a file, no link's target).
type fileError struct {
	why string
	err error
}

func (e *fileError) Error() string { return e.why }
func (e *fileError) Unwrap() error { return e.err }

// readScheduleFile reads path, a schedule's file (or a scheduled sweep's
// base job file) of team, as a dataset is opened: under team's allowed
// roots (rootsFor; "/" when the deployment sets none), not one of
// lathed's own files (Config.DataDeny), with no link followed after the
// check, a regular file of at most limit bytes. Its error is a
// *fileError.
func (ad *admission) readScheduleFile(team, path string, limit int64) ([]byte, error) {
	roots, key := ad.rootsFor(team)
	if roots == nil {
		roots = pathpolicy.Roots{"/"}
	}
	f, err := roots.Open(path, ad.cfg.DataDeny)
	if err != nil {
		return nil, &fileError{why: openRefusal(err, roots, key), err: err}
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, &fileError{why: "not a regular file", err: err}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fileError{why: "cannot be read", err: err}
	}
	if int64(len(b)) > limit {
		return nil, &fileError{why: fmt.Sprintf("over %d bytes", limit)}
	}
	return b, nil
}

// openRefusal says why pathpolicy.Roots.Open refused a schedule file,
// naming the rule: never the link's target nor the path resolved.
func openRefusal(err error, roots pathpolicy.Roots, key string) string {
	var de *pathpolicy.DeniedError
	switch {
	case errors.Is(err, pathpolicy.ErrOutside):
		return "not under " + pathpolicy.Rule(roots, key)
	case errors.As(err, &de):
		return fmt.Sprintf("%v (%s)", pathpolicy.ErrDenied, de.Entry.Why)
	case errors.Is(err, pathpolicy.ErrDenied):
		return pathpolicy.ErrDenied.Error() + " (a hard link to one of them)"
	case errors.Is(err, pathpolicy.ErrSymlink):
		return pathpolicy.ErrSymlink.Error()
	case errors.Is(err, pathpolicy.ErrNotData):
		return "not a regular file"
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	return "cannot be opened"
}

// startError is a scheduled run that did not start: msg (scheduleMessage)
// is what its schedule's state and the log say; err, the cause, is kept
// for errors.Is and jobstore.Unreachable.
type startError struct {
	msg string
	err error
}

func (e *startError) Error() string { return e.msg }
func (e *startError) Unwrap() error { return e.err }

// startFailed is err of starting the run of what (the schedule's "job
// file PATH"), said without a value of the file: check names the CLI
// command that shows the details to whoever may read file ("" for none).
func startFailed(what, check, file string, err error) error {
	return &startError{msg: what + ": " + scheduleMessage(err, check, file), err: err}
}

// scheduleMessage says what err is, for a schedule's message: a file that
// could not be read (fileError) says why; a spec that is not valid, or
// not admissible here, names each bad field (checkedField) with Lathe's
// rule when it is one of admissible's (ruleMessage) and "invalid"
// otherwise, never the value; a refusal by routing says so. Any other
// error (the store's) is Lathe's own text.
func scheduleMessage(err error, check, file string) string {
	var (
		fe     *fileError
		ve     *jobspec.ValidationError
		ie     *plane.InvalidError
		re     *plane.RefusedError
		fields []jobspec.FieldError
	)
	hint := ""
	if check != "" {
		hint = fmt.Sprintf("; `%s %s` shows the details", check, file)
	}
	switch {
	case errors.As(err, &fe):
		return fe.why
	case errors.As(err, &re):
		n := fmt.Sprintf("%d reasons", len(re.Reasons))
		if len(re.Reasons) == 1 {
			n = "1 reason"
		}
		return fmt.Sprintf("refused: no backend may run %s (%s; `%s %s` says why)", re.What, n, check, file)
	case errors.As(err, &ve):
		fields = ve.Errors
	case errors.As(err, &ie):
		fields = ie.Fields
	case errors.Is(err, jobspec.ErrTooLarge):
		return "too large"
	default:
		return err.Error()
	}
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		if n, ok := strings.CutSuffix(strings.TrimPrefix(f.Message, "and "), " more problems"); ok && f.Field == "" && isDigits(n) {
			parts = append(parts, f.Message) // the parsers' cap
			continue
		}
		parts = append(parts, checkedField(f.Field)+": "+ruleMessage(f.Message))
	}
	return "invalid (values from the file are not shown" + hint + "): " + strings.Join(parts, "; ")
}

// checkedField is field (a spec's dotted path, "trials[3].lora.rank") when
// it reads as one, else "a field" (a key of the file that is not a name,
// or the document as a whole: "the file").
func checkedField(field string) string {
	if field == "" {
		return "the file"
	}
	if len(field) > 100 {
		return "a field"
	}
	for _, c := range field {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.-[]", c)
		if !ok {
			return "a field"
		}
	}
	return field
}

// ruleMessage is msg when it is one of admissible's (it names the rule
// and holds no value of the spec), else "invalid".
func ruleMessage(msg string) string {
	for _, p := range []string{msgNoTrainer, msgNotUnder, msgMultiNode, pathpolicy.ErrDenied.Error()} {
		if strings.HasPrefix(msg, p) {
			return msg
		}
	}
	if msg == "unknown field" || msg == "duplicate key" {
		return msg
	}
	return "invalid"
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
