package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/wire"
)

// topInterval is how often `lathe top` reads the overview again.
const topInterval = 2 * time.Second

// topWaitingRows is how many waiting jobs `lathe top` lists (the first in
// line); the rest are counted.
const topWaitingRows = 10

func (a *app) topCmd() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of queues, GPUs, running jobs and cost now (refreshes every 2 s; q quits)",
		Long: "lathe top reads GET /api/v1/overview every 2 s and redraws it in place: the queues (by state and\n" +
			"priority, the oldest wait, jobs burst to the cloud), the running jobs with progress bars, the GPUs\n" +
			"per node, the cloud's instances and $ per hour, and the first jobs in line. q, Esc or Ctrl-C quits.\n" +
			"When stdout is not a terminal, or with --once, it prints one snapshot and exits; -o json prints\n" +
			"the overview's JSON once.",
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c := a.client()
			if once || a.output == outJSON || !isTerminal(a.stdout) {
				ov, err := c.Overview(cmd.Context())
				if err != nil {
					return err
				}
				if a.output == outJSON {
					return writeJSON(a.stdout, ov)
				}
				_, err = io.WriteString(a.stdout, renderOverview(ov, a.now(), plainStyles()))
				return err
			}
			m := newTopModel(cmd.Context(), c.Overview, a.now, topInterval)
			p := tea.NewProgram(m, tea.WithContext(cmd.Context()), tea.WithOutput(a.stdout), tea.WithInput(os.Stdin), tea.WithAltScreen())
			_, err := p.Run()
			if errors.Is(err, tea.ErrProgramKilled) && cmd.Context().Err() != nil {
				return nil // interrupted: a quit
			}
			return err
		}),
	}
	cmd.Flags().BoolVar(&once, "once", false, "print one snapshot and exit (the default when stdout is not a terminal)")
	return cmd
}

// fetchOverview reads the overview (apiclient.Client.Overview).
type fetchOverview func(ctx context.Context) (*wire.Overview, error)

// topModel is the bubbletea model of `lathe top`: the last overview read
// (kept on screen while a later read fails, with the error shown), read
// again every interval.
type topModel struct {
	ctx      context.Context
	fetch    fetchOverview
	now      func() time.Time
	interval time.Duration
	styles   topStyles

	ov  *wire.Overview
	err error
	// width and height are the terminal's cells (0 until the first
	// tea.WindowSizeMsg): View fits its text into them.
	width, height int
}

// overviewMsg carries one read of the overview.
type overviewMsg struct {
	ov  *wire.Overview
	err error
	// width and height are the terminal's cells (0 until the first
	// tea.WindowSizeMsg): View fits its text into them.
	width, height int
}

// tickMsg says it is time to read the overview again.
type tickMsg struct{}

func newTopModel(ctx context.Context, fetch fetchOverview, now func() time.Time, interval time.Duration) topModel {
	return topModel{ctx: ctx, fetch: fetch, now: now, interval: interval, styles: ttyStyles()}
}

// read is the command reading the overview once.
func (m topModel) read() tea.Msg {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	ov, err := m.fetch(ctx)
	return overviewMsg{ov: ov, err: err}
}

// Init reads the overview at once.
func (m topModel) Init() tea.Cmd { return m.read }

// Update quits on q, Esc or Ctrl-C, keeps each overview read and schedules
// the next read interval after it.
func (m topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "esc", "ctrl+c":
			return m, tea.Quit
		}
	case overviewMsg:
		m.err = msg.err
		if msg.err == nil {
			m.ov = msg.ov
		}
		return m, tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{} })
	case tickMsg:
		return m, m.read
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	}
	return m, nil
}

// View draws the last overview, the last read's error, and the keys,
// fitted to the terminal (fitScreen) once its size is known.
func (m topModel) View() string {
	var b strings.Builder
	switch {
	case m.ov != nil:
		st := m.styles
		st.width = m.width
		b.WriteString(renderOverview(m.ov, m.now(), st))
	case m.err == nil:
		b.WriteString("reading the overview…\n")
	}
	var foot []string
	if m.err != nil {
		foot = append(foot, m.styles.err.Render("error: "+termSafe(m.err.Error())))
	}
	foot = append(foot, m.styles.dim.Render(fmt.Sprintf("refreshes every %s · q quits", m.interval)))
	return fitScreen(b.String(), foot, m.width, m.height, m.styles)
}

