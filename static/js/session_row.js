// A session row as the sessions list and the session page's header show it: its status pill, its
// turn latency, the lists' order. Pure (tests/js/session_row.test.mjs).
import { clockTime, formatDuration } from "./format.js";

/**
 * The status pill: live, bot away (since when), or ended (how: client hung up, bot finished, bot
 * vanished, fatal error, server restarted). `pill` is its class: an end that failed is red. Which ends
 * failed is the server's to say: a row says it (`failed`); the state, which may say a session ended
 * before its row does, names its end kind, and `failedEnds` are the kinds that failed as the page's
 * config sent them (rtvi_monitor/sessions/models.py FAILED_ENDS): the browser keeps no list of its own.
 * @param {object | null} row   the session row (status, bot, away_since, end_reason, end_kind, failed)
 * @param {object | null} state the derived state (ended, end_reason, end_kind, fatal)
 * @param {Set<string>} failedEnds the end kinds that count as failures (config.failed_ends)
 * An operator's end names them: "ended (by operator ann)" (the server's words, rtvi_monitor/sessions/models.py).
 * @returns {{kind: "live" | "away" | "ended", failed: boolean, pill: string, text: string}}
 */
export function sessionStatus(row, state, failedEnds = new Set()) {
  if (row?.status === "ended" || state?.ended === true) {
    const reason = row?.end_reason || state?.end_reason || "";
    const endKind = row?.end_kind || state?.end_kind || "";
    const failed = row?.failed === true || failedEnds.has(endKind) || row?.fatal === true || state?.fatal === true;
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
