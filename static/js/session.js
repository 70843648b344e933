// The session page: the server's derived state (model.js keeps it current), rendered for diagnosis.
//
// Nothing here derives anything: transcript, turns and their waterfalls, latency, lanes, usage and
// markers are what rtvi_monitor/core/state.py made of the messages, and the header is the session row.
// Everything a bot or a client sent is written with textContent.
//
// Parts: session_view.js (pure: what each view shows), state_format.js, session_row.js,
// timeline_lanes.js and message_format.js (pure: the state, the row and the messages as words and
// lanes), timeline.js (the canvas), message_log.js (the paged log), audio_player.js (the call's
// recording). This module holds the socket, the model, the timeline's window and the cursor that
// links the timeline, the transcript, the charts, the log and the audio's playhead.
import uPlot from "../vendor/uplot/uPlot.esm.js";
import { createAudioPlayer } from "./audio_player.js";
import { formatDuration } from "./format.js";
import { liveSocket } from "./live.js";
import { mergeEvents } from "./message_format.js";
import { createMessageLog } from "./message_log.js";
import { FIGURE_COLORS, seriesStyles } from "./palette.js";
import { applyChanges, batchFits, createModel } from "./model.js";
import { sessionStatus } from "./session_row.js";
import {
  LIVE_SPAN,
  MIN_SPAN,
  absoluteTimeOf,
  clockOf,
  eventTime,
  headerFacts,
  indexAt,
  isSlow,
  lastValue,
  panWindow,
  replyTurns,
  seriesNames,
  tickLabel,
  usageRows,
  viewWindow,
  waterfallBars,
  wholeWindow,
  windowShowing,
  zoomWindow,
} from "./session_view.js";
import {
  countsText,
  fatalText,
  latencySeries,
  latencyText,
  metricSeries,
  peerText,
  peerTitle,
  speaker,
  speakerText,
  totalsText,
  transcriptEntries,
} from "./state_format.js";
import { createTimeline } from "./timeline.js";
import { timelineEnd, timelineStart } from "./timeline_lanes.js";

const config = JSON.parse(document.getElementById("session-config").textContent);
const FAILED_ENDS = new Set(config.failed_ends); // the server's (rtvi_monitor/sessions/models.py), for the header's pill
const $ = (id) => document.getElementById(id);
const ACK_EVERY = 200; // versions
const ACK_WAIT_MS = 500;
const SNAPSHOT_RETRY_MS = 5000;
const CHARTS_EVERY_MS = 500;
const NO_CURSOR = "No cursor: click the timeline, a transcript line or a message's time.";
const page = {
  model: null, // {state, bases, version}: the server's state
  session: null, // the session row
  log: [], // the newest stored messages the socket brought, by seq
  charts: {},
  dirty: new Set(), // what to draw again: "transcript", "charts", "usage", "cursor"
  acked: -1,
  ackedAt: 0,
  ackTimer: 0,
  snapshotAsked: 0,
  offlineSince: null, // epoch seconds the page lost the server; null while it has it
  view: null, // the timeline's chosen window (session_view.viewWindow); null: the default for the session
  shown: null, // {from, to}: what the timeline and the time charts show
  cursor: null, // {at, seq?, from}: the moment the timeline, transcript, charts, log and audio point at
};
window.rtviSession = page; // for the browser tests and the curious

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function setText(id, text) {
  const node = $(id);
  if (node.textContent !== text) node.textContent = text;
}

/** The clock the page shows: now, or, while it has lost the server, the moment it did (nothing moves then). */
const clockNow = () => page.offlineSince ?? Date.now() / 1000;
const isLive = (state) => sessionStatus(page.session, state).kind !== "ended";

/** The session's first and last moments on the timeline: up to now while it is live. */
function extent(state) {
  const started = page.session?.started_at ? Date.parse(page.session.started_at) / 1000 : null;
  const from = timelineStart(state) ?? started ?? clockNow();
  const last = timelineEnd(state) ?? from;
  return { from, to: isLive(state) ? Math.max(clockNow(), last) : Math.max(last, from + MIN_SPAN) };
}

/** The window asked for, or by default the last two minutes of a live call and the whole of an ended one. */
function currentView(state) {
  if (page.view) return page.view;
  return isLive(state) ? { follow: true, span: LIVE_SPAN } : { follow: false, ...wholeWindow(extent(state)) };
}

