// megaconn's live dashboard: asks /stats on this origin every second and
// draws what it holds (a server's or a load generator's). Every number
// is written with textContent (nothing from /stats is ever parsed as
// HTML), and each card's raw value is in its data-value attribute.
'use strict';

const POLL_MS = 1000;
const KEEP = 300; // points per chart: five minutes at one a second
const state = { token: null, last: null, lastAt: 0, series: { a: [], b: [], c: [] }, failures: 0 };
window.dashboard = state; // for a test, or a person at the console

const $ = (id) => document.getElementById(id);
const sum = (o) => Object.values(o || {}).reduce((a, v) => a + (typeof v === 'number' ? v : 0), 0);
// A count, or a map of counts by kind summed.
const n = (v) => (typeof v === 'number' ? v : sum(v));
const fmt = (v) => (typeof v !== 'number' || !isFinite(v) ? '-' : Number.isInteger(v) ? v.toLocaleString('en-US') : v.toFixed(1));
const bytes = (v) => {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return `${i ? v.toFixed(1) : v} ${u[i]}`;
};

// The token: from /ui#token=..., then this tab's storage; the fragment is
// cleared from the address bar at once.
function takeToken() {
  const m = /[#&]token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem('megaconn-token', decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname);
  }
  state.token = sessionStorage.getItem('megaconn-token');
}

// What a per-second rate of counter `now(s)` was since the last /stats.
function rate(s, prev, dt, get) {
  if (!prev || dt <= 0) return NaN;
  return Math.max(0, (get(s) - get(prev)) / dt);
}

// The cards and charts of each kind of /stats: [key, label, value, shown].
function serverView(s, prev, dt) {
  const msgsIn = rate(s, prev, dt, (x) => (x.broker ? x.broker.messages : 0));
  const msgsOut = rate(s, prev, dt, (x) => n(x.push_delivered));
  const bytesIn = rate(s, prev, dt, (x) => (x.broker ? x.broker.bytes || 0 : 0));
  const bytesOut = rate(s, prev, dt, (x) => x.push_delivered_bytes || 0);
  const cpu = rate(s, prev, dt, (x) => x.cpu_us || 0) / 1e4;
  const refused = (s.refused_over_cap || 0) + sum(s.refused_per_ip) + sum(s.auth_refused) + sum(s.subscribe_refused) + sum(s.mqtt_publish_refused);
  return {
    kind: `server: ${s.workers} worker${s.workers === 1 ? '' : 's'}${s.cluster ? `, cluster node ${s.cluster.node || ''}` : ''}`,
    cards: [
      ['active', 'connections', s.active, fmt(s.active)],
      ['workers', 'workers (accepting)', s.workers, `${fmt(s.workers)} (${fmt(s.accepting)})`],
      ['subscriptions', 'subscriptions', s.subscriptions, fmt(s.subscriptions)],
      ['topics', 'topics', s.topics, fmt(s.topics)],
      ['messages_in', 'messages in /s', msgsIn, fmt(msgsIn)],
      ['messages_out', 'deliveries /s', msgsOut, fmt(msgsOut)],
      ['bytes_in', 'message bytes in /s', bytesIn, isFinite(bytesIn) ? bytes(bytesIn) : '-'],
      ['bytes_out', 'bytes delivered /s', bytesOut, isFinite(bytesOut) ? bytes(bytesOut) : '-'],
      ['sessions_kept', 'MQTT sessions kept', s.mqtt_sessions ? s.mqtt_sessions.kept : 0, fmt(s.mqtt_sessions ? s.mqtt_sessions.kept : 0)],
      ['retained', 'retained messages', s.mqtt_retained ? s.mqtt_retained.messages : 0, fmt(s.mqtt_retained ? s.mqtt_retained.messages : 0)],
      ['closed', 'closed', s.closed, fmt(s.closed)],
      ['refused', 'refused', refused, fmt(refused)],
      ['cpu', 'CPU % of a core', cpu, fmt(cpu)],
      ['rss_bytes', 'memory (RSS)', s.rss_bytes, bytes(s.rss_bytes || 0)],
    ],
    charts: [['Connections', s.active || 0, null], ['Messages per second: in, delivered', msgsIn, msgsOut]],
    grid: ['Top topics (last second)', TOPIC_COLUMNS, s.top_topics || [], () => false],
    tables: [
      ['Connections by protocol', s.active_by_protocol],
      ['Connections by worker', s.active_by_worker],
      ['Closes by reason', s.close_reasons],
      ['Refused at the door', Object.assign({ over_cap: s.refused_over_cap || 0 }, s.refused_per_ip)],
      ['Authentication refused', s.auth_refused],
      ['MQTT connects', s.mqtt_connects],
      ['MQTT publishes refused', s.mqtt_publish_refused],
      ['Subscriptions refused', s.subscribe_refused],
      ['Broker', s.broker && { messages: s.broker.messages, unrouted: s.broker.unrouted, shards: s.broker.shards, dropped: sum(s.broker.dropped) }],
      ['Cluster link', s.cluster && { up: s.cluster.up ? 1 : 0, other_nodes_heard: s.cluster.peers, messages_in: s.cluster.messages_in, messages_out: s.cluster.messages_out, refused: sum(s.cluster.refused) }],
    ],
  };
}

