// Unit tests for static/js/viewmodel.js (node --test tests/js/).
import assert from "node:assert/strict";
import { test } from "node:test";

import { applyEvents, createView, latencyStats, metricSeries, newEvents, speaker, timelineRows } from "../../static/js/viewmodel.js";

const T0 = 1_750_000_000;
let seq = 0;
const ev = (type, data, dt = 0.1, extra = {}) => {
  seq += 1;
  return { seq, direction: "to-client", type, received_at: T0 + seq * dt, sent_at: null, valid: true, error: "",
           message: { label: "rtvi-ai", type, ...(data === undefined ? {} : { data }) }, ...extra };
};
const fresh = () => {
  seq = 0;
  return createView({ session: { id: "s" }, state: {}, events: [], last_seq: 0 });
};

test("user partials are replaced by the final text", () => {
  const view = applyEvents(fresh(), [
    ev("user-transcription", { text: "where is", final: false }),
    ev("user-transcription", { text: "Where is my order?", final: true }),
  ]);
  assert.deepEqual(view.transcript.map((t) => [t.role, t.text, t.final]), [["user", "Where is my order?", true]]);
});

test("a bot sentence sent four ways shows once, from bot-output", () => {
  const view = applyEvents(fresh(), [
    ev("bot-llm-text", { text: "It" }), ev("bot-llm-text", { text: " ships." }),
    ev("bot-output", { text: "It ships.", spoken: false, segment_id: 1, will_be_spoken: true, spoken_status: "new" }),
    ev("bot-tts-text", { text: "It ships." }),
    ev("bot-transcription", { text: " It ships." }),
    ev("bot-output", { text: "It ships.", spoken: true, segment_id: 1, will_be_spoken: true, spoken_status: "completed" }),
  ]);
  assert.equal(view.transcript.length, 1);
  assert.deepEqual([view.transcript[0].text, view.transcript[0].source], ["It ships.", "bot-output"]);
});

test("bot text falls back to tokens when nothing better comes", () => {
  const view = applyEvents(fresh(), [ev("bot-llm-text", { text: "Hel" }), ev("bot-llm-text", { text: "lo." })]);
  assert.equal(view.transcript[0].text, "Hello.");
  assert.equal(view.llm.current_tokens, "Hello.");
});

test("chat input is one typed line", () => {
  const view = applyEvents(fresh(), [
    { ...ev("send-text", { content: "Book a table" }), direction: "from-client" },
    ev("user-input", { text: "Book a table", input_type: "chat" }),
  ]);
  assert.deepEqual(view.transcript.map((t) => [t.source, t.text]), [["chat", "Book a table"]]);
});

test("speaking state follows the messages", () => {
  const view = fresh();
  applyEvents(view, [ev("user-started-speaking")]);
  assert.equal(speaker(view), "user");
  applyEvents(view, [ev("user-stopped-speaking"), ev("bot-started-speaking")]);
  assert.equal(speaker(view), "bot");
  applyEvents(view, [ev("bot-stopped-speaking")]);
  assert.equal(speaker(view), "nobody");
});

test("turn latency runs from user stopped to bot started, with ttfb in ms", () => {
  const view = applyEvents(fresh(), [
    ev("user-stopped-speaking", undefined, 1),
    ev("metrics", { ttfb: [{ processor: "OpenAILLMService#0", model: "gpt-4o", value: 0.25 }] }, 1),
    ev("bot-started-speaking", undefined, 1),
  ]);
  assert.equal(view.turns.length, 1);
  assert.equal(view.turns[0].latency_ms, 2000);
  assert.equal(view.turns[0].llm_ttfb_ms, 250);
  assert.deepEqual(latencyStats(view.turns), { p50: 2000, p95: 2000, max: 2000 });
});

test("metrics become series in milliseconds, with token totals", () => {
  const view = applyEvents(fresh(), [
    ev("metrics", { ttfb: [{ processor: "llm", model: "m", value: 0.1 }] }),
    ev("metrics", { ttfb: [{ processor: "tts", value: 0.2 }] }),
    ev("metrics", { tokens: [{ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }] }),
    ev("metrics", {}),
  ]);
  const { names, data } = metricSeries(view, "ttfb");
  assert.deepEqual(names, ["llm|m", "tts"]);
  assert.equal(data[0].length, 2);
  assert.deepEqual(data[1], [100, null]);
  assert.deepEqual(data[2], [null, 200]);
  assert.equal(view.totals.total_tokens, 15);
});

