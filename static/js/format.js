// The product's formats, on every page (base.html loads this module): one time format, one
// duration format, ids shown short. dashboard/web/display.py has the same duration and id rules for
// what the server renders; tests/web/test_format.py checks both languages on one table of cases.
//
// Everything here is pure except showTime and upgradeTimes, which fill <time class="when"> elements
// (base.html runs upgradeTimes on every page). What the session pages make of a session lives in
// modules named for it: session_row.js, state_format.js, timeline_lanes.js, message_format.js.

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
 * How long ago: "just now", "12 s ago", "4 min ago", "3 h ago", then the date and minute in the operator's zone,
 * the zone named ("2026-11-21 09:15 CET"), as for a time to come ("silenced until 2026-11-21 09:15 CET").
 * A time slightly in the future (the browser's clock behind the server's) is "just now".
 * @param {Date} date
 * @param {number} now epoch milliseconds
 */
export function relativeTime(date, now, where) {
  if (Number.isNaN(date.getTime())) return "?";
  const seconds = (now - date.getTime()) / 1000;
  if (seconds <= -SKEW_S || seconds >= DAY_S) {
    const f = dateFields(date, where);
    return `${f.year}-${f.month}-${f.day} ${f.hour}:${f.minute} ${f.timeZoneName}`;
  }
  if (seconds < RECENT_S) return "just now";
  if (seconds < 60) return `${Math.floor(seconds)} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  return `${Math.floor(seconds / 3600)} h ago`;
}

/**
 * Fills one <time datetime="(ISO 8601)"> element: how long ago as its text, the full time as its title.
 * The server renders it with UTC text (web/_when.html); this is what makes it the operator's.
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

// An id a person cannot read whole: a UUID or a long run of hex (dashboard/web/display.py's _OPAQUE).
const OPAQUE = /^(?:[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}|[0-9a-f]{20,})$/i;

/**
 * An id as a person reads it: a UUID (or long hex id) by its first 8 characters, as git shows a commit;
 * any other id, chosen by somebody to be read, whole; "—" for none. Show the whole id on hover (title)
 * and keep it in links. dashboard/web/display.py's short_id is the same rule.
 * @param {unknown} id
 */
export function shortId(id) {
  if (id === null || id === undefined || id === "") return "—";
  const text = String(id);
  return OPAQUE.test(text) ? text.slice(0, 8) : text;
}

/**
 * A share (0 to 1) as a whole percentage: "0 %", "12 %", "100 %"; "<1 %" and ">99 %" for a share that is neither
 * none nor all but would round to it; "—" when unknown. dashboard/web/display.py's percent_text is the same rule.
 * @param {number | null | undefined} share
 */
export function percentText(share) {
  if (typeof share !== "number" || !Number.isFinite(share)) return "—";
  const whole = Math.floor(share * 100 + 0.5);
  if (whole <= 0 && share > 0) return "<1 %";
  if (whole >= 100 && share * 100 < 100) return ">99 %";
  return `${Math.max(whole, 0)} %`;
}