function clientView(s, prev, dt) {
  const beats = rate(s, prev, dt, (x) => n(x.heartbeats_answered));
  const replies = rate(s, prev, dt, (x) => n(x.replies));
  const pushes = rate(s, prev, dt, (x) => n(x.push_received) + n(x.mqtt_received));
  const cpu = rate(s, prev, dt, (x) => x.cpu_us || 0) / 1e4;
  const failed = sum(s.failed);
  return {
    kind: 'load generator',
    cards: [
      ['open', 'open', s.open, fmt(s.open)],
      ['planned', 'planned', s.planned, fmt(s.planned)],
      ['established_total', 'established', s.established_total, fmt(s.established_total)],
      ['connecting', 'connecting', s.connecting, fmt(s.connecting)],
      ['failed', 'failed', failed, fmt(failed)],
      ['lost', 'lost', sum(s.lost), fmt(sum(s.lost))],
      ['heartbeats', 'heartbeats answered /s', beats, fmt(beats)],
      ['replies', 'replies /s', replies, fmt(replies)],
      ['pushes', 'messages received /s', pushes, fmt(pushes)],
      ['cpu', 'CPU % of a core', cpu, fmt(cpu)],
      ['rss_bytes', 'memory (RSS)', s.rss_bytes, bytes(s.rss_bytes || 0)],
    ],
    charts: [['Open connections', s.open || 0, null], ['Per second: heartbeats, replies + messages', beats, replies + pushes]],
    tables: [['Failed by kind', s.failed], ['Lost by kind', s.lost], ['Not attempted', s.not_attempted_by], ['HTTP status', s.http_status]],
    grid: ['Phases: latency percentiles (ms)', PHASE_COLUMNS, s.phases, (p) => p.name === s.phase],
  };
}

// The busiest topics: messages and bytes a second.
const TOPIC_COLUMNS = [
  ['topic', (t) => t.topic],
  ['messages /s', (t) => t.messages_per_s],
  ['bytes /s', (t) => t.bytes_per_s],
];

// A load generator's phases: latency percentiles of each, in ms.
const PHASE_COLUMNS = [
  ['phase', (p) => p.name],
  ['seconds', (p) => p.seconds],
  ['open at end', (p) => p.open_at_end],
  ['established', (p) => p.established],
  ['failed', (p) => p.failed_total],
  ['handshake p50', (p) => p.handshake_ms.count ? p.handshake_ms.p50_ms : NaN],
  ['handshake p99', (p) => p.handshake_ms.count ? p.handshake_ms.p99_ms : NaN],
  ['heartbeat p50', (p) => p.heartbeat_rtt_ms.count ? p.heartbeat_rtt_ms.p50_ms : NaN],
  ['heartbeat p99', (p) => p.heartbeat_rtt_ms.count ? p.heartbeat_rtt_ms.p99_ms : NaN],
  ['request p99', (p) => p.request_ms.count ? p.request_ms.p99_ms : NaN],
  ['message p99', (p) => p.push_ms.count ? p.push_ms.p99_ms : NaN],
];

// A table of rows under named columns (a load generator's phases, a
// server's busiest topics); `now` marks the row that is current.
function gridTable([title, columns, rows, now]) {
  $('grid').hidden = !rows;
  if (!rows) return;
  $('grid-title').textContent = title;
  const t = $('grid-table');
  t.replaceChildren();
  const head = t.createTHead().insertRow();
  for (const [name] of columns) {
    const th = document.createElement('th');
    th.textContent = name;
    head.append(th);
  }
  const body = t.createTBody();
  for (const p of rows) {
    const row = body.insertRow();
    if (now(p)) row.className = 'now';
    row.dataset.row = columns[0][1](p);
    for (const [name, get] of columns) {
      const cell = row.insertCell();
      const v = get(p);
      cell.textContent = typeof v === 'string' ? v : fmt(v);
      cell.dataset.column = name;
      if (typeof v === 'number' && isFinite(v)) cell.dataset.value = String(v);
    }
  }
}

function card(key, label, raw, shown) {
  let el = document.querySelector(`[data-key="${key}"]`);
  if (!el) {
    const c = document.createElement('div');
    c.className = 'card';
    const l = document.createElement('span');
    l.className = 'label';
    l.textContent = label;
    el = document.createElement('span');
    el.className = 'value';
    el.dataset.key = key;
    c.append(l, el);
    $('cards').append(c);
  }
  el.dataset.value = typeof raw === 'number' && isFinite(raw) ? String(raw) : '';
  el.textContent = shown;
}

