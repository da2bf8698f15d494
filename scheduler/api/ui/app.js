// Lathe's dashboard: polls the API every 2 s and renders it. Every string
// from the server goes into the page through textContent or an attribute,
// never as HTML: job names are written by users. Charts are uPlot's
// (ui/vendor, loaded before this script as the global uPlot), drawn on a
// canvas: their text is drawn, never parsed.
'use strict';

const POLL_MS = 2000;
const STATES = ['queued', 'dispatched', 'provisioning', 'running', 'paused', 'succeeded', 'failed', 'cancelled'];
const PRIORITIES = ['urgent', 'normal', 'batch'];

const $ = (sel) => document.querySelector(sel);

// el builds an element; attrs are set as attributes (class via className),
// children are nodes or strings (text nodes).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    // style through the CSSOM: the page's Content-Security-Policy refuses style attributes.
    if (k === 'class') e.className = v; else if (k === 'style') e.style.cssText = v; else e.setAttribute(k, String(v));
  }
  for (const kid of kids) {
    if (kid === undefined || kid === null) continue;
    e.appendChild(typeof kid === 'string' || typeof kid === 'number' ? document.createTextNode(String(kid)) : kid);
  }
  return e;
}

// svg builds an SVG element, in the namespace of the page's own <svg>
// elements (so that no URL appears in the script).
function svg(tag, attrs) {
  const e = document.createElementNS($('svg').namespaceURI, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

// CREDENTIALS_IN_URL is what the status line says when the page was
// opened at an address carrying user:password@: the browser then refuses
// every fetch the page makes (the Fetch standard: a relative URL takes the
// page's credentials along), and hides them from location, so the refusal
// is the only sign.
const CREDENTIALS_IN_URL = 'this address carries credentials (user:password@), so the browser refuses the page\'s requests: open ';

async function api(path) {
  let resp;
  try {
    resp = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
  } catch (e) {
    if (e instanceof TypeError && /credentials/.test(e.message)) {
      throw new Error(CREDENTIALS_IN_URL + location.origin + location.pathname + ' and give the token when asked (' + e.message + ')');
    }
    throw e;
  }
  if (!resp.ok) {
    let msg = resp.status + ' ' + resp.statusText;
    try { const body = await resp.json(); if (body.error) msg += ': ' + body.error; } catch (e) { /* not JSON */ }
    const err = new Error(path + ': ' + msg);
    err.status = resp.status;
    throw err;
  }
  return resp.json();
}

function setStatus(err) {
  const s = $('#status');
  if (err) { s.textContent = 'error: ' + err.message; s.className = 'status error'; return; }
  s.textContent = 'updated ' + new Date().toLocaleTimeString();
  s.className = 'status';
}

function duration(sec) {
  if (!sec || sec <= 0) return '0s';
  const s = Math.round(sec);
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
  return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm';
}

const usd = (v) => '$' + (v || 0).toFixed(2);
const when = (t) => t ? new Date(t).toLocaleTimeString() : '';

// fold holds a long text (an error, an event's data) on one line, cut with
// an ellipsis; the whole text is its title (shown on hover) and a click
// unfolds it in place, as text. Which folds are open is kept by key across
// the polls' redraws.
const openFolds = new Set();
function fold(text, key) {
  const f = el('span', { class: 'fold' + (openFolds.has(key) ? ' open' : ''), title: text, 'data-fold': key, tabindex: 0 }, text);
  const toggle = () => {
    if (openFolds.has(key)) openFolds.delete(key); else openFolds.add(key);
    f.classList.toggle('open', openFolds.has(key));
  };
  f.addEventListener('click', toggle);
  f.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); toggle(); } });
  return f;
}

// jobLink is a link to a job's page showing its whole id (a sweep's trials
// differ only at the end of theirs).
const jobLink = (id) => el('a', { href: '/jobs/' + encodeURIComponent(id), class: 'jobid' }, id);

function replaceRows(tbody, rows) {
  tbody.replaceChildren(...rows);
  if (rows.length === 0) {
    const cols = tbody.parentElement.querySelectorAll('thead th').length || 2;
    tbody.appendChild(el('tr', {}, el('td', { class: 'empty', colspan: cols }, 'none')));
  }
}

function bar(frac, cls) {
  const pct = Math.max(0, Math.min(1, frac || 0)) * 100;
  return el('span', { class: 'bar' + (cls ? ' ' + cls : ''), title: pct.toFixed(0) + '%' },
    el('span', { style: 'width:' + pct.toFixed(1) + '%' }));
}

// ---- overview ----

