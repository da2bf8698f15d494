//go:build linux

package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

const (
	// maxPollInterval caps the wait between checks that a killed group is gone.
	maxPollInterval = 50 * time.Millisecond
	// stuckWarnInterval is how often Run logs that a killed group lingers
	// (a process in uninterruptible sleep, e.g. a hung GPU driver call).
	stuckWarnInterval = 10 * time.Second
)

// Run starts the trainer cfg describes, reports its output to sink, and
// returns when the attempt is over.
//
// The trainer runs in its own process group, without a shell, with stdin
// from /dev/null and the environment described at Config.Env. Its parent-death
// signal is SIGKILL: if the thread that started it exits, the kernel kills the
// group leader (not the rest of the group). Run keeps its goroutine locked to
// that thread until it has reaped the leader, so the thread outlives the
// trainer while Run runs; if the whole caller process dies, the leader gets
// SIGKILL, and its children are left for the next worker to kill (see
// KillGroup).
//
// With Config.Cgroup set, the trainer also starts inside that new cgroup
// v2 (clone3 into it: there is no moment when it runs outside), where every
// process it starts stays, whatever it does to its process group or session.
//
// When ctx is done, Run sends SIGTERM to the group, then SIGKILL once
// Config.KillGrace has passed without the leader exiting. Once the leader has
// exited, for any reason, Run sends SIGKILL to the group and to the whole
// cgroup (cgroup.kill) and waits until no live process is left in either
// (cgroup.events says "populated 0"); it removes the cgroup, then reads what
// is left in the pipes (for at most Config.DrainTimeout) and returns. So when
// Run returns, the group and the cgroup are gone, processes that escaped the
// group included, and sink gets no more calls. If a process cannot die
// (uninterruptible sleep), Run waits for it and logs a warning every 10s.
//
// A nil sink discards the output; a nil Logger discards the runner's logs.
// Run never panics on bad input: an unusable Config yields StartFailed with
// an error wrapping ErrInvalidConfig.
func Run(ctx context.Context, cfg Config, sink Sink) Result {
	if sink == nil {
		sink = discardSink{}
	}
	cfg, err := cfg.normalise()
	if err != nil {
		return startFailed(err)
	}
	log := cfg.Logger.With(slog.String("argv0", cfg.Argv[0]))
	if ctx.Err() != nil {
		return doneBeforeStart(ctx, log)
	}
	path, err := resolve(cfg.Argv[0])
	if err != nil {
		log.Warn("trainer not started", slog.Any("error", err))
		return startFailed(err)
	}
	attr, cg, err := procAttr(cfg)
	if err != nil {
		log.Warn("trainer not started", slog.Any("error", err))
		return startFailed(err)
	}
	a := &attempt{cgroup: cg, cfg: cfg, log: log, sink: &serialSink{sink: sink}, watchDone: make(chan struct{})}
	if err := a.openPipes(); err != nil {
		dropCgroup(cfg.Cgroup, cg)
		return startFailed(err)
	}
	a.cmd = &exec.Cmd{
		Path:        path,
		Args:        cfg.Argv,
		Env:         environ(os.LookupEnv, cfg.PassEnv, cfg.Env),
		Dir:         cfg.Dir,
		Stdout:      a.outW,
		Stderr:      a.errW,
		SysProcAttr: attr,
	}
	return a.run(ctx)
}

// doneBeforeStart is the Result of a Run whose ctx was done before it
// started anything.
func doneBeforeStart(ctx context.Context, log *slog.Logger) Result {
	outcome, cause := ctxOutcome(ctx)
	log.Info("trainer not started: context already done", slog.String("outcome", outcome.String()), slog.Any("cause", cause))
	now := time.Now()
	return Result{Outcome: outcome, ExitCode: -1, Err: fmt.Errorf("trainer: not started: %w", cause), Started: now, Ended: now}
}

