// Unit tests for static/js/turns.js (node --test tests/js/): the turn diagnosis table's words and cells.
import assert from "node:assert/strict";
import { test } from "node:test";

process.env.TZ = "UTC";

const { contributionsCell, fillContributions, headings, interruptionText, percent, summaryText, turnRows, turnStart } = await import(
  "../../static/js/turns.js"
);

/** A row's cells by label, each with its lines joined as the page shows them, one under another. */
function cellsOf(row) {
  return Object.fromEntries(row.cells.map((c) => [c.label, { ...c, text: c.lines.join("\n") }]));
}

const STAGE_NAMES = [
  { stage: "transcription", label: "Final transcription" },
  { stage: "llm_start", label: "LLM started" },
  { stage: "llm_first_token", label: "LLM first token" },
  { stage: "tts_first_audio", label: "First TTS audio" },
  { stage: "bot_speaking", label: "Bot speaking" },
];

function stages(values, problems = {}) {
  return STAGE_NAMES.map(({ stage, label }, i) => ({
    stage,
    label,
    ms: values[i],
    problem: values[i] === null ? problems[stage] || "no reason" : null,
  }));
}

const COMPLETE = {
  number: 1,
  started_by: "user",
  at: { user_started: 1750000000, user_stopped: 1750000001.5 },
  stages: stages([0, 50, 420, 300, 80]),
  latency_ms: 850,
  complete: true,
  missing: [],
  in_progress: false,
  notes: ["the final transcription came 120 ms before the user stopped speaking"],
  interruptions: [
    {
      kind: "barge_in",
      by: "user",
      decided: true,
      why: "2 words, not only acknowledgements",
      speech_ms: 640,
      text: "<b>stop</b> now",
      cut: true,
      spoken_words: 3,
      reply_words: 8,
      spoken_share: 0.375,
    },
  ],
  user_text: "Where is my order?",
  bot_text: "It ships today.",
};

const GREETING = {
  number: 2,
  started_by: "bot",
  at: { llm_started: 1750000010 },
  stages: stages([null, null, 200, 100, 50], {
    transcription: "no user-stopped-speaking: the turn was started by the bot",
    llm_start: "no user-stopped-speaking: the turn was started by the bot",
  }),
  latency_ms: null,
  complete: false,
  missing: [
    { stage: "transcription", why: "no user-stopped-speaking: the turn was started by the bot" },
    { stage: "llm_start", why: "no user-stopped-speaking: the turn was started by the bot" },
  ],
  in_progress: true,
  notes: [],
  interruptions: [],
  user_text: "",
  bot_text: "Hello!",
};

const PAYLOAD = {
  live: true,
  contents: true,
  stage_names: STAGE_NAMES,
  thresholds: { backchannel_seconds: 0.8, backchannel_words: 3 },
  counts: { turns: 2, complete: 1, replies: 2, interruptions: 1, barge_ins: 1, backchannels: 0 },
  turns: [COMPLETE, GREETING],
};

test("a turn is placed at its first milestone", () => {
  assert.equal(turnStart(COMPLETE), 1750000000);
  assert.equal(turnStart(GREETING), 1750000010);
  assert.equal(turnStart({ at: {} }), null);
});

test("a complete turn's row: its stages, the longest marked, its interruption and notes", () => {
  const [row] = turnRows(PAYLOAD);
  const cells = cellsOf(row);
  assert.equal(cells.Turn.text, "1 · 15:06:40\nthe user spoke");
  assert.equal(cells.Said.text, "User: Where is my order?\nBot: It ships today.");
  assert.equal(cells.Latency.text, "850 ms");
  assert.equal(cells["LLM first token"].text, "420 ms");
  assert.equal(cells["LLM first token"].className, "num worst");
  assert.equal(cells["Final transcription"].text, "0 ms");
  assert.equal(cells["Final transcription"].className, "num");
  assert.equal(
    cells.Interruptions.text,
    "barge-in “<b>stop</b> now” · cut after 38 % of the reply (3 of 8 words) · spoke 640 ms · 2 words, not only acknowledgements",
  );
  assert.equal(cells.Notes.text, "the final transcription came 120 ms before the user stopped speaking");
  assert.equal(row.className, "barged");
});

test("an incomplete turn names each missing stage and why, with the reason on the cell too", () => {
  const [, row] = turnRows(PAYLOAD);
  const cells = cellsOf(row);
  assert.equal(cells["LLM started"].text, "—");
  assert.equal(cells["LLM started"].title, "no user-stopped-speaking: the turn was started by the bot");
  assert.equal(cells["LLM started"].className, "num missing");
  assert.equal(
    cells.Missing.text,
    "Final transcription: no user-stopped-speaking: the turn was started by the bot\n" +
      "LLM started: no user-stopped-speaking: the turn was started by the bot",
  );
  assert.equal(cells.Latency.text, "—");
  assert.equal(cells["LLM first token"].className, "num worst");
  assert.equal(cells["First TTS audio"].className, "num");
  assert.equal(row.className, "incomplete in-progress");
  assert.match(cells.Turn.text, /started by the bot$/);
});

