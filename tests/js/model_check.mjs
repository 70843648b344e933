// Applies recorded patch streams with static/js/model.js; run by tests/core/test_page_model.py.
//
//   node tests/js/model_check.mjs CASES.json
//
// CASES.json: [{name, snapshot: {state, bases}, batches: [{from, to, changes}]}]
// Prints, as JSON, [{name, fits: ["apply" | "skip" | "gap"], version, state}]: each model after its batches.
import { readFileSync } from "node:fs";

import { applyChanges, batchFits, createModel } from "../../static/js/model.js";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = cases.map(({ name, snapshot, batches }) => {
  const model = createModel(snapshot);
  const fits = batches.map((batch) => {
    const fit = batchFits(model, batch);
    if (fit === "apply") applyChanges(model, batch.changes);
    return fit;
  });
  return { name, fits, version: model.version, state: model.state };
});
process.stdout.write(JSON.stringify(out));