// procAttr is how the trainer's process is made: its own process group,
// SIGKILL at its parent's death, cfg.RunAs's credentials, and with
// cfg.Cgroup set, that cgroup, made here and returned open.
func procAttr(cfg Config) (*syscall.SysProcAttr, *os.File, error) {
	attr := &syscall.SysProcAttr{
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if c := cfg.RunAs; c != nil {
		attr.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
	}
	if cfg.Cgroup == "" {
		return attr, nil, nil
	}
	cg, err := makeCgroup(cfg.Cgroup)
	if err != nil {
		return nil, nil, err
	}
	// clone3 puts the child in the cgroup as it is made: it never runs a
	// single instruction outside it.
	attr.UseCgroupFD, attr.CgroupFD = true, int(cg.Fd())
	return attr, cg, nil
}

// openPipes opens the pipes for the trainer's stdout and stderr; on an
// error none is left open.
func (a *attempt) openPipes() error {
	var err error
	if a.outR, a.outW, err = os.Pipe(); err != nil {
		return fmt.Errorf("trainer: stdout pipe: %w", err)
	}
	if a.errR, a.errW, err = os.Pipe(); err != nil {
		a.outR.Close()
		a.outW.Close()
		return fmt.Errorf("trainer: stderr pipe: %w", err)
	}
	return nil
}

// attempt is the state of one Run.
type attempt struct {
	cfg  Config
	log  *slog.Logger
	sink *serialSink
	cmd  *exec.Cmd

	outR, outW *os.File
	errR, errW *os.File
	readers    sync.WaitGroup
	// cgroup is the attempt's cgroup directory, open, when Config.Cgroup
	// is set; nil otherwise.
	cgroup *os.File

	pid int
	// signalled is set by watch before it first signals the group; read
	// only after watchDone is closed.
	signalled bool
	watchDone chan struct{}
}

// run starts the process and sees it through to the end.
func (a *attempt) run(ctx context.Context) Result {
	// The parent-death signal fires when the forking thread exits, not the
	// process. Keep this goroutine on that thread, which no other goroutine
	// can then use (and end with LockOSThread held), until the leader is
	// reaped.
	runtime.LockOSThread()
	err := a.cmd.Start()
	// The child holds its own copies of the write ends; ours must be closed
	// for the readers to see EOF.
	a.outW.Close()
	a.errW.Close()
	if err != nil {
		runtime.UnlockOSThread()
		return a.notStarted(err)
	}
	started := time.Now()
	a.pid = a.cmd.Process.Pid
	a.log = a.log.With(slog.Int("pid", a.pid))
	a.log.Info("trainer started")
	a.sink.started(a.pid)
	if wd := a.cfg.Watchdog; wd != nil {
		if _, err := wd.start(a.pid, a.cfg.KillGrace, a.cgroup); err != nil {
			a.log.Warn("trainer runs without a watchdog", slog.Any("error", err))
		}
		defer wd.stop()
	}

	a.readers.Add(2)
	go a.read(StreamStdout, a.outR)
	go a.read(StreamStderr, a.errR)
	waitErr := a.waitEnd(ctx)
	a.closeCgroup()

	a.drain()
	res := a.result(ctx, waitErr)
	res.Started, res.Ended = started, time.Now()
	a.logEnd(res)
	return res
}

// notStarted cleans up after cmd.Start failed with err: the read ends of
// the pipes and the cgroup.
func (a *attempt) notStarted(err error) Result {
	a.outR.Close()
	a.errR.Close()
	dropCgroup(a.cfg.Cgroup, a.cgroup)
	err = fmt.Errorf("trainer: start %s: %w", a.cfg.Argv[0], err)
	a.log.Warn("trainer not started", slog.Any("error", err))
	return startFailed(err)
}

// waitEnd waits for the started leader to exit, stopping it when ctx is
// done (watch), then kills what is left of its group and cgroup, reaps it
// and unlocks the OS thread run locked. It returns cmd.Wait's error.
func (a *attempt) waitEnd(ctx context.Context) error {
	exited := make(chan struct{})
	go a.watch(ctx, exited)

	// Wait for the leader to exit without reaping it: as a zombie it keeps
	// the group id reserved, so signalling the group cannot hit a stranger
	// that reused the id.
	pinnedErr := waitExited(a.pid)
	close(exited)
	<-a.watchDone
	if pinnedErr == nil {
		a.killGroupAndWait()
	}
	waitErr := a.cmd.Wait()
	runtime.UnlockOSThread()
	if pinnedErr != nil {
		// Not expected (something else reaped our child?); fall back to
		// killing the group after the reap.
		a.log.Warn("wait without reaping failed; killing the group after the reap", slog.Any("error", pinnedErr))
		a.killGroupAndWait()
	}
	return waitErr
}

// closeCgroup removes the trainer's cgroup once everything in it is dead
// (killGroupAndWait waited for it) and the leader is reaped.
func (a *attempt) closeCgroup() {
	if a.cgroup == nil {
		return
	}
	a.cgroup.Close()
	if err := removeCgroup(a.cfg.Cgroup); err != nil {
		a.log.Warn("trainer cgroup not removed", slog.String("cgroup", a.cfg.Cgroup), slog.Any("error", err))
	}
}

// logEnd logs how the trainer ended.
func (a *attempt) logEnd(res Result) {
	attrs := []any{
		slog.String("outcome", res.Outcome.String()),
		slog.Int("exit_code", res.ExitCode),
		slog.Duration("duration", res.Ended.Sub(res.Started)),
	}
	if res.Signal != "" {
		attrs = append(attrs, slog.String("signal", res.Signal))
	}
	if res.Err != nil {
		attrs = append(attrs, slog.Any("error", res.Err))
	}
	a.log.Info("trainer ended", attrs...)
}

// watch stops the trainer when ctx is done: SIGTERM to the group, then
// SIGKILL after the grace unless the leader exited first. It returns when
// exited is closed (the leader has exited) or after the SIGKILL.
func (a *attempt) watch(ctx context.Context, exited <-chan struct{}) {
	defer close(a.watchDone)
	select {
	case <-exited:
		return
	case <-ctx.Done():
	}
	if processExited(a.pid) {
		// It ended by itself before we signalled it; its exit status
		// decides the outcome.
		return
	}
	a.signalled = true
	a.log.Info("stopping trainer: SIGTERM to its process group",
		slog.Any("cause", context.Cause(ctx)), slog.Duration("kill_grace", a.cfg.KillGrace))
	if err := KillGroup(a.pid, syscall.SIGTERM); err != nil {
		a.log.Warn("SIGTERM failed", slog.Any("error", err))
	}
	t := time.NewTimer(a.cfg.KillGrace)
	defer t.Stop()
	select {
	case <-exited:
		return
	case <-t.C:
	}
	a.log.Warn("trainer still running after the grace: SIGKILL to its process group", slog.Duration("kill_grace", a.cfg.KillGrace))
	if err := KillGroup(a.pid, syscall.SIGKILL); err != nil {
		a.log.Warn("SIGKILL failed", slog.Any("error", err))
	}
}

// killGroupAndWait sends SIGKILL to what is left of the group and of the
// attempt's cgroup (processes that left the group included), again while
// any of it lives, and returns once no live process is left in either.
func (a *attempt) killGroupAndWait() {
	delay := time.Millisecond
	lastWarn := time.Now()
	warned := false
	for {
		if err := KillGroup(a.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			a.log.Warn("SIGKILL to the rest of the group failed", slog.Any("error", err))
		}
		populated := false
		if a.cgroup != nil {
			if err := killCgroupOnce(a.cfg.Cgroup); err != nil && !warned {
				a.log.Warn("killing the trainer's cgroup failed", slog.String("cgroup", a.cfg.Cgroup), slog.Any("error", err))
				warned = true
			}
			var err error
			if populated, err = CgroupPopulated(a.cfg.Cgroup); err != nil && !warned {
				a.log.Warn("reading the trainer's cgroup failed", slog.String("cgroup", a.cfg.Cgroup), slog.Any("error", err))
				warned = true
			}
		}
		if !populated && !GroupAlive(a.pid) {
			return
		}
		if time.Since(lastWarn) >= stuckWarnInterval {
			a.log.Warn("trainer's process group or cgroup still has live processes after SIGKILL; waiting",
				slog.String("cgroup", a.cfg.Cgroup))
			lastWarn = time.Now()
		}
		time.Sleep(delay)
		delay = min(2*delay, maxPollInterval)
	}
}

// read turns one pipe into sink calls until EOF or the drain deadline.
func (a *attempt) read(stream string, r *os.File) {
	defer a.readers.Done()
	truncated := 0
	err := readLines(r, a.cfg.MaxLineBytes, func(line string, dropped int) {
		if dropped > 0 {
			truncated++
			if truncated == 1 {
				a.log.Warn("trainer output line truncated", slog.String("stream", stream),
					slog.Int("max_line_bytes", a.cfg.MaxLineBytes), slog.Int("dropped_bytes", dropped))
			}
		}
		if stream == StreamStdout {
			if ev, bad, ok := parseEvent(line); ok {
				if len(bad) > 0 {
					a.log.Warn("trainer event has fields of the wrong type", slog.String("event", ev.Kind), slog.Any("fields", bad))
				}
				a.sink.event(ev)
				return
			}
		}
		a.sink.log(stream, line)
	})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		a.log.Warn("stopped reading trainer output: a process outside its group still holds the pipe",
			slog.String("stream", stream), slog.Duration("drain_timeout", a.cfg.DrainTimeout))
	case err != nil:
		a.log.Warn("reading trainer output failed", slog.String("stream", stream), slog.Any("error", err))
	}
	if truncated > 1 {
		a.log.Warn("trainer output lines truncated", slog.String("stream", stream), slog.Int("lines", truncated))
	}
}

