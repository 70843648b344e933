// Unit tests for static/js/session_view.js (node --test tests/js/): what the session page's views show.
import assert from "node:assert/strict";
import { test } from "node:test";

process.env.TZ = "UTC"; // clocks read in the test's own zone, whatever the machine's

const {
  LogPager,
  clockOf,
  costText,
  deploymentText,
  eventTime,
  endedLine,
  headerFacts,
  indexAt,
  isSlow,
  lastValue,
  mergeBySeq,
  panWindow,
  previewText,
  redactedText,
  replyTurns,
  serviceName,
  seriesNames,
  tickLabel,
  timeTicks,
  usageRows,
  viewWindow,
  waterfallBars,
  wholeWindow,
  windowShowing,
  zoomWindow,
} = await import("../../static/js/session_view.js");

const T0 = 1_750_000_000; // 2025-06-15 15:06:40 UTC

test("clocks are compact, with ms for messages", () => {
  assert.equal(clockOf(T0), "15:06:40");
  assert.equal(clockOf(T0 + 0.25, { ms: true }), "15:06:40.250");
  assert.equal(clockOf(null), "?");
  assert.equal(eventTime({ sent_at: T0, received_at: T0 + 1 }), T0);
  assert.equal(eventTime({ sent_at: null, received_at: T0 + 1 }), T0 + 1);
});

test("the cost is dollars to four places, or a hint when the organization has no prices", () => {
  assert.deepEqual(costText(0.01234), { text: "$0.0123", hint: "" });
  assert.deepEqual(costText(0), { text: "$0.0000", hint: "" });
  assert.deepEqual(costText(null), { text: "—", hint: "set prices in the admin" });
  assert.deepEqual(costText(undefined), { text: "—", hint: "" }); // a server that does not price
});

test("the deployment is the row's, else what the bot says of itself, never made up", () => {
  assert.equal(deploymentText({ deployment_id: "4cab03c7-8f53" }, {}), "4cab03c7-8f53");
  const about = { library: "pipecat-ai", library_version: "1.14.0", name: "support" };
  assert.equal(deploymentText({}, { bot_about: about }), "pipecat-ai 1.14.0 · support (as the bot says)");
  assert.equal(deploymentText({}, { bot_about: { os: "linux" } }), '{"os":"linux"}');
  assert.equal(deploymentText({}, { bot_about: null }), "—");
  assert.equal(deploymentText(null, null), "—");
});

const row = {
  id: "call-1",
  agent_id: "a1",
  agent_name: "support-bot",
  status: "ended",
  end_reason: "fatal error",
  end_kind: "fatal_error",
  failed: true,
  started_at: "2025-06-15T15:06:40+00:00",
  ended_at: "2025-06-15T15:08:45+00:00",
  duration_s: 125,
  turn_count: 9,
  interruption_count: 9,
  error_count: 9,
  protocol_version: "1.0.0",
  cost_usd: 0.5,
};

test("the header's facts: the row's, with counts from the state's lists (as the server counts them)", () => {
  const state = { turns: [{}, {}], interruptions: [T0], errors: [], protocol_version: "2.2.0", ended: true };
  const facts = headerFacts(row, state, T0 + 999);
  assert.deepEqual(facts.agent, { name: "support-bot", id: "a1" });
  assert.deepEqual(facts.status, { kind: "ended", failed: true, pill: "ended error", text: "ended (fatal error)" });
  assert.equal(facts.started, "2025-06-15 15:06:40 UTC");
  assert.equal(facts.ended, "2025-06-15 15:08:45 UTC");
  assert.equal(facts.duration, "2 min 05 s");
  assert.deepEqual([facts.turns, facts.interruptions, facts.errors], ["2", "1", "0"]);
  assert.equal(facts.protocol, "2.2.0");
  assert.deepEqual(facts.cost, { text: "$0.5000", hint: "" });
  // Before the state comes, the row's own counts.
  assert.equal(headerFacts(row, null, T0).turns, "9");
});

