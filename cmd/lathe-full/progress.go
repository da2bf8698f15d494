package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

const (
	barWidth = 20
	// plainEvery is how often, at most, a non-terminal writer gets a
	// progress line between 10% marks.
	plainEvery = 5 * time.Second
)

// progressPrinter shows a job's events while submit --wait follows it: on a
// terminal, one progress bar line rewritten in place plus a line per state
// change; elsewhere, plain lines only (state changes, and progress every
// 10% or every plainEvery).
type progressPrinter struct {
	w   io.Writer
	tty bool
	now func() time.Time

	barShown  bool // a bar line without its newline is on screen
	lastTenth int  // the last 10% mark printed (plain mode)
	lastPrint time.Time
	lastLine  string // the last progress line printed (plain mode)
	lastBar   string // the summary of the bar last drawn (terminal)
	// ended: the trainer's done event came; the summary shows its final
	// metrics and no ETA.
	ended bool

	// Rate estimate for the ETA: the first progress sample of the current
	// attempt, by the event's own time.
	attempt     int
	firstStep   int
	firstTime   time.Time
	lastStep    int
	lastTime    time.Time
	lastTotal   int
	lastLoss    float64
	hasProgress bool
	evalLoss    float64
	hasEvalLoss bool
}

func newProgressPrinter(w io.Writer, tty bool, now func() time.Time) *progressPrinter {
	return &progressPrinter{w: w, tty: tty, now: now, lastTenth: -1}
}

// linef prints a whole line, clearing a bar first and redrawing it after.
func (p *progressPrinter) linef(format string, args ...any) {
	if p.tty && p.barShown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintln(p.w, termSafe(fmt.Sprintf(format, args...)))
	if p.tty && p.barShown {
		p.drawBar()
	}
}

// event shows ev and returns the job's new state when ev is a state change.
func (p *progressPrinter) event(ev jobtype.Event) jobtype.State {
	switch ev.Type {
	case jobtype.EventState:
		var sc jobtype.StateChange
		if json.Unmarshal(ev.Data, &sc) != nil || sc.To == "" {
			return ""
		}
		if sc.To.Terminal() {
			p.finish() // keep the last bar on screen; draw no new one
		}
		p.linef("%s", describeState(sc))
		return sc.To
	case jobtype.EventProgress:
		var pr jobtype.Progress
		if json.Unmarshal(ev.Data, &pr) != nil {
			return ""
		}
		p.progress(ev, pr)
	case jobtype.EventEval:
		var e struct {
			EvalLoss *float64 `json:"eval_loss"`
		}
		if json.Unmarshal(ev.Data, &e) == nil && e.EvalLoss != nil {
			p.evalLoss, p.hasEvalLoss = *e.EvalLoss, true
		}
	case jobtype.EventDone:
		var d struct {
			Metrics map[string]float64 `json:"metrics"`
		}
		if json.Unmarshal(ev.Data, &d) == nil {
			p.final(d.Metrics)
		}
	}
	return ""
}

// final shows the trainer's final metrics (a done event's, or the ended
// job's record's): the last progress line or bar then says the final eval
// loss, not the last periodic eval, which may be older. It prints only
// what changes the line last shown.
func (p *progressPrinter) final(metrics map[string]float64) {
	p.ended = true
	if v, ok := metrics["eval_loss"]; ok {
		p.evalLoss, p.hasEvalLoss = v, true
	}
	if !p.hasProgress && !p.hasEvalLoss {
		return
	}
	if p.tty {
		if p.summary() != p.lastBar {
			p.drawBar()
		}
		return
	}
	p.printLine()
}

// end closes the progress output of a job that ended: its last line shows
// the record's final metrics when the stream did not bring the done event
// (final), and a bar line is ended (finish). j may be nil (it could not be
// read).
func (p *progressPrinter) end(j *jobtype.Job) {
	if j != nil {
		p.final(j.Metrics)
	}
	p.finish()
}

// printLine prints the summary as a plain progress line, unless it is the
// line printed last.
func (p *progressPrinter) printLine() {
	line := "progress: " + p.summary()
	if line == p.lastLine {
		return
	}
	p.lastLine = line
	fmt.Fprintln(p.w, line)
}

