// Pure helpers: the session's derived state to what the session page shows. No DOM here.
//
// `state` is the server's SessionState.to_dict() (rtvi_monitor/state.py), kept
// current by model.js. Every rule that derives it lives on the server; these
// helpers only pick, order and format what it derived.

export const MAX_LOG = 2000;

const PREVIEW_KEYS = new Set(["truncated", "preview", "length", "seq"]);

/** Who is speaking now: "user", "bot", "both" or "nobody". */
export function speaker(state) {
  const { user = false, bot = false } = state.speaking || {};
  return user && bot ? "both" : user ? "user" : bot ? "bot" : "nobody";
}

/** The words for speaker(): "nobody speaking", "bot speaking"… */
export function speakerText(who) {
  return `${who} speaking`;
}

/**
 * Whether a value is the server's stand-in for a long one:
 * {truncated: true, preview, length} (a message log row) or with the seq of the message that holds it whole.
 */
export function isPreview(value) {
  return (
    value !== null &&
    typeof value === "object" &&
    !Array.isArray(value) &&
    value.truncated === true &&
    typeof value.preview === "string" &&
    typeof value.length === "number" &&
    Object.keys(value).every((key) => PREVIEW_KEYS.has(key))
  );
}

/**
 * A value of the state as text: strings as they are, previews as their start and where the rest is, the rest as JSON.
 * @param {unknown} value
 * @param {number} [indent] JSON indentation
 */
export function formatValue(value, indent) {
  if (value === undefined) return "";
  if (typeof value === "string") return value;
  if (isPreview(value)) {
    const where = typeof value.seq === "number" ? `; full message #${value.seq}` : "";
    return `${value.preview}… (${value.length} characters${where})`;
  }
  return JSON.stringify(value, null, indent);
}