test("a live session's duration runs to the page's clock, which stops when the page loses the server", () => {
  const live = { ...row, status: "live", end_reason: "", ended_at: null, duration_s: 3 };
  const facts = headerFacts(live, { turns: [] }, T0 + 42);
  assert.equal(facts.duration, "42 s so far");
  assert.equal(facts.ended, "not yet");
  assert.equal(facts.status.kind, "live");
  // A bot away: its call runs until it left, however long the page waits for it.
  const away = { ...live, bot: "away", away_since: new Date((T0 + 30) * 1000).toISOString() };
  assert.equal(headerFacts(away, { turns: [] }, T0 + 99).duration, "30 s until the bot left");
});

test("usage by model is a row per model, the unnamed one last", () => {
  const rows = usageRows({
    "": { prompt_tokens: 5 },
    "nova-3": { stt_audio_seconds: 1.6 },
    "gpt-4o": { prompt_tokens: 1200, completion_tokens: 18 },
  });
  assert.deepEqual(
    rows.map((r) => [r.model, r.prompt, r.completion, r.characters, r.audio]),
    [
      ["gpt-4o", "1,200", "18", "—", "—"],
      ["nova-3", "—", "—", "—", "1.6 s"],
      ["(model not named)", "5", "—", "—", "—"],
    ],
  );
  assert.deepEqual(usageRows(undefined), []);
});

const turn = (index, stopped, latency, extra = {}) => ({
  index,
  user_stopped_at: stopped,
  bot_started_at: stopped + latency / 1000,
  latency_ms: latency,
  waterfall: [],
  ...extra,
});

test("each reply shows the turn the reducer says it answers; a reply without one gets none", () => {
  const transcript = [
    { role: "user", at: T0 },
    { role: "bot", at: T0 + 1.2, turn: 0 },
    { role: "user", at: T0 + 3, source: "chat" },
    { role: "bot", at: T0 + 3.5, turn: null }, // a typed question's answer: no turn
    { role: "user", at: T0 + 5 },
    { role: "bot", at: T0 + 6.3, turn: 1 },
  ];
  const turns = [turn(0, T0 + 1, 400), turn(1, T0 + 6, 500)];
  const byLine = replyTurns(transcript, turns);
  assert.equal(byLine.get(T0 + 1.2).index, 0);
  assert.equal(byLine.get(T0 + 3.5), undefined);
  assert.equal(byLine.get(T0 + 6.3).index, 1);
  assert.equal(replyTurns([], turns).size, 0);
});

test("a turn is slow over the server's p95", () => {
  assert.equal(isSlow({ latency_ms: 900 }, { p95: 800 }), true);
  assert.equal(isSlow({ latency_ms: 800 }, { p95: 800 }), false);
  assert.equal(isSlow({ latency_ms: null }, { p95: 800 }), false);
  assert.equal(isSlow({ latency_ms: 900 }, { p95: null }), false);
});

test("waterfall bars are the server's parts on the session's scale; a part without an end is open", () => {
  const waterfall = [
    { part: "llm_first_token", from_ms: 50, to_ms: 300 },
    { part: "tts_first_audio", from_ms: 350, to_ms: null },
    { part: "bot_speaking", from_ms: 0, to_ms: 500 },
  ];
  const bars = waterfallBars({ waterfall }, { max: 1000 });
  assert.deepEqual(
    bars.map((b) => [b.part, b.left, b.width, b.open, b.text]),
    [
      ["llm_first_token", 5, 25, false, "+300 ms"],
      ["tts_first_audio", 35, 0, true, "?"],
      ["bot_speaking", 0, 50, false, "+500 ms"],
    ],
  );
  assert.equal(bars[0].label, "LLM first token");
  assert.match(bars[1].title, /do not say when it came/);
  // A part later than the slowest turn (a late metric) stretches the scale rather than spill over.
  const late = waterfallBars({ waterfall: [{ part: "tts_first_audio", from_ms: 0, to_ms: 2000 }] }, { max: 1000 });
  assert.equal(late[0].width, 100);
  assert.deepEqual(waterfallBars({}, null), []);
});

