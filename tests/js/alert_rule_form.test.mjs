// What the alert rule form's threshold says for each condition (static/js/alert_rule_form.js), from the server's units.
import assert from "node:assert/strict";
import { test } from "node:test";
import { thresholdFor } from "../../static/js/alert_rule_form.js";

const units = {
  turn_latency_p95_ms: { unit: "s", default: "1.5 (default)", none: "", window: "15 (default)" },
  fatal_error: { unit: "", default: "", none: "none: one fatal error fires it", window: "15 (default)" },
};

test("a condition with a threshold says its unit and default", () => {
  assert.deepEqual(thresholdFor(units, "turn_latency_p95_ms"), {
    unit: "s",
    placeholder: "1.5 (default)",
    disabled: false,
    window: "15 (default)",
  });
});

test("a condition that takes none says what fires it, and the input is off", () => {
  const shown = thresholdFor(units, "fatal_error");
  assert.equal(shown.unit, "none: one fatal error fires it");
  assert.equal(shown.disabled, true);
});

test("no condition chosen says nothing", () => {
  assert.deepEqual(thresholdFor(units, ""), { unit: "", placeholder: "", disabled: false, window: "" });
});