/** Local wall-clock time as HH:MM:SS. */
export function clock(date) {
  if (Number.isNaN(date.getTime())) return "?";
  return [date.getHours(), date.getMinutes(), date.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

/**
 * The status pill: live, bot away (since when), or ended (why).
 * @param {object | null} row   the session row (status, bot, away_since, end_reason)
 * @param {object | null} state the derived state (ended, end_reason)
 * @returns {{kind: "live" | "away" | "ended", text: string}}
 */
export function sessionStatus(row, state) {
  if (row?.status === "ended" || state?.ended === true) {
    const reason = row?.end_reason || state?.end_reason || "";
    return { kind: "ended", text: reason ? `ended (${reason})` : "ended" };
  }
  if (row?.bot === "away") {
    const since = row.away_since ? clock(new Date(row.away_since)) : "?";
    return { kind: "away", text: `bot away since ${since} — the session ends if it does not return within the grace period` };
  }
  return { kind: "live", text: "live" };
}

/** The latency line of the Now panel, from state.latency (the server's percentiles). */
export function latencyText(latency, turns) {
  if (!latency || latency.p50 == null) return "—";
  const ms = (v) => `${Math.round(v)} ms`;
  return `p50 ${ms(latency.p50)} · p95 ${ms(latency.p95)} · max ${ms(latency.max)} (${turns} turn${turns === 1 ? "" : "s"})`;
}

/** Token, character and audio totals as one line. */
export function totalsText(totals) {
  const t = { characters: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, stt_audio_seconds: 0, ...totals };
  const audio = t.stt_audio_seconds ? ` · ${t.stt_audio_seconds} s of audio transcribed` : "";
  return `${t.total_tokens} tokens (${t.prompt_tokens} prompt, ${t.completion_tokens} completion) · ${t.characters} characters${audio}`;
}

/** A client's or bot's RTVI version and what it says about itself. */
export function peerText(version, about) {
  const said = about === null || about === undefined ? "" : ` · ${formatValue(about)}`;
  return `${version || "?"}${said}`;
}

/** Message counts of the session. */
export function countsText(counts) {
  const c = { total: 0, invalid: 0, unknown: 0, ...counts };
  return `${c.total} messages · ${c.invalid} invalid · ${c.unknown} of unknown type`;
}

function who(item) {
  if (item.role === "user") {
    return item.source === "chat" ? "user (typed)" : item.source === "backchannel" ? "user (backchannel)" : "user";
  }
  return item.interrupted ? "bot (interrupted)" : "bot";
}

function functionCallText(call) {
  const took = call.duration_ms == null ? "" : ` in ${call.duration_ms} ms`;
  const args = call.args == null ? "" : ` · args ${formatValue(call.args)}`;
  const result = call.result == null ? "" : ` · result ${formatValue(call.result)}`;
  return `function ${call.function_name || "(unnamed)"}: ${call.status}${took}${args}${result}`;
}

function errorText(error) {
  const kind = error.fatal ? "fatal error" : error.type;
  const to = error.request_type ? ` (to ${error.request_type})` : "";
  return `${kind}${to}: ${formatValue(error.message ?? "")}`;
}

/**
 * The transcript card's entries: the state's transcript lines, with its function calls,
 * server messages and errors as notes between them, in time order.
 * @returns {{className: string, who?: string, text: string, at: number}[]}
 */
export function transcriptEntries(state) {
  const entries = [];
  for (const item of state.transcript || []) {
    const text = item.text === "" && item.interrupted ? "(interrupted before the first word)" : item.text;
    const className = `${item.role}${item.final ? "" : " partial"}${item.interrupted ? " interrupted" : ""}`;
    entries.push({ className, who: who(item), text, at: item.at || 0 });
  }
  for (const call of state.function_calls || []) {
    entries.push({ className: "note", text: functionCallText(call), at: call.started_at || 0 });
  }
  for (const message of state.server_messages || []) {
    entries.push({ className: "note", text: `server message: ${formatValue(message.data)}`, at: message.at || 0 });
  }
  for (const error of state.errors || []) {
    entries.push({ className: "note err", text: errorText(error), at: error.at || 0 });
  }
  return entries.sort((a, b) => a.at - b.at); // stable: lines of the same moment keep their order
}

/** The last fatal error's message, for the banner. */
export function fatalText(state) {
  const fatal = (state.errors || []).findLast((e) => e.fatal);
  return `Fatal error: ${fatal ? formatValue(fatal.message ?? "") : ""}`;
}

/**
 * uPlot data for one metric kind of state.metrics: [xs, ...ys] aligned on the union of times, with series names.
 * @returns {{names: string[], data: (number | null)[][]}}
 */
export function metricSeries(state, kind) {
  const series = state.metrics?.[kind] || {};
  const names = Object.keys(series).sort();
  const xs = [...new Set(names.flatMap((n) => series[n].map((p) => p[0])))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = names.map((n) => {
    const column = new Array(xs.length).fill(null);
    for (const [x, y] of series[n]) column[index.get(x)] = y;
    return column;
  });
  return { names: names.map((n) => n.replace(/\|$/, "") || "(all)"), data: [xs, ...ys] };
}

/**
 * uPlot data for the turn latency chart: x is the turn's number, with the server's p50 and p95 as lines.
 * @returns {(number | null)[][]} [turns, latency, p50, p95]
 */
export function latencySeries(state) {
  const turns = (state.turns || []).filter((t) => typeof t.latency_ms === "number");
  const xs = turns.map((t, i) => (typeof t.index === "number" ? t.index + 1 : i + 1));
  const { p50 = null, p95 = null } = state.latency || {};
  return [xs, turns.map((t) => t.latency_ms), xs.map(() => p50), xs.map(() => p95)];
}

export const LANES = [
  ["user_speaking", "user speaking"],
  ["bot_speaking", "bot speaking"],
  ["llm_busy", "LLM busy"],
  ["tts_busy", "TTS busy"],
  ["function_calls", "function calls"],
  ["interruptions", "interruptions"],
];

/**
 * The timeline's rows for a time window: intervals clipped to [from, to], open ones running to `to`.
 * @returns {{lane: string, label: string, spans: number[][]}[]}
 */
export function timelineRows(state, from, to) {
  const clip = (spans) =>
    spans
      .map(([a, b]) => [a, b === null || b === undefined ? to : b])
      .filter(([a, b]) => b >= from && a <= to)
      .map(([a, b]) => [Math.max(a, from), Math.min(b, to)]);
  const intervals = state.intervals || {};
  return LANES.map(([lane, label]) => {
    let spans;
    if (lane === "function_calls") {
      spans = (state.function_calls || []).map((c) => [c.started_at, c.ended_at]);
    } else if (lane === "interruptions") {
      spans = (state.interruptions || []).map((t) => [t, t]);
    } else {
      spans = intervals[lane] || [];
    }
    return { lane, label, spans: clip(spans) };
  });
}

/**
 * The timeline's vertical markers in [from, to]: the client's disconnect-bot and the session's end.
 * @returns {{at: number, kind: string, label: string}[]}
 */
export function timelineMarkers(state, from, to) {
  return (state.markers || [])
    .filter((m) => m.at >= from && m.at <= to)
    .map((m) => ({
      at: m.at,
      kind: m.kind,
      label: m.kind === "ended" ? (m.reason ? `ended (${m.reason})` : "ended") : m.kind,
    }));
}

/** The earliest moment the timeline can show, or null when the state has none. */
export function timelineStart(state) {
  const times = [
    ...Object.values(state.intervals || {}).flatMap((spans) => spans.map((s) => s[0])),
    ...(state.interruptions || []),
    ...(state.function_calls || []).map((c) => c.started_at),
    ...(state.markers || []).map((m) => m.at),
    ...(state.transcript || []).map((t) => t.at),
  ];
  let earliest = null;
  for (const t of times) if (typeof t === "number" && (earliest === null || t < earliest)) earliest = t;
  return earliest;
}

/** The latest moment the state knows of (its last message, or its end), or null. */
export function timelineEnd(state) {
  const times = [state.last_at, ...(state.markers || []).map((m) => m.at)].filter((t) => typeof t === "number");
  return times.length ? Math.max(...times) : null;
}

/** A log row's type: the stored type, else the message's, else "(not JSON)". */
export function eventType(event) {
  if (typeof event.type === "string" && event.type) return event.type;
  const message = event.message;
  if (message && typeof message === "object" && !isPreview(message) && typeof message.type === "string" && message.type) {
    return message.type;
  }
  return "(not JSON)";
}

/**
 * A glimpse of a stored message for its closed log row: what its data says, on one line, cut at `max`
 * characters ("" for a message that is only its type); raw text as it came; a preview by its length.
 */
export function messageSummary(message, max = 120) {
  if (isPreview(message)) return `${message.length} characters`;
  let text;
  if (message !== null && typeof message === "object" && !Array.isArray(message) && typeof message.type === "string") {
    text = message.data === undefined ? "" : formatValue(message.data);
  } else {
    text = formatValue(message);
  }
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/** A stored message as the log shows it: raw text as it came, previews as their start, JSON indented. */
export function messageText(message) {
  return formatValue(message, 2);
}

/**
 * The message log with new events merged in: one per seq, in seq order, the newest `max` kept.
 * Returns `log` itself when nothing was new.
 */
export function mergeEvents(log, events, max = MAX_LOG) {
  const seen = new Set(log.map((e) => e.seq));
  const fresh = [];
  for (const event of events || []) {
    if (typeof event.seq !== "number" || seen.has(event.seq)) continue;
    seen.add(event.seq);
    fresh.push(event);
  }
  if (!fresh.length) return log;
  const merged = log.concat(fresh).sort((a, b) => a.seq - b.seq);
  return merged.length > max ? merged.slice(merged.length - max) : merged;
}