test("errors and a fatal one", () => {
  const view = applyEvents(fresh(), [ev("error", { error: "boom", fatal: false }), ev("error", { message: "dead", fatal: true })]);
  assert.deepEqual(view.errors.map((e) => e.message), ["boom", "dead"]);
  assert.equal(view.fatal, true);
});

test("function calls are correlated by tool_call_id", () => {
  const view = applyEvents(fresh(), [
    ev("llm-function-call-started", {}),
    ev("llm-function-call-in-progress", { tool_call_id: "c1", function_name: "lookup" }),
    ev("llm-function-call-stopped", { tool_call_id: "c1", cancelled: false }),
  ]);
  assert.equal(view.functionCalls.length, 1);
  assert.deepEqual([view.functionCalls[0].function_name, view.functionCalls[0].status], ["lookup", "completed"]);
});

test("duplicates are skipped and gaps are detected", () => {
  const view = fresh();
  const events = [ev("bot-llm-text", { text: "a" }), ev("bot-llm-text", { text: "b" })];
  applyEvents(view, events);
  applyEvents(view, events);
  assert.equal(view.llm.current_tokens, "ab");
  assert.equal(view.log.length, 2);
  assert.deepEqual(newEvents(2, [{ seq: 2 }, { seq: 3 }]), { fresh: [{ seq: 3 }], gap: false });
  assert.equal(newEvents(2, [{ seq: 5 }]).gap, true);
});

test("invalid messages go to the log only", () => {
  const view = applyEvents(fresh(), [{ seq: 1, direction: "to-client", valid: false, error: "not JSON", message: "<img src=x>", received_at: T0 }]);
  assert.equal(view.log.length, 1);
  assert.equal(view.transcript.length, 0);
});

test("a snapshot's state seeds the view", () => {
  const view = createView({
    session: { id: "s" },
    state: { speaking: { user: true, bot: false }, transcript: [{ role: "bot", text: "Hi", final: false, source: "bot-output" }], turns: [{ latency_ms: 800 }] },
    events: [],
    last_seq: 40,
  });
  assert.equal(speaker(view), "user");
  assert.equal(view.lastSeq, 40);
  applyEvents(view, [{ ...ev("bot-llm-text", { text: " there" }), seq: 41 }]);
  assert.equal(view.transcript.length, 1, "continues the unfinished bot line");
  assert.equal(view.transcript[0].text, "Hi", "spoken text outranks tokens");
});

test("the timeline has a lane per activity, clipped to its window", () => {
  const view = applyEvents(fresh(), [
    ev("user-started-speaking", undefined, 1), // t=1
    ev("user-stopped-speaking", undefined, 1), // t=2
    ev("bot-started-speaking", undefined, 1), // t=3
    ev("user-started-speaking", undefined, 1), // t=4: barge-in
    ev("bot-llm-started", undefined, 1), // t=5, still busy
  ]);
  const rows = Object.fromEntries(timelineRows(view, T0 + 1.5, T0 + 10).map((r) => [r.lane, r.spans]));
  assert.deepEqual(rows.user_speaking, [[T0 + 1.5, T0 + 2], [T0 + 4, T0 + 10]]);
  assert.deepEqual(rows.bot_speaking, [[T0 + 3, T0 + 10]]);
  assert.deepEqual(rows.llm_busy, [[T0 + 5, T0 + 10]]);
  assert.deepEqual(rows.interruptions, [[T0 + 4, T0 + 4]]);
});

test("server messages are kept for the transcript", () => {
  const view = applyEvents(fresh(), [ev("server-message", { order: 42 })]);
  assert.deepEqual(view.serverMessages.map((m) => m.data), [{ order: 42 }]);
});

test("bot-interrupted counts only while the bot speaks", () => {
  const view = applyEvents(fresh(), [ev("bot-interrupted")]);
  assert.equal(view.interruptions.length, 0);
  applyEvents(view, [ev("bot-started-speaking"), ev("bot-interrupted", undefined, 2)]);
  assert.equal(view.interruptions.length, 1);
});

test("a text-only reply (will_be_spoken false) is shown", () => {
  const view = applyEvents(fresh(), [ev("bot-output", { text: "Here is the link.", spoken: false, will_be_spoken: false, aggregated_by: "sentence" })]);
  assert.equal(view.transcript[0].text, "Here is the link.");
});

test("ttfat entries without value are read by their own name", () => {
  const view = applyEvents(fresh(), [ev("metrics", { ttfat: [{ processor: "llm", ttfat: 0.4, ttfb: 0.2, thinking_time: 0.2 }] })]);
  assert.deepEqual(metricSeries(view, "ttfat").data[1], [400]);
});