test("without contents the words are hidden, the timings kept", () => {
  const hidden = {
    ...PAYLOAD,
    contents: false,
    turns: [{ ...COMPLETE, user_text: null, bot_text: null, interruptions: [{ ...COMPLETE.interruptions[0], text: null }] }],
  };
  const [row] = turnRows(hidden);
  const cells = cellsOf(row);
  assert.equal(cells.Said.text, "hidden (needs the operator role)");
  assert.ok(cells.Interruptions.text.startsWith("barge-in · cut after 38 %"));
  assert.equal(cells.Latency.text, "850 ms");
});

test("interruptions in words: a backchannel the bot spoke on, a client's, one still undecided", () => {
  assert.equal(
    interruptionText({ kind: "backchannel", by: "user", why: "1 word, only acknowledgements", speech_ms: 300, text: "mhm", cut: false }),
    "backchannel “mhm” · the bot spoke on · spoke 300 ms · 1 word, only acknowledgements",
  );
  assert.equal(
    interruptionText({ kind: "barge_in", by: "client", why: "", speech_ms: 0, text: "", cut: true, spoken_words: 0, reply_words: 0, spoken_share: null }),
    "barge-in (by the client) · cut (the reply's words unknown) · spoke 0 ms",
  );
  assert.match(interruptionText({ kind: "backchannel", by: "user", decided: false, why: "", speech_ms: null, cut: false }), /^backchannel \(so far\)/);
});

test("the headings follow the server's stages; the summary line counts and says the thresholds", () => {
  assert.deepEqual(headings(PAYLOAD), [
    "Turn",
    "Said",
    "Latency",
    "Final transcription",
    "LLM started",
    "LLM first token",
    "First TTS audio",
    "Bot speaking",
    "Contributions",
    "Interruptions",
    "Missing / notes",
  ]);
  assert.equal(
    summaryText(PAYLOAD),
    "2 turns, 1 with every stage measured; 1 barge-in, 0 backchannels (a backchannel: at most 3 words of acknowledgement, or under 800 ms untranscribed).",
  );
  assert.equal(summaryText({ ...PAYLOAD, counts: { turns: 0 }, live: true }), "No turn yet.");
  assert.equal(summaryText({ ...PAYLOAD, counts: { turns: 0 }, live: false }), "No turn in this call.");
  assert.equal(percent(0.375), "38 %");
  assert.equal(percent(null), "—");
});

const PARTS = [
  { key: "endpointing_wait", label: "endpointing wait", owner: "config: VAD stop_secs", kind: "setting", ms: 200 },
  { key: "llm_inference", label: "LLM inference", owner: "OpenAILLMService#0", kind: "service", ms: 336.4 },
  { key: "pipeline", label: "pipeline", owner: "pipecat", kind: "pipeline", ms: 12 },
];

test("a turn's latency contributions show beside its stages, a short line a part, the largest first, then the total", () => {
  const turn = {
    ...COMPLETE,
    contributions: PARTS,
    contributions_total_ms: 548.4,
    contributions_user_turn_ms: 230,
    notes: ["the bot's latency contributions sum to 318 ms after the user's turn was released, the messages measure 850 ms: 532 ms less, past the tolerance of 85 ms"],
  };
  const cell = contributionsCell(turn);
  assert.deepEqual(cell.lines, ["llm_inference 336 ms", "endpointing_wait 200 ms", "pipeline 12 ms", "total 548 ms", "318 ms after release"]);
  assert.deepEqual(
    cell.parts.map((p) => [p.key, p.ms, p.title, p.setting]),
    [
      ["llm_inference", "336 ms", "LLM inference — service: OpenAILLMService#0", false],
      ["endpointing_wait", "200 ms", "endpointing wait — setting: VAD stop_secs", true],
      ["pipeline", "12 ms", "pipeline — pipeline: pipecat", false],
    ],
  );
  assert.equal(cell.shown, 3);
  assert.equal(cell.more, ""); // four or fewer: every part shows
  assert.equal(cell.title, undefined); // each part has its own
  assert.equal(cell.totalTitle, "548 ms from the user's silence; 318 ms after the turn was released");
  const cells = cellsOf(turnRows({ ...PAYLOAD, turns: [turn] })[0]);
  assert.equal(cells.Contributions.text, cell.lines.join("\n"));
  assert.match(cells.Notes.text, /past the tolerance of 85 ms/); // the disagreement, among the turn's notes, as before
  const none = contributionsCell(COMPLETE);
  assert.deepEqual(none.lines, ["—"]);
  assert.match(none.title, /no latency breakdown/);
  assert.equal(none.parts, undefined);
});