test("a following view shows the last span up to now; a fixed one is itself", () => {
  const extent = { from: T0, to: T0 + 600 };
  const follow = viewWindow({ follow: true, span: 120 }, extent);
  assert.equal(follow.from, T0 + 480);
  assert.ok(follow.to > T0 + 600 && follow.to < T0 + 603); // a little room after now
  // Younger than the span: from the start.
  assert.equal(viewWindow({ follow: true, span: 120 }, { from: T0, to: T0 + 30 }).from, T0);
  assert.equal(viewWindow({ follow: true, span: Number.POSITIVE_INFINITY }, extent).from, T0);
  assert.deepEqual(viewWindow({ follow: false, from: 1, to: 2 }, extent), { from: 1, to: 2 });
  const whole = wholeWindow(extent);
  assert.ok(whole.from < T0 && whole.to > T0 + 600);
});

test("zoom keeps its moment in place; pan keeps the window on the call; the cursor's moment is brought in", () => {
  const w = { from: 100, to: 200 };
  assert.deepEqual(zoomWindow(w, 0.5, 125), { from: 112.5, to: 162.5 });
  assert.deepEqual(zoomWindow(w, 2, 150), { from: 50, to: 250 });
  assert.equal(zoomWindow(w, 0.001, 150).to - zoomWindow(w, 0.001, 150).from, 1); // no closer than a second
  assert.deepEqual(panWindow(w, 30, { from: 0, to: 1000 }), { from: 130, to: 230 });
  assert.deepEqual(panWindow(w, -500, { from: 0, to: 1000 }), { from: -50, to: 50 }); // half the window past the start
  assert.equal(windowShowing(w, 150), w);
  assert.deepEqual(windowShowing(w, 400), { from: 350, to: 450 });
});

test("ticks fall on round clock times, labelled to the second, the minute or the tenth", () => {
  const { step, ticks } = timeTicks(T0 + 1, T0 + 61, 4);
  assert.equal(step, 15);
  assert.deepEqual(
    ticks.map((t) => t.label),
    ["15:06:45", "15:07:00", "15:07:15", "15:07:30"],
  );
  assert.equal(timeTicks(T0, T0 + 3600, 6).ticks[0].label, "15:10");
  assert.equal(timeTicks(T0, T0 + 1, 8).step, 0.2);
  assert.equal(tickLabel(T0 + 0.4, 0.2), "15:06:40.4");
});

test("series are named by service and model, the instance kept only to tell two apart", () => {
  assert.equal(serviceName("OpenAILLMService#0"), "OpenAI LLM");
  assert.equal(serviceName("CartesiaTTSService#1"), "Cartesia TTS");
  assert.equal(serviceName("DeepgramSTTService"), "Deepgram STT");
  assert.equal(serviceName("MyProcessor#2"), "MyProcessor");
  assert.deepEqual(seriesNames(["OpenAILLMService#0|gpt-4o", "OpenAILLMService#0", "(all)"]), ["OpenAI LLM · gpt-4o", "OpenAI LLM", "(all)"]);
  assert.deepEqual(seriesNames(["OpenAILLMService#0|gpt-4o", "OpenAILLMService#1|gpt-4o"]), ["OpenAI LLM · gpt-4o #0", "OpenAI LLM · gpt-4o #1"]);
  assert.deepEqual(seriesNames(["|gpt-4o"]), ["gpt-4o"]);
});

test("a legend's value when nothing is hovered is the series' last", () => {
  assert.equal(lastValue([1, 2, null]), 2);
  assert.equal(lastValue([null, null]), null);
  assert.equal(lastValue(undefined), null);
});

