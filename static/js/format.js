// Formatting for every page: the product's one time format and one duration format, and
// the session's derived state as the session pages show it.
//
// `state` is the server's SessionState.to_dict() (rtvi_monitor/state.py), kept
// current by model.js. Every rule that derives it lives on the server; these
// helpers only pick, order and format what it derived. Everything here is pure
// except showTime and upgradeTimes, which fill <time class="when"> elements
// (base.html runs upgradeTimes on every page).

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

// Times. Servers send UTC (ISO 8601); an operator reads them in the browser's time zone,
// 24-hour, with the zone named: the server cannot know the operator's zone, the browser does.

const RECENT_S = 10; // younger than this is "just now"
const SKEW_S = 60; // a time this far in the future is not clock skew: shown as a date
const DAY_S = 86400; // older than a day: the date says more than "31 h ago"
const FORMATS = new Map(); // Intl.DateTimeFormat by language and zone: a page fills hundreds of times

/**
 * A date's fields in a time zone (the browser's by default), numbers zero-padded, and the zone's short name
 * in the browser's language ("CET", "EST", "GMT+5:30"; "UTC" for UTC).
 * @param {Date} date
 * @param {{timeZone?: string, locale?: string}} [where] for tests: a zone and language other than the browser's
 */
function dateFields(date, { timeZone, locale } = {}) {
  const key = `${locale}|${timeZone}`;
  let format = FORMATS.get(key);
  if (!format) {
    const options = { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23", timeZoneName: "short", timeZone };
    format = new Intl.DateTimeFormat(locale, options);
    FORMATS.set(key, format);
  }
  const parts = format.formatToParts(date);
  return Object.fromEntries(parts.filter((p) => p.type !== "literal").map((p) => [p.type, p.value]));
}

/** "2026-11-23 14:03:07 CET": the full time, 24-hour, in the operator's zone, the zone named. "?" for an invalid date. */
export function absoluteTime(date, where) {
  if (Number.isNaN(date.getTime())) return "?";
  const f = dateFields(date, where);
  return `${f.year}-${f.month}-${f.day} ${f.hour}:${f.minute}:${f.second} ${f.timeZoneName}`;
}

/** "14:03:07 CET": the time of day alone, for a moment that is today (a bot away since when). */
export function clockTime(date, where) {
  if (Number.isNaN(date.getTime())) return "?";
  const f = dateFields(date, where);
  return `${f.hour}:${f.minute}:${f.second} ${f.timeZoneName}`;
}

/**
 * How long ago: "just now", "12 s ago", "4 min ago", "3 h ago", then the date and minute ("2026-11-21 09:15")
 * in the operator's zone. A time slightly in the future (the browser's clock behind the server's) is "just now".
 * @param {Date} date
 * @param {number} now epoch milliseconds
 */
export function relativeTime(date, now, where) {
  if (Number.isNaN(date.getTime())) return "?";
  const seconds = (now - date.getTime()) / 1000;
  if (seconds <= -SKEW_S || seconds >= DAY_S) {
    const f = dateFields(date, where);
    return `${f.year}-${f.month}-${f.day} ${f.hour}:${f.minute}`;
  }
  if (seconds < RECENT_S) return "just now";
  if (seconds < 60) return `${Math.floor(seconds)} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  return `${Math.floor(seconds / 3600)} h ago`;
}

/**
 * Fills one <time datetime="(ISO 8601)"> element: how long ago as its text, the full time as its title.
 * The server renders it with UTC text (dashboard/_when.html); this is what makes it the operator's.
 * @param {{getAttribute(name: string): string | null, textContent: string, title: string}} element
 */
export function showTime(element, now = Date.now()) {
  const date = new Date(element.getAttribute("datetime") || "");
  if (Number.isNaN(date.getTime())) return; // keep the server's text
  element.textContent = relativeTime(date, now);
  element.title = absoluteTime(date);
}

/** Every <time class="when"> under `root`, filled by showTime: on load, then again so that "just now" ages. */
export function upgradeTimes(root = document, now = Date.now()) {
  for (const element of root.querySelectorAll("time.when")) showTime(element, now);
}

/**
 * A duration, rounded as a person says it: "380 ms", "1.2 s", "12 s", "4 min 05 s", "1 h 02 min"; "—" when unknown.
 * dashboard/templatetags/dashboard_format.py's `duration` filter is the same rules in Python, tested on the same
 * cases: keep both in step. Rounding is half up (floor of x + 0.5) in both languages, so they agree to the digit.
 * @param {number | null | undefined} ms
 */
export function formatDuration(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "—";
  const value = Math.max(ms, 0);
  const wholeMs = Math.floor(value + 0.5);
  if (wholeMs < 1000) return `${wholeMs} ms`;
  const tenths = Math.floor(value / 100 + 0.5);
  if (tenths < 100) return `${Math.floor(tenths / 10)}.${tenths % 10} s`;
  const seconds = Math.floor(value / 1000 + 0.5);
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, "0")} s`;
  const minutes = Math.floor(value / 60000 + 0.5);
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, "0")} min`;
}

/** How a session ended that an operator should look at (rtvi_monitor/models.py FAILED_ENDS). */
export const FAILED_ENDS = new Set(["bot_vanished", "fatal_error", "server_restarted"]);

/**
 * The status pill: live, bot away (since when), or ended (how: client hung up, bot finished, bot
 * vanished, fatal error, server restarted). `pill` is its class: an end that failed is red.
 * @param {object | null} row   the session row (status, bot, away_since, end_reason, end_kind, failed)
 * @param {object | null} state the derived state (ended, end_reason, end_kind, fatal)
 * @returns {{kind: "live" | "away" | "ended", failed: boolean, pill: string, text: string}}
 */
export function sessionStatus(row, state) {
  if (row?.status === "ended" || state?.ended === true) {
    const reason = row?.end_reason || state?.end_reason || "";
    const endKind = row?.end_kind || state?.end_kind || "";
    const failed = row?.failed === true || FAILED_ENDS.has(endKind) || row?.fatal === true || state?.fatal === true;
    return { kind: "ended", failed, pill: failed ? "ended error" : "ended", text: reason ? `ended (${reason})` : "ended" };
  }
  if (row?.bot === "finished") {
    // Its bot closed with 1000: the session is ending (the server stores the end within moments), not away.
    return { kind: "ending", failed: false, pill: "live", text: "ending (bot finished)" };
  }
  if (row?.bot === "away") {
    const since = row.away_since ? clockTime(new Date(row.away_since)) : "?";
    const text = `bot away since ${since} — the session ends if it does not return within the grace period`;
    return { kind: "away", failed: false, pill: "away", text };
  }
  return { kind: "live", failed: false, pill: "live", text: "live" };
}

/** The latency line of the Now panel, from state.latency (the server's percentiles). */
export function latencyText(latency, turns) {
  if (!latency || latency.p50 == null) return "—";
  const { p50, p95, max } = latency;
  return `p50 ${formatDuration(p50)} · p95 ${formatDuration(p95)} · max ${formatDuration(max)} (${turns} turn${turns === 1 ? "" : "s"})`;
}

/** A session row's turn latency as the lists show it: "820 ms / 1.4 s" (p50 / p95), or "—". */
export function latencyPair(latency) {
  if (!latency || latency.p50 == null) return "—";
  return `${formatDuration(latency.p50)} / ${formatDuration(latency.p95)}`;
}

/**
 * Session rows in the order the lists show them: newest start first, then by id, descending
 * (the history's order is started_at then primary key; the rows the socket sends carry no key).
 */
export function newestFirst(a, b) {
  const started = Date.parse(b.started_at) - Date.parse(a.started_at);
  if (started !== 0) return started;
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

/** Token, character and audio totals as one line. */
export function totalsText(totals) {
  const t = { characters: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, stt_audio_seconds: 0, ...totals };
  const audio = t.stt_audio_seconds ? ` · ${formatDuration(t.stt_audio_seconds * 1000)} of audio transcribed` : "";
  return `${t.total_tokens} tokens (${t.prompt_tokens} prompt, ${t.completion_tokens} completion) · ${t.characters} characters${audio}`;
}

// An id a person cannot read whole: a UUID or a long run of hex (dashboard/display.py's _OPAQUE).
const OPAQUE = /^(?:[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}|[0-9a-f]{20,})$/i;

/**
 * An id as a person reads it: a UUID (or long hex id) by its first 8 characters, as git shows a commit;
 * any other id, chosen by somebody to be read, whole; "—" for none. Show the whole id on hover (title)
 * and keep it in links. dashboard/display.py's short_id is the same rule.
 * @param {unknown} id
 */
export function shortId(id) {
  if (id === null || id === undefined || id === "") return "—";
  const text = String(id);
  return OPAQUE.test(text) ? text.slice(0, 8) : text;
}

const word = (value) => (typeof value === "string" ? value.trim() : "");
const ABOUT_KEYS = new Set(["library", "library_version", "platform", "platform_version", "platform_details", "name"]);

/**
 * What a client (client-ready) or bot (bot-ready) says it is, as a person reads it: "client-js 1.4.0 on
 * browser · RTVI 2.1.0", "pipecat-ai 1.14.0 · RTVI 2.2.0"; "—" when nothing was said. npm's scope goes from the
 * library's name; a bot's `name` follows it in brackets; platform_details and other fields are free-form and
 * left to the raw JSON (peerTitle, on hover). dashboard/display.py's peer_text is the same rules in Python.
 * @param {unknown} version the RTVI version it speaks
 * @param {unknown} about   its `about`
 */
export function peerText(version, about) {
  const parts = [];
  if (isPreview(about)) {
    parts.push(`(${about.length} characters of JSON)`);
  } else if (about !== null && typeof about === "object" && !Array.isArray(about)) {
    const library = word(about.library).replace(/^@[^/]+\//, "");
    let said = [library, word(about.library_version)].filter(Boolean).join(" ");
    const platform = [word(about.platform), word(about.platform_version)].filter(Boolean).join(" ");
    if (platform) said = said ? `${said} on ${platform}` : `on ${platform}`;
    const name = word(about.name);
    if (name) said = said ? `${said} (${name})` : name;
    if (!said) {
      said = Object.entries(about)
        .filter(([key, value]) => !ABOUT_KEYS.has(key) && (typeof value === "string" || (typeof value === "number" && Number.isFinite(value))))
        .map(([key, value]) => `${key} ${value}`)
        .join(", ")
        .slice(0, 120);
    }
    if (said) parts.push(said);
  } else if (typeof about === "string" && about.trim()) {
    parts.push(about.trim().slice(0, 120));
  }
  const rtvi = word(version);
  if (rtvi) parts.push(`RTVI ${rtvi}`);
  return parts.join(" · ") || "—";
}

/** The whole of what a client or bot said of itself, for a title: compact JSON, "" when nothing. */
export function peerTitle(about) {
  return about === null || about === undefined ? "" : formatValue(about).slice(0, 2000);
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

// A call's status is the server's (state.py's call_failure says when one failed); a failed call
// reads as its error, not as a result: "failed after 3.0 s: timed out".
function functionCallText(call) {
  const failed = call.status === "failed";
  const took = call.duration_ms == null ? "" : ` ${call.status === "completed" ? "in" : "after"} ${formatDuration(call.duration_ms)}`;
  const why = failed && call.error ? `: ${call.error}` : "";
  const args = call.args == null ? "" : ` · args ${formatValue(call.args)}`;
  const result = failed || call.result == null ? "" : ` · result ${formatValue(call.result)}`;
  return `function ${call.function_name || "(unnamed)"}: ${call.status}${took}${why}${args}${result}`;
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
    const className = call.status === "failed" ? "note err" : "note";
    entries.push({ className, text: functionCallText(call), at: call.started_at || 0 });
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
 * uPlot data for one metric kind of state.metrics: [xs, ...ys] aligned on the union of times, with series names;
 * a service whose every figure is zero (or none) gets no series.
 * @returns {{names: string[], data: (number | null)[][]}}
 */
export function metricSeries(state, kind) {
  const series = state.metrics?.[kind] || {};
  // A series only for a service that reported a figure: Pipecat's start-of-session metrics name every
  // service with a zero, and a line of zeros named for a service that never measured anything misleads.
  const reported = (points) => points.some((p) => typeof p[1] === "number" && Number.isFinite(p[1]) && p[1] > 0);
  const names = Object.keys(series)
    .filter((n) => Array.isArray(series[n]) && reported(series[n]))
    .sort();
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
