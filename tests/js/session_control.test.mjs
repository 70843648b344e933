// What the session page's "Act on the call" card says (static/js/session_control.js), from the API's answers.
import assert from "node:assert/strict";
import { test } from "node:test";
import { controlState, resultText } from "../../static/js/session_control.js";

test("a bot that takes control enables the actions", () => {
  assert.deepEqual(controlState({ available: true, allowed: true }).enabled, true);
});

test("unavailable says why: the server's reason, or the role's", () => {
  assert.deepEqual(controlState({ available: false, reason: "the session has ended", allowed: true }), {
    enabled: false,
    text: "Unavailable: the session has ended.",
  });
  const viewer = controlState({ available: true, allowed: false, allowed_reason: "This needs the operator role" });
  assert.equal(viewer.enabled, false);
  assert.equal(viewer.text, "Unavailable: This needs the operator role.");
});

test("an answer is what the bot said, or why nothing was done", () => {
  assert.equal(resultText("send-text", 200, { ok: true, answer: "the bot took it" }), "Text: the bot took it.");
  assert.equal(
    resultText("end", 504, { ok: false, error: "the bot did not answer within 5 s" }),
    "End not done (HTTP 504): the bot did not answer within 5 s.",
  );
  assert.equal(resultText("end", 500, null), "End not done (HTTP 500): no answer.");
});