// --- the header --------------------------------------------------------------------

function renderHeader(state) {
  const facts = headerFacts(page.session, state, clockNow(), FAILED_ENDS);
  $("status").className = `pill ${facts.status.pill}`;
  setText("status", facts.status.text);
  const agent = $("fact-agent");
  const link = agent.querySelector("a");
  if (facts.agent.id && (!link || link.textContent !== facts.agent.name)) {
    const a = el("a", "", facts.agent.name);
    a.href = `${agent.dataset.agentsUrl}${encodeURIComponent(facts.agent.id)}/`;
    a.title = facts.agent.id; // the name to read, the id on hover
    agent.replaceChildren(a);
  } else if (!facts.agent.id) {
    setText("fact-agent", facts.agent.name);
  }
  setText("fact-status", facts.status.text);
  $("fact-status").className = `status-${facts.status.kind}${facts.status.failed ? " failed" : ""}`;
  const keys = ["started", "ended", "duration", "turns", "interruptions", "errors", "protocol", "deployment", "redacted"];
  for (const key of keys) {
    setText(`fact-${key}`, facts[key]);
  }
  $("fact-deployment").title = page.session?.deployment_id || ""; // shown short, whole on hover
  $("fact-errors").classList.toggle("bad", facts.errors !== "0" && facts.errors !== "—");
  for (const id of ["fact-cost", "usage-cost"]) {
    setText(id, facts.cost.text);
    $(id).title = facts.cost.hint;
  }
  for (const hint of document.querySelectorAll(".cost-hint")) {
    hint.hidden = !facts.cost.hint;
    hint.textContent = facts.cost.hint ? `(${facts.cost.hint})` : "";
  }
  if (facts.endedLine) showEnded(facts.endedLine);
}

/** The call ended: nothing can be done on it and nothing goes on in it. Its actions and "Now" go, one line says so. */
function showEnded(line) {
  setText("call-ended", line);
  $("call-ended").hidden = false;
  $("control")?.remove();
  if ($("now")) {
    $("now").remove();
    $("now-grid").classList.add("single");
  }
}

function renderOffline() {
  $("offline").hidden = page.offlineSince === null;
  if (page.offlineSince !== null) {
    setText("offline", `Lost the connection to the server at ${clockOf(page.offlineSince)}; reconnecting. What you see is as of then: the clock, the timeline and whatever was still going on are stopped there. The session itself may well go on.`);
  }
}

function renderNow(state) {
  if ($("now")) {
    // What goes on in the call now: a live call's only (an ended one has no "Now").
    const who = speaker(state);
    $("speaker").dataset.speaker = who;
    setText("speaker", speakerText(who));
    setText("llm-user", state.llm?.last_user_llm_text ?? "");
    setText("llm-tokens", state.llm?.current_tokens ?? "");
    setText("llm-busy", state.llm?.busy ? "busy" : "idle");
    setText("tts-text", state.tts?.current_text ?? "");
    setText("tts-busy", state.tts?.busy ? "busy" : "idle");
  }
  setText("latency", latencyText(state.latency, (state.turns || []).length));
  setText("totals", totalsText(state.totals));
  setText("client", peerText(state.client_version, state.client_about));
  setText("bot", peerText(state.bot_version, state.bot_about));
  $("client").title = peerTitle(state.client_about); // the whole of what it said, on hover
  $("bot").title = peerTitle(state.bot_about);
  setText("counts", countsText(state.counts));
  $("fatal").hidden = !state.fatal;
  setText("fatal", state.fatal ? fatalText(state) : "");
}

function renderUsage(state) {
  const rows = usageRows(state.usage).map((use) => {
    const tr = el("tr");
    const cells = [
      ["Model", use.model],
      ["Prompt tokens", use.prompt],
      ["Completion tokens", use.completion],
      ["TTS characters", use.characters],
      ["STT audio", use.audio],
    ];
    for (const [label, text] of cells) {
      const td = el(label === "Model" ? "th" : "td", text === "—" ? "none" : "", text);
      if (label === "Model") td.scope = "row";
      td.dataset.label = label; // the narrow layout stacks each row's cells under their labels
      tr.append(td);
    }
    return tr;
  });
  $("usage").replaceChildren(...rows);
  $("usage-none").hidden = rows.length > 0;
}

