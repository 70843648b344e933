// The session page: the server's derived state (model.js keeps it current), rendered.
//
// Nothing here derives anything: transcript, turns, latency, lanes and markers
// are what rtvi_monitor/state.py made of the messages. Everything a bot or a
// client sent is written with textContent.
import uPlot from "../vendor/uplot/uPlot.esm.js";
import { liveSocket } from "./live.js";
import { applyChanges, batchFits, createModel } from "./model.js";
import {
  LANES,
  countsText,
  eventType,
  fatalText,
  isPreview,
  latencySeries,
  latencyText,
  mergeEvents,
  messageSummary,
  messageText,
  metricSeries,
  peerText,
  sessionStatus,
  speaker,
  speakerText,
  timelineEnd,
  timelineMarkers,
  timelineRows,
  timelineStart,
  totalsText,
  transcriptEntries,
} from "./format.js";

const config = JSON.parse(document.getElementById("session-config").textContent);
const $ = (id) => document.getElementById(id);
const ACK_EVERY = 200; // versions
const ACK_WAIT_MS = 500;
const SNAPSHOT_RETRY_MS = 5000;
const page = {
  model: null, // {state, bases, version}: the server's state
  session: null, // the session row
  log: [], // the newest stored messages, by seq
  charts: {},
  dirty: new Set(), // what to draw again: "transcript", "charts", "log"
  acked: -1,
  ackedAt: 0,
  ackTimer: 0,
  snapshotAsked: 0,
};
window.rtviSession = page; // for the browser tests and the curious

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// --- drawing -------------------------------------------------------------------

function renderStatus(state) {
  const status = sessionStatus(page.session, state);
  $("status").textContent = status.text;
  $("status").className = `pill ${status.kind}`;
}

function renderNow(state) {
  const who = speaker(state);
  $("speaker").dataset.speaker = who;
  $("speaker").textContent = speakerText(who);
  $("llm-user").textContent = state.llm?.last_user_llm_text ?? "";
  $("llm-tokens").textContent = state.llm?.current_tokens ?? "";
  $("llm-busy").textContent = state.llm?.busy ? "busy" : "idle";
  $("tts-text").textContent = state.tts?.current_text ?? "";
  $("tts-busy").textContent = state.tts?.busy ? "busy" : "idle";
  $("latency").textContent = latencyText(state.latency, (state.turns || []).length);
  $("totals").textContent = totalsText(state.totals);
  $("client").textContent = peerText(state.client_version, state.client_about);
  $("bot").textContent = peerText(state.bot_version, state.bot_about);
  $("protocol").textContent = state.protocol_version || page.session?.protocol_version || "?";
  $("counts").textContent = countsText(state.counts);
  $("fatal").hidden = !state.fatal;
  $("fatal").textContent = state.fatal ? fatalText(state) : "";
}

function renderTranscript(state) {
  const list = $("transcript");
  // An empty list (the first draw) follows the end without measuring: measuring forces a layout.
  const atBottom = !list.firstChild || list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  list.replaceChildren(
    ...transcriptEntries(state).map((entry) => {
      if (entry.who === undefined) return el("li", entry.className, entry.text);
      const li = el("li", entry.className);
      li.dataset.role = entry.className.split(" ")[0];
      li.append(el("span", "who", entry.who), el("span", "text", entry.text));
      return li;
    }),
  );
  if (atBottom) list.scrollTop = list.scrollHeight;
}

// Series hues from blue on, so that a first series is never the red of the p95 line.
const seriesColor = (i) => `hsl(${(210 + i * 67) % 360} 65% 50%)`;

function chart(id, names, data, extra = []) {
  const target = $(id);
  const xLabel = id === "chart-latency" ? "turn" : "seconds";
  const series = [{ label: xLabel }, ...names.map((name, i) => ({ label: name, stroke: seriesColor(i), spanGaps: true, points: { show: true } })), ...extra];
  const key = names.join(",") + extra.length;
  const existing = page.charts[id];
  if (existing && existing.key === key) {
    existing.plot.setData(data);
    return;
  }
  existing?.plot.destroy();
  const width = Math.max(260, target.clientWidth || 400);
  const plot = new uPlot({ width, height: 220, series, scales: { x: { time: false } }, axes: [{ label: xLabel }, { label: "ms" }] }, data, target);
  page.charts[id] = { plot, key };
}

function renderCharts(state) {
  // x: seconds since the series' first point, so one point still gets a sensible axis.
  for (const kind of ["ttfb", "processing"]) {
    const { names, data } = metricSeries(state, kind);
    const t0 = data[0][0] ?? 0;
    chart(`chart-${kind}`, names, [data[0].map((x) => Math.round((x - t0) * 10) / 10), ...data.slice(1)]);
  }
  chart("chart-latency", ["turn latency"], latencySeries(state), [
    { label: "p50", stroke: "gray", dash: [4, 4] },
    { label: "p95", stroke: "red", dash: [4, 4] },
  ]);
}

