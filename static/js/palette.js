// Every chart's colours, named by what they show: a service kind, a lane of the timeline, a figure. The colours
// themselves are the stylesheet's (static/css/dashboard.css: --stt, --llm, --tts, --p50, --p95..., light and dark),
// the server's latency charts read the same ones; so the LLM is one colour on the timeline, the waterfall, the
// time-to-first-byte and processing charts alike.

/** A service kind's colour (the CSS custom property), "unknown" for a processor whose name does not say. */
export const SERVICE_COLORS = { stt: "--stt", llm: "--llm", tts: "--tts", unknown: "--service" };

/** The timeline's lanes: who speaks, and the services at work. */
export const LANE_COLORS = {
  user_speaking: "--user",
  bot_speaking: "--bot",
  llm_busy: SERVICE_COLORS.llm,
  tts_busy: SERVICE_COLORS.tts,
  function_calls: "--warn",
  interruptions: "--err",
};

/** The percentile lines, on the session's latency chart and the Overview's. */
export const FIGURE_COLORS = { p50: "--p50", p95: "--p95" };

// A second or third series of one kind (two LLMs, one model then another) keeps the kind's colour, drawn dashed.
const DASHES = [[], [6, 3], [2, 2], [8, 3, 2, 3]];

// The Pipecat services whose class names do not end in their kind (rtvi_monitor/core/services.py KNOWN).
const KNOWN = { WhisperSTTServiceMLX: "stt", GoogleLLMOpenAIBetaService: "llm" };
const KINDS = ["stt", "llm", "tts"];

/**
 * Which kind of service a Pipecat processor's name says: "stt", "llm", "tts" or "unknown". The rule of
 * rtvi_monitor/core/services.py's service_kind (its docstring says it step by step); tests/core/test_service_kinds.py
 * checks both on one table.
 * @param {unknown} processor
 */
export function serviceKind(processor) {
  if (typeof processor !== "string") return "unknown";
  const name = processor.trim().replace(/#\d+$/, "");
  if (Object.hasOwn(KNOWN, name)) return KNOWN[name];
  const stem = name.replace(/Service$/, "");
  for (const kind of KINDS) if (stem.endsWith(kind.toUpperCase())) return kind;
  const words = new Set(name.split(/[^A-Za-z0-9]+/).map((word) => word.toLowerCase()));
  const named = KINDS.filter((kind) => words.has(kind));
  return named.length === 1 ? named[0] : "unknown";
}

/**
 * The colour (a CSS custom property) and dash of each chart series, from the state's "processor|model" keys: the
 * kind's colour, solid for the first series of a kind and dashed for the next ones, in the keys' order.
 * @param {string[]} keys
 * @returns {{color: string, dash: number[]}[]}
 */
export function seriesStyles(keys) {
  const seen = {};
  return keys.map((key) => {
    const bar = key.indexOf("|");
    const kind = serviceKind(bar < 0 ? key : key.slice(0, bar));
    const n = seen[kind] ?? 0;
    seen[kind] = n + 1;
    return { color: SERVICE_COLORS[kind], dash: DASHES[n % DASHES.length] };
  });
}