// --- the transcript ------------------------------------------------------------------

const lines = []; // [at, <li>] in time order, for the cursor

function waterfall(turn, latency) {
  const box = el("div", "waterfall");
  for (const bar of waterfallBars(turn, latency)) {
    const row = el("div", "wf-row");
    row.dataset.part = bar.part;
    row.title = bar.title;
    const track = el("span", "wf-track");
    const fill = el("span", `wf-bar${bar.open ? " open" : ""}`);
    fill.style.left = `${bar.left}%`;
    if (!bar.open) fill.style.width = `${bar.width}%`; // an open part's width is the stylesheet's stub
    track.append(fill);
    row.append(el("span", "wf-label", bar.label), track, el("span", "wf-ms", bar.text));
    box.append(row);
  }
  return box;
}

function renderTranscript(state) {
  const list = $("transcript");
  // An empty list (the first draw) follows the end without measuring: measuring forces a layout.
  const atBottom = !list.firstChild || list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  const turns = replyTurns(state.transcript, state.turns);
  const items = new Map((state.transcript || []).map((item) => [item.at, item]));
  lines.length = 0;
  const entries = transcriptEntries(state).map((entry) => {
    const li = el("li", entry.className);
    const head = el("div", "line-head");
    if (entry.who !== undefined) {
      li.dataset.role = entry.className.split(" ")[0];
      head.append(el("span", "who", entry.who));
    }
    const time = el("time", "at", clockOf(entry.at));
    time.title = absoluteTimeOf(entry.at);
    head.append(time);
    const turn = li.dataset.role === "bot" ? turns.get(entry.at) : undefined;
    if (turn) {
      li.dataset.turn = String(turn.index);
      head.append(el("span", "latency", `${formatDuration(turn.latency_ms)} to reply`));
      if (isSlow(turn, state.latency)) {
        li.classList.add("slow");
        head.append(el("span", "slow-mark", `slow: over the p95 of ${formatDuration(state.latency.p95)}`));
      }
    }
    li.append(head, el("span", "text", entry.text));
    if (turn?.waterfall?.length) li.append(waterfall(turn, state.latency));
    const seq = entry.who !== undefined ? items.get(entry.at)?.seq : undefined;
    li.addEventListener("click", () => setCursor({ at: entry.at, seq, from: "transcript", role: li.dataset.role }));
    lines.push([entry.at, li]);
    return li;
  });
  list.replaceChildren(...entries);
  if (atBottom) list.scrollTop = list.scrollHeight;
  markTranscript(false);
}

let cursorLine = null; // the time of the transcript line at the cursor, the last it was marked

function markTranscript(scroll) {
  const list = $("transcript");
  for (const li of list.querySelectorAll("li.cursor")) li.classList.remove("cursor");
  if (!page.cursor) {
    cursorLine = null;
    return;
  }
  const index = indexAt(lines, page.cursor.at, (line) => line[0]);
  if (index < 0) return;
  const li = lines[index][1];
  li.classList.add("cursor");
  // Following the audio, the list scrolls when the playhead reaches another line, not ten times a second.
  const another = cursorLine !== lines[index][0];
  cursorLine = lines[index][0];
  if (scroll && (another || page.cursor.from !== "audio")) {
    list.scrollTop += li.getBoundingClientRect().top - list.getBoundingClientRect().top - list.clientHeight / 3;
  }
}

// --- charts ----------------------------------------------------------------------------

const themed = () => {
  const css = getComputedStyle(document.documentElement);
  const get = (name) => css.getPropertyValue(name).trim();
  return { fg: get("--fg"), muted: get("--muted"), line: get("--line"), err: get("--err"), get: (name) => get(name) || "gray" };
};

/** The ms a legend shows: the hovered point's, else the series' last. */
const msValue = (u, value, seriesIdx, idx) => {
  if (idx === null || idx === undefined) {
    const last = lastValue(u.data[seriesIdx]);
    return last === null ? "—" : `${formatDuration(last)} (last)`;
  }
  return value === null || value === undefined ? "—" : formatDuration(value);
};

