// Unit tests for static/js/format.js (node --test tests/js/): the product's time and duration formats,
// and formatting the server's derived state. tests/test_format.py runs formatDuration on the same table
// of cases as the server's `duration` filter.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  absoluteTime,
  clockTime,
  countsText,
  eventType,
  fatalText,
  formatDuration,
  formatValue,
  isPreview,
  latencyPair,
  latencySeries,
  latencyText,
  mergeEvents,
  messageText,
  metricSeries,
  newestFirst,
  peerText,
  peerTitle,
  relativeTime,
  sessionStatus,
  shortId,
  showTime,
  speaker,
  timelineEnd,
  timelineMarkers,
  timelineRows,
  timelineStart,
  totalsText,
  transcriptEntries,
  upgradeTimes,
} from "../../static/js/format.js";

const T0 = 1_750_000_000;

test("the speaker comes from state.speaking", () => {
  assert.equal(speaker({ speaking: { user: true, bot: false } }), "user");
  assert.equal(speaker({ speaking: { user: false, bot: true } }), "bot");
  assert.equal(speaker({ speaking: { user: true, bot: true } }), "both");
  assert.equal(speaker({ speaking: { user: false, bot: false } }), "nobody");
  assert.equal(speaker({}), "nobody");
});

const PARIS = { timeZone: "Europe/Paris", locale: "en-GB" };
const NEW_YORK = { timeZone: "America/New_York", locale: "en-US" };
const UTC = { timeZone: "UTC", locale: "en-US" };
const MOMENT = new Date("2026-11-23T13:03:07Z");

test("an absolute time is 24-hour, in the operator's zone, the zone named", () => {
  assert.equal(absoluteTime(MOMENT, PARIS), "2026-11-23 14:03:07 CET");
  assert.equal(absoluteTime(MOMENT, NEW_YORK), "2026-11-23 08:03:07 EST");
  assert.equal(absoluteTime(MOMENT, UTC), "2026-11-23 13:03:07 UTC");
  // Midnight is 00, never 24 or 12 AM, and the date is the zone's own.
  assert.equal(absoluteTime(new Date("2026-11-23T23:30:00Z"), PARIS), "2026-11-24 00:30:00 CET");
  assert.equal(absoluteTime(new Date("2026-07-01T12:00:00Z"), PARIS), "2026-07-01 14:00:00 CEST");
  assert.equal(clockTime(MOMENT, NEW_YORK), "08:03:07 EST");
  assert.equal(absoluteTime(new Date("nonsense")), "?");
  assert.equal(clockTime(new Date("nonsense")), "?");
  // The browser's own zone when none is given.
  assert.match(absoluteTime(MOMENT), /^2026-11-2[34] \d\d:\d\d:07 \S+$/);
});

test("a relative time says how long ago, then the date", () => {
  const now = MOMENT.getTime();
  const ago = (seconds) => relativeTime(new Date(now - seconds * 1000), now, PARIS);
  const cases = [
    [0, "just now"],
    [9.9, "just now"],
    [10, "10 s ago"],
    [59.9, "59 s ago"],
    [60, "1 min ago"],
    [245, "4 min ago"],
    [3599, "59 min ago"],
    [3600, "1 h ago"],
    [3 * 3600 + 59 * 60, "3 h ago"],
    [86399, "23 h ago"],
    [86400, "2026-11-22 14:03"],
    [40 * 86400, "2026-10-14 15:03"], // a summer-time date, in summer time
    [-30, "just now"], // the browser's clock a little behind the server's
    [-61, "2026-11-23 14:04"], // a time in the future is not clock skew: its date
  ];
  for (const [seconds, text] of cases) assert.equal(ago(seconds), text, `${seconds} s ago`);
  assert.equal(relativeTime(new Date("nonsense"), now), "?");
});