// drain lets the readers finish what the group wrote, bounded by
// DrainTimeout in case a process that left the group holds a pipe open.
func (a *attempt) drain() {
	deadline := time.Now().Add(a.cfg.DrainTimeout)
	for _, r := range []*os.File{a.outR, a.errR} {
		if err := r.SetReadDeadline(deadline); err != nil {
			a.log.Warn("set pipe deadline", slog.Any("error", err))
		}
	}
	a.readers.Wait()
	a.outR.Close()
	a.errR.Close()
}

// result maps the exit status and whether Run signalled the trainer to a
// Result without times.
func (a *attempt) result(ctx context.Context, waitErr error) Result {
	res := Result{PID: a.pid, ExitCode: -1}
	st := a.cmd.ProcessState
	if st == nil {
		res.Outcome = Failed
		res.Err = fmt.Errorf("trainer: wait for trainer %d: %w", a.pid, waitErr)
		return res
	}
	res.ExitCode = st.ExitCode()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = signalName(ws.Signal())
	}
	switch {
	case a.signalled:
		var cause error
		res.Outcome, cause = ctxOutcome(ctx)
		res.Err = fmt.Errorf("trainer: trainer stopped (%s): %w", st, cause)
	default:
		switch res.Outcome = ExitOutcome(res.ExitCode); res.Outcome {
		case Permanent:
			res.Err = fmt.Errorf("trainer: trainer reported a permanent failure: %w", waitErr)
		case Failed:
			res.Err = fmt.Errorf("trainer: trainer failed: %w", waitErr)
		}
	}
	return res
}