function renderQueues(q) {
  $('#q-pending').textContent = String(q.pending);
  $('#q-oldest').textContent = duration(q.oldest_wait_s);
  const oj = $('#q-oldest-job');
  oj.textContent = q.oldest_job || '';
  if (q.oldest_job) oj.href = '/jobs/' + encodeURIComponent(q.oldest_job); else oj.removeAttribute('href');
  $('#q-burst').textContent = String(q.burst);
  const by = q.by_state || {};
  const states = STATES.concat(Object.keys(by).filter((s) => !STATES.includes(s)).sort());
  replaceRows($('#q-states tbody'), states.filter((s) => s in by).map((s) =>
    el('tr', { 'data-state': s }, el('td', { class: 'state-' + s }, s), el('td', { class: 'n' }, by[s]))));
  const bp = q.by_priority || {};
  replaceRows($('#q-priorities tbody'), PRIORITIES.concat(Object.keys(bp).filter((p) => !PRIORITIES.includes(p)).sort())
    .map((p) => el('tr', { 'data-priority': p }, el('td', {}, p), el('td', { class: 'n' }, bp[p] || 0))));
}

function gpuColor(g) {
  if (!g.healthy) return 'hsl(0, 70%, 60%)';
  const u = Math.max(0, Math.min(100, g.utilization_pct || 0));
  return 'hsl(' + (210 - u * 1.7).toFixed(0) + ', 70%, ' + (75 - u * 0.25).toFixed(0) + '%)';
}

// renderGPU is one GPU's tile: index, utilisation, memory and the job
// holding it (its whole id, linked; "busy" for another team's, "free").
function renderGPU(g) {
  const memFrac = g.memory_total_mb ? g.memory_used_mb / g.memory_total_mb : 0;
  const title = [g.name, 'util ' + g.utilization_pct + '%', 'memory ' + g.memory_used_mb + '/' + g.memory_total_mb + ' MiB',
    g.temperature_c + ' °C', g.healthy ? 'healthy' : 'unhealthy: ' + (g.unhealthy || '?'), g.job_id ? 'job ' + g.job_id : (g.busy ? 'busy' : 'free')].join('\n');
  return el('div', { class: 'gpu' + (g.healthy ? '' : ' unhealthy'), 'data-gpu': g.index, 'data-util': g.utilization_pct,
    'data-mem-used': g.memory_used_mb, 'data-healthy': g.healthy, 'data-job': g.job_id || '', style: 'background:' + gpuColor(g), title: title },
  el('div', { class: 'idx' }, 'GPU ' + g.index), el('div', { class: 'util' }, g.utilization_pct + '%'),
  el('div', { class: 'mem' }, (memFrac * 100).toFixed(0) + '% mem'),
  el('div', { class: 'job' }, g.job_id ? jobLink(g.job_id) : (g.busy ? 'busy' : 'free')),
  g.healthy ? null : el('div', { class: 'why' }, g.unhealthy || 'unhealthy'));
}

// slotsText is a node's CPU-slot use from its queue row (the overview's
// queues.queues, GET /api/v1/queues): "CPU slots reserved/slots"; null
// when the answer has none (a team's token gets no queue rows).
function slotsText(q) {
  return q ? 'CPU slots ' + q.reserved + '/' + q.slots : null;
}

function renderNodes(nodes, queues) {
  const box = $('#nodes');
  if (!nodes || nodes.length === 0) { box.replaceChildren(el('div', { class: 'empty' }, 'no live nodes')); return; }
  const byNode = new Map((queues || []).filter((q) => q.node).map((q) => [q.node, q]));
  box.replaceChildren(...nodes.map((n) => el('div', { class: 'node', 'data-node': n.name },
    el('div', { class: 'node-head' }, el('strong', {}, n.name), ' ', el('span', { class: 'k' }, n.backend),
      n.simulated ? el('span', { class: 'badge simulated' }, 'simulated') : null,
      byNode.has(n.name) ? el('span', { class: 'slots', 'data-slots': byNode.get(n.name).slots, 'data-reserved': byNode.get(n.name).reserved },
        ' ' + slotsText(byNode.get(n.name))) : null,
      el('span', { class: 'k' }, ' seen ' + when(n.seen_at))),
    el('div', { class: 'grid' }, ...(n.gpus || []).map(renderGPU)))));
}