func (p *progressPrinter) progress(ev jobtype.Event, pr jobtype.Progress) {
	t := ev.Time
	if t.IsZero() {
		t = p.now()
	}
	if ev.Attempt != p.attempt || pr.Step < p.lastStep || p.firstTime.IsZero() {
		p.attempt, p.firstStep, p.firstTime = ev.Attempt, pr.Step, t
	}
	p.lastStep, p.lastTime, p.lastTotal, p.lastLoss, p.hasProgress = pr.Step, t, pr.TotalSteps, pr.Loss, true
	p.ended = false // a new run after a paused one (an ASHA rung)
	if p.tty {
		p.drawBar()
		return
	}
	now := p.now()
	tenth := -1
	if pr.TotalSteps > 0 {
		tenth = min(pr.Step*10/pr.TotalSteps, 10)
	}
	if tenth > p.lastTenth || now.Sub(p.lastPrint) >= plainEvery {
		if tenth > p.lastTenth {
			p.lastTenth = tenth
		}
		p.lastPrint = now
		p.printLine()
	}
}

// eta estimates the time left from the rate between the attempt's first
// and latest progress samples, timed by the events' own times (so the
// scheduler's clock, not this machine's, and replayed history counts); ok
// is false when there is not enough to go on.
func (p *progressPrinter) eta() (time.Duration, bool) {
	done := p.lastStep - p.firstStep
	if done <= 0 || p.lastTotal <= p.lastStep || !p.lastTime.After(p.firstTime) {
		return 0, false
	}
	perStep := p.lastTime.Sub(p.firstTime) / time.Duration(done)
	return (perStep * time.Duration(p.lastTotal-p.lastStep)).Round(time.Second), true
}

// summary is "step 40/120 loss 1.93 eval 1.88 eta 12s"; once the trainer
// has ended, "step 120/120 loss 1.71 eval 1.69" with the final eval loss
// (only "eval 1.69" when no progress came).
func (p *progressPrinter) summary() string {
	var parts []string
	if p.hasProgress || !p.ended {
		step := fmt.Sprintf("step %d", p.lastStep)
		if p.lastTotal > 0 {
			step = fmt.Sprintf("step %d/%d", p.lastStep, p.lastTotal)
		}
		parts = append(parts, step, "loss "+fmtFloat(p.lastLoss))
	}
	if p.hasEvalLoss {
		parts = append(parts, "eval "+fmtFloat(p.evalLoss))
	}
	if d, ok := p.eta(); ok && !p.ended {
		parts = append(parts, fmt.Sprintf("eta %s", d))
	}
	return strings.Join(parts, " ")
}

// drawBar rewrites the bar line: "\r[#####.....] step 40/120 loss 1.93 eta 12s".
func (p *progressPrinter) drawBar() {
	filled := 0
	if p.lastTotal > 0 {
		filled = min(p.lastStep*barWidth/p.lastTotal, barWidth)
	}
	bar := strings.Repeat("#", filled) + strings.Repeat(".", barWidth-filled)
	p.lastBar = p.summary()
	fmt.Fprintf(p.w, "\r[%s] %s\x1b[K", bar, p.lastBar)
	p.barShown = true
}

// finish ends a bar line on screen with a newline.
func (p *progressPrinter) finish() {
	if p.tty && p.barShown {
		fmt.Fprintln(p.w)
		p.barShown = false
	}
}

// describeState is "state: queued -> running (node host1)".
func describeState(sc jobtype.StateChange) string {
	var b strings.Builder
	b.WriteString("state: ")
	if sc.From != "" {
		fmt.Fprintf(&b, "%s -> ", sc.From)
	}
	b.WriteString(string(sc.To))
	var extra []string
	if sc.Node != "" {
		extra = append(extra, "node "+sc.Node)
	}
	if sc.Reason != "" {
		extra = append(extra, "reason "+sc.Reason)
	}
	if sc.Error != "" {
		extra = append(extra, sc.Error)
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(extra, ", "))
	}
	return b.String()
}