// The page's cursor on a time chart, where the timeline has it.
function drawCursor(u) {
  const at = page.cursor?.at;
  if (typeof at !== "number") return;
  const x = Math.round(u.valToPos(at, "x", true));
  if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
  const { ctx } = u;
  ctx.save();
  ctx.strokeStyle = themed().fg;
  ctx.lineWidth = devicePixelRatio;
  ctx.beginPath();
  ctx.moveTo(x, u.bbox.top);
  ctx.lineTo(x, u.bbox.top + u.bbox.height);
  ctx.stroke();
  ctx.restore();
}

function axes(xLabel, x) {
  const { muted, line } = themed();
  const style = { stroke: muted, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 } };
  // The figures in the product's one duration format ("820 ms", "1.4 s"), as the legends and tables say them.
  return [{ ...style, label: xLabel, ...x }, { ...style, size: 56, values: (_u, splits) => splits.map(formatDuration) }];
}

const fromZero = (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1];

function chart(id, key, options, data) {
  const target = $(id);
  const existing = page.charts[id];
  if (existing && existing.key === key) {
    existing.plot.setData(data);
    return;
  }
  existing?.plot.destroy();
  const width = Math.max(240, target.clientWidth || 400);
  const plot = new uPlot({ width, height: 210, legend: { live: true }, ...options }, data, target);
  page.charts[id] = { plot, key };
}

function renderCharts(state) {
  // ttfb and processing on the timeline's clock: x is the time each figure came, and the window is the timeline's.
  for (const kind of ["ttfb", "processing"]) {
    const { names, data } = metricSeries(state, kind);
    const labels = seriesNames(names);
    const styles = seriesStyles(names); // each service in its kind's colour, as on the timeline (palette.js)
    const { get } = themed();
    chart(
      `chart-${kind}`,
      labels.join("\n"),
      {
        series: [
          { label: "time", value: (_u, v) => (v === null || v === undefined ? "—" : clockOf(v, { ms: true })) },
          ...labels.map((label, i) => ({ label, stroke: get(styles[i].color), dash: styles[i].dash, width: 1.5, spanGaps: true, points: { show: true, size: 5 }, value: msValue })),
        ],
        scales: { x: { time: true, range: () => [page.shown.from, page.shown.to] }, y: { range: fromZero } },
        // The timeline's clock on the axis too (uPlot's own would add a date, and a format of its own).
        axes: axes("", { space: 70, values: (_u, splits, _axis, _space, step) => splits.map((at) => tickLabel(at, step)) }),
        cursor: { drag: { x: false, y: false } }, // the timeline owns the window
        hooks: { draw: [drawCursor] },
      },
      data,
    );
  }
  const { fg, get } = themed();
  chart(
    "chart-latency",
    "latency",
    {
      series: [
        { label: "turn", value: (_u, v) => (v === null || v === undefined ? "—" : `#${v}`) },
        { label: "turn latency", stroke: fg, width: 1.5, points: { show: true, size: 6 }, value: msValue },
        { label: "p50", stroke: get(FIGURE_COLORS.p50), dash: [4, 4], points: { show: false }, value: msValue },
        { label: "p95", stroke: get(FIGURE_COLORS.p95), dash: [4, 4], points: { show: false }, value: msValue },
      ],
      scales: { x: { time: false, range: (_u, min, max) => [(min ?? 1) - 0.5, (max ?? 1) + 0.5] }, y: { range: fromZero } },
      // Turns are whole numbers: ticks on whole steps only.
      axes: axes("turn", { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000], values: (_u, splits) => splits.map((v) => (Number.isInteger(v) ? String(v) : "")) }),
    },
    latencySeries(state),
  );
}

/** The time charts follow the timeline's window, and show its cursor. */
function syncCharts(cursorMoved) {
  for (const id of ["chart-ttfb", "chart-processing"]) {
    const plot = page.charts[id]?.plot;
    if (!plot) continue;
    if (plot.scales.x.min !== page.shown.from || plot.scales.x.max !== page.shown.to) {
      plot.setScale("x", { min: page.shown.from, max: page.shown.to });
    } else if (cursorMoved) {
      plot.redraw(false);
    }
  }
}

function resizeCharts() {
  for (const [id, { plot }] of Object.entries(page.charts)) {
    const width = Math.max(240, $(id).clientWidth);
    if (plot.width !== width) plot.setSize({ width, height: plot.height });
  }
}

// --- the timeline and the cursor -------------------------------------------------------

