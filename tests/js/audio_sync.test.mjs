// Unit tests for static/js/audio_sync.js (node --test tests/js/): where a caller's line is heard.
import assert from "node:assert/strict";
import { test } from "node:test";

import { callerSpeechStart } from "../../static/js/audio_sync.js";

test("a caller's line plays from the start of the words it transcribes, not from when it arrived", () => {
  const runs = [
    [10.0, 11.2],
    [11.6, 13.0], // a pause under a second: the same utterance
    [20.0, 21.0],
  ];
  assert.equal(callerSpeechStart(runs, 13.4), 10.0 - 0.05); // the final came 0.4 s after the words
  assert.equal(callerSpeechStart(runs, 21.5), 20.0 - 0.05);
  assert.equal(callerSpeechStart(runs, 12.0), 10.0 - 0.05); // a partial, while the caller speaks
});

test("a line the audio heard no words for plays from its own time", () => {
  assert.equal(callerSpeechStart([[10, 11]], 30), 30); // long after any speech
  assert.equal(callerSpeechStart([[10, 11]], 5), 5); // before any speech
  assert.equal(callerSpeechStart([], 5), 5);
  assert.equal(callerSpeechStart(undefined, 5), 5);
});