test("showTime and upgradeTimes fill <time class=when>: how long ago, the full time on hover", () => {
  const element = (datetime, text) => ({ textContent: text, title: "server's", getAttribute: (name) => (name === "datetime" ? datetime : null) });
  const now = MOMENT.getTime();
  const recent = element("2026-11-23T13:03:00+00:00", "2026-11-23 13:03:00 UTC");
  showTime(recent, now);
  assert.equal(recent.textContent, "just now");
  assert.equal(recent.title, absoluteTime(new Date("2026-11-23T13:03:00Z")));
  // Unreadable: the server's UTC text stays.
  const broken = element("yesterday", "2026-11-22 10:00:00 UTC");
  showTime(broken, now);
  assert.deepEqual([broken.textContent, broken.title], ["2026-11-22 10:00:00 UTC", "server's"]);
  // The whole page, again later: "just now" ages.
  const times = [element("2026-11-23T13:03:07Z", ""), element("2026-11-23T12:03:07.123456+00:00", "")];
  const asked = [];
  const root = {
    querySelectorAll(selector) {
      asked.push(selector);
      return times;
    },
  };
  upgradeTimes(root, now + 15_000);
  assert.deepEqual(asked, ["time.when"]);
  assert.deepEqual(times.map((t) => t.textContent), ["15 s ago", "1 h ago"]);
});

test("durations are rounded as a person says them", () => {
  // The whole table, shared with the server's filter, is in tests/test_format.py; these are its landmarks.
  const cases = [
    [0, "0 ms"],
    [380.491, "380 ms"],
    [999.4, "999 ms"],
    [999.5, "1.0 s"],
    [1234, "1.2 s"],
    [9949, "9.9 s"],
    [9950, "10 s"],
    [12_345, "12 s"],
    [59_499, "59 s"],
    [59_500, "1 min 00 s"],
    [245_000, "4 min 05 s"],
    [3_599_499, "59 min 59 s"],
    [3_599_500, "1 h 00 min"],
    [3_720_000, "1 h 02 min"],
    [-5, "0 ms"],
  ];
  for (const [ms, text] of cases) assert.equal(formatDuration(ms), text, `${ms} ms`);
  for (const unknown of [null, undefined, Number.NaN, Number.POSITIVE_INFINITY, "12"]) assert.equal(formatDuration(unknown), "—");
});

test("latency is the server's, written out", () => {
  assert.equal(latencyText({ p50: 812.4, p95: 1500, max: 2100.6 }, 3), "p50 812 ms · p95 1.5 s · max 2.1 s (3 turns)");
  assert.equal(latencyText({ p50: 800, p95: 800, max: 800 }, 1), "p50 800 ms · p95 800 ms · max 800 ms (1 turn)");
  assert.equal(latencyText({ p50: null, p95: null, max: null }, 0), "—");
  assert.equal(latencyText(undefined, 0), "—");
  assert.equal(latencyPair({ p50: 820, p95: 1400, max: 1400 }), "820 ms / 1.4 s");
  assert.equal(latencyPair({ p50: null, p95: null, max: null }), "—");
});

test("a function call's time and the audio transcribed are durations too", () => {
  const state = { function_calls: [{ function_name: "lookup", status: "completed", duration_ms: 380.491, started_at: T0 }] };
  assert.equal(transcriptEntries(state)[0].text, "function lookup: completed in 380 ms");
  assert.match(totalsText({ stt_audio_seconds: 75.2 }), / · 1 min 15 s of audio transcribed$/);
});