function renderCloud(c) {
  $('#cloud-usd-h').textContent = usd(c.usd_per_hour);
  replaceRows($('#cloud-backends tbody'), (c.backends || []).map((b) => el('tr', { 'data-backend': b.name },
    el('td', {}, b.name), el('td', {}, b.instances), el('td', {}, usd(b.usd_per_hour)),
    el('td', {}, usd(b.spent_usd), ' ', b.limit_usd > 0 ? bar(b.spent_usd / b.limit_usd, 'budget') : null),
    el('td', {}, b.limit_usd > 0 ? usd(b.limit_usd) : 'none'))));
}

// renderBudgets fills the budgets panel from GET /api/v1/budgets: per
// backend and team, the month's spent (settled jobs), reserved (estimates
// of jobs not settled yet) and limit, with a bar of spent + reserved
// against the limit. A team's token is answered its own team's row (and
// the backends') only.
function renderBudgets(b) {
  $('#budgets-note').textContent = b ? 'month ' + b.month + ' (UTC)' : '';
  replaceRows($('#budget-table tbody'), ((b && b.scopes) || []).map((r) => el('tr', { 'data-scope': r.scope },
    el('td', {}, r.scope), el('td', { class: 'spent' }, usd(r.spent_usd)), el('td', { class: 'reserved' }, usd(r.reserved_usd)),
    el('td', { class: 'limit' }, r.limit_usd > 0 ? usd(r.limit_usd) : 'none'),
    el('td', {}, r.limit_usd > 0 ? bar((r.spent_usd + r.reserved_usd) / r.limit_usd, 'budget') : '',
      r.limit_usd > 0 ? ' ' + (100 * (r.spent_usd + r.reserved_usd) / r.limit_usd).toFixed(0) + '%' : ''))));
}

// sparkline draws a loss series [[step, loss], …] as a small inline SVG
// (the jobs table's loss cell); null for fewer than two points.
function sparkline(series) {
  if (!series || series.length < 2) return null;
  const W = 80, H = 18, P = 1;
  const xs = series.map((p) => p[0]), ys = series.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => P + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - 2 * P);
  const sy = (y) => H - P - (y1 === y0 ? 0.5 : (y - y0) / (y1 - y0)) * (H - 2 * P);
  // The description is an attribute, not a <title>, so the cell's text stays the loss alone.
  const e = svg('svg', { class: 'spark', viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, 'data-points': series.length,
    role: 'img', 'aria-label': 'loss ' + series[0][1].toFixed(3) + ' → ' + series[series.length - 1][1].toFixed(3) + ' over steps ' + x0 + '–' + x1 });
  e.appendChild(svg('path', { d: series.map((p, i) => (i ? 'L' : 'M') + sx(p[0]).toFixed(1) + ' ' + sy(p[1]).toFixed(1)).join(' ') }));
  return e;
}

// jobRows merges the jobs list with the overview's live rows (progress
// and cost of running jobs) and each job's loss series (the overview's for
// running jobs, the list's for others). A queued job's place in line,
// estimated start and reason are the list's (its wait, from the leader's
// last placement round): the overview is asked for none of its waiting
// rows (waiting_limit=0), only its counts.
function jobRows(list, ov) {
  const listSeries = list.loss_series || {};
  const running = new Map((ov.running || []).map((r) => [r.id, r]));
  return (list.jobs || []).map((j) => {
    const r = running.get(j.id);
    const p = j.progress || {};
    const wait = j.wait || null;
    return {
      id: j.id, name: j.name, state: r ? r.state : j.state, backend: (r && r.backend) || j.backend || (j.route && j.route.backend) || '',
      node: (r && r.node) || j.node || '', gpus: (r ? r.gpus : j.gpus) || [],
      step: r ? r.step : p.step, total: r ? r.total_steps : p.total_steps, loss: r ? r.loss : p.loss,
      cost: r ? r.cost_usd : (j.cost_usd || 0), wait: j.state === 'queued' ? wait : null, error: j.error || '',
      gate: j.state === 'queued' && j.trial && j.trial.gate ? j.trial.gate : '', sweep: j.trial ? j.trial.sweep_id : '',
      series: (r && r.loss_series) || listSeries[j.id] || [],
    };
  });
}

const sortKeys = {
  id: (r) => r.id, name: (r) => r.name, state: (r) => r.state, backend: (r) => r.backend, node: (r) => r.node,
  gpus: (r) => r.gpus.length, progress: (r) => (r.total ? r.step / r.total : 0), loss: (r) => r.loss || 0,
  cost: (r) => r.cost, wait: (r) => (r.wait ? r.wait.position : Infinity),
};
const view = { sort: '', desc: false, rows: [] };