// keptLines is how many lines at the top of the view fitScreen never
// drops: the title, a blank line and the queue summary (QUEUES, the
// states, the priorities, the oldest wait), up to the second blank line.
func keptLines(lines []string) int {
	blanks := 0
	for i, l := range lines {
		if l == "" {
			if blanks++; blanks == 2 {
				return i
			}
		}
	}
	return len(lines)
}

// fitScreen fits body and the footer lines into width×height cells: each
// line cut at width (ANSI-aware), and, when the lines outnumber the rows,
// the body's last lines dropped for one line saying how many, so that the
// title, the queue summary (keptLines) and the footer stay on
// screen. bubbletea's own renderer keeps a view's last rows instead, which
// lost the title and the queues at 80×24. A zero width or height leaves
// that side as it is.
//
// The answer ends without a newline after its last line.
func fitScreen(body string, foot []string, width, height int, st topStyles) string {
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	if height > 0 && len(lines)+len(foot) > height {
		room := min(max(height-len(foot)-1, keptLines(lines)), len(lines))
		cut := len(lines) - room
		lines = append(lines[:room:room], st.dim.Render(fmt.Sprintf("… %d more lines (a taller terminal shows them)", cut)))
	}
	lines = append(lines, foot...)
	if height > 0 && len(lines) > height {
		lines = lines[:height]
	}
	if width > 0 {
		cut := lipgloss.NewStyle().MaxWidth(width)
		for i, l := range lines {
			if lipgloss.Width(l) > width {
				lines[i] = cut.Render(l)
			}
		}
	}
	// No newline after the last line: bubbletea counts the empty line
	// after one as a row of its own and would scroll the title away.
	return strings.Join(lines, "\n")
}

// topStyles are the styles of the view's parts: lipgloss styles on a
// terminal, none for plain output.
type topStyles struct {
	title, section, dim, err lipgloss.Style
	// width is the terminal's width in cells, 0 when unknown (plain
	// output): under topNarrow the tables drop their widest columns.
	width int
}

// topNarrow is the width under which the tables leave out the progress
// bar, the GPU model and the backend columns, so that an 80-column
// terminal shows each row's numbers.
const topNarrow = 120

// narrow reports whether the view is drawn for a terminal under topNarrow.
func (st topStyles) narrow() bool { return st.width > 0 && st.width < topNarrow }

func ttyStyles() topStyles {
	return topStyles{
		title:   lipgloss.NewStyle().Bold(true),
		section: lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("12")),
		dim:     lipgloss.NewStyle().Faint(true),
		err:     lipgloss.NewStyle().Foreground(lipgloss.Color("9")),
	}
}

func plainStyles() topStyles {
	s := lipgloss.NewStyle()
	return topStyles{title: s, section: s, dim: s, err: s}
}

// renderOverview is the text of one overview at now: every string that
// came from the server goes through termSafe.
func renderOverview(ov *wire.Overview, now time.Time, st topStyles) string {
	var b strings.Builder
	title := "lathe top · " + ov.At.UTC().Format("2006-01-02 15:04:05 UTC")
	if ov.Team != "" {
		title += " · team " + termSafe(ov.Team)
	}
	if ov.Truncated {
		title += " · truncated: more active jobs than one overview reads"
	}
	b.WriteString(st.title.Render(title) + "\n\n")
	renderQueues(&b, ov.Queues, st)
	renderRunning(&b, ov.Running, now, st)
	renderGPUs(&b, ov.Nodes, st)
	renderCloud(&b, ov.Cloud, st)
	renderWaiting(&b, ov.Waiting, max(ov.WaitingTotal, len(ov.Waiting)), now, st)
	return b.String()
}

