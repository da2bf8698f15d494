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
}

// overviewMsg carries one read of the overview.
type overviewMsg struct {
	ov  *wire.Overview
	err error
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
	}
	return m, nil
}

// View draws the last overview, the last read's error, and the keys.
func (m topModel) View() string {
	var b strings.Builder
	switch {
	case m.ov != nil:
		b.WriteString(renderOverview(m.ov, m.now(), m.styles))
	case m.err == nil:
		b.WriteString("reading the overview…\n")
	}
	if m.err != nil {
		b.WriteString(m.styles.err.Render("error: "+termSafe(m.err.Error())) + "\n")
	}
	b.WriteString(m.styles.dim.Render(fmt.Sprintf("refreshes every %s · q quits", m.interval)) + "\n")
	return b.String()
}

// topStyles are the styles of the view's parts: lipgloss styles on a
// terminal, none for plain output.
type topStyles struct {
	title, section, dim, err lipgloss.Style
}

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
	fmt.Fprintf(b, "  pending %d · %s\n", q.Pending, strings.Join(parts, " · "))
	fmt.Fprintf(b, "  queued by priority: urgent %d · normal %d · batch %d\n",
		q.ByPriority["urgent"], q.ByPriority["normal"], q.ByPriority["batch"])
	oldest := "-"
	if q.OldestJob != "" {
		oldest = fmtAge(time.Duration(q.OldestWaitS*float64(time.Second))) + " (" + termSafe(q.OldestJob) + ")"
	}
	fmt.Fprintf(b, "  oldest wait %s · burst to the cloud %d\n\n", oldest, q.Burst)
}

func renderRunning(b *strings.Builder, rs []wire.RunningJob, now time.Time, st topStyles) {
	b.WriteString(st.section.Render(fmt.Sprintf("RUNNING (%d)", len(rs))) + "\n")
	if len(rs) == 0 {
		b.WriteString("  none\n\n")
		return
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  JOB\tNAME\tSTATE\tBACKEND\tNODE\tGPUS\tPROGRESS\tLOSS\tCOST\tAGE")
	for _, r := range rs {
		p := jobtype.Progress{Step: r.Step, TotalSteps: r.TotalSteps, Loss: r.Loss}
		age := "-"
		if r.StartedAt != nil {
			age = fmtAge(now.Sub(*r.StartedAt))
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
	fmt.Fprintln(tw, "  NODE\tGPU\tNAME\tUTIL\tMEMORY\tHEALTH\tJOB")
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
	fmt.Fprintln(tw, "  #\tJOB\tNAME\tPRIORITY\tBACKEND\tWAITED\tEST. START\tREASON")
	for _, w := range ws[:min(len(ws), topWaitingRows)] {
		pos, start, reason := "-", "-", "not placed by a round yet"
		if w.Wait != nil {
			pos, reason = strconv.Itoa(w.Wait.Position), termSafe(w.Wait.Reason)
			if w.Wait.EstimatedStart != nil {
				start = "in " + fmtAge(w.Wait.EstimatedStart.Sub(now))
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pos, termSafe(w.ID), termSafe(w.Name), termSafe(w.Priority),
			orDash(termSafe(w.Backend)), fmtAge(now.Sub(w.CreatedAt)), start, reason)
	}
	tw.Flush()
	if shown := min(len(ws), topWaitingRows); total > shown {
		fmt.Fprintf(b, "  … and %d more\n", total-shown)
	}
}
