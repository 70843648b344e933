// Unit tests for static/js/session_row.js (node --test tests/js/): a session row's status pill,
// latency and order, as the sessions list and the session page's header show them.
import assert from "node:assert/strict";
import { test } from "node:test";

import { clockTime } from "../../static/js/format.js";
import { latencyPair, newestFirst, sessionStatus } from "../../static/js/session_row.js";

test("a session row's latency is the server's p50 and p95", () => {
  assert.equal(latencyPair({ p50: 820, p95: 1400, max: 1400 }), "820 ms / 1.4 s");
  assert.equal(latencyPair({ p50: null, p95: null, max: null }), "—");
});

test("session rows sort newest start first, then by id", () => {
  const rows = [
    { id: "b", started_at: "2026-11-23T13:00:00+00:00" },
    { id: "c", started_at: "2026-11-23T13:05:00.250000+00:00" },
    { id: "a", started_at: "2026-11-23T13:00:00+00:00" },
    { id: "d", started_at: "2026-11-23T14:05:00+01:00" }, // the same instant as c's minute, written in another offset
  ];
  assert.deepEqual([...rows].sort(newestFirst).map((r) => r.id), ["c", "d", "b", "a"]);
});

test("the status pill says live, bot away since when, or ended and how, failures in red", () => {
  const live = { kind: "live", failed: false, pill: "live", text: "live" };
  assert.deepEqual(sessionStatus({ status: "live", bot: "connected" }, { ended: false }), live);
  const since = new Date(2025, 5, 1, 9, 5, 7); // the browser's own zone, as the pill says it
  const away = sessionStatus({ status: "live", bot: "away", away_since: since.toISOString() }, { ended: false });
  assert.equal(away.kind, "away");
  assert.equal(away.pill, "away");
  assert.equal(away.text, `bot away since ${clockTime(since)} — the session ends if it does not return within the grace period`);
  assert.match(away.text, /^bot away since 09:05:07 \S+ — /);
  // A bot that closed with 1000 has finished: the session is ending, never "away" (its end is stored within moments).
  const finishing = sessionStatus({ status: "live", bot: "finished", away_since: since.toISOString() }, { ended: false });
  assert.deepEqual(finishing, { kind: "ending", failed: false, pill: "live", text: "ending (bot finished)" });
  const row = (end_kind, end_reason, failed) => ({ status: "ended", end_kind, end_reason, failed, bot: null });
  const ended = (text, failed) => ({ kind: "ended", failed, pill: failed ? "ended error" : "ended", text });
  assert.deepEqual(sessionStatus(row("client_hung_up", "client hung up", false), {}), ended("ended (client hung up)", false));
  assert.deepEqual(sessionStatus(row("bot_finished", "bot finished", false), {}), ended("ended (bot finished)", false));
  assert.deepEqual(sessionStatus(row("bot_vanished", "bot vanished", true), {}), ended("ended (bot vanished)", true));
  assert.deepEqual(sessionStatus(row("server_restarted", "server restarted", true), {}), ended("ended (server restarted)", true));
  // An operator's end names them, and is no failure (the server's FAILED_ENDS has no operator_ended).
  const byOperator = row("operator_ended", "by operator ann", false);
  assert.deepEqual(sessionStatus(byOperator, {}, new Set(["bot_vanished", "fatal_error", "server_restarted"])), ended("ended (by operator ann)", false));
  // The session page's state says it before its row does: its end kind is a failure when the server's list
  // (the page's config.failed_ends) names it; the browser has no list of its own.
  const failedEnds = new Set(["bot_vanished", "fatal_error", "server_restarted"]);
  const vanished = { ended: true, end_reason: "bot vanished", end_kind: "bot_vanished" };
  assert.deepEqual(sessionStatus({ status: "live", bot: "connected" }, vanished, failedEnds), ended("ended (bot vanished)", true));
  assert.deepEqual(sessionStatus({ status: "live", bot: "connected" }, vanished), ended("ended (bot vanished)", false));
  const fatal = { ended: true, end_reason: "fatal error", end_kind: "fatal_error", fatal: true };
  assert.deepEqual(sessionStatus({ status: "live", bot: "connected" }, fatal), ended("ended (fatal error)", true));
  assert.deepEqual(sessionStatus({ status: "ended", end_reason: "", end_kind: "bot_vanished", failed: true }, null), ended("ended", true));
  // Ended before kinds were recorded: as before, and not called a failure.
  assert.deepEqual(sessionStatus({ status: "ended", end_reason: "bot disconnected", bot: null }, {}), ended("ended (bot disconnected)", false));
  assert.deepEqual(sessionStatus({ status: "ended", end_reason: "" }, null), ended("ended", false));
  assert.equal(sessionStatus({ status: "live", bot: "away", away_since: null }, null).text.startsWith("bot away since ? "), true);
});