const event = (seq, type, data, extra = {}) => ({
  seq,
  type,
  direction: "to-client",
  received_at: T0 + seq,
  sent_at: null,
  message: { label: "rtvi-ai", type, ...(data === undefined ? {} : { data }) },
  valid: true,
  error: "",
  ...extra,
});

test("a log row's preview is the text a message carries, quoted, on one line", () => {
  assert.equal(previewText(event(1, "bot-llm-text", { text: " ships" })), '" ships"');
  assert.equal(previewText(event(1, "user-transcription", { text: "line one\nline two" })), '"line one\\nline two"');
  assert.equal(previewText(event(1, "send-text", { content: "Book a table" })), '"Book a table"');
  assert.equal(previewText(event(1, "error", { error: "boom", fatal: true })), '"boom"');
  assert.equal(previewText(event(1, "metrics", { ttfb: [{ value: 0.2 }] })), '{"ttfb":[{"value":0.2}]}');
  assert.equal(previewText(event(1, "bot-started-speaking")), "");
  assert.equal(previewText({ seq: 1, message: "not\njson", valid: false, error: "" }), "not json");
  assert.equal(previewText({ seq: 1, message: "x", valid: false, error: "not JSON:\n bad" }), "invalid: not JSON: bad");
  assert.match(previewText({ seq: 1, message: { truncated: true, preview: "{", length: 9000 } }), /^9000 characters/);
  assert.equal(previewText(event(1, "bot-llm-text", { text: "x".repeat(500) })).length, 161);
});

const tail = (from, to, type = "bot-llm-text") => Array.from({ length: to - from + 1 }, (_, i) => event(from + i, type, { text: "w" }));
const page = (events, prev_before, next_after) => ({ events, prev_before, next_after });

test("the log starts at the live tail and follows it", () => {
  const pager = new LogPager(5);
  pager.reset({}, tail(10, 12));
  assert.deepEqual(pager.events.map((e) => e.seq), [10, 11, 12]);
  assert.equal(pager.following && pager.hasOlder, true);
  assert.equal(pager.live(tail(13, 15)), true);
  assert.deepEqual(pager.events.map((e) => e.seq), [11, 12, 13, 14, 15]); // at most `cap` rows
  assert.equal(pager.query(pager.olderCursor([]), 200), "limit=200&before=11");
  // A tail that holds the first message (seq 1) has nothing older, unless a filter hides it.
  pager.reset({}, tail(1, 3));
  assert.equal(pager.hasOlder, false);
  pager.reset({ type: "metrics" }, tail(1, 3));
  assert.equal(pager.hasOlder, true);
  assert.deepEqual(pager.events, []);
  assert.equal(pager.query(pager.olderCursor(tail(1, 3))), "limit=200&before=1&type=metrics");
});

test("paging back reaches the start; past the cap it lets go of the newest, and paging forth follows again", () => {
  const pager = new LogPager(6);
  const live = tail(9, 11);
  pager.reset({}, live);
  pager.older(page(tail(6, 8), 6, 8));
  assert.deepEqual(pager.events.map((e) => e.seq), [6, 7, 8, 9, 10, 11]);
  assert.equal(pager.following, true);
  pager.older(page(tail(3, 5), 3, 5));
  assert.deepEqual(pager.events.map((e) => e.seq), [3, 4, 5, 6, 7, 8]);
  assert.equal(pager.following, false);
  assert.equal(pager.hasOlder, true);
  pager.older(page(tail(1, 2), null, 2));
  assert.equal(pager.hasOlder, false);
  assert.deepEqual(pager.events.map((e) => e.seq), [1, 2, 3, 4, 5, 6]);
  // New messages while paged back are a page away.
  assert.equal(pager.live(tail(12, 12)), false);
  assert.equal(pager.query(pager.newerCursor()), "limit=200&after=6");
  pager.newer(page(tail(7, 11), 6, null), [...live, ...tail(12, 12)]); // the last page: the tail follows
  assert.equal(pager.following, true);
  assert.deepEqual(pager.events.map((e) => e.seq), [7, 8, 9, 10, 11, 12]);
  assert.equal(pager.hasOlder, true);
});