function panBy(seconds) {
  const state = page.model?.state;
  if (!state || !page.shown) return;
  setView({ follow: false, ...panWindow(page.shown, seconds, extent(state)) });
}

function zoomBy(factor, at) {
  const state = page.model?.state;
  if (!state || !page.shown) return;
  const span = page.shown.to - page.shown.from;
  // Following the clock, a zoom keeps following (now stays at the right); otherwise it is about `at`.
  if (currentView(state).follow) setView({ follow: true, span: Math.max(span * factor, MIN_SPAN) });
  else setView({ follow: false, ...zoomWindow(page.shown, factor, at) });
}

const timeline = createTimeline($("timeline"), {
  pan: panBy,
  zoom: zoomBy,
  pick: (at) => setCursor({ at, from: "timeline" }),
});

function setView(view) {
  page.view = view;
  schedule();
}

/**
 * The one way the cursor moves. Placed by the operator (the timeline, a transcript line, a message), it
 * takes the audio's playhead with it, and a transcript line plays from there; placed by the playing audio
 * (`from: "audio"`), it only follows.
 */
function setCursor(cursor) {
  page.cursor = cursor;
  if (cursor && cursor.from !== "audio") audio.seekTo(cursor.at, { play: cursor.from === "transcript", role: cursor.role });
  schedule("cursor");
}

function renderTimeline(state) {
  const live = isLive(state);
  const view = currentView(state);
  page.shown = viewWindow(view, extent(state));
  timeline.draw(state, page.shown, {
    now: live ? clockNow() : null,
    live,
    offline: page.offlineSince !== null,
    cursor: page.cursor?.at ?? null,
  });
  const span = page.shown.to - page.shown.from;
  setText("tl-range", `${clockOf(page.shown.from)} – ${clockOf(page.shown.to)} (${formatDuration(span * 1000)})${view.follow && live ? ", following the clock" : ""}`);
  $("tl-live").hidden = !live || view.follow;
}

/** The transcript line whose message is the nearest at or before a moment: where the log reads from. */
function anchorSeq(at) {
  const items = (page.model?.state.transcript || []).filter((item) => typeof item.seq === "number");
  const index = indexAt(items, at, (item) => item.at);
  return index < 0 ? undefined : items[index].seq;
}

function applyCursor() {
  const cursor = page.cursor;
  $("cursor-clear").hidden = !cursor;
  if (!cursor) {
    setText("cursor-text", NO_CURSOR);
    markTranscript(false);
    messageLog.unmark();
    return;
  }
  setText("cursor-text", `Cursor at ${clockOf(cursor.at, { ms: true })}`);
  if (cursor.from !== "timeline" && page.shown) {
    const shown = windowShowing(page.shown, cursor.at);
    if (shown !== page.shown) page.view = { follow: false, ...shown };
  }
  markTranscript(cursor.from !== "transcript");
  showInLog();
}

// The log is shown the cursor one request at a time: a cursor that moves meanwhile (the audio's, ten
// times a second) is shown once the page on its way has come, at wherever it is by then.
let logShowing = null;
let logAgain = false;

function showInLog() {
  if (logShowing) {
    logAgain = true;
    return;
  }
  const cursor = page.cursor;
  if (!cursor) return;
  logShowing = messageLog.show(cursor.at, { seq: cursor.seq, anchor: anchorSeq(cursor.at), scroll: cursor.from !== "log" }).finally(() => {
    logShowing = null;
    if (!page.cursor) messageLog.unmark();
    else if (logAgain) showInLog();
    logAgain = false;
  });
}

// --- the message log ------------------------------------------------------------------

const messageLog = createMessageLog({
  pagesUrl: `${config.state_url}events/`,
  eventUrl: (seq) => `${config.state_url}events/${seq}/`,
  tail: () => page.log,
  pick: (event) => setCursor({ at: eventTime(event), seq: event.seq, from: "log" }),
});

// --- the audio --------------------------------------------------------------------------

const audio = createAudioPlayer({
  urls: config.audio || { url: `${config.state_url}audio/` },
  live: () => (page.model || page.session ? isLive(page.model?.state ?? null) : null),
  follow: (at) => setCursor({ at, from: "audio" }),
  turnStart: (index) => (page.model?.state.turns || []).find((turn) => turn.index === index)?.user_stopped_at ?? null,
});
window.rtviAudio = audio; // for the browser tests and the curious

