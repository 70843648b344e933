// Unit tests for static/js/palette.js (node --test tests/js/): one colour per service kind on every chart.
// tests/core/test_service_kinds.py checks serviceKind against the server's service_kind on Pipecat's services.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { FIGURE_COLORS, LANE_COLORS, SERVICE_COLORS, seriesStyles, serviceKind } from "../../static/js/palette.js";

test("a service is its kind's colour on the metrics charts and the timeline alike", () => {
  const styles = seriesStyles(["CartesiaTTSService#0|sonic", "DeepgramSTTService#0|nova-3", "OpenAILLMService#0|gpt-4o"]);
  assert.deepEqual(
    styles.map((s) => s.color),
    ["--tts", "--stt", "--llm"],
  );
  assert.equal(LANE_COLORS.llm_busy, SERVICE_COLORS.llm);
  assert.equal(LANE_COLORS.tts_busy, SERVICE_COLORS.tts);
  // The order of the series does not change a service's colour (it did when colours went by position).
  assert.equal(seriesStyles(["OpenAILLMService#0|gpt-4o"])[0].color, "--llm");
});

test("a second series of one kind keeps the colour, dashed", () => {
  const [a, b, c] = seriesStyles(["OpenAILLMService#0|gpt-4o", "OpenAILLMService#0|gpt-4o-mini", "Mystery"]);
  assert.equal(a.color, "--llm");
  assert.deepEqual(a.dash, []);
  assert.equal(b.color, "--llm");
  assert.notDeepEqual(b.dash, []);
  assert.equal(c.color, SERVICE_COLORS.unknown);
  assert.equal(serviceKind("PlayHTTTSService#0"), "tts");
  assert.equal(serviceKind("Watts"), "unknown");
});

test("every colour the palette names is defined in both themes of the stylesheet", () => {
  const css = readFileSync(new URL("../../static/css/dashboard.css", import.meta.url), "utf8");
  const names = new Set([...Object.values(SERVICE_COLORS), ...Object.values(LANE_COLORS), ...Object.values(FIGURE_COLORS)]);
  const [light, dark] = css.split("@media (prefers-color-scheme: dark)");
  for (const name of names) {
    assert.match(light, new RegExp(`${name}:`), `${name} in the light theme`);
    assert.match(dark.slice(0, dark.indexOf("}\n}")), new RegExp(`${name}:`), `${name} in the dark theme`);
  }
});
