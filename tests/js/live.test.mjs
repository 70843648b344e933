// Unit tests for static/js/live.js (node --test tests/js/): frames sent in parts.
import assert from "node:assert/strict";
import { test } from "node:test";

import { frameReader } from "../../static/js/live.js";

const part = (data, last) => JSON.stringify({ type: "part", data, last });

test("a whole frame is read as it is", () => {
  const read = frameReader();
  assert.deepEqual(read('{"type":"resync"}'), { type: "resync" });
});

test("parts are joined until the last one, then read as one frame", () => {
  const read = frameReader();
  const whole = JSON.stringify({ type: "snapshot", state: { version: 3, text: "ü, \"quoted\" and \\ kept" }, events: [] });
  const pieces = [whole.slice(0, 7), whole.slice(7, 30), whole.slice(30)];
  assert.equal(read(part(pieces[0], false)), null);
  assert.equal(read(part(pieces[1], false)), null);
  assert.deepEqual(read(part(pieces[2], true)), JSON.parse(whole));
  assert.deepEqual(read('{"type":"ended","session":{}}'), { type: "ended", session: {} }, "and the next frame is its own");
});

test("one part marked last is a frame", () => {
  assert.deepEqual(frameReader()(part('{"type":"batch","from":1,"to":2}', true)), { type: "batch", from: 1, to: 2 });
});

test("a whole frame drops parts left unfinished before it", () => {
  const read = frameReader();
  assert.equal(read(part('{"type":"bat', false)), null);
  assert.deepEqual(read('{"type":"resync"}'), { type: "resync" });
  assert.deepEqual(read(part('{"type":"resync"}', true)), { type: "resync" });
});

test("unreadable JSON throws, and the reader starts over", () => {
  const read = frameReader();
  read(part("{", false));
  assert.throws(() => read(part("nope", true)), SyntaxError);
  assert.deepEqual(read(part('{"type":"resync"}', true)), { type: "resync" });
});
