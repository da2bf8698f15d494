package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

// fmtFloat prints a metric with four significant digits ("1.93", "0.0123").
func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// fmtStep is "40/120", "40" without a total, or "-" before the first step.
func fmtStep(p jobtype.Progress) string {
	switch {
	case p.TotalSteps > 0:
		return fmt.Sprintf("%d/%d", p.Step, p.TotalSteps)
	case p.Step > 0:
		return strconv.Itoa(p.Step)
	default:
		return "-"
	}
}

// fmtLoss is the loss, or "-" before the first progress line.
func fmtLoss(p jobtype.Progress) string {
	if p.Step == 0 && p.Loss == 0 {
		return "-"
	}
	return fmtFloat(p.Loss)
}

// fmtAge is a coarse age: "45s", "12m", "5h", "3d".
func fmtAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printJob writes the status table of one job; now places a queued job's
// estimated start ("in 12m").
func printJob(w io.Writer, j *jobtype.Job, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	evalLoss := "-"
	if v, ok := j.Metrics["eval_loss"]; ok {
		evalLoss = fmtFloat(v)
	}
	rows := [][2]string{
		{"ID", j.ID},
		{"Name", j.Name},
		{"State", stateCell(j)},
	}
	rows = append(rows, trialRows(j.Trial)...)
	rows = append(rows, waitRows(j.Wait, now)...)
	rows = append(rows, placementRows(j)...)
	rows = append(rows, [][2]string{
		{"Progress", fmtStep(j.Progress)},
		{"Loss", fmtLoss(j.Progress)},
		{"Eval loss", evalLoss},
		{"Error", orDash(j.Error)},
	}...)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], termSafe(r[1]))
	}
	if len(j.Artifacts) == 0 {
		fmt.Fprintf(tw, "Artifacts:\t-\n")
	}
	for i, a := range j.Artifacts {
		label := ""
		if i == 0 {
			label = "Artifacts:"
		}
		sum := a.SHA256
		if len(sum) > 12 {
			sum = sum[:12]
		}
		fmt.Fprintf(tw, "%s\t%s\t%d bytes\tsha256 %s\n", label, a.Path, a.Bytes, orDash(sum))
	}
	return tw.Flush()
}

// trialRows are a sweep trial's sweep, index, parameters, ASHA rung and
// why it waits for its sweep (none for a plain job).
func trialRows(t *jobtype.TrialInfo) [][2]string {
	if t == nil {
		return nil
	}
	rows := [][2]string{
		{"Sweep", fmt.Sprintf("%s, trial %d (rung %d)", t.SweepID, t.Index, t.Rung)},
		{"Params", fmtParams(t.Params)},
	}
	if t.Gate != "" {
		rows = append(rows, [2]string{"Waits for", "the sweep: " + t.Gate})
	}
	if t.StopRequested != "" {
		rows = append(rows, [2]string{"Stop asked", t.StopRequested})
	}
	return rows
}

// stateCell is a job's state with why, and a cancel or preemption on its
// way: "running, cancel requested".
func stateCell(j *jobtype.Job) string {
	state := string(j.State)
	if j.Reason != "" {
		state += " (" + j.Reason + ")"
	}
	if j.CancelRequested && !j.State.Terminal() {
		state += ", cancel requested"
	}
	if j.PreemptRequested != "" && !j.State.Terminal() {
		state += ", being preempted for " + j.PreemptRequested
	}
	return state
}

// placementRows are where a job runs and what it costs: attempt, node,
// GPUs, and, when set, CUDA_VISIBLE_DEVICES, route, cloud instance, cost
// and preemptions.
func placementRows(j *jobtype.Job) [][2]string {
	node := j.Node
	if j.Backend != "" && node != "" {
		node += " (" + j.Backend + ")"
	} else if node == "" {
		node = j.Backend
	}
	gpus := make([]string, len(j.GPUs))
	for i, g := range j.GPUs {
		gpus[i] = strconv.Itoa(g)
	}
	gpuCell := orDash(strings.Join(gpus, ","))
	if j.SimulatedGPUs {
		gpuCell += " (simulated GPUs)"
	}
	rows := [][2]string{
		{"Attempt", strconv.Itoa(j.Attempt)},
		{"Node", orDash(node)},
		{"GPUs", gpuCell},
	}
	if j.CUDAVisibleDevices != "" {
		rows = append(rows, [2]string{"CUDA_VISIBLE_DEVICES", j.CUDAVisibleDevices})
	}
	if g := j.Gang; g != nil && g.Attempt == j.Attempt {
		rows = append(rows, [2]string{"Ranks", gangCell(g)})
	}
	if j.Route != nil {
		rows = append(rows, [2]string{"Route", j.Route.Backend + " (site " + j.Route.Site + ")"})
	}
	if in := j.Instance; in != nil {
		cell := fmt.Sprintf("%s %s %s in %s, attempt %d, $%.4f/h", in.ID, in.Type, in.Market, orDash(in.Subnet), in.Attempt, in.USDPerHour)
		if in.State != "" {
			cell += ", " + in.State
		}
		rows = append(rows, [2]string{"Instance", cell})
	}
	switch cost := max(j.CostUSD, j.CostNowUSD); {
	case cost > 0 && !j.State.Terminal():
		// A job that runs accrues: what it has cost by the answer's time.
		rows = append(rows, [2]string{"Cost", fmt.Sprintf("$%.4f so far", cost)})
	case cost > 0:
		rows = append(rows, [2]string{"Cost", fmt.Sprintf("$%.4f", cost)})
	}
	if j.Preemptions > 0 {
		rows = append(rows, [2]string{"Preempted", plural(j.Preemptions, "time")})
	}
	return rows
}

// gangCell is a gang attempt's ranks, "0 node-a [0,1], 1 node-b [0,1];
// rendezvous 10.0.0.1:29500" (no rendezvous before rank 0 claimed).
func gangCell(g *jobtype.Gang) string {
	parts := make([]string, len(g.Ranks))
	for r, m := range g.Ranks {
		gpus := make([]string, len(m.GPUs))
		for i, x := range m.GPUs {
			gpus[i] = strconv.Itoa(x)
		}
		parts[r] = fmt.Sprintf("%d %s [%s]", r, m.Node, strings.Join(gpus, ","))
	}
	cell := strings.Join(parts, ", ")
	if g.Port > 0 {
		cell += fmt.Sprintf("; rendezvous %s:%d", g.Addr, g.Port)
	}
	return cell
}

// waitRows are a queued job's place in line: "Position: 3 in line",
// "Estimated start: 2026-12-02 15:04 (in 12m)" (or "unknown") and
// "Waiting: <reason>"; none without a wait.
func waitRows(wi *jobtype.WaitInfo, now time.Time) [][2]string {
	if wi == nil {
		return nil
	}
	start := "unknown"
	if wi.EstimatedStart != nil {
		t := *wi.EstimatedStart
		start = t.In(now.Location()).Format("2006-01-02 15:04")
		switch d := t.Sub(now); {
		case d >= time.Minute:
			start += " (in " + fmtAge(d) + ")"
		case d > -time.Minute:
			start += " (now)"
		default:
			start += " (" + fmtAge(-d) + " overdue)"
		}
	}
	reason := wi.Reason
	switch {
	case reason == "":
		reason = orDash(wi.Code)
	case wi.Code != "":
		reason += " (" + wi.Code + ")"
	}
	return [][2]string{
		{"Position", strconv.Itoa(wi.Position) + " in line"},
		{"Estimated start", start},
		{"Waiting", reason},
	}
}

// plural is "1 time", "3 times".
func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}