test("filters apply to the tail, to live messages and to the pages' queries", () => {
  const pager = new LogPager();
  const mixed = [event(1, "metrics", {}), event(2, "bot-llm-text", { text: "a" }), { ...event(3, "send-text", {}), direction: "from-client" }];
  pager.reset({ type: "bot-llm-text" }, mixed);
  assert.deepEqual(pager.events.map((e) => e.seq), [2]);
  assert.equal(pager.live([event(4, "metrics", {})]), false);
  pager.reset({ direction: "from-client" }, mixed);
  assert.deepEqual(pager.events.map((e) => e.seq), [3]);
  assert.equal(pager.query({ after: 0 }, 50), "limit=50&after=0&direction=from-client");
});

test("a page about a moment replaces the rows; at the end of what is stored it follows the tail", () => {
  const pager = new LogPager();
  pager.reset({}, tail(100, 110));
  pager.around(page(tail(20, 40), 20, 40), tail(100, 110));
  assert.equal(pager.following, false);
  assert.deepEqual([pager.events[0].seq, pager.events.at(-1).seq], [20, 40]);
  pager.around(page(tail(95, 105), 95, null), tail(100, 110));
  assert.equal(pager.following, true);
  assert.deepEqual([pager.events[0].seq, pager.events.at(-1).seq], [95, 110]);
});

test("merging keeps seq order and each seq once; indexAt finds the row at or before a moment", () => {
  const seqs = (events) => events.map((e) => e.seq);
  assert.deepEqual(seqs(mergeBySeq(tail(1, 3), tail(4, 5))), [1, 2, 3, 4, 5]);
  assert.deepEqual(seqs(mergeBySeq(tail(1, 3), [...tail(5, 5), ...tail(2, 4)])), [1, 2, 3, 4, 5]);
  const a = tail(1, 2);
  assert.equal(mergeBySeq(a, []), a);
  const items = [{ at: 10 }, { at: 20 }, { at: 30 }];
  assert.equal(indexAt(items, 25, (i) => i.at), 1);
  assert.equal(indexAt(items, 30, (i) => i.at), 2);
  assert.equal(indexAt(items, 5, (i) => i.at), 0);
  assert.equal(indexAt([], 5, (i) => i.at), -1);
});

test("the header says what redaction removed before storage, most first, or none", () => {
  assert.equal(redactedText(undefined), "none");
  assert.equal(redactedText({}), "none");
  assert.equal(redactedText({ email: 1, card: 2, phone: 1 }), "2 card, 1 email, 1 phone");
  assert.equal(redactedText({ "member-id": 3, bogus: "x" }), "3 member-id");
  assert.equal(headerFacts({ status: "live" }, { counts: { redacted: { card: 1 } } }, 0).redacted, "1 card");
});

test("an ended call in one line: when, and how in the server's words; a live one has none", () => {
  const ended = new Date(Date.UTC(2026, 10, 28, 3, 12, 9));
  assert.match(endedLine(ended, "by operator ann"), /^Call ended at 2026-11-2\d \d\d:12:09 \S+ \(by operator ann\)\.$/);
  assert.equal(endedLine(null, ""), "Call ended.");
  const row = { status: "ended", end_kind: "operator_ended", end_reason: "by operator ann", ended_at: ended.toISOString(), started_at: ended.toISOString() };
  assert.equal(headerFacts(row, null, 0).endedLine, endedLine(ended, "by operator ann"));
  assert.equal(headerFacts({ ...row, status: "live", ended_at: null, end_reason: "" }, { ended: false }, 0).endedLine, "");
});