const LANE_COLORS = { user_speaking: "--user", bot_speaking: "--bot", llm_busy: "--accent", tts_busy: "--ok", function_calls: "--warn", interruptions: "--err" };
const MARKER_COLORS = { "disconnect-bot": "--warn", ended: "--muted" };
const TIMELINE = { height: 200, top: 32, row: 26, label: 110 };

function isLive(state) {
  return sessionStatus(page.session, state).kind !== "ended";
}

function renderTimeline(state) {
  const canvas = $("timeline");
  const width = canvas.clientWidth || 800;
  const { height, top, row, label } = TIMELINE;
  if (canvas.width !== width * devicePixelRatio || canvas.height !== height * devicePixelRatio) {
    canvas.width = width * devicePixelRatio;
    canvas.height = height * devicePixelRatio;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
  ctx.clearRect(0, 0, width, height);
  const css = getComputedStyle(document.documentElement);
  const now = Date.now() / 1000;
  const last = timelineEnd(state);
  // Live, the window runs with the clock; ended, it ends where the session did and starts no earlier than it.
  const live = isLive(state);
  const to = live ? Math.max(now, last ?? now) : last ?? now;
  const span = Number($("timeline-window").value);
  const start = Math.min(to - 1, timelineStart(state) ?? to - 1);
  const from = span && (live || to - span > start) ? to - span : start;
  const x = (t) => label + ((t - from) / (to - from)) * (width - label - 10);
  ctx.font = "12px system-ui, sans-serif";
  timelineRows(state, from, to).forEach((lane, i) => {
    const y = top + i * row;
    ctx.fillStyle = css.getPropertyValue("--muted");
    ctx.fillText(lane.label, 4, y + 13);
    ctx.fillStyle = css.getPropertyValue(LANE_COLORS[lane.lane]) || "gray";
    for (const [a, b] of lane.spans) ctx.fillRect(x(a), y + 2, Math.max(2, x(b) - x(a)), 16);
  });
  const bottom = top + LANES.length * row;
  const labelEnds = [-Infinity, -Infinity]; // two lines of marker labels above the lanes
  for (const marker of timelineMarkers(state, from, to)) {
    const color = css.getPropertyValue(MARKER_COLORS[marker.kind] || "--muted") || "gray";
    const mx = Math.round(x(marker.at)) + 0.5;
    ctx.strokeStyle = color;
    ctx.lineWidth = 1.5;
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    ctx.moveTo(mx, 6);
    ctx.lineTo(mx, bottom);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = color;
    // Right of its line, or left of it near the edge; on the second line if the first is taken there.
    const textWidth = ctx.measureText(marker.label).width;
    const start = mx + 3 + textWidth <= width ? mx + 3 : mx - 3 - textWidth;
    const line = labelEnds[0] < start ? 0 : labelEnds[1] < start ? 1 : 0;
    labelEnds[line] = start + textWidth + 4;
    ctx.fillText(marker.label, start, 11 + line * 13);
  }
  ctx.fillStyle = css.getPropertyValue("--muted");
  ctx.fillText(`${Math.round(to - from)} s`, width - 40, height - 4);
}

// The log keeps its row elements (an opened message stays open); rows only arrive at the end, except after a snapshot.
const logRows = new Map(); // seq -> <tr>

function logRow(event) {
  const type = eventType(event);
  const filter = $("log-filter");
  if (![...filter.options].some((o) => o.value === type)) filter.append(new Option(type, type));
  const row = el("tr");
  row.dataset.type = type;
  row.dataset.seq = String(event.seq);
  row.hidden = Boolean(filter.value) && filter.value !== type;
  const details = el("details");
  const summary = event.valid === false ? `invalid: ${event.error}` : messageSummary(event.message);
  const text = el("pre", "", messageText(event.message));
  details.append(el("summary", "", summary), text);
  if (isPreview(event.message)) details.append(loadButton(event.seq, text));
  const cell = el("td");
  cell.append(details);
  row.append(el("td", "", String(event.seq)), el("td", "", event.direction === "from-client" ? "client→bot" : "bot→client"), el("td", "", type), cell);
  return row;
}

function loadButton(seq, target) {
  const button = el("button", "link", "load the whole message");
  button.type = "button";
  button.addEventListener("click", async () => {
    button.disabled = true;
    button.textContent = "loading…";
    try {
      const response = await fetch(`${config.state_url}events/${seq}/`, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const event = await response.json();
      target.textContent = messageText(event.message);
      button.remove();
    } catch (error) {
      button.disabled = false;
      button.textContent = `could not load it (${error.message}): try again`;
    }
  });
  return button;
}

function renderLog() {
  const body = $("log");
  const keep = new Set(page.log.map((e) => e.seq));
  for (const [seq, row] of logRows) {
    if (!keep.has(seq)) {
      row.remove();
      logRows.delete(seq);
    }
  }
  const lastShown = body.lastElementChild ? Number(body.lastElementChild.dataset.seq) : -Infinity;
  let inOrder = true;
  const added = [];
  for (const event of page.log) {
    if (logRows.has(event.seq)) continue;
    const row = logRow(event);
    logRows.set(event.seq, row);
    added.push(row);
    if (event.seq < lastShown) inOrder = false;
  }
  if (inOrder) body.append(...added);
  else body.replaceChildren(...page.log.map((e) => logRows.get(e.seq)));
}

let lastCharts = -Infinity; // the first draw is at once, however soon after navigation it comes
let chartsLater = 0;
function render() {
  const dirty = page.dirty;
  page.dirty = new Set();
  scheduled = false;
  if (dirty.has("log")) renderLog();
  const state = page.model?.state;
  if (page.session || state) renderStatus(state ?? null);
  if (!state) return;
  renderNow(state);
  if (dirty.has("transcript")) renderTranscript(state);
  renderTimeline(state);
  if (dirty.has("charts")) {
    if (performance.now() - lastCharts > 500) {
      lastCharts = performance.now();
      renderCharts(state);
    } else if (!chartsLater) {
      chartsLater = setTimeout(() => {
        chartsLater = 0;
        schedule("charts");
      }, 500);
    }
  }
}

let scheduled = false;
function schedule(...parts) {
  for (const part of parts) page.dirty.add(part);
  if (!scheduled) {
    scheduled = true;
    requestAnimationFrame(render);
  }
}

// What a patch touched, for what to draw again.
function touched(changes) {
  const keys = new Set([...Object.keys(changes.head || {}), ...Object.keys(changes.tails || {})]);
  const parts = [];
  if (["transcript", "function_calls", "server_messages", "errors"].some((k) => k in changes || keys.has(k))) parts.push("transcript");
  if (["metrics", "turns", "latency"].some((k) => keys.has(k))) parts.push("charts");
  return parts;
}

// --- the socket ------------------------------------------------------------------

function acknowledge(socket) {
  const model = page.model;
  if (!model || model.version === page.acked) return;
  const wait = ACK_WAIT_MS - (performance.now() - page.ackedAt);
  if (model.version - page.acked >= ACK_EVERY || wait <= 0) {
    clearTimeout(page.ackTimer);
    page.ackTimer = 0;
    if (socket.readyState !== WebSocket.OPEN) return;
    socket.send(JSON.stringify({ ack: model.version }));
    page.acked = model.version;
    page.ackedAt = performance.now();
  } else if (!page.ackTimer) {
    page.ackTimer = setTimeout(() => {
      page.ackTimer = 0;
      acknowledge(socket);
    }, wait);
  }
}

function askForSnapshot(socket) {
  if (page.snapshotAsked && performance.now() - page.snapshotAsked < SNAPSHOT_RETRY_MS) return; // one is on its way
  page.snapshotAsked = performance.now();
  socket.send(JSON.stringify({ snapshot: true }));
}

function addEvents(events) {
  const log = mergeEvents(page.log, events || []);
  if (log !== page.log) {
    page.log = log;
    page.dirty.add("log");
  }
}

function onFrame(frame, socket) {
  if (frame.type === "snapshot") {
    page.model = createModel(frame);
    page.snapshotAsked = 0;
    page.acked = -1; // a new stream (or a new connection): say where we are at once
    page.ackedAt = 0;
    if (frame.session) page.session = frame.session;
    addEvents(frame.events);
    schedule("transcript", "charts");
  } else if (frame.type === "batch") {
    addEvents(frame.events);
    const fit = page.model ? batchFits(page.model, frame) : "gap";
    if (fit === "apply") {
      applyChanges(page.model, frame.changes || {});
      schedule(...touched(frame.changes || {}));
    } else if (fit === "gap") {
      askForSnapshot(socket);
    }
    schedule();
  } else if (frame.type === "session" || frame.type === "ended") {
    page.session = frame.session;
    schedule();
  } else if (frame.type === "resync") {
    askForSnapshot(socket);
    return;
  }
  acknowledge(socket);
}

$("timeline-window").addEventListener("change", () => schedule());
// The timeline scrolls with the clock while the session is live.
setInterval(() => page.model && isLive(page.model.state) && schedule(), 1000);

$("log-filter").addEventListener("change", () => {
  const type = $("log-filter").value;
  for (const row of $("log").rows) row.hidden = Boolean(type) && row.dataset.type !== type;
});

liveSocket(() => config.ws, onFrame, $("conn"));