// ctxOutcome maps a done context to Cancelled or TimedOut, with the cause.
func ctxOutcome(ctx context.Context) (Outcome, error) {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, ErrTimeout):
		return TimedOut, cause
	case errors.Is(cause, ErrCancelled):
		return Cancelled, cause
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return TimedOut, cause
	default:
		return Cancelled, cause
	}
}

// resolve finds the program to run: an absolute path as is, anything else
// through exec.LookPath, made absolute so that Dir does not change its meaning.
func resolve(argv0 string) (string, error) {
	if filepath.IsAbs(argv0) {
		return argv0, nil
	}
	p, err := exec.LookPath(argv0)
	if err != nil {
		return "", fmt.Errorf("trainer: resolve %q: %w", argv0, err)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("trainer: resolve %q: %w", argv0, err)
	}
	return abs, nil
}

// startFailed is the Result of an attempt that never ran.
func startFailed(err error) Result {
	now := time.Now()
	return Result{Outcome: StartFailed, ExitCode: -1, Err: err, Started: now, Ended: now}
}

// serialSink makes sink calls one at a time.
type serialSink struct {
	mu   sync.Mutex
	sink Sink
}

func (s *serialSink) started(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sink.Started(pid)
}

func (s *serialSink) event(ev TrainerEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sink.Event(ev)
}

func (s *serialSink) log(stream, line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sink.Log(stream, line)
}

// makeCgroup creates the attempt's cgroup directory, which must not exist,
// and opens it.
func makeCgroup(dir string) (*os.File, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("trainer: cgroup %s already exists (another attempt's, or a leftover the worker did not clean up)", dir)
		}
		return nil, fmt.Errorf("trainer: make cgroup: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		_ = syscall.Rmdir(dir)
		return nil, fmt.Errorf("trainer: open cgroup: %w", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Fstatfs(int(f.Fd()), &st); err != nil || st.Type != cgroup2Magic {
		f.Close()
		_ = syscall.Rmdir(dir)
		return nil, fmt.Errorf("trainer: cgroup %s: %w: not in a cgroup v2 file system", dir, ErrNoCgroup)
	}
	return f, nil
}

// dropCgroup closes and removes the cgroup of an attempt that did not
// start (it holds no process).
func dropCgroup(dir string, f *os.File) {
	if f == nil {
		return
	}
	f.Close()
	_ = removeCgroup(dir)
}
