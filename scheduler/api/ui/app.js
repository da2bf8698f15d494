// Lathe's dashboard: polls the API every 2 s and renders it. Every string
// from the server goes into the page through textContent or an attribute,
// never as HTML: job names are written by users.
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

async function api(path) {
  const resp = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
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
const shortID = (id) => id.length > 12 ? id.slice(0, 12) : id;
const when = (t) => t ? new Date(t).toLocaleTimeString() : '';

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
  oj.textContent = q.oldest_job ? shortID(q.oldest_job) : '';
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

function renderGPU(g) {
  const memFrac = g.memory_total_mb ? g.memory_used_mb / g.memory_total_mb : 0;
  const title = [g.name, 'util ' + g.utilization_pct + '%', 'memory ' + g.memory_used_mb + '/' + g.memory_total_mb + ' MiB',
    g.temperature_c + ' °C', g.healthy ? 'healthy' : 'unhealthy: ' + (g.unhealthy || '?'), g.job_id ? 'job ' + g.job_id : (g.busy ? 'busy' : 'free')].join('\n');
  return el('div', { class: 'gpu' + (g.healthy ? '' : ' unhealthy'), 'data-gpu': g.index, 'data-util': g.utilization_pct,
    'data-mem-used': g.memory_used_mb, 'data-healthy': g.healthy, 'data-job': g.job_id || '', style: 'background:' + gpuColor(g), title: title },
  el('div', { class: 'idx' }, 'GPU ' + g.index), el('div', { class: 'util' }, g.utilization_pct + '%'),
  el('div', { class: 'mem' }, (memFrac * 100).toFixed(0) + '% mem'),
  g.healthy ? null : el('div', { class: 'why' }, g.unhealthy || 'unhealthy'));
}

function renderNodes(nodes) {
  const box = $('#nodes');
  if (!nodes || nodes.length === 0) { box.replaceChildren(el('div', { class: 'empty' }, 'no live nodes')); return; }
  box.replaceChildren(...nodes.map((n) => el('div', { class: 'node', 'data-node': n.name },
    el('div', { class: 'node-head' }, el('strong', {}, n.name), ' ', el('span', { class: 'k' }, n.backend),
      n.simulated ? el('span', { class: 'badge simulated' }, 'simulated') : null,
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
      id: j.id, name: j.name, state: r ? r.state : j.state, backend: (r && r.backend) || j.backend || '',
      node: (r && r.node) || j.node || '', gpus: (r ? r.gpus : j.gpus) || [],
      step: r ? r.step : p.step, total: r ? r.total_steps : p.total_steps, loss: r ? r.loss : p.loss,
      cost: r ? r.cost_usd : (j.cost_usd || 0), wait: j.state === 'queued' ? wait : null, error: j.error || '',
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

function jobRow(r) {
  const w = r.wait;
  const waitText = w ? '#' + w.position + (w.estimated_start ? ' · ~' + when(w.estimated_start) : '') + ' · ' + (w.reason || w.code || '') : (r.error || '');
  return el('tr', { 'data-job': r.id, 'data-state': r.state },
    el('td', { class: 'id' }, el('a', { href: '/jobs/' + encodeURIComponent(r.id) }, shortID(r.id))),
    el('td', { class: 'name' }, r.name), el('td', { class: 'state state-' + r.state }, r.state),
    el('td', { class: 'backend' }, r.backend), el('td', { class: 'node' }, r.node),
    el('td', { class: 'gpus' }, r.gpus.join(',')),
    el('td', { class: 'progress' }, bar(r.total ? r.step / r.total : 0), ' ', r.total ? r.step + '/' + r.total : ''),
    el('td', { class: 'loss' }, r.loss ? r.loss.toFixed(3) : '', sparkline(r.series)),
    el('td', { class: 'cost' }, usd(r.cost)),
    el('td', { class: 'reason', 'data-position': w ? w.position : '' }, waitText));
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
      best = shortID(d.best) + (row && row.objective !== undefined && row.objective !== null ? ' = ' + row.objective.toFixed(4) : '');
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
    el('td', { class: 'id' }, d.job_id ? el('a', { href: '/jobs/' + encodeURIComponent(d.job_id) }, shortID(d.job_id)) : '–'),
    el('td', { class: 'name' }, d.job_name || ''), el('td', {}, d.team || ''), el('td', {}, d.path || ''),
    el('td', { class: d.refused ? 'state-failed' : (d.waiting ? 'state-queued' : 'state-running') }, choice(d)),
    el('td', { class: 'cost' }, d.refused ? '' : usd(d.est_cost_usd)),
    el('td', { class: 'reason', title: (d.reasons || []).join('\n') }, shortReasons(d.reasons || [])))));
}

// pollDecisions reads the routing panel's decisions every DECISIONS_EVERY
// polls (10 s): null when the scheduler keeps no ledger (501).
const DECISIONS_EVERY = 5;
let decisionsTick = 0;
async function pollDecisions() {
  if (decisionsTick++ % DECISIONS_EVERY !== 0) return undefined;
  try { return await api('/api/v1/decisions?limit=50'); } catch (e) { if (e.status === 501) return null; throw e; }
}

async function pollOverview() {
  const [ov, list, sweeps, decisions] = await Promise.all([api('/api/v1/overview?waiting_limit=0'), api('/api/v1/jobs?limit=200&loss_series=true'),
    api('/api/v1/sweeps?limit=10'), pollDecisions()]);
  const details = new Map();
  await Promise.all((sweeps.sweeps || []).slice(0, 10).map(async (sw) => {
    try { details.set(sw.id, await api('/api/v1/sweeps/' + encodeURIComponent(sw.id))); } catch (e) { /* shown without best */ }
  }));
  renderQueues(ov.queues);
  renderNodes(ov.nodes);
  renderCloud(ov.cloud || {});
  view.rows = jobRows(list, ov);
  renderJobs();
  renderSweeps(sweeps, details);
  if (decisions !== undefined) renderDecisions(decisions);
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

// drawCurve draws points [{x, y}] into svgEl as one path, with the axes'
// ranges written at the corners.
function drawCurve(svgEl, points, cls) {
  const W = 600, H = 240, L = 48, R = 10, T = 10, B = 24;
  svgEl.replaceChildren();
  svgEl.appendChild(svg('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }));
  svgEl.appendChild(svg('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
  if (points.length === 0) {
    const t = svg('text', { x: W / 2 - 40, y: H / 2 });
    t.textContent = 'no points yet';
    svgEl.appendChild(t);
    svgEl.dataset.points = '0';
    return;
  }
  const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const sx = (x) => L + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => H - B - (y1 === y0 ? 0.5 : (y - y0) / (y1 - y0)) * (H - T - B);
  const d = points.map((p, i) => (i ? 'L' : 'M') + sx(p.x).toFixed(1) + ' ' + sy(p.y).toFixed(1)).join(' ');
  svgEl.appendChild(svg('path', { class: 'series ' + cls, d: d, 'data-points': points.length }));
  const labels = [[L - 4, T + 10, y1.toFixed(3), 'end'], [L - 4, H - B, y0.toFixed(3), 'end'],
    [L, H - 6, 'step ' + x0, 'start'], [W - R, H - 6, 'step ' + x1, 'end']];
  for (const [x, y, s, anchor] of labels) {
    const t = svg('text', { x: x, y: y, 'text-anchor': anchor });
    t.textContent = s;
    svgEl.appendChild(t);
  }
  svgEl.dataset.points = String(points.length);
}

// drawSeries draws several series [{points: [{x, y}], cls, label}] into
// svgEl on shared axes (y from 0 to yMax, or to the largest y), x as
// clock times (x in ms); each path carries data-points and data-label.
function drawSeries(svgEl, series, yMax, unit) {
  const W = 600, H = 240, L = 48, R = 10, T = 10, B = 24;
  svgEl.replaceChildren();
  svgEl.appendChild(svg('line', { class: 'axis', x1: L, y1: H - B, x2: W - R, y2: H - B }));
  svgEl.appendChild(svg('line', { class: 'axis', x1: L, y1: T, x2: L, y2: H - B }));
  const all = series.flatMap((s) => s.points);
  svgEl.dataset.points = String(all.length);
  if (all.length === 0) {
    const t = svg('text', { x: W / 2 - 40, y: H / 2 });
    t.textContent = 'no samples yet';
    svgEl.appendChild(t);
    return;
  }
  const xs = all.map((p) => p.x);
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const y1 = yMax || Math.max(1, ...all.map((p) => p.y));
  const sx = (x) => L + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => H - B - Math.max(0, Math.min(1, y / y1)) * (H - T - B);
  for (const s of series) {
    if (s.points.length === 0) continue;
    const d = s.points.map((p, i) => (i ? 'L' : 'M') + sx(p.x).toFixed(1) + ' ' + sy(p.y).toFixed(1)).join(' ');
    const path = svg('path', { class: 'series ' + s.cls, d: d, 'data-points': s.points.length, 'data-label': s.label });
    const title = svg('title', {});
    title.textContent = s.label;
    path.appendChild(title);
    svgEl.appendChild(path);
  }
  const labels = [[L - 4, T + 10, y1.toFixed(0) + unit, 'end'], [L - 4, H - B, '0', 'end'],
    [L, H - 6, when(x0), 'start'], [W - R, H - 6, when(x1), 'end']];
  for (const [x, y, s, anchor] of labels) {
    const t = svg('text', { x: x, y: y, 'text-anchor': anchor });
    t.textContent = s;
    svgEl.appendChild(t);
  }
}

// renderGPUSeries draws GET /api/v1/jobs/{id}/gpu: utilisation (%) and
// memory used (GiB) over time, one line per GPU.
function renderGPUSeries(gs) {
  const byGPU = new Map();
  for (const p of gs.points || []) {
    for (const g of p.gpus || []) {
      if (!byGPU.has(g.index)) byGPU.set(g.index, []);
      byGPU.get(g.index).push({ t: p.t, util: g.utilization_pct || 0, mem: (g.memory_used_mb || 0) / 1024 });
    }
  }
  const idx = [...byGPU.keys()].sort((a, b) => a - b);
  const series = (field) => idx.map((i, k) => ({ label: 'GPU ' + i, cls: 'gpu-line gpu-line-' + (k % 8),
    points: byGPU.get(i).map((q) => ({ x: q.t, y: q[field] })) }));
  drawSeries($('#gpu-util-chart'), series('util'), 100, '%');
  drawSeries($('#gpu-mem-chart'), series('mem'), 0, ' GiB');
  $('#gpu-legend').replaceChildren(...idx.map((i, k) => el('span', { class: 'legend gpu-line-' + (k % 8), 'data-gpu': i }, 'GPU ' + i)));
}

function eventSummary(e) {
  const d = e.data || {};
  switch (e.type) {
    case 'state': return (d.from ? d.from + ' → ' : '') + d.to + (d.reason ? ' (' + d.reason + ')' : '') + (d.error ? ': ' + d.error : '');
    case 'log': return '[' + (d.stream || '') + '] ' + (d.line || '');
    default: return JSON.stringify(d);
  }
}

function renderJobFacts(j) {
  $('#job-title').textContent = 'Job ' + j.name + ' (' + j.id + ')';
  document.title = 'Lathe · ' + j.name;
  const p = j.progress || {};
  const facts = [['state', j.state], ['backend', j.backend || ''], ['node', j.node || ''], ['GPUs', (j.gpus || []).join(',')],
    ['progress', p.total_steps ? p.step + '/' + p.total_steps : String(p.step || 0)], ['loss', p.loss ? p.loss.toFixed(4) : ''],
    ['cost', usd(j.cost_usd)], ['attempt', String(j.attempt)]];
  if (j.wait) facts.push(['place in line', '#' + j.wait.position + ' ' + (j.wait.reason || '')]);
  if (j.error) facts.push(['error', j.error]);
  $('#job-facts').replaceChildren(...facts.map(([k, v]) => el('div', { 'data-fact': k }, el('span', { class: 'k' }, k), ' ',
    el('span', { class: 'v' + (k === 'state' ? ' state-' + v : '') }, v))));
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
    drawCurve($('#loss-chart'), pts('progress', 'loss'), 'loss');
    drawCurve($('#eval-chart'), pts('eval', 'eval_loss'), 'eval');
    $('#log-tail').textContent = evs.filter((e) => e.type === 'log').slice(-200).map((e) => (e.data && e.data.line) || '').join('\n');
    const tail = evs.slice(-100).reverse();
    replaceRows($('#event-table tbody'), tail.map((e) => el('tr', { 'data-type': e.type }, el('td', {}, when(e.time)),
      el('td', {}, e.attempt), el('td', {}, e.type), el('td', { class: 'reason' }, eventSummary(e)))));
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