const MANY = [
  { key: "stt_final", owner: "DeepgramSTTService#0", kind: "service", ms: 90 },
  { key: "endpointing_wait", owner: "config: VAD stop_secs", kind: "setting", ms: 200 },
  { key: "function_call", owner: "lookup_order", kind: "bot", ms: 40 },
  { key: "llm_inference", owner: "OpenAILLMService#0", kind: "service", ms: 336 },
  { key: "pipeline", owner: "pipecat", kind: "pipeline", ms: 12 },
  { key: "tts_first_audio", owner: "CartesiaTTSService#0", kind: "service", ms: 140 },
  { key: "turn_analyzer", owner: "config: smart turn", kind: "setting", ms: 90 },
];

test("many parts: the largest four, then '+N more' for the rest; equal parts keep the bot's order", () => {
  const cell = contributionsCell({ contributions: MANY });
  assert.equal(cell.shown, 4);
  assert.equal(cell.more, "+3 more");
  assert.deepEqual(
    cell.parts.map((p) => p.text),
    [
      "llm_inference 336 ms",
      "endpointing_wait 200 ms",
      "tts_first_audio 140 ms",
      "stt_final 90 ms",
      "turn_analyzer 90 ms",
      "function_call 40 ms",
      "pipeline 12 ms",
    ],
  );
  assert.equal(cell.parts[5].title, "function_call — the bot's code: lookup_order"); // no label: the key
  assert.deepEqual(cell.parts.filter((p) => p.setting).map((p) => p.key), ["endpointing_wait", "turn_analyzer"]);
  assert.deepEqual(cell.lines.slice(-1), ["total 908 ms"]); // no user turn given: no "after release"
  // Exactly four: no "+N more".
  assert.equal(contributionsCell({ contributions: MANY.slice(0, 4) }).more, "");
});

/** Just enough of a document for the cell's builder: elements with children, text, class, title, attributes. */
class FakeElement {
  constructor(tagName) {
    Object.assign(this, { tagName: tagName.toUpperCase(), children: [], className: "", title: "", text: "" });
  }
  append(...nodes) {
    this.children.push(...nodes);
  }
  set textContent(value) {
    this.children = [];
    this.text = String(value);
  }
  get textContent() {
    return this.text + this.children.map((c) => (typeof c === "string" ? c : c.textContent)).join("");
  }
  set innerHTML(_) {
    throw new Error("innerHTML is never used with a bot's words");
  }
  all(predicate) {
    const own = this.children.filter((c) => typeof c !== "string");
    return [...own.filter(predicate), ...own.flatMap((c) => c.all(predicate))];
  }
}

test("the cell's DOM: a line a part with its owner and kind in its title and hidden text, settings marked, the rest in a <details>", () => {
  const saved = globalThis.document;
  globalThis.document = { createElement: (tag) => new FakeElement(tag) };
  try {
    const td = new FakeElement("td");
    fillContributions(td, contributionsCell({ contributions: [...MANY, { key: "<b>x</b>", owner: "<img src=x>", kind: "bot", ms: 1 }] }));
    const top = td.children.filter((c) => c.className.includes("part"));
    assert.deepEqual(top.map((p) => p.textContent), [
      "llm_inference 336 ms (service: OpenAILLMService#0)",
      "endpointing_wait 200 ms (setting: VAD stop_secs)",
      "tts_first_audio 140 ms (service: CartesiaTTSService#0)",
      "stt_final 90 ms (service: DeepgramSTTService#0)",
    ]);
    assert.equal(top[1].className, "line part setting");
    assert.equal(top[1].title, "endpointing_wait — setting: VAD stop_secs");
    assert.equal(top[1].all((e) => e.className === "who")[0].textContent, " (setting: VAD stop_secs)");
    const [details] = td.all((e) => e.tagName === "DETAILS");
    assert.equal(details.children[0].tagName, "SUMMARY");
    assert.equal(details.children[0].textContent, "+4 more");
    const rest = details.children.slice(1);
    assert.deepEqual(rest.map((p) => p.all((e) => e.className === "key")[0].textContent), [
      "turn_analyzer",
      "function_call",
      "pipeline",
      "<b>x</b>",
    ]);
    assert.equal(rest[3].title, "<b>x</b> — the bot's code: <img src=x>"); // text, never markup
    assert.equal(td.children.at(-1).textContent, "total 909 ms");
    assert.equal(td.tabIndex, 0);
  } finally {
    globalThis.document = saved;
  }
});
