// Unit tests for static/js/model.js (node --test tests/js/): the server's state, kept by its patches.
// tests/core/test_page_model.py checks the same against the real reducer, for every split of real sessions.
import assert from "node:assert/strict";
import { test } from "node:test";

import { applyChanges, batchFits, createModel } from "../../static/js/model.js";

const snapshot = () => ({
  type: "snapshot",
  state: {
    version: 4,
    speaking: { user: false, bot: true },
    transcript: [
      { role: "user", text: "Hi", final: true },
      { role: "bot", text: "Hel", final: false },
    ],
    turns: [],
    intervals: { user_speaking: [[1, 2]], bot_speaking: [[3, null]] },
    metrics: {},
    function_calls: [],
    client_messages: [],
  },
  bases: { transcript: 10, turns: 0, intervals: { user_speaking: 0, bot_speaking: 0 }, metrics: {} },
  events: [],
});

test("a model is a copy of the snapshot's state and bases, at its version", () => {
  const frame = snapshot();
  const model = createModel(frame);
  assert.equal(model.version, 4);
  assert.deepEqual(model.state, frame.state);
  assert.deepEqual(model.bases, frame.bases);
  model.state.transcript.push({});
  model.bases.transcript = 99;
  assert.equal(frame.state.transcript.length, 2, "the frame is not shared");
  assert.equal(frame.bases.transcript, 10);
  assert.deepEqual(createModel({}), { state: {}, bases: {}, version: 0 });
});

test("a batch that continues the model applies, an old one is skipped, a later one is a gap", () => {
  const model = createModel(snapshot());
  assert.equal(batchFits(model, { from: 4, to: 6 }), "apply");
  assert.equal(batchFits(model, { from: 2, to: 4 }), "skip");
  assert.equal(batchFits(model, { from: 3, to: 3 }), "skip");
  assert.equal(batchFits(model, { from: 5, to: 7 }), "gap");
  assert.equal(batchFits(model, { from: 3, to: 6 }), "gap", "half known: cannot be applied");
});

test("the head replaces its keys whole and moves the version", () => {
  const model = createModel(snapshot());
  applyChanges(model, { head: { version: 5, speaking: { user: true, bot: false }, latency: { p50: 800, p95: 800, max: 800 } } });
  assert.equal(model.version, 5);
  assert.deepEqual(model.state.speaking, { user: true, bot: false });
  assert.deepEqual(model.state.latency, { p50: 800, p95: 800, max: 800 });
  assert.deepEqual(model.state.transcript.map((t) => t.text), ["Hi", "Hel"], "the rest stays");
});

test("a tail patch rewrites from its position and appends", () => {
  const model = createModel(snapshot());
  // positions 10 and 11 are kept; 11 changed and 12 came.
  applyChanges(model, {
    head: { version: 6 },
    tails: { transcript: { at: 11, items: [{ role: "bot", text: "Hello.", final: true }, { role: "user", text: "Bye", final: false }], base: 10 } },
  });
  assert.deepEqual(model.state.transcript.map((t) => t.text), ["Hi", "Hello.", "Bye"]);
  assert.equal(model.bases.transcript, 10);
});

test("a tail patch drops items from the front past the server's limit", () => {
  const model = createModel(snapshot());
  applyChanges(model, {
    head: { version: 7 },
    tails: { transcript: { at: 12, items: [{ text: "a" }, { text: "b" }], base: 12 } },
  });
  assert.deepEqual(model.state.transcript.map((t) => t.text), ["a", "b"]);
  assert.equal(model.bases.transcript, 12);
  // More items came than the server keeps: positions 14-19 came and went between two patches.
  applyChanges(model, { head: { version: 8 }, tails: { transcript: { at: 20, items: [{ text: "z" }], base: 20 } } });
  assert.deepEqual(model.state.transcript.map((t) => t.text), ["z"]);
  assert.equal(model.bases.transcript, 20);
});

test("nested tails: intervals change in place and new metric series appear", () => {
  const model = createModel(snapshot());
  applyChanges(model, {
    head: { version: 5 },
    tails: {
      intervals: { bot_speaking: { at: 0, items: [[3, 4]], base: 0 }, llm_busy: { at: 0, items: [[3.5, null]], base: 0 } },
      metrics: { ttfb: { "OpenAILLMService#0|gpt-4o": { at: 0, items: [[3.2, 250]], base: 0 } } },
      turns: { at: 0, items: [{ index: 0, latency_ms: 1000 }], base: 0 },
    },
  });
  assert.deepEqual(model.state.intervals, { user_speaking: [[1, 2]], bot_speaking: [[3, 4]], llm_busy: [[3.5, null]] });
  assert.deepEqual(model.state.metrics, { ttfb: { "OpenAILLMService#0|gpt-4o": [[3.2, 250]] } });
  assert.deepEqual(model.bases.metrics, { ttfb: { "OpenAILLMService#0|gpt-4o": 0 } });
  assert.deepEqual(model.state.turns, [{ index: 0, latency_ms: 1000 }]);
  applyChanges(model, { head: { version: 6 }, tails: { metrics: { ttfb: { "OpenAILLMService#0|gpt-4o": { at: 1, items: [[5, 300]], base: 1 } } } } });
  assert.deepEqual(model.state.metrics.ttfb["OpenAILLMService#0|gpt-4o"], [[5, 300]]);
});

test("whole sections replace what the model had", () => {
  const model = createModel(snapshot());
  const calls = [{ tool_call_id: "c1", function_name: "lookup", status: "completed" }];
  const requests = [{ id: "m1", t: "ping", status: "answered" }];
  applyChanges(model, { head: { version: 5 }, function_calls: calls, client_messages: requests });
  assert.deepEqual(model.state.function_calls, calls);
  assert.deepEqual(model.state.client_messages, requests);
  applyChanges(model, { head: { version: 6 }, function_calls: [] });
  assert.deepEqual(model.state.function_calls, []);
  assert.deepEqual(model.state.client_messages, requests, "a section not in the patch stays");
});

test("an empty patch changes nothing", () => {
  const model = createModel(snapshot());
  const before = structuredClone(model);
  applyChanges(model, {});
  assert.deepEqual(model, before);
});

test("metric kinds a bot names like Object's own properties stay plain keys", () => {
  const model = createModel(snapshot());
  const changes = JSON.parse(
    '{"head":{"version":5},"tails":{"metrics":{"__proto__":{"x|":{"at":0,"items":[[1,1]],"base":0}},' +
      '"constructor":{"y|":{"at":0,"items":[[1,2]],"base":0}},"items":{"z|":{"at":0,"items":[[1,3]],"base":0}}}}}',
  );
  applyChanges(model, changes);
  assert.deepEqual(Object.keys(model.state.metrics), ["__proto__", "constructor", "items"]);
  assert.deepEqual(model.state.metrics.constructor, { "y|": [[1, 2]] });
  assert.deepEqual(model.state.metrics.items, { "z|": [[1, 3]] });
  assert.deepEqual(Object.getOwnPropertyDescriptor(model.state.metrics, "__proto__").value, { "x|": [[1, 1]] });
  assert.equal({}["x|"], undefined, "Object.prototype is untouched");
  assert.equal(Object["y|"], undefined);
  assert.equal(Object.getPrototypeOf(model.state.metrics), Object.prototype);
});
