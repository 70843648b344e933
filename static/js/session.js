// The session page: snapshot, then live events; everything a bot says is written with textContent.
import uPlot from "../vendor/uplot/uPlot.esm.js";
import { liveSocket } from "./live.js";
import { applyEvents, createView, latencyStats, metricSeries, newEvents, speaker, timelineRows } from "./viewmodel.js";

const config = JSON.parse(document.getElementById("session-config").textContent);
const $ = (id) => document.getElementById(id);
const page = { view: null, charts: {}, renderedSeq: 0, acked: 0, ackedAt: 0, dirty: false };
window.rtviSession = page; // for the browser tests and the curious

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function renderTranscript(view) {
  const list = $("transcript");
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  const items = [];
  for (const t of view.transcript) {
    const li = el("li", `${t.role}${t.final ? "" : " partial"}`);
    li.dataset.role = t.role;
    li.append(el("span", "who", t.role === "user" ? (t.source === "chat" ? "user (typed)" : "user") : "bot"), el("span", "text", t.text));
    items.push([t.at || 0, li]);
  }
  for (const c of view.functionCalls) {
    items.push([c.started_at || 0, el("li", "note", `function ${c.function_name || "(unnamed)"}: ${c.status}${c.duration_ms != null ? ` in ${c.duration_ms} ms` : ""}`)]);
  }
  for (const m of view.serverMessages) {
    items.push([m.at || 0, el("li", "note", `server message: ${JSON.stringify(m.data)}`)]);
  }
  for (const e of view.errors) {
    items.push([e.at || 0, el("li", "note err", `${e.fatal ? "fatal error" : e.type}: ${e.message}`)]);
  }
  items.sort((a, b) => a[0] - b[0]);
  list.replaceChildren(...items.map(([, li]) => li));
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function renderNow(view) {
  const who = speaker(view);
  $("speaker").dataset.speaker = who;
  $("speaker").textContent = who === "nobody" ? "nobody speaking" : who === "both" ? "both speaking" : `${who} speaking`;
  $("llm-user").textContent = view.llm.last_user_llm_text;
  $("llm-tokens").textContent = view.llm.current_tokens;
  $("llm-busy").textContent = view.llm.busy ? "busy" : "idle";
  $("tts-text").textContent = view.tts.current_text;
  $("tts-busy").textContent = view.tts.busy ? "busy" : "idle";
  const stats = latencyStats(view.turns);
  $("latency").textContent = stats.p50 == null ? "—" : `p50 ${Math.round(stats.p50)} ms · p95 ${Math.round(stats.p95)} ms · max ${Math.round(stats.max)} ms (${view.turns.length} turns)`;
  $("totals").textContent = `${view.totals.total_tokens} tokens (${view.totals.prompt_tokens} prompt, ${view.totals.completion_tokens} completion) · ${view.totals.characters} characters`;
  if (view.fatal) {
    const fatal = view.errors.findLast((e) => e.fatal);
    $("fatal").hidden = false;
    $("fatal").textContent = `Fatal error: ${fatal ? fatal.message : ""}`;
  }
}

function renderLog(view) {
  const body = $("log");
  const filter = $("log-filter");
  const types = new Set([...filter.options].map((o) => o.value));
  for (const event of view.log) {
    if (event.seq <= page.renderedSeq) continue;
    const type = event.message && typeof event.message === "object" ? String(event.message.type ?? "") : "(not JSON)";
    if (!types.has(type)) {
      filter.append(new Option(type, type));
      types.add(type);
    }
    const row = el("tr");
    row.dataset.type = type;
    row.hidden = Boolean(filter.value) && filter.value !== type;
    const details = el("details");
    details.append(el("summary", "", event.valid ? "" : `invalid: ${event.error}`), el("pre", "", typeof event.message === "string" ? event.message : JSON.stringify(event.message, null, 2)));
    const cell = el("td");
    cell.append(details);
    row.append(el("td", "", String(event.seq)), el("td", "", event.direction === "from-client" ? "client→bot" : "bot→client"), el("td", "", type), cell);
    body.append(row);
  }
  while (body.rows.length > 2000) body.deleteRow(0);
  page.renderedSeq = view.log.length ? view.log[view.log.length - 1].seq : page.renderedSeq;
}

function chart(id, names, data, extra = []) {
  const target = $(id);
  const series = [{}, ...names.map((name, i) => ({ label: name, stroke: `hsl(${(i * 67) % 360} 65% 50%)`, spanGaps: true, points: { show: true } })), ...extra];
  const key = names.join(",") + extra.length;
  const existing = page.charts[id];
  if (existing && existing.key === key) {
    existing.plot.setData(data);
    return;
  }
  existing?.plot.destroy();
  const width = Math.max(300, target.clientWidth || 400);
  const xLabel = id === "chart-latency" ? "turn" : "seconds";
  const plot = new uPlot({ width, height: 220, series, scales: { x: { time: false } }, axes: [{ label: xLabel }, { label: "ms" }] }, data, target);
  page.charts[id] = { plot, key };
}

function renderCharts(view) {
  // x: seconds since the session's first metric, so one point still gets a sensible axis.
  for (const kind of ["ttfb", "processing"]) {
    const { names, data } = metricSeries(view, kind);
    const t0 = data[0][0] ?? 0;
    chart(`chart-${kind}`, names, [data[0].map((x) => Math.round((x - t0) * 10) / 10), ...data.slice(1)]);
  }
  const turns = view.turns.filter((t) => typeof t.latency_ms === "number");
  const stats = latencyStats(turns);
  const xs = turns.map((_, i) => i + 1);
  chart("chart-latency", ["turn latency"], [xs, turns.map((t) => t.latency_ms), xs.map(() => stats.p50), xs.map(() => stats.p95)], [
    { label: "p50", stroke: "gray", dash: [4, 4] },
    { label: "p95", stroke: "red", dash: [4, 4] },
  ]);
}

const LANE_COLORS = { user_speaking: "--user", bot_speaking: "--bot", llm_busy: "--accent", tts_busy: "--ok", function_calls: "--warn", interruptions: "--err" };

function renderTimeline(view) {
  const canvas = $("timeline");
  const width = canvas.clientWidth || 800;
  if (canvas.width !== width * devicePixelRatio) {
    canvas.width = width * devicePixelRatio;
    canvas.height = 170 * devicePixelRatio;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
  ctx.clearRect(0, 0, width, 170);
  const css = getComputedStyle(document.documentElement);
  const live = $("status").textContent === "live";
  const lastEvent = view.log.length ? view.log[view.log.length - 1] : null;
  const to = live ? Date.now() / 1000 : lastEvent ? lastEvent.sent_at ?? lastEvent.received_at : Date.now() / 1000;
  const span = Number($("timeline-window").value);
  const starts = Object.values(view.lanes).flat().map((i) => i[0]);
  const from = span ? to - span : Math.min(to - 1, ...starts);
  const labelWidth = 110;
  const x = (t) => labelWidth + ((t - from) / (to - from)) * (width - labelWidth - 10);
  ctx.font = "12px system-ui, sans-serif";
  timelineRows(view, from, to).forEach((row, i) => {
    const y = 8 + i * 26;
    ctx.fillStyle = css.getPropertyValue("--muted");
    ctx.fillText(row.label, 4, y + 13);
    ctx.fillStyle = css.getPropertyValue(LANE_COLORS[row.lane]) || "gray";
    for (const [a, b] of row.spans) ctx.fillRect(x(a), y + 2, Math.max(2, x(b) - x(a)), 16);
  });
  ctx.fillStyle = css.getPropertyValue("--muted");
  ctx.fillText(`${Math.round(to - from)} s`, width - 40, 166);
}

let lastCharts = 0;
function render() {
  page.dirty = false;
  const view = page.view;
  if (!view) return;
  renderNow(view);
  renderTranscript(view);
  renderLog(view);
  renderTimeline(view);
  if (performance.now() - lastCharts > 500) {
    lastCharts = performance.now();
    renderCharts(view);
  } else {
    setTimeout(() => schedule(), 500);
  }
}

function schedule() {
  if (!page.dirty) {
    page.dirty = true;
    requestAnimationFrame(render);
  }
}

function acknowledge(socket) {
  const view = page.view;
  if (view.lastSeq - page.acked >= 200 || performance.now() - page.ackedAt > 500) {
    socket.send(JSON.stringify({ ack: view.lastSeq }));
    page.acked = view.lastSeq;
    page.ackedAt = performance.now();
  }
}

function onFrame(frame, socket) {
  if (frame.type === "snapshot") {
    if (!page.view) {
      page.view = createView(frame);
      page.view.log = frame.events.slice(-2000);
    } else {
      applyEvents(page.view, frame.events); // what we missed while away: exactly the gap
    }
    if (frame.session) $("status").textContent = frame.session.status;
    if (frame.state && frame.state.protocol_version) $("protocol").textContent = frame.state.protocol_version;
  } else if (frame.type === "events") {
    const { fresh, gap } = newEvents(page.view.lastSeq, frame.events);
    if (gap) {
      socket.send(JSON.stringify({ since: page.view.lastSeq }));
      return;
    }
    applyEvents(page.view, fresh);
  } else if (frame.type === "resync") {
    socket.send(JSON.stringify({ ack: page.view.lastSeq }));
    socket.send(JSON.stringify({ since: page.view.lastSeq }));
    return;
  } else if (frame.type === "ended") {
    $("status").textContent = "ended";
    $("status").className = "pill ended";
  }
  acknowledge(socket);
  schedule();
}

$("timeline-window").addEventListener("change", schedule);
// The timeline scrolls with the clock while the session is live.
setInterval(() => page.view && $("status").textContent === "live" && schedule(), 1000);

$("log-filter").addEventListener("change", () => {
  for (const row of $("log").rows) row.hidden = Boolean($("log-filter").value) && row.dataset.type !== $("log-filter").value;
});

liveSocket(() => config.ws + (page.view ? `?since=${page.view.lastSeq}` : ""), onFrame, $("conn"));