func renderQueues(b *strings.Builder, q wire.OverviewQueues, st topStyles) {
	b.WriteString(st.section.Render("QUEUES") + "\n")
	var parts []string
	for _, s := range jobtype.States {
		if n, ok := q.ByState[s]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	parts = append([]string{fmt.Sprintf("pending %d", q.Pending)}, parts...)
	for _, l := range wrapJoin(parts, " · ", st.width-2) {
		b.WriteString("  " + l + "\n")
	}
	fmt.Fprintf(b, "  queued by priority: urgent %d · normal %d · batch %d\n",
		q.ByPriority["urgent"], q.ByPriority["normal"], q.ByPriority["batch"])
	oldest := "-"
	if q.OldestJob != "" {
		oldest = fmtAge(time.Duration(q.OldestWaitS*float64(time.Second))) + " (" + termSafe(q.OldestJob) + ")"
	}
	fmt.Fprintf(b, "  oldest wait %s · burst to the cloud %d\n\n", oldest, q.Burst)
}

// wrapJoin joins parts with sep into lines of at most width cells (one
// line when width is 0 or less), never splitting a part.
func wrapJoin(parts []string, sep string, width int) []string {
	var lines []string
	cur := ""
	for _, p := range parts {
		switch {
		case cur == "":
			cur = p
		case width > 0 && lipgloss.Width(cur+sep+p) > width:
			lines, cur = append(lines, cur), p
		default:
			cur += sep + p
		}
	}
	return append(lines, cur)
}

func renderRunning(b *strings.Builder, rs []wire.RunningJob, now time.Time, st topStyles) {
	b.WriteString(st.section.Render(fmt.Sprintf("RUNNING (%d)", len(rs))) + "\n")
	if len(rs) == 0 {
		b.WriteString("  none\n\n")
		return
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	if st.narrow() {
		fmt.Fprintln(tw, "  JOB\tNAME\tSTATE\tNODE\tGPUS\tSTEP\tLOSS\tCOST\tAGE")
	} else {
		fmt.Fprintln(tw, "  JOB\tNAME\tSTATE\tBACKEND\tNODE\tGPUS\tPROGRESS\tLOSS\tCOST\tAGE")
	}
	for _, r := range rs {
		p := jobtype.Progress{Step: r.Step, TotalSteps: r.TotalSteps, Loss: r.Loss}
		age := "-"
		if r.StartedAt != nil {
			age = fmtAge(now.Sub(*r.StartedAt))
		}
		if st.narrow() {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t$%.2f\t%s\n", termSafe(r.ID), termSafe(r.Name), termSafe(string(r.State)),
				orDash(termSafe(r.Node)), fmtGPUList(r.GPUs), fmtStep(p), fmtLoss(p), r.CostUSD, age)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s %s\t%s\t$%.2f\t%s\n", termSafe(r.ID), termSafe(r.Name), termSafe(string(r.State)),
			orDash(termSafe(r.Backend)), orDash(termSafe(r.Node)), fmtGPUList(r.GPUs), progressBar(r.Step, r.TotalSteps, 20), fmtStep(p),
			fmtLoss(p), r.CostUSD, age)
	}
	tw.Flush()
	b.WriteString("\n")
}

// progressBar is a bar of width cells, "[########------------]", filled
// by step/total; all dashes while the total is unknown.
func progressBar(step, total, width int) string {
	filled := 0
	if total > 0 {
		filled = min(width, max(0, step*width/total))
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", width-filled) + "]"
}

// fmtGPUList is "0,1", or "-" for none.
func fmtGPUList(gpus []int) string {
	if len(gpus) == 0 {
		return "-"
	}
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}

func renderGPUs(b *strings.Builder, nodes []wire.NodeGPUs, st topStyles) {
	b.WriteString(st.section.Render("GPUS") + "\n")
	if len(nodes) == 0 {
		b.WriteString("  no live node\n\n")
		return
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	if st.narrow() {
		fmt.Fprintln(tw, "  NODE\tGPU\tUTIL\tMEMORY\tHEALTH\tJOB")
	} else {
		fmt.Fprintln(tw, "  NODE\tGPU\tNAME\tUTIL\tMEMORY\tHEALTH\tJOB")
	}
	for _, n := range nodes {
		name := termSafe(n.Name)
		if n.Simulated {
			name += " (simulated)"
		}
		if len(n.GPUs) == 0 {
			fmt.Fprintf(tw, "  %s\t-\t-\t-\t-\t-\t-\n", name)
		}
		for _, g := range n.GPUs {
			health := "ok"
			if !g.Healthy {
				health = "unhealthy: " + termSafe(orDash(g.Unhealthy)) // unstyled: escapes would skew tabwriter's columns
			}
			job := termSafe(g.JobID)
			switch {
			case job == "" && g.Busy:
				job = "(another team's)"
			case job == "":
				job = "-"
			}
			if st.narrow() {
				fmt.Fprintf(tw, "  %s\t%d\t%d%%\t%d/%d MB\t%s\t%s\n", name, g.Index, g.UtilizationPct, g.MemoryUsedMB, g.MemoryTotalMB, health, job)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d%%\t%d/%d MB\t%s\t%s\n", name, g.Index, orDash(termSafe(g.Name)), g.UtilizationPct,
				g.MemoryUsedMB, g.MemoryTotalMB, health, job)
		}
	}
	tw.Flush()
	b.WriteString("\n")
}

func renderCloud(b *strings.Builder, c wire.OverviewCloud, st topStyles) {
	b.WriteString(st.section.Render(fmt.Sprintf("CLOUD ($%.2f/h now)", c.USDPerHour)) + "\n")
	if len(c.Backends) == 0 {
		b.WriteString("  no cloud backend\n\n")
		return
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  BACKEND\tINSTANCES\t$/H\tMONTH\tSPENT\tRESERVED\tBUDGET")
	for _, cb := range c.Backends {
		budget := "none"
		if cb.LimitUSD > 0 {
			budget = fmt.Sprintf("$%.2f (%.0f%% spent or reserved)", cb.LimitUSD, 100*(cb.SpentUSD+cb.ReservedUSD)/cb.LimitUSD)
		}
		fmt.Fprintf(tw, "  %s\t%d\t$%.2f\t%s\t$%.2f\t$%.2f\t%s\n", termSafe(cb.Name), cb.Instances, cb.USDPerHour,
			termSafe(cb.Month), cb.SpentUSD, cb.ReservedUSD, budget)
	}
	tw.Flush()
	b.WriteString("\n")
}

func renderWaiting(b *strings.Builder, ws []wire.WaitingJob, total int, now time.Time, st topStyles) {
	b.WriteString(st.section.Render(fmt.Sprintf("WAITING (%d)", total)) + "\n")
	if total == 0 {
		b.WriteString("  none\n")
		return
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	if st.narrow() {
		fmt.Fprintln(tw, "  #\tJOB\tNAME\tPRIO\tWAITED\tSTART\tREASON")
	} else {
		fmt.Fprintln(tw, "  #\tJOB\tNAME\tPRIORITY\tBACKEND\tWAITED\tEST. START\tREASON")
	}
	for _, w := range ws[:min(len(ws), topWaitingRows)] {
		pos, start, reason := "-", "-", "not placed by a round yet"
		if w.Wait != nil {
			pos, reason = strconv.Itoa(w.Wait.Position), termSafe(w.Wait.Reason)
			if w.Wait.EstimatedStart != nil {
				start = "in " + fmtAge(w.Wait.EstimatedStart.Sub(now))
			}
		}
		if st.narrow() {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", pos, termSafe(w.ID), termSafe(w.Name), termSafe(w.Priority),
				fmtAge(now.Sub(w.CreatedAt)), start, reason)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pos, termSafe(w.ID), termSafe(w.Name), termSafe(w.Priority),
			orDash(termSafe(w.Backend)), fmtAge(now.Sub(w.CreatedAt)), start, reason)
	}
	tw.Flush()
	if shown := min(len(ws), topWaitingRows); total > shown {
		fmt.Fprintf(b, "  … and %d more\n", total-shown)
	}
}