// waitText says why a queued job waits: its place in line, estimated
// start and reason from the leader's last placement round; for a sweep's
// trial its sweep holds back (max_parallel, or the sweep's budget), that;
// for a job no round has listed yet, so. An ended job's is its error.
function waitText(r) {
  const w = r.wait;
  if (w) return '#' + w.position + (w.estimated_start ? ' · ~' + when(w.estimated_start) : '') + ' · ' + (w.reason || w.code || '');
  if (r.state !== 'queued') return r.error || '';
  if (r.gate === 'max_parallel') return 'held by sweep ' + r.sweep + ': its max_parallel trials run already';
  if (r.gate) return 'held by sweep ' + r.sweep + ': ' + r.gate;
  return 'waits for the next placement round';
}

function jobRow(r) {
  const w = r.wait;
  const text = waitText(r);
  return el('tr', { 'data-job': r.id, 'data-state': r.state },
    el('td', { class: 'id' }, jobLink(r.id)),
    el('td', { class: 'name' }, r.name), el('td', { class: 'state state-' + r.state }, r.state),
    el('td', { class: 'backend' }, r.backend), el('td', { class: 'node' }, r.node),
    el('td', { class: 'gpus' }, r.gpus.join(',')),
    el('td', { class: 'progress' }, bar(r.total ? r.step / r.total : 0), ' ', r.total ? r.step + '/' + r.total : ''),
    el('td', { class: 'loss' }, r.loss ? r.loss.toFixed(3) : '', sparkline(r.series)),
    el('td', { class: 'cost' }, usd(r.cost)),
    el('td', { class: 'reason', 'data-position': w ? w.position : '' }, text ? fold(text, 'job:' + r.id) : ''));
}

function renderJobs() {
  const f = $('#job-filter').value.trim().toLowerCase();
  const st = $('#job-state').value;
  let rows = view.rows.filter((r) => (!st || r.state === st) &&
    (!f || [r.id, r.name, r.backend, r.node, r.state].some((x) => String(x).toLowerCase().includes(f))));
  if (view.sort) {
    const key = sortKeys[view.sort];
    rows = rows.slice().sort((a, b) => { const x = key(a), y = key(b); const c = x < y ? -1 : x > y ? 1 : 0; return view.desc ? -c : c; });
  }
  replaceRows($('#job-table tbody'), rows.map(jobRow));
}

function renderSweeps(list, details) {
  replaceRows($('#sweep-table tbody'), (list.sweeps || []).map((sw) => {
    const d = details.get(sw.id);
    let best = '';
    if (d && d.best) {
      const row = (d.leaderboard || []).find((t) => t.id === d.best);
      best = d.best + (row && row.objective !== undefined && row.objective !== null ? ' = ' + row.objective.toFixed(4) : '');
    }
    return el('tr', { 'data-sweep': sw.id }, el('td', {}, sw.name), el('td', {}, sw.state), el('td', {}, sw.trials),
      el('td', {}, (sw.metric || '') + ' ' + (sw.goal || '')), el('td', {}, best));
  }));
}

// choice says what a decision chose, in words.
function choice(d) {
  if (d.refused) return 'refused';
  return (d.waiting ? 'waits for ' : '') + (d.backend || '?') + (d.site ? ' @ ' + d.site : '');
}

// shortReasons is a decision's first reasons in a line; the cell's title
// holds them all.
const REASONS_SHOWN = 3;
function shortReasons(rs) {
  return rs.slice(0, REASONS_SHOWN).join('; ') + (rs.length > REASONS_SHOWN ? '; … (' + (rs.length - REASONS_SHOWN) + ' more)' : '');
}

function renderDecisions(ans) {
  const note = $('#decisions-note');
  if (!ans) { note.textContent = 'this scheduler keeps no ledger'; replaceRows($('#decision-table tbody'), []); return; }
  note.textContent = ans.team ? 'team ' + ans.team + ' only' : 'every team';
  replaceRows($('#decision-table tbody'), (ans.decisions || []).map((d) => el('tr', { 'data-kind': d.kind, 'data-decision-job': d.job_id || '' },
    el('td', {}, when(d.time)),
    el('td', { class: 'id' }, d.job_id ? jobLink(d.job_id) : '–'),
    el('td', { class: 'name' }, d.job_name || ''), el('td', {}, d.team || ''), el('td', {}, d.path || ''),
    el('td', { class: d.refused ? 'state-failed' : (d.waiting ? 'state-queued' : 'state-running') }, choice(d)),
    el('td', { class: 'cost' }, d.refused ? '' : usd(d.est_cost_usd)),
    el('td', { class: 'reason', title: (d.reasons || []).join('\n') }, fold(shortReasons(d.reasons || []), 'decision:' + d.time + ':' + (d.job_id || ''))))));
}

