// Unit tests for static/js/timeline_lanes.js (node --test tests/js/): the timeline's lanes, markers
// and span, from the session's derived state.
import assert from "node:assert/strict";
import { test } from "node:test";

import { timelineEnd, timelineMarkers, timelineRows, timelineStart } from "../../static/js/timeline_lanes.js";

const T0 = 1_750_000_000;

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
