// The session's derived state as the session page shows it: who speaks, latency, totals, the
// client and the bot, the transcript, the charts' series.
//
// `state` is the server's SessionState.to_dict() (rtvi_monitor/core/state.py), kept current by
// model.js. Every rule that derives it lives on the server; these helpers only pick, order and
// format what it derived. Pure (tests/js/state_format.test.mjs).
import { formatDuration } from "./format.js";
import { formatValue, isPreview } from "./message_format.js";

/** Who is speaking now: "user", "bot", "both" or "nobody". */
export function speaker(state) {
  const { user = false, bot = false } = state.speaking || {};
  return user && bot ? "both" : user ? "user" : bot ? "bot" : "nobody";
}

/** The words for speaker(): "nobody speaking", "bot speaking"… */
export function speakerText(who) {
  return `${who} speaking`;
}

/** The latency line of the Now panel, from state.latency (the server's percentiles). */
export function latencyText(latency, turns) {
  if (!latency || latency.p50 == null) return "—";
  const { p50, p95, max } = latency;
  return `p50 ${formatDuration(p50)} · p95 ${formatDuration(p95)} · max ${formatDuration(max)} (${turns} turn${turns === 1 ? "" : "s"})`;
}

/** Token, character and audio totals as one line. */
export function totalsText(totals) {
  const t = { characters: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, stt_audio_seconds: 0, ...totals };
  const audio = t.stt_audio_seconds ? ` · ${formatDuration(t.stt_audio_seconds * 1000)} of audio transcribed` : "";
  return `${t.total_tokens} tokens (${t.prompt_tokens} prompt, ${t.completion_tokens} completion) · ${t.characters} characters${audio}`;
}

const word = (value) => (typeof value === "string" ? value.trim() : "");
const ABOUT_KEYS = new Set(["library", "library_version", "platform", "platform_version", "platform_details", "name"]);

/**
 * What a client (client-ready) or bot (bot-ready) says it is, as a person reads it: "client-js 1.4.0 on
 * browser · RTVI 2.1.0", "pipecat-ai 1.14.0 · RTVI 2.2.0"; "—" when nothing was said. npm's scope goes from the
 * library's name; a bot's `name` follows it in brackets; platform_details and other fields are free-form and
 * left to the raw JSON (peerTitle, on hover). dashboard/web/display.py's peer_text is the same rules in Python.
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
  if (item.role === "operator") return item.operator ? `operator ${item.operator}` : "operator";
  if (item.role === "user") {
    return item.source === "chat" ? "user (typed)" : item.source === "backchannel" ? "user (backchannel)" : "user";
  }
  return item.interrupted ? "bot (interrupted)" : "bot";
}

// A call's status is the server's (reducer/calls.py's call_failure says when one failed); a failed call
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
 * What an operator did, as their transcript line says it (the server's line: rtvi_monitor/core/reducer/operators.py):
 * "sent text (answer now, spoken): Please hold.", "ended the call"; what the bot answered when it did not take it.
 * The words are the operator's, not the caller's nor the model's: the bot speaking them is its own line.
 */
export function operatorText(item) {
  let did;
  if (item.action === "end") {
    did = item.cancel ? "cut the call off at once" : "ended the call";
  } else {
    const o = item.options;
    const how = o ? ` (${o.run_immediately ? "answer now" : "for the next turn"}, ${o.audio_response ? "spoken" : "not spoken"})` : "";
    did = `sent text${how}: ${item.text || "(its words were not recorded)"}`;
  }
  return item.ok === false ? `${did} — not done: ${item.outcome || "no reason given"}` : did;
}

/**
 * The transcript card's entries: the state's transcript lines (the caller's, the bot's, the operators'), with
 * its function calls, server messages and errors as notes between them, in time order.
 * @returns {{className: string, who?: string, text: string, at: number}[]}
 */
export function transcriptEntries(state) {
  const entries = [];
  for (const item of state.transcript || []) {
    if (item.role === "operator") {
      entries.push({ className: `operator${item.ok === false ? " failed" : ""}`, who: who(item), text: operatorText(item), at: item.at || 0 });
      continue;
    }
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
