package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lathe-ml/lathe/internal/jobtype"
)

func (a *app) logsCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a job's log lines and events (-f: follow until it ends)",
		Long: `Print a job's events: log lines as the trainer wrote them, and other events
on one line each with a [type] prefix. -f follows until the job ends.
With -o json each event is printed as one JSON object per line.`,
		Args: exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c := a.client()
			show := func(ev jobtype.Event) error {
				if a.output == outJSON {
					b, err := json.Marshal(ev)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(a.stdout, "%s\n", b)
					return err
				}
				return writeEvent(a.stdout, ev)
			}
			if follow {
				return c.Follow(cmd.Context(), args[0], "", show)
			}
			events, err := c.Events(cmd.Context(), args[0], "")
			if err != nil {
				return err
			}
			for _, ev := range events {
				if err := show(ev); err != nil {
					return err
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow new events until the job ends")
	return cmd
}

// writeEvent prints one event for humans: a log event as its line, others as
// "[progress] step 10/200 loss 2.31" and the like.
// Trainer text is shown through termSafe: it cannot drive the terminal.
func writeEvent(w io.Writer, ev jobtype.Event) error {
	_, err := fmt.Fprintln(w, termSafe(formatEvent(ev)))
	return err
}

// formatEvent is one line for ev: the line of a log event, a [type] prefix
// and the few fields that matter for the other types it knows, and the
// compacted JSON data for the rest (or for data that does not decode).
func formatEvent(ev jobtype.Event) string {
	var s string
	ok := false
	switch ev.Type {
	case jobtype.EventLog:
		s, ok = formatLogLine(ev.Data)
	case jobtype.EventState:
		s, ok = formatStateChange(ev.Data)
	case jobtype.EventProgress:
		s, ok = formatProgress(ev.Data)
	case jobtype.EventEval:
		s, ok = formatEval(ev.Data)
	case jobtype.EventCheckpoint:
		s, ok = formatCheckpoint(ev.Data)
	case jobtype.EventArtifact:
		s, ok = formatArtifact(ev.Data)
	case jobtype.EventDone:
		s, ok = formatDone(ev.Data)
	}
	if ok {
		return s
	}
	var compact bytes.Buffer
	if json.Compact(&compact, ev.Data) != nil {
		compact.Reset()
		compact.Write(ev.Data)
	}
	return fmt.Sprintf("[%s] %s", ev.Type, compact.String())
}

// The format* functions below each turn the data of one event type into its
// line; false when the data does not decode.

func formatLogLine(data json.RawMessage) (string, bool) {
	var l jobtype.LogLine
	if json.Unmarshal(data, &l) != nil {
		return "", false
	}
	return l.Line, true
}

func formatStateChange(data json.RawMessage) (string, bool) {
	var sc jobtype.StateChange
	if json.Unmarshal(data, &sc) != nil || sc.To == "" {
		return "", false
	}
	return "[state] " + strings.TrimPrefix(describeState(sc), "state: "), true
}

func formatProgress(data json.RawMessage) (string, bool) {
	var p jobtype.Progress
	if json.Unmarshal(data, &p) != nil {
		return "", false
	}
	s := fmt.Sprintf("[progress] step %s loss %s", fmtStep(p), fmtFloat(p.Loss))
	if p.LearningRate != 0 {
		s += " lr " + fmtFloat(p.LearningRate)
	}
	return s, true
}

func formatEval(data json.RawMessage) (string, bool) {
	var e struct {
		Step     int     `json:"step"`
		EvalLoss float64 `json:"eval_loss"`
	}
	if json.Unmarshal(data, &e) != nil {
		return "", false
	}
	return fmt.Sprintf("[eval] step %d eval_loss %s", e.Step, fmtFloat(e.EvalLoss)), true
}

func formatCheckpoint(data json.RawMessage) (string, bool) {
	var c struct {
		Step int    `json:"step"`
		Path string `json:"path"`
	}
	if json.Unmarshal(data, &c) != nil {
		return "", false
	}
	return fmt.Sprintf("[checkpoint] step %d %s", c.Step, c.Path), true
}

func formatArtifact(data json.RawMessage) (string, bool) {
	var a jobtype.Artifact
	if json.Unmarshal(data, &a) != nil {
		return "", false
	}
	return fmt.Sprintf("[artifact] %s %d bytes", a.Path, a.Bytes), true
}

// formatDone lists the final metrics, sorted by name.
func formatDone(data json.RawMessage) (string, bool) {
	var d struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if json.Unmarshal(data, &d) != nil {
		return "", false
	}
	keys := make([]string, 0, len(d.Metrics))
	for k := range d.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := []string{"[done]"}
	for _, k := range keys {
		parts = append(parts, k+"="+fmtFloat(d.Metrics[k]))
	}
	return strings.Join(parts, " "), true
}
