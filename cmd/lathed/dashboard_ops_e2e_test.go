package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lathe-ml/lathe/internal/jobtype"
	"github.com/lathe-ml/lathe/internal/waitfor"
	"github.com/lathe-ml/lathe/internal/wire"
)

// The dashboard's ops fixes (issue #26), checked by TestDashboardChromium
// in the same real Chromium against the same real `lathed up`.

// minChartTextPx is the smallest on-screen size the job page's chart text
// may have (issue #26: it was about 6.5 px).
const minChartTextPx = 11

// submitGatedSweep submits a grid sweep of 3 one-GPU trials of the real
// reference trainer, one at a time (max_parallel 1), while every GPU is
// held: the first is admitted and waits for a GPU, the other two wait for
// their sweep. It returns the sweep's id and its trials' ids.
func submitGatedSweep(t *testing.T, lathe, base, dir, good string) (string, []string) {
	t.Helper()
	job := dashSpec(t, dir, "trial", 1, "batch", 40, 0, good)
	sweep := filepath.Join(dir, "sweep.yaml")
	if err := os.WriteFile(sweep, []byte(`name: gated
job: `+filepath.Base(job)+`
parameters:
  training.learning_rate: {grid: [0.01, 0.02, 0.03]}
search: grid
objective: {metric: eval_loss, goal: minimize}
max_parallel: 1
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cli(t, lathe, base, "sweep", "submit", sweep, "-o", "json")
	if code != 0 {
		t.Fatalf("sweep submit: exit %d\n%s\n%s", code, out, errOut)
	}
	var st wire.SweepStatus
	getJSONFromString(t, out, &st)
	if st.Sweep == nil || st.Sweep.ID == "" {
		t.Fatalf("sweep submit answered no sweep id: %s", out)
	}
	var list wire.JobList
	getJSON(t, base, "/api/v1/jobs?limit=10&sweep="+st.Sweep.ID, &list)
	var ids []string
	for _, j := range list.Jobs {
		ids = append(ids, j.ID)
	}
	if len(ids) != 3 {
		t.Fatalf("sweep %s has trials %v, want 3", st.Sweep.ID, ids)
	}
	return st.Sweep.ID, ids
}

// trialRow is a jobs-table row of a trial: the link's text and the reason.
type trialRow struct {
	Link   string `json:"link"`
	Reason string `json:"reason"`
}

// checkTrialRows waits until each trial's row shows its whole id (its
// link's text) and a reason: its place in line when the leader's round
// listed it, else that its sweep holds it back (gate max_parallel), as
// GET /api/v1/jobs/{id} has it; at least one trial is held by its sweep.
func checkTrialRows(t *testing.T, b *browser, base, sweepID string, ids []string) {
	t.Helper()
	waitfor.Value(t, 30*time.Second, "the trials' rows to show their whole ids and a reason each", func() pageAndAPI {
		var rows map[string]trialRow
		if err := b.exec(`const out = {};
			for (const tr of document.querySelectorAll('#job-table tbody tr[data-job]')) {
			  const a = tr.querySelector('td.id a'); const r = tr.querySelector('td.reason');
			  out[tr.dataset.job] = {link: a ? a.textContent : '', reason: r ? r.textContent : ''};
			}
			return out;`, &rows); err != nil {
			t.Fatalf("read the jobs table: %v", err)
		}
		var bad pageAndAPI
		held := 0
		for _, id := range ids {
			j := getJob(t, base, id)
			want := trialRow{Link: id}
			switch {
			case j.State != jobtype.StateQueued:
				want.Reason = j.Error
			case j.Wait != nil:
				want.Reason = "#" + strconv.Itoa(j.Wait.Position) + " " // a prefix: "#N · ~time · reason"
			case j.Trial != nil && j.Trial.Gate == jobtype.ReasonMaxParallel:
				want.Reason = "held by sweep " + sweepID + ": its max_parallel trials run already"
				held++
			default:
				want.Reason = "?"
			}
			got := rows[id]
			ok := got.Link == want.Link && (got.Reason == want.Reason || strings.HasSuffix(want.Reason, " ") && strings.HasPrefix(got.Reason, want.Reason))
			if !ok || held == 0 && id == ids[len(ids)-1] {
				bad.page += fmt.Sprintf("%s: %+v; ", id, got)
				bad.api += fmt.Sprintf("%s: %+v (state %s, trial %+v); ", id, want, j.State, j.Trial)
			}
		}
		return bad
	}, func(x pageAndAPI) bool { return x == pageAndAPI{} })
}

// tileView is the GPU panel's tiles and CPU slots of a node, and the
// budgets panel, as the page shows them or as the API answers.
type tileView struct {
	Jobs    []string `json:"jobs"`    // each tile's job text, in GPU order
	Slots   string   `json:"slots"`   // "CPU slots r/s"
	Budgets []string `json:"budgets"` // "scope spent reserved limit"
}

// checkTilesSlotsBudgets waits until node sim1's tiles show the job the
// API says holds each GPU (its whole id, "free" for none), the node its
// CPU slots as its queue row counts them, and the budgets panel the rows
// of GET /api/v1/budgets (polled every 10 s).
func checkTilesSlotsBudgets(t *testing.T, b *browser, base string) {
	t.Helper()
	usd := func(v float64) string { return "$" + strconv.FormatFloat(v, 'f', 2, 64) }
	waitfor.Value(t, 30*time.Second, "the GPU tiles, CPU slots and budgets as the API answers", func() pageAndAPI {
		var page tileView
		if err := b.exec(`const n = document.querySelector('#nodes .node[data-node="sim1"]');
			const s = n ? n.querySelector('.slots') : null;
			return {jobs: n ? [...n.querySelectorAll('.gpu .job')].map((e) => e.textContent) : [], slots: s ? s.textContent.trim() : '',
			  budgets: [...document.querySelectorAll('#budget-table tbody tr[data-scope]')].map((tr) =>
			    [...tr.querySelectorAll('td')].slice(0, 4).map((td) => td.textContent).join(' '))};`, &page); err != nil {
			t.Fatalf("read the GPU and budgets panels: %v", err)
		}
		ov := getOverview(t, base)
		api := tileView{Jobs: []string{}, Budgets: []string{}}
		for _, n := range ov.Nodes {
			if n.Name != "sim1" {
				continue
			}
			for _, g := range n.GPUs {
				job := g.JobID
				if job == "" {
					job = "free"
				}
				api.Jobs = append(api.Jobs, job)
			}
		}
		for _, q := range ov.Queues.Queues {
			if q.Node == "sim1" {
				api.Slots = fmt.Sprintf("CPU slots %d/%d", q.Reserved, q.Slots)
			}
		}
		var bud wire.Budgets
		getJSON(t, base, "/api/v1/budgets", &bud)
		for _, r := range bud.Scopes {
			limit := "none"
			if r.LimitUSD > 0 {
				limit = usd(r.LimitUSD)
			}
			api.Budgets = append(api.Budgets, r.Scope+" "+usd(r.SpentUSD)+" "+usd(r.ReservedUSD)+" "+limit)
		}
		if len(api.Jobs) == 8 && api.Slots != "" && len(api.Budgets) > 0 && slices.Equal(page.Jobs, api.Jobs) && page.Slots == api.Slots &&
			slices.Equal(page.Budgets, api.Budgets) {
			return pageAndAPI{}
		}
		return pageAndAPI{page: fmt.Sprintf("%+v", page), api: fmt.Sprintf("%+v (want 8 tiles, slots and a budget row)", api)}
	}, func(x pageAndAPI) bool { return x == pageAndAPI{} })
}

// foldView is a folded text's row: its height, title, text, and whether
// its text is cut.
type foldView struct {
	Height float64 `json:"h"`
	Title  string  `json:"title"`
	Text   string  `json:"text"`
	Cut    bool    `json:"cut"`
	Open   bool    `json:"open"`
}

const readFoldJS = `const tr = document.querySelector('#job-table tbody tr[data-job="' + arguments[0] + '"]');
const f = tr ? tr.querySelector('td.reason .fold') : null;
if (!f) return {h: 0, title: '', text: '', cut: false, open: false};
return {h: tr.getBoundingClientRect().height, title: f.title, text: f.textContent, cut: f.scrollWidth > f.clientWidth, open: f.classList.contains('open')};`

// checkFoldedError: the failed job's row is one line high (at most 30 px)
// with its whole error as the fold's text and title (text, never markup);
// a click unfolds it (nothing cut), kept open across the polls' redraws.
func checkFoldedError(t *testing.T, b *browser, id, errText string) {
	t.Helper()
	var f foldView
	if err := b.exec(readFoldJS, &f, id); err != nil {
		t.Fatalf("read the failed row: %v", err)
	}
	if f.Height == 0 || f.Height > 30 || f.Title != errText || f.Text != errText || f.Open {
		t.Fatalf("failed row %s: %+v; want one line (<= 30 px) folded, with the whole error %q as text and title", id, f, errText)
	}
	t.Logf("failed row: %.0f px high, error of %d characters, cut %v", f.Height, len(errText), f.Cut)
	if err := b.exec(`document.querySelector('#job-table tbody tr[data-job="' + arguments[0] + '"] td.reason .fold').click(); return null;`, nil, id); err != nil {
		t.Fatalf("click the failed row's error: %v", err)
	}
	// Past the next poll, which draws the row again: still open.
	var at string
	if err := b.exec(`return document.body.dataset.overviewAt || '';`, &at); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, 10*time.Second, "the next poll of the overview", func() bool {
		var now string
		if err := b.exec(`return document.body.dataset.overviewAt || '';`, &now); err != nil {
			t.Fatal(err)
		}
		return now != at
	})
	if err := b.exec(readFoldJS, &f, id); err != nil {
		t.Fatalf("read the failed row: %v", err)
	}
	if !f.Open || f.Cut || f.Text != errText {
		t.Fatalf("failed row %s after a click and a poll: %+v; want it open, nothing cut", id, f)
	}
	if err := b.exec(`document.querySelector('#job-table tbody tr[data-job="' + arguments[0] + '"] td.reason .fold').click(); return null;`, nil, id); err != nil {
		t.Fatalf("click the failed row's error again: %v", err)
	}
}

// checkNoSideScroll: the page is no wider than the window (panels scroll
// their own tables).
func checkNoSideScroll(t *testing.T, b *browser, width int) {
	t.Helper()
	var w int
	if err := b.exec(`return document.documentElement.scrollWidth;`, &w); err != nil {
		t.Fatal(err)
	}
	if w > width {
		t.Errorf("at %d px the page is %d px wide: it scrolls sideways", width, w)
	}
}

// chartView is the job page's loss chart as measured in the page.
type chartView struct {
	Points   string   `json:"points"`
	XTicks   []string `json:"xTicks"`
	YTicks   []string `json:"yTicks"`
	Font     string   `json:"font"`
	ScreenPx float64  `json:"screenPx"` // the canvas font's size × the canvas's CSS px per canvas px
	LegendPx float64  `json:"legendPx"`
	CanvasW  float64  `json:"canvasW"` // on screen
	BoxW     float64  `json:"boxW"`
}

// readChartJS measures chart arguments[0]: the font the canvas last drew
// its text with (uPlot draws the axes' ticks and labels with it, in canvas
// pixels) scaled to CSS pixels by the canvas's on-screen width over its
// pixel width, the legend's computed font size, the tick labels drawn.
const readChartJS = `const box = document.querySelector(arguments[0]);
const cv = box ? box.querySelector('canvas') : null;
if (!cv) return {points: box ? (box.dataset.points || '') : '', xTicks: [], yTicks: []};
const r = cv.getBoundingClientRect();
const font = cv.getContext('2d').font;
const m = /([0-9.]+)px/.exec(font);
const lg = box.querySelector('.u-legend');
const ticks = (s) => (s || '').split('|').filter((x) => x !== '');
return {points: box.dataset.points, xTicks: ticks(box.dataset.xTicks), yTicks: ticks(box.dataset.yTicks), font: font,
  screenPx: m ? parseFloat(m[1]) * r.width / cv.width : 0, legendPx: lg ? parseFloat(getComputedStyle(lg).fontSize) : 0,
  canvasW: r.width, boxW: box.getBoundingClientRect().width};`

// checkLossChart waits until the job page's loss chart has one point per
// progress event (steps), then holds its text to minChartTextPx on screen
// at the window's width, its axes to at least 3 ticks each within the
// steps' range, the canvas to its panel, and the legend to show the
// values under the pointer.
func checkLossChart(t *testing.T, b *browser, steps []int) chartView {
	t.Helper()
	c := waitfor.Value(t, 30*time.Second, fmt.Sprintf("the loss chart with %d points at %d px", len(steps), b.width), func() chartView {
		var c chartView
		if err := b.exec(readChartJS, &c, "#loss-chart"); err != nil {
			t.Fatalf("read the loss chart: %v", err)
		}
		return c
	}, func(c chartView) bool {
		return c.Points == strconv.Itoa(len(steps)) && c.ScreenPx > 0 && c.CanvasW <= c.BoxW+1 && c.CanvasW >= c.BoxW-4
	})
	if c.ScreenPx < minChartTextPx || c.LegendPx < minChartTextPx {
		t.Errorf("at %d px the loss chart's text is %.1f px on screen (canvas font %q), its legend %.1f px; want >= %d", b.width, c.ScreenPx, c.Font, c.LegendPx, minChartTextPx)
	}
	if len(c.XTicks) < 3 || len(c.YTicks) < 3 {
		t.Errorf("at %d px the loss chart has x ticks %q and y ticks %q; want at least 3 each", b.width, c.XTicks, c.YTicks)
	}
	for _, x := range c.XTicks {
		if s, err := strconv.Atoi(x); err != nil || s < slices.Min(steps) || s > slices.Max(steps) {
			t.Errorf("x tick %q is not a step in %d–%d", x, slices.Min(steps), slices.Max(steps))
		}
	}
	t.Logf("at %d px: loss chart text %.1f px on screen (canvas font %q), legend %.1f px, %d x ticks, %d y ticks", b.width, c.ScreenPx, c.Font, c.LegendPx, len(c.XTicks), len(c.YTicks))
	// Values on hover: the pointer over the plot's middle fills the legend.
	var legend []string
	if !waitfor.Poll(10*time.Second, func() bool {
		if err := b.exec(`const box = document.querySelector('#loss-chart'); const over = box.querySelector('.u-over');
			const r = over.getBoundingClientRect(); const at = {clientX: r.left + r.width / 2, clientY: r.top + r.height / 2, bubbles: true};
			over.dispatchEvent(new MouseEvent('mouseenter', at)); over.dispatchEvent(new MouseEvent('mousemove', at));
			return [...box.querySelectorAll('.u-legend .u-series')].map((tr) => tr.textContent);`, &legend); err != nil {
			t.Fatalf("hover the loss chart: %v", err)
		}
		return len(legend) == 2 && regexp.MustCompile(`^step\d+$`).MatchString(legend[0]) && regexp.MustCompile(`^loss\d+\.\d{4}$`).MatchString(legend[1])
	}) {
		t.Errorf("hovering the loss chart's middle shows legend %q; want the step and the loss there", legend)
	}
	return c
}

// checkEventRows: the job page's events are rows of words (no JSON), one
// line high, and the table fits its panel.
func checkEventRows(t *testing.T, b *browser) {
	t.Helper()
	var ev struct {
		N      int      `json:"n"`
		JSON   []string `json:"json"`
		TableW float64  `json:"tableW"`
		PanelW float64  `json:"panelW"`
		MaxH   float64  `json:"maxH"`
	}
	if err := b.exec(`const tb = document.querySelector('#event-table'); const panel = tb.closest('.panel');
		const cells = [...tb.querySelectorAll('tbody td.what')].map((td) => td.textContent);
		return {n: cells.length, json: cells.filter((c) => c.includes('{"') || c.includes('":')), tableW: tb.getBoundingClientRect().width,
		  panelW: panel.clientWidth, maxH: Math.max(0, ...[...tb.querySelectorAll('tbody tr')].map((r) => r.getBoundingClientRect().height))};`, &ev); err != nil {
		t.Fatalf("read the events: %v", err)
	}
	if ev.N == 0 || len(ev.JSON) > 0 || ev.TableW > ev.PanelW+1 || ev.MaxH > 30 {
		t.Errorf("at %d px the events table: %d rows, JSON in %q, %.0f px wide in a %.0f px panel, tallest row %.0f px; want rows of words, one line each (<= 30 px), within the panel",
			b.width, ev.N, ev.JSON, ev.TableW, ev.PanelW, ev.MaxH)
	}
}

// checkQueuedJobPage: a queued job's page shows its backend (the routing
// decision's, as GET /api/v1/jobs/{id} has it) and its estimated start.
func checkQueuedJobPage(t *testing.T, b *browser, base, id string) {
	t.Helper()
	b.navigate(t, base+"/jobs/"+id)
	type facts struct {
		State   string `json:"state"`
		Backend string `json:"backend"`
		Start   string `json:"start"`
	}
	var last facts
	var j jobtype.Job
	if !waitfor.Poll(30*time.Second, func() bool {
		if err := b.exec(`const f = (k) => { const d = document.querySelector('#job-facts [data-fact="' + k + '"] .v'); return d ? d.textContent : ''; };
			return {state: f('state'), backend: f('backend'), start: f('estimated start')};`, &last); err != nil {
			t.Fatalf("read the queued job's facts: %v", err)
		}
		j = getJob(t, base, id)
		backend := j.Backend
		if backend == "" && j.Route != nil {
			backend = j.Route.Backend
		}
		estimated := j.Wait != nil && j.Wait.EstimatedStart != nil || j.Route != nil && j.Route.EstWaitS > 0
		return j.State == jobtype.StateQueued && last.State == "queued" && backend != "" && strings.HasPrefix(last.Backend, backend) &&
			last.Start != "" && (last.Start != "not estimated yet") == estimated
	}) {
		t.Fatalf("queued job %s's page shows %+v; the API: backend %q route %+v wait %+v", id, last, j.Backend, j.Route, j.Wait)
	}
	t.Logf("queued job's page: backend %q, estimated start %q", last.Backend, last.Start)
}

// getJSONFromString decodes s into v.
func getJSONFromString(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decode %.300s: %v", s, err)
	}
}

// checkHistoryPanel waits until each of the overview's four history charts
// (queue depth, oldest wait, throughput, GPU use) has as many points as
// GET /api/v1/history has samples (the leader took its first when it
// became the leader; the page reads the history every 30 s), with tick
// labels on its y axis.
func checkHistoryPanel(t *testing.T, b *browser, base string) {
	t.Helper()
	waitfor.Value(t, 70*time.Second, "the history charts with the API's samples", func() pageAndAPI {
		var page struct {
			Points []string `json:"points"`
			YTicks []int    `json:"yTicks"`
		}
		if err := b.exec(`const ids = ['#hist-queue', '#hist-wait', '#hist-throughput', '#hist-gpu'];
			return {points: ids.map((id) => document.querySelector(id).dataset.points || ''),
			  yTicks: ids.map((id) => (document.querySelector(id).dataset.yTicks || '').split('|').filter((x) => x !== '').length)};`, &page); err != nil {
			t.Fatalf("read the history panel: %v", err)
		}
		var h wire.History
		getJSON(t, base, "/api/v1/history", &h)
		n := strconv.Itoa(len(h.Points))
		ok := len(h.Points) > 0
		for i, p := range page.Points {
			ok = ok && p == n && page.YTicks[i] >= 2
		}
		if ok {
			return pageAndAPI{}
		}
		return pageAndAPI{page: fmt.Sprintf("%+v", page), api: fmt.Sprintf("%d samples (want each chart with as many points, >= 2 y ticks)", len(h.Points))}
	}, func(x pageAndAPI) bool { return x == pageAndAPI{} })
}

// checkAsynqmonTaskID opens asynqmon's page of node sim1's active tasks
// and waits until it shows the running job's task id whole (asynqmon's UI
// cut it at the first '-', to "j").
func checkAsynqmonTaskID(t *testing.T, b *browser, base, taskID string) {
	t.Helper()
	b.navigate(t, base+"/monitoring/queues/node:sim1?status=active")
	var text string
	if !waitfor.Poll(30*time.Second, func() bool {
		if err := b.exec(`return document.body ? document.body.innerText : '';`, &text); err != nil {
			t.Fatalf("read asynqmon's page: %v", err)
		}
		return strings.Contains(text, taskID)
	}) {
		t.Fatalf("asynqmon's active tasks of node:sim1 never showed task %s whole; the page reads:\n%.2000s", taskID, text)
	}
}

// checkCredentialsInURL opens the page at an address carrying
// user:password@ and waits until its status line says why it shows
// nothing (the browser refuses the page's fetches from such an address;
// docs/dashboard.md).
func checkCredentialsInURL(t *testing.T, b *browser, base string) {
	t.Helper()
	b.navigate(t, strings.Replace(base, "http://", "http://viewer:some-token@", 1)+"/")
	var status string
	if !waitfor.Poll(20*time.Second, func() bool {
		if err := b.exec(`const s = document.querySelector('#status'); return s ? s.textContent : '';`, &status); err != nil {
			t.Fatalf("read the status line: %v", err)
		}
		return strings.HasPrefix(status, "error: this address carries credentials") && strings.Contains(status, "open "+base+"/ and give the token")
	}) {
		t.Fatalf("at an address with credentials the status line reads %q; want it to say why and the address to open", status)
	}
	// The page's own fetch from that address fails, as the docs say.
	var fetchErr string
	if err := b.execAsync(`const done = arguments[arguments.length - 1];
		fetch('/api/v1/overview').then(() => done('no error')).catch((e) => done(String(e)));`, &fetchErr); err != nil {
		t.Fatalf("fetch from the page: %v", err)
	}
	if !strings.Contains(fetchErr, "TypeError") || !strings.Contains(fetchErr, "credentials") {
		t.Errorf("a fetch from an address with credentials: %q; want the TypeError the docs name", fetchErr)
	}
}
