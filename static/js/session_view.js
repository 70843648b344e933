// Pure helpers of the session page's views: the header's facts, the replies' turns and waterfalls,
// the timeline's window and time axis, the charts' names (their colours: palette.js), the message log's pages.
// No DOM here (tests/js/session_view.test.mjs).
//
// Like state_format.js, these only pick, place and word what the server sent: the session row and
// the reducer's state (rtvi_monitor/core/state.py). Nothing here computes latency, turns or who speaks.
import { absoluteTime, formatDuration, shortId } from "./format.js";
import { eventType, formatValue, isPreview, messageSummary } from "./message_format.js";
import { sessionStatus } from "./session_row.js";

// --- times -------------------------------------------------------------------------

const pad = (n, width = 2) => String(n).padStart(width, "0");

/**
 * Epoch seconds as a compact local clock, "14:03:07" (or "14:03:07.250" with ms): for rows and ticks,
 * where format.js's clockTime (which names the zone on every time) would repeat itself line after line.
 */
export function clockOf(seconds, { ms = false } = {}) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds)) return "?";
  const date = new Date(Math.round(seconds * 1000));
  const hms = `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  return ms ? `${hms}.${pad(date.getMilliseconds(), 3)}` : hms;
}

/** Epoch seconds as format.js's full time in the operator's zone: "2026-11-23 14:03:07 CET". */
export function absoluteTimeOf(seconds) {
  return absoluteTime(new Date(seconds * 1000));
}

/** When a stored message happened: the bot's clock when it says (as the reducer reads it), else when it came. */
export function eventTime(event) {
  return typeof event.sent_at === "number" ? event.sent_at : event.received_at;
}

// --- the header ----------------------------------------------------------------------

/**
 * The session's cost as the header shows it. cost_usd is a number, null when the organization has
 * no prices (then a hint where to set them), or absent from rows of servers that do not price.
 * @returns {{text: string, hint: string}}
 */
export function costText(cost) {
  if (typeof cost === "number" && Number.isFinite(cost)) return { text: `$${cost.toFixed(4)}`, hint: "" };
  return { text: "—", hint: cost === null ? "set prices in the admin" : "" };
}

/**
 * What the header says of the deployment: the agent's active deployment when the bot connected, as the
 * agents API named it (the row's deployment_id; a UUID by its first 8 characters, shortId), else what the
 * bot said of itself in bot-ready (library, its version, a name). Never more than that.
 */
export function deploymentText(row, state) {
  const deployment = row?.deployment_id;
  if (typeof deployment === "string" && deployment) return shortId(deployment);
  const about = state?.bot_about;
  if (about === null || about === undefined) return "—";
  if (typeof about !== "object" || Array.isArray(about) || isPreview(about)) return formatValue(about);
  const library = [about.library, about.library_version].filter((v) => typeof v === "string" && v).join(" ");
  const name = typeof about.name === "string" ? about.name : "";
  const said = [library, name].filter(Boolean).join(" · ");
  return said ? `${said} (as the bot says)` : formatValue(about);
}

const count = (list, fallback) => (Array.isArray(list) ? list.length : typeof fallback === "number" ? fallback : null);

/**
 * The header's facts from the session row and the state. Counts are the lengths of the state's lists,
 * which is how the server counts them for the row (SessionState.summary), and they stay current between rows.
 * @param {object | null} row   the session row (rtvi_monitor/models.py session_row)
 * @param {object | null} state the derived state
 * @param {number} now          epoch seconds: the clock, or the moment the page lost the server
 * @param {Set<string>} failedEnds the end kinds that count as failures (the page's config.failed_ends)
 */
export function headerFacts(row, state, now, failedEnds = new Set()) {
  const status = sessionStatus(row, state, failedEnds);
  const started = row?.started_at ? new Date(row.started_at) : null;
  const ended = row?.ended_at ? new Date(row.ended_at) : null;
  let duration = "—";
  if (status.kind === "ended" && typeof row?.duration_s === "number") duration = formatDuration(row.duration_s * 1000);
  else if (status.kind !== "ended" && started && row?.away_since) {
    // The bot left: if it does not come back, the session ends when it left (the server's rule), not now.
    duration = `${formatDuration(new Date(row.away_since).getTime() - started.getTime())} until the bot left`;
  } else if (status.kind !== "ended" && started) duration = `${formatDuration(now * 1000 - started.getTime())} so far`;
  const number = (n) => (n === null ? "—" : String(n));
  return {
    agent: { name: row?.agent_name || row?.agent_id || "—", id: row?.agent_id || null },
    status,
    started: started ? absoluteTime(started) : "—",
    ended: ended ? absoluteTime(ended) : status.kind === "ended" ? "—" : "not yet",
    duration,
    turns: number(count(state?.turns, row?.turn_count)),
    interruptions: number(count(state?.interruptions, row?.interruption_count)),
    errors: number(count(state?.errors, row?.error_count)),
    protocol: state?.protocol_version || row?.protocol_version || "?",
    deployment: deploymentText(row, state),
    cost: costText(row?.cost_usd),
    redacted: redactedText(state?.counts?.redacted),
    endedLine: status.kind === "ended" ? endedLine(ended, row?.end_reason || state?.end_reason) : "",
  };
}

/**
 * An ended call in one line, where its actions and its "Now" card were: "Call ended at 2026-11-28 03:12:09 UTC
 * (by operator ann)." (templates/sessions/_call_ended.html says the same from the server's row).
 * @param {Date | null} ended
 * @param {string} [reason] the server's words for how it ended
 */
export function endedLine(ended, reason) {
  return `Call ended${ended ? ` at ${absoluteTime(ended)}` : ""}${reason ? ` (${reason})` : ""}.`;
}

/** What redaction removed before storage, by kind, most first: "2 card, 1 email"; "none" when nothing. */
export function redactedText(redacted) {
  const entries = Object.entries(redacted || {}).filter(([, n]) => typeof n === "number" && n > 0);
  if (entries.length === 0) return "none";
  entries.sort(([a, x], [b, y]) => y - x || a.localeCompare(b));
  return entries.map(([kind, n]) => `${n} ${kind}`).join(", ");
}

/**
 * state.usage ({model: {prompt_tokens, completion_tokens, characters, stt_audio_seconds}}) as table rows,
 * by model name; the usage the messages name no model for is "(model not named)".
 */
export function usageRows(usage) {
  const cell = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : "—");
  return Object.entries(usage || {})
    .sort(([a], [b]) => (a === "" ? 1 : b === "" ? -1 : a.localeCompare(b)))
    .map(([model, use]) => ({
      model: model || "(model not named)",
      prompt: cell(use.prompt_tokens),
      completion: cell(use.completion_tokens),
      characters: cell(use.characters),
      audio: typeof use.stt_audio_seconds === "number" ? formatDuration(use.stt_audio_seconds * 1000) : "—",
    }));
}

// --- replies, turns and waterfalls -----------------------------------------------------

/**
 * Which turn each bot reply answers, keyed by the reply line's time (its `at`): the reducer names it
 * (a bot line's `turn` is the index of the turn it answers). Lines without one (typed input, a bot
 * that spoke first) get none.
 * @returns {Map<number, object>} bot line `at` -> turn
 */
export function replyTurns(transcript, turns) {
  const byIndex = new Map((turns || []).map((turn) => [turn.index, turn]));
  const byLine = new Map();
  for (const item of transcript || []) {
    if (item.role === "bot" && byIndex.has(item.turn)) byLine.set(item.at, byIndex.get(item.turn));
  }
  return byLine;
}

/** A turn is slow when it took longer than the session's p95 (the server's figure). */
export function isSlow(turn, latency) {
  return typeof turn?.latency_ms === "number" && typeof latency?.p95 === "number" && turn.latency_ms > latency.p95;
}

export const WATERFALL_PARTS = {
  llm_first_token: "LLM first token",
  tts_first_audio: "TTS first audio",
  bot_speaking: "bot speaking",
};

/**
 * The bars of a turn's waterfall (turn.waterfall, as the server made it), placed on one scale for
 * the whole session (its slowest turn) so that bars compare across replies. A part whose end the
 * messages do not give is drawn from its start, open.
 * @returns {{part: string, label: string, left: number, width: number, open: boolean, text: string, title: string}[]}
 *   left and width in % of the scale
 */
export function waterfallBars(turn, latency) {
  const parts = Array.isArray(turn?.waterfall) ? turn.waterfall : [];
  const ends = parts.flatMap((p) => [p.from_ms, p.to_ms]).filter((v) => typeof v === "number");
  const scale = Math.max(typeof latency?.max === "number" ? latency.max : 0, ...ends, 1);
  return parts.map((p) => {
    const from = typeof p.from_ms === "number" ? p.from_ms : 0;
    const open = typeof p.to_ms !== "number";
    const to = open ? from : p.to_ms;
    const label = WATERFALL_PARTS[p.part] || p.part;
    const text = open ? "?" : `+${formatDuration(to)}`;
    const title = open
      ? `${label}: began at +${formatDuration(from)}; the messages do not say when it came`
      : `${label} at +${formatDuration(to)} after the user stopped speaking (from +${formatDuration(from)})`;
    return { part: p.part, label, left: (from / scale) * 100, width: ((to - from) / scale) * 100, open, text, title };
  });
}

// --- the timeline's window and axis ------------------------------------------------------

export const MIN_SPAN = 1; // seconds: the closest zoom
export const LIVE_SPAN = 120; // seconds a live session's timeline shows by default

/**
 * The seconds a view shows. A view either follows the clock (live: the last `span` seconds up to now;
 * span Infinity shows the whole call so far) or is fixed ({from, to}: zoomed or panned, or an ended call).
 * @param {{follow: boolean, span: number, from?: number, to?: number}} view
 * @param {{from: number, to: number}} extent the session's first and last moments (to: now while live)
 */
export function viewWindow(view, extent) {
  if (!view.follow) return { from: view.from, to: view.to };
  const to = extent.to;
  const from = Number.isFinite(view.span) ? Math.max(extent.from, to - view.span) : extent.from;
  const span = Math.max(to - from, MIN_SPAN);
  const margin = span * 0.02; // the newest moment is not on the edge
  return { from: to - span, to: to + margin };
}

/** The whole call, with a little room at each end. */
export function wholeWindow(extent) {
  const span = Math.max(extent.to - extent.from, MIN_SPAN);
  const margin = Math.max(span * 0.02, 0.2);
  return { from: extent.from - margin, to: extent.from + span + margin };
}

/** A window zoomed by `factor` (below 1 zooms in) about the moment `at`, which stays where it is. */
export function zoomWindow(window, factor, at) {
  const span = window.to - window.from;
  const next = Math.max(span * factor, MIN_SPAN);
  const ratio = span > 0 ? (at - window.from) / span : 0.5;
  return { from: at - ratio * next, to: at - ratio * next + next };
}

/** A window moved by `seconds`, kept overlapping the call by at least half its width. */
export function panWindow(window, seconds, extent) {
  const span = window.to - window.from;
  const from = Math.min(Math.max(window.from + seconds, extent.from - span / 2), extent.to - span / 2);
  return { from, to: from + span };
}

/** A window that shows the moment `at`: itself when it does, else moved to centre it. */
export function windowShowing(window, at) {
  if (at >= window.from && at <= window.to) return window;
  const span = window.to - window.from;
  return { from: at - span / 2, to: at + span / 2 };
}

const STEPS = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

/** A time axis's label for a tick: the clock to the second, to the minute for steps of minutes, to the tenth below a second. */
export function tickLabel(at, step) {
  if (step < 1) return clockOf(at, { ms: true }).slice(0, -2);
  return step >= 60 ? clockOf(at).slice(0, 5) : clockOf(at);
}

/**
 * Tick marks for a time axis: the smallest round step that gives at most `most` ticks, and the ticks
 * (epoch seconds on multiples of it) with their labels.
 * @returns {{step: number, ticks: {at: number, label: string}[]}}
 */
export function timeTicks(from, to, most) {
  const span = Math.max(to - from, 1e-3);
  const step = STEPS.find((s) => span / s <= Math.max(most, 1)) ?? STEPS.at(-1);
  const ticks = [];
  for (let k = Math.ceil(from / step); k * step <= to; k++) {
    const at = Math.round(k * step * 1000) / 1000;
    ticks.push({ at, label: tickLabel(at, step) });
  }
  return { step, ticks };
}

// --- charts ------------------------------------------------------------------------------

/**
 * A Pipecat processor as a person names it: "OpenAILLMService#0" -> "OpenAI LLM", "CartesiaTTSService#1" ->
 * "Cartesia TTS". Other names are kept as they are, less the instance number.
 */
export function serviceName(processor) {
  return processor
    .replace(/#\d+$/, "")
    .replace(/Service$/, "")
    .replace(/(LLM|TTS|STT|VAD)$/, " $1")
    .trim();
}

/**
 * Chart series names from the state's "processor|model" keys: "OpenAI LLM · gpt-4o". Two series that would read
 * the same (two instances of one service) keep their instance number.
 */
export function seriesNames(keys) {
  const split = keys.map((key) => {
    const bar = key.indexOf("|");
    return bar < 0 ? [key, ""] : [key.slice(0, bar), key.slice(bar + 1)];
  });
  const plain = split.map(([processor, model]) => [serviceName(processor), model].filter(Boolean).join(" · ") || "(all)");
  return plain.map((name, i) => {
    if (plain.indexOf(name) === plain.lastIndexOf(name)) return name;
    const instance = split[i][0].match(/#\d+$/);
    return instance ? `${name} ${instance[0]}` : name;
  });
}

/** The last value of a chart column that has one, for legends while no point is hovered. */
export function lastValue(column) {
  for (let i = (column?.length ?? 0) - 1; i >= 0; i--) if (column[i] !== null && column[i] !== undefined) return column[i];
  return null;
}

// --- the message log -----------------------------------------------------------------------

const oneLine = (text) => text.replace(/\s+/g, " ").trim();
const cut = (text, max) => (text.length > max ? `${text.slice(0, max)}…` : text);

/**
 * One line of what a stored message says, for its log row: the text it carries (quoted, so that a token's
 * leading space shows), else its data in short, else its raw text; never more than `max` characters.
 */
export function previewText(event, max = 160) {
  if (event.valid === false && event.error) return cut(oneLine(`invalid: ${event.error}`), max);
  const message = event.message;
  if (isPreview(message)) return `${message.length} characters: open it to load it whole`;
  if (message && typeof message === "object" && !Array.isArray(message)) {
    const data = message.data && typeof message.data === "object" ? message.data : {};
    const said = [data.text, data.content, data.error, data.message].find((v) => typeof v === "string");
    if (said !== undefined) return cut(JSON.stringify(said), max);
    return cut(oneLine(messageSummary(message, max)), max);
  }
  return cut(oneLine(formatValue(message)), max);
}

export const LOG_CAP = 1000; // rows the log holds at once; the rest are a page away
export const LOG_PAGE = 200; // messages asked for at a time

/**
 * Which stored messages the log shows: a window of the session's messages that match its filters, in seq
 * order. While `following`, its end is the live tail (the messages the socket brings); otherwise newer
 * messages are a page away. Paging back (`older`) and forth (`newer`) reads the server's pages. At most
 * `cap` rows: paging back past it lets go of the newest (no longer following), following past it lets
 * go of the oldest.
 */
export class LogPager {
  constructor(cap = LOG_CAP) {
    this.cap = cap;
    this.filter = { type: "", direction: "" };
    this.events = [];
    this.following = true;
    this.hasOlder = true; // unknown until a page says
  }

  matches(event) {
    const { type, direction } = this.filter;
    return (!type || eventType(event) === type) && (!direction || event.direction === direction);
  }

  /** The page's query for these filters, with a cursor: {after} or {before}. */
  query(cursor, limit = LOG_PAGE) {
    const params = new URLSearchParams({ limit: String(limit) });
    for (const [key, value] of Object.entries({ ...cursor, ...this.filter })) {
      if (value !== "" && value !== undefined && value !== null) params.set(key, String(value));
    }
    return params.toString();
  }

  /** Start again at the live tail, with these filters. */
  reset(filter, tail) {
    this.filter = { type: filter.type || "", direction: filter.direction || "" };
    this.events = tail.filter((e) => this.matches(e)).slice(-this.cap);
    this.following = true;
    // Seqs start at 1: a tail that holds it holds the start (with no filter to hide what came before).
    this.hasOlder = !(this.events[0]?.seq === 1 && !this.filter.type && !this.filter.direction);
  }

  /** Messages that just came over the socket; returns whether the rows changed (not while paged back). */
  live(events) {
    const fresh = events.filter((e) => this.matches(e));
    if (!fresh.length || !this.following) return false;
    this.events = mergeBySeq(this.events, fresh);
    this.trimFront();
    return true;
  }

  /** Where the next older page ends: before the first row, or before the tail when nothing matched in it. */
  olderCursor(tail) {
    const first = this.events[0]?.seq ?? tail[0]?.seq;
    return first === undefined ? {} : { before: first };
  }

  newerCursor() {
    const last = this.events.at(-1)?.seq;
    return last === undefined ? { after: 0 } : { after: last };
  }

  /** A page of older messages came (the answer to olderCursor's query). */
  older(page) {
    const first = this.events[0]?.seq ?? Infinity;
    this.events = mergeBySeq(
      page.events.filter((e) => e.seq < first),
      this.events,
    );
    this.hasOlder = page.prev_before !== null;
    if (this.events.length > this.cap) {
      this.events = this.events.slice(0, this.cap);
      this.following = false;
    }
  }

  /** A page of newer messages came; when it is the last, the log follows the live tail again. */
  newer(page, tail) {
    this.events = mergeBySeq(this.events, page.events);
    if (page.next_after === null) this.follow(tail);
    this.trimFront();
  }

  /** A page about a moment (a cursor far from the rows shown) replaces the rows; at the end of what is stored, it follows. */
  around(page, tail) {
    this.events = page.events.slice(-this.cap);
    this.hasOlder = page.prev_before !== null;
    this.following = false;
    if (page.next_after === null) this.follow(tail);
  }

  follow(tail) {
    this.following = true;
    const last = this.events.at(-1)?.seq ?? -Infinity;
    this.events = mergeBySeq(
      this.events,
      tail.filter((e) => e.seq > last && this.matches(e)),
    );
    this.trimFront();
  }

  trimFront() {
    if (this.events.length > this.cap) {
      this.events = this.events.slice(this.events.length - this.cap);
      this.hasOlder = true;
    }
  }
}

/** Two lists of messages as one, in seq order, each seq once (the later list's copy wins). */
export function mergeBySeq(a, b) {
  if (!b.length) return a;
  if (!a.length || b[0].seq > a.at(-1).seq) {
    const merged = a.concat(b);
    for (let i = a.length + 1; i < merged.length; i++) if (merged[i].seq <= merged[i - 1].seq) return sortUnique(merged);
    return merged;
  }
  return sortUnique(a.concat(b));
}

function sortUnique(events) {
  const bySeq = new Map(events.map((e) => [e.seq, e]));
  return [...bySeq.values()].sort((x, y) => x.seq - y.seq);
}

/**
 * The index of the item nearest before (or at) the moment `at`, by `timeOf`, in a list in time order;
 * the first item when all come after it; -1 for an empty list.
 */
export function indexAt(items, at, timeOf) {
  let best = -1;
  for (let i = 0; i < items.length; i++) {
    const t = timeOf(items[i]);
    if (typeof t !== "number") continue;
    if (t <= at) best = i;
    else break;
  }
  return best === -1 && items.length ? 0 : best;
}
