// Unit tests for static/js/message_format.js (node --test tests/js/): stored messages and the
// server's previews of long values, as the session page's log shows them.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eventType, formatValue, isPreview, mergeEvents, messageText } from "../../static/js/message_format.js";

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