test("a failed function call reads as a failure, in the error colour, never as completed", () => {
  const failed = { function_name: "lookup", status: "failed", error: "timed out", duration_ms: 3000, started_at: T0 };
  const call = { ...failed, args: { id: 1 }, result: { error: "timed out" } };
  const [entry] = transcriptEntries({ function_calls: [call] });
  assert.deepEqual([entry.className, entry.text], ["note err", 'function lookup: failed after 3.0 s: timed out · args {"id":1}']);
  const cancelled = { function_name: "lookup", status: "cancelled", error: null, duration_ms: 3000, started_at: T0 };
  const [stopped] = transcriptEntries({ function_calls: [cancelled] });
  assert.deepEqual([stopped.className, stopped.text], ["note", "function lookup: cancelled after 3.0 s"]);
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

test("totals, counts and the peers are one line each", () => {
  assert.equal(totalsText({ characters: 42, prompt_tokens: 10, completion_tokens: 5, total_tokens: 15, stt_audio_seconds: 0 }), "15 tokens (10 prompt, 5 completion) · 42 characters");
  assert.match(totalsText({ stt_audio_seconds: 2.5 }), /2\.5 s of audio transcribed$/);
  assert.equal(countsText({ total: 7, invalid: 1, unknown: 2 }), "7 messages · 1 invalid · 2 of unknown type");
  assert.equal(peerText("2.2.0", { library: "pipecat-ai" }), "pipecat-ai · RTVI 2.2.0");
  assert.equal(peerText(null, null), "—");
});

test("a client or bot reads as its library, version and platform, not as JSON", () => {
  const client = { library: "@pipecat-ai/client-js", library_version: "1.4.0", platform: "browser", platform_details: { os: "macOS" } };
  assert.equal(peerText("2.1.0", client), "client-js 1.4.0 on browser · RTVI 2.1.0");
  assert.equal(peerText("2.2.0", { library: "pipecat-ai", library_version: "1.14.0" }), "pipecat-ai 1.14.0 · RTVI 2.2.0");
  assert.equal(peerText("", { library: "pipecat", library_version: "0.0.95", platform: "python", platform_version: "3.12" }), "pipecat 0.0.95 on python 3.12");
  assert.equal(peerText("2.2.0", { library: "pipecat-ai", library_version: "1.14.0", name: "support" }), "pipecat-ai 1.14.0 (support) · RTVI 2.2.0");
  assert.equal(peerText(undefined, { os: "linux", build: 7, debug: true, nested: { a: 1 } }), "os linux, build 7");
  assert.equal(peerText("1.0.0", {}), "RTVI 1.0.0");
  assert.equal(peerText("1.0.0", { truncated: true, preview: "{", length: 9000 }), "(9000 characters of JSON) · RTVI 1.0.0");
  assert.equal(peerTitle(client), JSON.stringify(client));
  assert.equal(peerTitle(null), "");
});

test("UUIDs and long hex ids read by their first 8 characters; ids a person chose, whole", () => {
  assert.equal(shortId("4cab03c7-8f53-4e1b-9a0d-2f6c1e7b5a90"), "4cab03c7");
  assert.equal(shortId("4CAB03C78F534E1B9A0D2F6C1E7B5A90"), "4CAB03C7");
  assert.equal(shortId("demo-3fa9c2d1e0b4"), "demo-3fa9c2d1e0b4");
  assert.equal(shortId("4cab03c7-8f53"), "4cab03c7-8f53"); // not a UUID: somebody's name for it
  assert.equal(shortId(null), "—");
  assert.equal(shortId(""), "—");
});

test("a preview shows its start, its length and the message that holds it whole", () => {
  const preview = { truncated: true, preview: '{"rows":[1,2', length: 9000, seq: 17 };
  assert.equal(isPreview(preview), true);
  assert.equal(formatValue(preview), '{"rows":[1,2… (9000 characters; full message #17)');
  assert.equal(formatValue({ truncated: true, preview: "abc", length: 5000 }), "abc… (5000 characters)");
  // A bot's own object that only looks a bit like one is shown as it is.
  assert.equal(isPreview({ truncated: true, preview: "x", length: 1, type: "server-message" }), false);
  assert.equal(formatValue({ order: 42 }), '{"order":42}');
  assert.equal(formatValue("<img src=x>"), "<img src=x>");
  assert.equal(formatValue(null), "null");
});

test("the log shows raw text as it came, previews as their start, JSON indented", () => {
  assert.equal(messageText("not json {"), "not json {");
  assert.equal(messageText({ type: "x" }), '{\n  "type": "x"\n}');
  assert.equal(messageText({ truncated: true, preview: '{"type":"bot-llm-text"', length: 20000 }), '{"type":"bot-llm-text"… (20000 characters)');
});

test("a log row's type comes from the stored type, then the message", () => {
  assert.equal(eventType({ type: "bot-ready", message: {} }), "bot-ready");
  assert.equal(eventType({ type: null, message: { type: "metrics" } }), "metrics");
  assert.equal(eventType({ type: "", message: "<img src=x>" }), "(not JSON)");
  assert.equal(eventType({ message: { truncated: true, preview: "{", length: 9000 } }), "(not JSON)");
});

test("the log keeps one row per seq, in order, the newest 2000", () => {
  const ev = (seq) => ({ seq });
  let log = mergeEvents([], [ev(1), ev(2), ev(3)]);
  assert.deepEqual(log.map((e) => e.seq), [1, 2, 3]);
  assert.equal(mergeEvents(log, [ev(2), ev(3)]), log, "nothing new: the same log");
  log = mergeEvents(log, [ev(3), ev(5), ev(4)]);
  assert.deepEqual(log.map((e) => e.seq), [1, 2, 3, 4, 5]);
  const many = Array.from({ length: 2500 }, (_, i) => ev(i + 10));
  log = mergeEvents(log, many);
  assert.equal(log.length, 2000);
  assert.deepEqual([log[0].seq, log.at(-1).seq], [510, 2509]);
  assert.equal(mergeEvents(log, [ev(1)]).length, 2000, "an old one comes and goes");
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
  // The session page's state says it before its row does; the kind alone is enough to tell a failure.
  const fatal = { ended: true, end_reason: "fatal error", end_kind: "fatal_error" };
  assert.deepEqual(sessionStatus({ status: "live", bot: "connected" }, fatal), ended("ended (fatal error)", true));
  assert.deepEqual(sessionStatus({ status: "ended", end_reason: "", end_kind: "bot_vanished" }, null), ended("ended", true));
  // Ended before kinds were recorded: as before, and not called a failure.
  assert.deepEqual(sessionStatus({ status: "ended", end_reason: "bot disconnected", bot: null }, {}), ended("ended (bot disconnected)", false));
  assert.deepEqual(sessionStatus({ status: "ended", end_reason: "" }, null), ended("ended", false));
  assert.equal(sessionStatus({ status: "live", bot: "away", away_since: null }, null).text.startsWith("bot away since ? "), true);
});

test("the transcript interleaves lines, calls, server messages and errors by time", () => {
  const state = {
    transcript: [
      { role: "user", text: "Where is my order?", final: true, source: "voice", seq: 3, at: T0 + 1 },
      { role: "bot", text: "Let me", final: true, source: "bot-output", seq: 9, at: T0 + 3, interrupted: true },
      { role: "user", text: "Book a table", final: true, source: "chat", seq: 12, at: T0 + 6 },
      { role: "user", text: "wait", final: false, source: "voice", seq: 13, at: T0 + 7 },
      { role: "bot", text: "", final: true, source: "bot-output", seq: 14, at: T0 + 8, interrupted: true },
    ],
    function_calls: [
      { tool_call_id: "c1", function_name: "lookup", args: { id: 1 }, status: "completed", result: { truncated: true, preview: "{", length: 3000, seq: 8 }, started_at: T0 + 2, ended_at: T0 + 2.5, duration_ms: 500, seq: 7 },
    ],
    server_messages: [{ seq: 10, at: T0 + 4, data: { order: 42 } }],
    errors: [
      { seq: 11, at: T0 + 5, message: "no such request", fatal: false, type: "error-response", id: "r1", request_type: "client-message" },
      { seq: 15, at: T0 + 9, message: "dead", fatal: true, type: "error", id: null, request_type: null },
    ],
  };
  assert.deepEqual(
    transcriptEntries(state).map((e) => [e.className, e.who, e.text]),
    [
      ["user", "user", "Where is my order?"],
      ["note", undefined, 'function lookup: completed in 500 ms · args {"id":1} · result {… (3000 characters; full message #8)'],
      ["bot interrupted", "bot (interrupted)", "Let me"],
      ["note", undefined, 'server message: {"order":42}'],
      ["note err", undefined, "error-response (to client-message): no such request"],
      ["user", "user (typed)", "Book a table"],
      ["user partial", "user", "wait"],
      ["bot interrupted", "bot (interrupted)", "(interrupted before the first word)"],
      ["note err", undefined, "fatal error: dead"],
    ],
  );
  assert.equal(fatalText(state), "Fatal error: dead");
});

test("metric series for uPlot come from state.metrics, aligned on time", () => {
  const state = { metrics: { ttfb: { "llm|m": [[T0 + 1, 100]], "tts|": [[T0 + 2, 200]] }, ttfat: { "llm|": [[T0, 400]] } } };
  const { names, data } = metricSeries(state, "ttfb");
  assert.deepEqual(names, ["llm|m", "tts"]);
  assert.deepEqual(data, [[T0 + 1, T0 + 2], [100, null], [null, 200]]);
  assert.deepEqual(metricSeries(state, "ttfat").data[1], [400]);
  assert.deepEqual(metricSeries({}, "processing"), { names: [], data: [[]] });
  assert.deepEqual(metricSeries({ metrics: { ttfb: { "|": [[T0, 1]] } } }, "ttfb").names, ["(all)"]);
});

test("a service that sent no figure (only the start-of-session zeros) gets no series", () => {
  const state = {
    metrics: {
      ttfb: {
        "DeepgramSTTService#0|nova-3": [[T0, 0]],
        "OpenAILLMService#0|gpt-4o": [[T0, 0], [T0 + 3, 420]],
        "CartesiaTTSService#0|sonic": [[T0, 0], [T0 + 4, 0]],
      },
    },
  };
  const { names, data } = metricSeries(state, "ttfb");
  assert.deepEqual(names, ["OpenAILLMService#0|gpt-4o"]);
  assert.deepEqual(data, [[T0, T0 + 3], [0, 420]]);
  assert.deepEqual(metricSeries({ metrics: { processing: { "stt|": [[T0, 0]] } } }, "processing"), { names: [], data: [[]] });
});

test("the latency chart numbers turns by their index and draws the server's p50 and p95", () => {
  const state = {
    turns: [
      { index: 4, latency_ms: 900 },
      { index: 5, latency_ms: null },
      { index: 6, latency_ms: 1200 },
    ],
    latency: { p50: 900, p95: 1200, max: 1200 },
  };
  assert.deepEqual(latencySeries(state), [[5, 7], [900, 1200], [900, 900], [1200, 1200]]);
  assert.deepEqual(latencySeries({}), [[], [], [], []]);
});

test("the timeline has a lane per activity, clipped to its window", () => {
  const state = {
    intervals: {
      user_speaking: [[T0 + 1, T0 + 2], [T0 + 4, null]],
      bot_speaking: [[T0 + 3, T0 + 4]],
      llm_busy: [[T0 + 5, null]],
      tts_busy: [],
    },
    interruptions: [T0 + 4],
    function_calls: [{ started_at: T0 + 6, ended_at: null }, { started_at: T0, ended_at: T0 + 0.5 }],
  };
  const rows = Object.fromEntries(timelineRows(state, T0 + 1.5, T0 + 10).map((r) => [r.lane, r.spans]));
  assert.deepEqual(rows.user_speaking, [[T0 + 1.5, T0 + 2], [T0 + 4, T0 + 10]]);
  assert.deepEqual(rows.bot_speaking, [[T0 + 3, T0 + 4]]);
  assert.deepEqual(rows.llm_busy, [[T0 + 5, T0 + 10]]);
  assert.deepEqual(rows.tts_busy, []);
  assert.deepEqual(rows.interruptions, [[T0 + 4, T0 + 4]]);
  assert.deepEqual(rows.function_calls, [[T0 + 6, T0 + 10]]);
  assert.deepEqual(Object.keys(rows), ["user_speaking", "bot_speaking", "llm_busy", "tts_busy", "function_calls", "interruptions"]);
  assert.deepEqual(timelineRows({}, T0, T0 + 1).map((r) => r.spans), [[], [], [], [], [], []]);
});

test("markers are labelled, and only those in the window are drawn", () => {
  const state = {
    markers: [
      { at: T0 + 1, kind: "disconnect-bot", seq: 40 },
      { at: T0 + 20, kind: "ended", reason: "bot disconnected" },
    ],
  };
  assert.deepEqual(timelineMarkers(state, T0, T0 + 30), [
    { at: T0 + 1, kind: "disconnect-bot", label: "disconnect-bot" },
    { at: T0 + 20, kind: "ended", label: "ended (bot disconnected)" },
  ]);
  assert.deepEqual(timelineMarkers(state, T0 + 10, T0 + 30).map((m) => m.kind), ["ended"]);
  assert.deepEqual(timelineMarkers({ markers: [{ at: T0, kind: "ended" }] }, T0, T0)[0].label, "ended");
});

test("the timeline spans from the first moment the state knows to its last", () => {
  const state = {
    intervals: { user_speaking: [[T0 + 3, T0 + 4]] },
    interruptions: [T0 + 5],
    function_calls: [{ started_at: T0 + 2 }],
    markers: [{ at: T0 + 30, kind: "ended" }],
    transcript: [{ at: T0 + 1 }],
    last_at: T0 + 25,
  };
  assert.equal(timelineStart(state), T0 + 1);
  assert.equal(timelineEnd(state), T0 + 30);
  assert.equal(timelineStart({}), null);
  assert.equal(timelineEnd({ last_at: null }), null);
});