// --- drawing ---------------------------------------------------------------------------

let lastCharts = -Infinity; // the first draw is at once, however soon after navigation it comes
let chartsLater = 0;
let scheduled = false;

function render() {
  const dirty = page.dirty;
  page.dirty = new Set();
  scheduled = false;
  const state = page.model?.state;
  renderOffline();
  if (page.session || state) renderHeader(state ?? null);
  if (!state) return;
  renderNow(state);
  if (dirty.has("usage")) {
    renderUsage(state);
    messageLog.types(Object.keys(state.counts?.by_type || {}).filter((type) => type !== "(other)"));
  }
  if (dirty.has("cursor")) applyCursor();
  if (dirty.has("transcript")) renderTranscript(state);
  renderTimeline(state);
  if (dirty.has("charts")) {
    if (performance.now() - lastCharts > CHARTS_EVERY_MS) {
      lastCharts = performance.now();
      renderCharts(state);
    } else if (!chartsLater) {
      chartsLater = setTimeout(() => {
        chartsLater = 0;
        schedule("charts");
      }, CHARTS_EVERY_MS);
    }
  }
  syncCharts(dirty.has("cursor"));
}

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
  if (["transcript", "function_calls", "server_messages", "errors", "turns", "latency"].some((k) => k in changes || keys.has(k))) parts.push("transcript");
  if (["metrics", "turns", "latency"].some((k) => keys.has(k))) parts.push("charts");
  if (["usage", "counts"].some((k) => keys.has(k))) parts.push("usage");
  return parts;
}

// --- the socket ------------------------------------------------------------------------

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

function onFrame(frame, socket) {
  if (frame.type === "snapshot") {
    page.model = createModel(frame);
    page.snapshotAsked = 0;
    page.acked = -1; // a new stream (or a new connection): say where we are at once
    page.ackedAt = 0;
    page.offlineSince = null; // the page has the server's state again
    if (frame.session) page.session = frame.session;
    page.log = mergeEvents(page.log, frame.events || []);
    // After a reconnection the newest messages may be far past the rows shown: start again from them.
    if (messageLog.pager.following) messageLog.reset();
    schedule("transcript", "charts", "usage");
  } else if (frame.type === "batch") {
    page.log = mergeEvents(page.log, frame.events || []);
    messageLog.live(frame.events || []);
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

// --- controls ----------------------------------------------------------------------------

// The buttons zoom about the cursor when the timeline shows it, else about the middle.
const zoomCentre = () => {
  if (!page.shown) return 0;
  const at = page.cursor?.at;
  return typeof at === "number" && at >= page.shown.from && at <= page.shown.to ? at : (page.shown.from + page.shown.to) / 2;
};
const span = () => (page.shown ? page.shown.to - page.shown.from : 0);
$("tl-in").addEventListener("click", () => zoomBy(0.5, zoomCentre()));
$("tl-out").addEventListener("click", () => zoomBy(2, zoomCentre()));
$("tl-earlier").addEventListener("click", () => panBy(-span() / 4));
$("tl-later").addEventListener("click", () => panBy(span() / 4));
$("tl-whole").addEventListener("click", () => {
  const state = page.model?.state;
  if (state) setView(isLive(state) ? { follow: true, span: Number.POSITIVE_INFINITY } : null);
});
$("tl-live").addEventListener("click", () => setView({ follow: true, span: LIVE_SPAN }));
$("cursor-clear").addEventListener("click", () => setCursor(null));

// While live, the clock moves the timeline and the duration; not while the page has lost the server.
setInterval(() => page.model && page.offlineSince === null && isLive(page.model.state) && schedule(), 1000);
window.addEventListener("resize", () => {
  resizeCharts();
  schedule();
});

// live.js marks its status element "down" when the socket closes. From then until the next snapshot
// the page says so, and stops its clock: what it shows is as of that moment.
const conn = $("conn");
new MutationObserver(() => {
  if (conn.classList.contains("down") && page.offlineSince === null) {
    page.offlineSince = Date.now() / 1000;
    schedule();
  }
}).observe(conn, { attributes: true, attributeFilter: ["class"] });

liveSocket(() => config.ws, onFrame, conn);