function table(title, rows) {
  const id = 'table-' + title.toLowerCase().replace(/[^a-z]+/g, '-');
  let t = $(id);
  if (!t) {
    const box = document.createElement('div');
    const h = document.createElement('h2');
    h.textContent = title;
    t = document.createElement('table');
    t.id = id;
    box.append(h, t);
    $('tables').append(box);
  }
  t.parentElement.hidden = rows === undefined || rows === null;
  const entries = Object.entries(rows || {}).sort((x, y) => (y[1] || 0) - (x[1] || 0));
  t.replaceChildren();
  if (entries.length === 0) {
    const td = document.createElement('td');
    td.className = 'none';
    td.textContent = 'none';
    t.insertRow().append(td);
  }
  for (const [k, v] of entries) {
    const row = t.insertRow();
    row.insertCell().textContent = k;
    const cell = row.insertCell();
    cell.textContent = fmt(v);
    cell.dataset.value = String(v);
  }
}

// A line chart of one or two series (the second dashed), newest right.
function chart(canvas, title, a, b) {
  const g = canvas.getContext('2d');
  const { width: w, height: h } = canvas;
  g.clearRect(0, 0, w, h);
  const all = a.concat(b).filter((v) => isFinite(v));
  const top = Math.max(1, ...all);
  g.strokeStyle = '#eaecf0';
  g.fillStyle = '#667085';
  g.font = '11px system-ui, sans-serif';
  for (const f of [0, 0.5, 1]) {
    const y = h - 16 - f * (h - 28);
    g.beginPath(); g.moveTo(40, y); g.lineTo(w, y); g.stroke();
    g.fillText(fmt(Math.round(top * f)), 2, y + 4);
  }
  const line = (vs, colour, dash) => {
    g.strokeStyle = colour; g.lineWidth = 2; g.setLineDash(dash); g.beginPath();
    // A point not known (the first rate, before a second /stats) is a
    // gap, not a zero.
    let joined = false;
    vs.forEach((v, i) => {
      if (!isFinite(v)) { joined = false; return; }
      const x = 40 + (w - 44) * (KEEP - vs.length + i) / (KEEP - 1);
      const y = h - 16 - v / top * (h - 28);
      if (joined) g.lineTo(x, y); else g.moveTo(x, y);
      joined = true;
    });
    g.stroke(); g.setLineDash([]);
  };
  line(a, '#2563eb', []);
  if (b.length) line(b, '#d97706', [5, 3]);
  g.fillText('5 min ago', 40, h - 2);
  g.fillText('now', w - 24, h - 2);
  canvas.previousElementSibling.textContent = title;
}

function render(s, at) {
  const dt = state.last ? (at - state.lastAt) / 1000 : 0;
  const view = ('active' in s && 'workers' in s ? serverView : clientView)(s, state.last, dt);
  $('kind').textContent = view.kind;
  for (const [key, label, raw, shown] of view.cards) card(key, label, raw, shown);
  const push = (arr, v) => { arr.push(v); if (arr.length > KEEP) arr.shift(); };
  const [[ta, a], [tb, b1, b2]] = view.charts;
  push(state.series.a, a);
  push(state.series.b, b1);
  if (b2 !== null) push(state.series.c, b2);
  chart($('chart-a'), ta, state.series.a, []);
  chart($('chart-b'), tb, state.series.b, state.series.c);
  for (const [title, rows] of view.tables) table(title, rows);
  gridTable(view.grid);
  state.last = s;
  state.lastAt = at;
}

async function poll() {
  const headers = state.token ? { Authorization: `Bearer ${state.token}` } : {};
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), 5000);
  try {
    const r = await fetch('/stats', { headers, cache: 'no-store', signal: abort.signal });
    if (r.status === 401) {
      $('login').hidden = false;
      throw new Error('the admin API wants its token');
    }
    const s = await r.json();
    if (!r.ok) throw new Error(s.error || `HTTP ${r.status}`);
    render(s, performance.now());
    state.failures = 0;
    $('status').className = '';
    $('status').textContent = `updated ${new Date().toLocaleTimeString('en-GB')}`;
  } catch (e) {
    state.failures++;
    $('status').className = 'error';
    $('status').textContent = `/stats: ${e.message || e} (${state.failures} in a row)`;
  } finally {
    clearTimeout(timer);
    setTimeout(poll, POLL_MS);
  }
}

$('login').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem('megaconn-token', $('token').value.trim());
  state.token = sessionStorage.getItem('megaconn-token');
  $('login').hidden = true;
});
takeToken();
poll();
