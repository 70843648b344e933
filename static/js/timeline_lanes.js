// The timeline's data from the session's derived state: a lane per activity clipped to a window,
// the markers in it, and the moments the call spans. timeline.js draws them. Pure
// (tests/js/timeline_lanes.test.mjs).

/** The timeline's lanes, top to bottom: [what the state calls it, its label]. */
export const LANES = [
  ["user_speaking", "user speaking"],
  ["bot_speaking", "bot speaking"],
  ["llm_busy", "LLM busy"],
  ["tts_busy", "TTS busy"],
  ["function_calls", "function calls"],
  ["interruptions", "interruptions"],
];

/**
 * The timeline's rows for a time window: intervals clipped to [from, to], open ones running to `to`.
 * @returns {{lane: string, label: string, spans: number[][]}[]}
 */
export function timelineRows(state, from, to) {
  const clip = (spans) =>
    spans
      .map(([a, b]) => [a, b === null || b === undefined ? to : b])
      .filter(([a, b]) => b >= from && a <= to)
      .map(([a, b]) => [Math.max(a, from), Math.min(b, to)]);
  const intervals = state.intervals || {};
  return LANES.map(([lane, label]) => {
    let spans;
    if (lane === "function_calls") {
      spans = (state.function_calls || []).map((c) => [c.started_at, c.ended_at]);
    } else if (lane === "interruptions") {
      spans = (state.interruptions || []).map((t) => [t, t]);
    } else {
      spans = intervals[lane] || [];
    }
    return { lane, label, spans: clip(spans) };
  });
}

/**
 * The timeline's vertical markers in [from, to]: the client's disconnect-bot and the session's end.
 * @returns {{at: number, kind: string, label: string}[]}
 */
export function timelineMarkers(state, from, to) {
  return (state.markers || [])
    .filter((m) => m.at >= from && m.at <= to)
    .map((m) => ({
      at: m.at,
      kind: m.kind,
      label: m.kind === "ended" ? (m.reason ? `ended (${m.reason})` : "ended") : m.kind,
    }));
}

/** The earliest moment the timeline can show, or null when the state has none. */
export function timelineStart(state) {
  const times = [
    ...Object.values(state.intervals || {}).flatMap((spans) => spans.map((s) => s[0])),
    ...(state.interruptions || []),
    ...(state.function_calls || []).map((c) => c.started_at),
    ...(state.markers || []).map((m) => m.at),
    ...(state.transcript || []).map((t) => t.at),
  ];
  let earliest = null;
  for (const t of times) if (typeof t === "number" && (earliest === null || t < earliest)) earliest = t;
  return earliest;
}

/** The latest moment the state knows of (its last message, or its end), or null. */
export function timelineEnd(state) {
  const times = [state.last_at, ...(state.markers || []).map((m) => m.at)].filter((t) => typeof t === "number");
  return times.length ? Math.max(...times) : null;
}
