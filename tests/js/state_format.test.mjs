// Unit tests for static/js/state_format.js (node --test tests/js/): the session's derived state as the
// session page shows it. tests/web/test_format.py runs peerText on the same table of cases as the server's
// dashboard/display.py.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  countsText,
  fatalText,
  latencySeries,
  latencyText,
  metricSeries,
  peerText,
  peerTitle,
  speaker,
  totalsText,
  transcriptEntries,
} from "../../static/js/state_format.js";

const T0 = 1_750_000_000;

test("the speaker comes from state.speaking", () => {
  assert.equal(speaker({ speaking: { user: true, bot: false } }), "user");
  assert.equal(speaker({ speaking: { user: false, bot: true } }), "bot");
  assert.equal(speaker({ speaking: { user: true, bot: true } }), "both");
  assert.equal(speaker({ speaking: { user: false, bot: false } }), "nobody");
  assert.equal(speaker({}), "nobody");
});

test("latency is the server's, written out", () => {
  assert.equal(latencyText({ p50: 812.4, p95: 1500, max: 2100.6 }, 3), "p50 812 ms · p95 1.5 s · max 2.1 s (3 turns)");
  assert.equal(latencyText({ p50: 800, p95: 800, max: 800 }, 1), "p50 800 ms · p95 800 ms · max 800 ms (1 turn)");
  assert.equal(latencyText({ p50: null, p95: null, max: null }, 0), "—");
  assert.equal(latencyText(undefined, 0), "—");
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

test("an operator's lines are theirs: who, what they did, and the bot's refusal; never a user's or a bot's", () => {
  const sent = { role: "operator", action: "send-text", cancel: false, operator: "ann", text: "Please hold.", options: { run_immediately: true, audio_response: false }, ok: true, outcome: "the bot took it", final: true, at: T0 + 2 };
  const state = {
    transcript: [
      { role: "bot", text: "Your order ships today.", final: true, source: "bot-output", at: T0 + 1, interrupted: false },
      sent,
      { role: "bot", text: "Please hold.", final: true, source: "bot-output", at: T0 + 3, interrupted: false },
      { ...sent, options: null, text: "", ok: false, outcome: "the bot did not answer within 5 s", at: T0 + 4 },
      { role: "operator", action: "end", cancel: true, operator: "", text: "", options: null, ok: true, outcome: "the bot took it", at: T0 + 5 },
    ],
  };
  assert.deepEqual(
    transcriptEntries(state).map((e) => [e.className, e.who, e.text]),
    [
      ["bot", "bot", "Your order ships today."],
      ["operator", "operator ann", "sent text (answer now, not spoken): Please hold."],
      ["bot", "bot", "Please hold."],
      ["operator failed", "operator ann", "sent text: (its words were not recorded) — not done: the bot did not answer within 5 s"],
      ["operator", "operator", "cut the call off at once"],
    ],
  );
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