// renderHistory draws GET /api/v1/history, the leader's samples of the
// pool (every minute by default, the last 6 hours): queue depth (queued,
// and pending: those the placer tries), the oldest wait, throughput (jobs
// ended per minute: each sample's count over the minutes since the one
// before) and GPU use (the share of GPUs holding a job, their mean
// utilisation).
function renderHistory(h) {
  const pts = (h && h.points) || [];
  const xs = pts.map((p) => Date.parse(p.at) / 1000);
  const hhmm = (v) => new Date(v * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  const note = $('#history-note');
  note.textContent = pts.length === 0 ? 'no samples yet (the leader takes one a minute)'
    : pts.length + (pts.length === 1 ? ' sample' : ' samples') + ' since ' + hhmm(xs[0]) + ', every team\'s jobs';
  // At least an hour wide, so one sample does not make the axis a point;
  // counts and waits tick at whole steps.
  const base = { time: true, xLabel: 'time', fx: hhmm, xSpan: 3600 };
  const whole = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
  const waits = [1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800];
  const count = (v) => String(Math.round(v));
  drawChart($('#hist-queue'), Object.assign({ key: 'queue', yLabel: 'jobs', fy: count, yMin: 0, yIncrs: whole,
    series: [{ label: 'queued', value: count }, { label: 'pending', value: count }] }, base),
  [xs, pts.map((p) => p.queued), pts.map((p) => p.pending)]);
  drawChart($('#hist-wait'), Object.assign({ key: 'wait', yLabel: 'oldest wait', fy: duration, yMin: 0, yIncrs: waits,
    series: [{ label: 'oldest wait', value: duration }] }, base),
  [xs, pts.map((p) => p.oldest_wait_s)]);
  const perMin = pts.map((p, i) => (i === 0 ? null : p.ended / Math.max(1 / 60, (xs[i] - xs[i - 1]) / 60)));
  drawChart($('#hist-throughput'), Object.assign({ key: 'throughput', yLabel: 'jobs / min', fy: fmtNum, yMin: 0,
    series: [{ label: 'ended / min', value: fmtNum }] }, base),
  [xs, perMin]);
  const pct = (v) => Math.round(v) + '%';
  drawChart($('#hist-gpu'), Object.assign({ key: 'gpu', yLabel: '%', fy: pct, yMin: 0, yMax: 100,
    series: [{ label: 'GPUs busy', value: pct }, { label: 'mean utilisation', value: pct }] }, base),
  [xs, pts.map((p) => (p.gpus ? 100 * p.gpus_busy / p.gpus : 0)), pts.map((p) => p.gpu_util_pct)]);
}

// pollHistory reads the history every HISTORY_EVERY polls (30 s; a new
// sample comes once a minute): undefined between reads.
const HISTORY_EVERY = 15;
let historyTick = 0;
function pollHistory() {
  if (historyTick++ % HISTORY_EVERY !== 0) return Promise.resolve(undefined);
  return api('/api/v1/history');
}

// pollDecisions reads the routing panel's decisions every DECISIONS_EVERY
// polls (10 s): null when the scheduler keeps no ledger (501).
const DECISIONS_EVERY = 5;
let decisionsTick = 0;
async function pollDecisions() {
  if (decisionsTick++ % DECISIONS_EVERY !== 0) return [undefined, undefined];
  return Promise.all([
    api('/api/v1/decisions?limit=50').catch((e) => { if (e.status === 501) return null; throw e; }),
    api('/api/v1/budgets')]);
}

async function pollOverview() {
  const [ov, list, sweeps, [decisions, budgets], history] = await Promise.all([api('/api/v1/overview?waiting_limit=0'),
    api('/api/v1/jobs?limit=200&loss_series=true'), api('/api/v1/sweeps?limit=10'), pollDecisions(), pollHistory()]);
  const details = new Map();
  await Promise.all((sweeps.sweeps || []).slice(0, 10).map(async (sw) => {
    try { details.set(sw.id, await api('/api/v1/sweeps/' + encodeURIComponent(sw.id))); } catch (e) { /* shown without best */ }
  }));
  renderQueues(ov.queues);
  renderNodes(ov.nodes, ov.queues.queues);
  renderCloud(ov.cloud || {});
  view.rows = jobRows(list, ov);
  renderJobs();
  renderSweeps(sweeps, details);
  if (decisions !== undefined) renderDecisions(decisions);
  if (budgets !== undefined) renderBudgets(budgets);
  if (history !== undefined) renderHistory(history);
  document.body.dataset.overviewAt = ov.at;
}

function setupOverview() {
  $('#overview').hidden = false;
  const sel = $('#job-state');
  for (const s of STATES) sel.appendChild(el('option', { value: s }, s));
  sel.addEventListener('change', renderJobs);
  $('#job-filter').addEventListener('input', renderJobs);
  for (const th of document.querySelectorAll('#job-table th[data-sort]')) {
    th.addEventListener('click', () => {
      const k = th.dataset.sort;
      view.desc = view.sort === k ? !view.desc : false;
      view.sort = k;
      renderJobs();
    });
  }
  return pollOverview;
}

// ---- job page ----

// Charts: uPlot on a canvas, axes with ticks and units, the values under
// the pointer in the legend. The axis text is CHART_FONT_PX CSS pixels:
// the canvas is sized in CSS pixels to its panel (uPlot scales it by
// devicePixelRatio), so the text is drawn at that size whatever the
// panel's width (the SVG charts before were scaled down with their
// viewBox, to about 6.5 px in a narrow panel).
const CHART_FONT_PX = 12;
const CHART_FONT = CHART_FONT_PX + 'px system-ui, sans-serif';
const CHART_HEIGHT = 240;
const SMALL_CHART_HEIGHT = 180;
const PALETTE = ['#4fb3ff', '#f0c05a', '#5fd38d', '#ff6b6b', '#c792ea', '#89ddff', '#f78c6c', '#d8dee6'];
const charts = new Map(); // box id -> {u, key}

// fmtNum writes a number for an axis or the legend: up to 4 significant
// digits, no trailing zeros.
function fmtNum(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  if (v !== 0 && Math.abs(v) < 0.001) return v.toExponential(1);
  return String(Number(v.toPrecision(4)));
}

// axis is a uPlot axis with the page's colours and font; values formats
// each tick and records the labels drawn in the box's data-{x,y}-ticks.
function axis(box, which, label, format, incrs) {
  const a = {
    label: label, stroke: '#8a96a3', font: CHART_FONT, labelFont: CHART_FONT, labelSize: 18, size: which === 'y' ? 56 : 40,
    grid: { stroke: '#2a3440', width: 1 }, ticks: { stroke: '#2a3440', width: 1, size: 5 },
    values: (u, splits) => {
      const v = splits.map((x) => (x === null ? '' : format(x)));
      box.dataset[which + 'Ticks'] = v.join('|');
      return v;
    },
  };
  if (incrs) a.incrs = incrs;
  return a;
}

// drawChart draws data ([xs, ys1, ys2, …], uPlot's aligned columns) into
// the box: a new uPlot when the series change (spec.key), else new data.
// spec: {key, time (x is seconds since the epoch), xLabel, yLabel, fx, fy
// (tick formats), series: [{label, value (legend format)}], yMin, yMax,
// xSpan (the x axis spans at least this much, ending at the last x),
// yIncrs (the y ticks' allowed steps, e.g. whole numbers for counts)}.
// data-points is the number of x values; "no points yet" when none.
function drawChart(box, spec, data) {
  const n = data[0].length;
  box.dataset.points = String(n);
  let c = charts.get(box.id);
  if (n === 0) {
    if (c) { c.u.destroy(); charts.delete(box.id); }
    box.replaceChildren(el('div', { class: 'empty chart-empty' }, 'no points yet'));
    return;
  }
  const span = (u) => { if (spec.xSpan) u.setScale('x', { min: Math.min(data[0][0], data[0][n - 1] - spec.xSpan), max: data[0][n - 1] }); };
  if (c && c.key === spec.key) { c.u.setData(data); span(c.u); return; }
  if (c) c.u.destroy();
  box.replaceChildren();
  const height = box.classList.contains('small') ? SMALL_CHART_HEIGHT : CHART_HEIGHT;
  const opts = {
    width: Math.max(200, box.clientWidth), height: height,
    scales: { x: { time: !!spec.time }, y: { range: (u, lo, hi) => yRange(lo, hi, spec) } },
    axes: [axis(box, 'x', spec.xLabel, spec.fx), axis(box, 'y', spec.yLabel, spec.fy, spec.yIncrs)],
    series: [{ label: spec.xLabel, value: (u, v) => (v === null ? '–' : spec.fx(v)) }].concat(spec.series.map((s, i) => ({
      label: s.label, stroke: PALETTE[i % PALETTE.length], width: 2, points: { show: n < 60 },
      value: (u, v) => (v === null || v === undefined ? '–' : s.value(v)),
    }))),
    cursor: { points: { size: 7 } },
    legend: { live: true },
  };
  const u = new uPlot(opts, data, box);
  span(u);
  charts.set(box.id, { u: u, key: spec.key });
  new ResizeObserver(() => {
    const cur = charts.get(box.id);
    if (cur && cur.u === u && Math.abs(u.width - box.clientWidth) > 2) u.setSize({ width: Math.max(200, box.clientWidth), height: height });
  }).observe(box);
}

// yRange is a chart's y scale: from spec.yMin (else a little under the
// lowest value) to spec.yMax (else a little over the highest).
function yRange(lo, hi, spec) {
  if (lo === null || hi === null) { lo = 0; hi = 1; } // no value yet (e.g. a rate of one sample)
  if (spec.yIncrs && spec.yMin !== undefined && hi < spec.yMin + spec.yIncrs[0]) hi = spec.yMin + spec.yIncrs[0];
  const pad = hi > lo ? (hi - lo) * 0.05 : Math.max(Math.abs(hi) * 0.05, 0.5);
  return [spec.yMin !== undefined ? spec.yMin : lo - pad, spec.yMax !== undefined ? spec.yMax : hi + pad];
}

// stepChart draws points [{x: step, y}] as one series.
function stepChart(box, points, label) {
  drawChart(box, { key: label, xLabel: 'step', yLabel: label, fx: (v) => String(Math.round(v)), fy: fmtNum,
    series: [{ label: label, value: (v) => v.toFixed(4) }] }, [points.map((p) => p.x), points.map((p) => p.y)]);
}

// renderGPUSeries draws GET /api/v1/jobs/{id}/gpu: utilisation (%) and
// memory used (GiB) over time, one line per GPU (the legend names them).
function renderGPUSeries(gs) {
  const pts = gs.points || [];
  const idx = [...new Set(pts.flatMap((p) => (p.gpus || []).map((g) => g.index)))].sort((a, b) => a - b);
  const xs = pts.map((p) => p.t / 1000);
  const col = (field) => idx.map((i) => pts.map((p) => {
    const g = (p.gpus || []).find((q) => q.index === i);
    return g ? field(g) : null;
  }));
  const key = idx.join(',');
  const hhmm = (v) => new Date(v * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' });
  drawChart($('#gpu-util-chart'), { key: 'util:' + key, time: true, xLabel: 'time', yLabel: 'utilisation (%)', fx: hhmm, fy: (v) => v + '%',
    yMin: 0, yMax: 100, series: idx.map((i) => ({ label: 'GPU ' + i, value: (v) => v + '%' })) },
  [xs].concat(col((g) => g.utilization_pct || 0)));
  drawChart($('#gpu-mem-chart'), { key: 'mem:' + key, time: true, xLabel: 'time', yLabel: 'memory used (GiB)', fx: hhmm, fy: (v) => fmtNum(v) + ' GiB',
    yMin: 0, series: idx.map((i) => ({ label: 'GPU ' + i, value: (v) => v.toFixed(2) + ' GiB' })) },
  [xs].concat(col((g) => (g.memory_used_mb || 0) / 1024)));
}

// fmtVal writes one value of an event's data as words: numbers short,
// lists joined, objects as "key value" pairs; never JSON.
function fmtVal(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : fmtNum(v);
  if (typeof v === 'string') return v;
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (Array.isArray(v)) return v.map(fmtVal).join(', ');
  return Object.entries(v).map(([k, x]) => k + ' ' + fmtVal(x)).join(', ');
}

// eventSummary is an event as one line of words.
function eventSummary(e) {
  const d = e.data || {};
  switch (e.type) {
    case 'state': return (d.from ? d.from + ' → ' : '') + d.to + (d.reason ? ' (' + d.reason + ')' : '') + (d.error ? ': ' + d.error : '');
    case 'log': return '[' + (d.stream || '') + '] ' + (d.line || '');
    case 'progress': return 'step ' + d.step + (d.total_steps ? '/' + d.total_steps : '') + (typeof d.loss === 'number' ? ' · loss ' + fmtNum(d.loss) : '') +
      (d.learning_rate ? ' · lr ' + fmtNum(d.learning_rate) : '') + (d.samples_per_s ? ' · ' + fmtNum(d.samples_per_s) + ' samples/s' : '');
    case 'eval': return 'step ' + d.step + (typeof d.eval_loss === 'number' ? ' · eval loss ' + fmtNum(d.eval_loss) : '');
    // The trainer's own "event" key repeats the type.
    default: return Object.entries(d).filter(([k]) => k !== 'event').map(([k, v]) => k.replace(/_/g, ' ') + ': ' + fmtVal(v)).join(' · ');
  }
}

// startText is a queued job's estimated start: the leader's last round's
// (its wait), else the routing decision's estimated wait from when it was
// decided; '' when neither.
function startText(j, now) {
  let t = j.wait && j.wait.estimated_start ? Date.parse(j.wait.estimated_start) : 0;
  if (!t && j.route && j.route.est_wait_s && j.route.decided_at) t = Date.parse(j.route.decided_at) + j.route.est_wait_s * 1000;
  if (!t) return '';
  return when(t) + (t > now ? ' (in ' + duration((t - now) / 1000) + ')' : ' (due)');
}

function renderJobFacts(j) {
  $('#job-title').textContent = 'Job ' + j.name + ' (' + j.id + ')';
  document.title = 'Lathe · ' + j.name;
  const p = j.progress || {};
  const r = j.route || null;
  const backend = j.backend || (r ? r.backend + (r.site ? ' @ ' + r.site : '') + (r.waiting ? ' (waits for it)' : '') : '');
  const facts = [['state', j.state], ['backend', backend], ['node', j.node || ''], ['GPUs', (j.gpus || []).join(',')],
    ['progress', p.total_steps ? p.step + '/' + p.total_steps : String(p.step || 0)], ['loss', p.loss ? p.loss.toFixed(4) : ''],
    ['cost', usd(Math.max(j.cost_now_usd || 0, j.cost_usd || 0))], ['attempt', String(j.attempt)]];
  if (j.budget_reserved_usd) facts.push(['reserved', usd(j.budget_reserved_usd)]);
  if (r && r.est_cost_usd) facts.push(['est. cost', usd(r.est_cost_usd)]);
  if (j.state === 'queued') {
    facts.push(['estimated start', startText(j, Date.now()) || 'not estimated yet']);
    if (j.wait) facts.push(['place in line', '#' + j.wait.position + ' ' + (j.wait.reason || '')]);
    else if (j.trial && j.trial.gate) facts.push(['waits', 'held by sweep ' + j.trial.sweep_id + ': ' + j.trial.gate]);
  }
  if (j.error) facts.push(['error', j.error]);
  $('#job-facts').replaceChildren(...facts.map(([k, v]) => el('div', { 'data-fact': k }, el('span', { class: 'k' }, k), ' ',
    k === 'error' ? fold(v, 'fact:error') : el('span', { class: 'v' + (k === 'state' ? ' state-' + v : '') }, v))));
}

function setupJob(id) {
  $('#jobpage').hidden = false;
  const evs = [];
  let after = '';
  return async function pollJob() {
    const j = await api('/api/v1/jobs/' + encodeURIComponent(id));
    const got = await api('/api/v1/jobs/' + encodeURIComponent(id) + '/events' + (after ? '?after=' + encodeURIComponent(after) : ''));
    renderGPUSeries(await api('/api/v1/jobs/' + encodeURIComponent(id) + '/gpu'));
    for (const e of got.events || []) { evs.push(e); after = e.id; }
    renderJobFacts(j);
    const pts = (type, field) => evs.filter((e) => e.type === type && e.data && typeof e.data[field] === 'number')
      .map((e) => ({ x: e.data.step || 0, y: e.data[field] }));
    stepChart($('#loss-chart'), pts('progress', 'loss'), 'loss');
    stepChart($('#eval-chart'), pts('eval', 'eval_loss'), 'eval loss');
    $('#log-tail').textContent = evs.filter((e) => e.type === 'log').slice(-200).map((e) => (e.data && e.data.line) || '').join('\n');
    const tail = evs.slice(-100).reverse();
    replaceRows($('#event-table tbody'), tail.map((e) => el('tr', { 'data-type': e.type }, el('td', {}, when(e.time)),
      el('td', {}, e.attempt), el('td', {}, e.type), el('td', { class: 'what' }, fold(eventSummary(e), 'event:' + e.id)))));
  };
}

// ---- main ----

function start() {
  const m = location.pathname.match(/^\/jobs\/([^/]+)$/);
  const poll = m ? setupJob(decodeURIComponent(m[1])) : setupOverview();
  let busy = false;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try { await poll(); setStatus(null); } catch (e) { setStatus(e); } finally { busy = false; }
  };
  tick();
  setInterval(tick, POLL_MS);
}

start();
