// Pure helpers: RTVI messages to what the session page shows. No DOM here.
//
// The server sends a snapshot (its derived state, rtvi_monitor/state.py, plus
// recent events) and then batches of stored events in seq order. These
// helpers turn the snapshot into a view model and fold each event into it, as
// the server's reducer does for the parts the page shows live.

/** Where a bot turn's text comes from, best first: what was spoken beats what was written. */
export const BOT_SOURCES = ["bot-output", "bot-tts-text", "bot-transcription", "bot-llm-text"];
const TIME_METRICS = new Set(["ttfb", "processing", "ttfa", "ttfat"]);
export const MAX_LOG = 2000;

/**
 * A view model from a snapshot frame.
 * @param {object} snapshot {session, state, events, last_seq}
 */
export function createView(snapshot) {
  const state = snapshot.state || {};
  const view = {
    session: snapshot.session || {},
    speaking: { user: false, bot: false, ...(state.speaking || {}) },
    transcript: (state.transcript || []).map((item) => ({ ...item, parts: seedParts(item) })),
    llm: { busy: false, current_tokens: "", last_user_llm_text: "", ...(state.llm || {}) },
    tts: { busy: false, current_text: "", ...(state.tts || {}) },
    turns: (state.turns || []).map((t) => ({ ...t })),
    metrics: structuredClone(state.metrics || {}),
    totals: { characters: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, ...(state.totals || {}) },
    errors: [...(state.errors || [])],
    functionCalls: [...(state.function_calls || [])],
    serverMessages: [...(state.server_messages || [])],
    fatal: Boolean(state.fatal),
    lanes: {
      user_speaking: [], bot_speaking: [], llm_busy: [], tts_busy: [],
      ...structuredClone(state.intervals || {}),
    },
    interruptions: [...(state.interruptions || [])],
    log: [],
    lastSeq: snapshot.last_seq || 0,
    pendingTurn: null,
    botItem: null,
    userItem: null,
  };
  const last = view.transcript[view.transcript.length - 1];
  if (last && last.role === "bot" && !last.final) view.botItem = last;
  if (last && last.role === "user" && !last.final) view.userItem = last;
  return view;
}

// A bot line from the server continues here: keep its text under its source.
function seedParts(item) {
  if (item.role !== "bot" || !item.source) return {};
  const sentences = item.source === "bot-output" || item.source === "bot-transcription";
  return { [item.source]: sentences ? [item.text] : item.text };
}

/**
 * Which events of a batch are new, and whether some are missing before them.
 * @returns {{fresh: object[], gap: boolean}}
 */
export function newEvents(lastSeq, events) {
  const fresh = events.filter((e) => e.seq > lastSeq);
  return { fresh, gap: fresh.length > 0 && fresh[0].seq > lastSeq + 1 };
}

/** p50/p95/max of the turns' latency in ms (null when there is none). */
export function latencyStats(turns) {
  const values = turns.map((t) => t.latency_ms).filter((v) => typeof v === "number").sort((a, b) => a - b);
  const pick = (p) => (values.length ? values[Math.min(values.length - 1, Math.round((p / 100) * (values.length - 1)))] : null);
  return { p50: pick(50), p95: pick(95), max: values.length ? values[values.length - 1] : null };
}

function when(event) {
  return typeof event.sent_at === "number" ? event.sent_at : event.received_at;
}

function joinPiece(text, piece) {
  if (!text) return piece.trimStart();
  if (/^\s/.test(piece) || /\s$/.test(text) || /^[,.;:!?']/.test(piece)) return text + piece;
  return `${text} ${piece}`;
}

function botItem(view, source, event) {
  if (!view.botItem) {
    view.botItem = { role: "bot", text: "", final: false, source, seq: event.seq, at: when(event), parts: {} };
    view.transcript.push(view.botItem);
  }
  return view.botItem;
}

function showBest(item) {
  for (const source of BOT_SOURCES) {
    const part = item.parts[source];
    if (part && part.length) {
      item.source = source;
      item.text = (Array.isArray(part) ? part.join(" ") : part).trim();
      return;
    }
  }
}

function sentence(view, source, event, text, key) {
  text = (text || "").trim();
  if (!text) return;
  const item = botItem(view, source, event);
  const list = (item.parts[source] ||= []);
  const keys = (item.keys ||= {})[source] ||= [];
  const at = key === undefined || key === null ? -1 : keys.indexOf(key);
  if (at >= 0) list[at] = text;
  else if (list[list.length - 1] === text) return;
  else {
    list.push(text);
    keys.push(key ?? null);
  }
  showBest(item);
}

function point(view, kind, entry, at, value) {
  const series = `${entry.processor || ""}|${entry.model || ""}`;
  ((view.metrics[kind] ||= {})[series] ||= []).push([at, value]);
}

/** Open an interval on a timeline lane (ignored when one is open already). */
function laneStart(view, lane, at) {
  const list = view.lanes[lane];
  const last = list[list.length - 1];
  if (last && last[1] === null) return;
  list.push([last ? Math.max(at, last[1]) : at, null]);
}

function laneStop(view, lane, at) {
  const last = view.lanes[lane][view.lanes[lane].length - 1];
  if (last && last[1] === null) last[1] = Math.max(at, last[0]);
}

const HANDLERS = {
  "user-started-speaking"(view, e, data, at) {
    if (view.speaking.bot) view.interruptions.push(at);
    view.speaking.user = true;
    laneStart(view, "user_speaking", at);
    view.botItem = null;
  },
  "user-stopped-speaking"(view, e, data, at) {
    view.speaking.user = false;
    laneStop(view, "user_speaking", at);
    view.pendingTurn = { index: view.turns.length, user_stopped_at: at, latency_ms: null, llm_ttfb_ms: null, tts_ttfb_ms: null };
  },
  "bot-started-speaking"(view, e, data, at) {
    view.speaking.bot = true;
    laneStart(view, "bot_speaking", at);
    if (view.pendingTurn) {
      const turn = view.pendingTurn;
      turn.bot_started_at = at;
      turn.latency_ms = Math.round((at - turn.user_stopped_at) * 1e6) / 1e3;
      view.turns.push(turn);
      view.pendingTurn = null;
    }
  },
  "bot-stopped-speaking"(view, e, data, at) {
    view.speaking.bot = false;
    laneStop(view, "bot_speaking", at);
    if (view.botItem) view.botItem.final = true;
  },
  "user-transcription"(view, e, data, at) {
    if (typeof data.text !== "string") return;
    let item = view.userItem;
    if (!item || item.final) {
      item = { role: "user", text: data.text, final: Boolean(data.final), source: "voice", seq: e.seq, at, parts: {} };
      view.transcript.push(item);
      view.userItem = item;
    } else {
      Object.assign(item, { text: data.text, final: Boolean(data.final), seq: e.seq, at });
    }
    view.botItem = null;
  },
  "send-text"(view, e, data, at) {
    chat(view, e, data.content, at);
  },
  "user-input"(view, e, data, at) {
    if (data.input_type === "chat") chat(view, e, data.text, at);
  },
  "bot-output"(view, e, data) {
    // Single words mark progress; the sentence comes whole. Text-only replies
    // (will_be_spoken: false, audio_response off) are shown too.
    if (data.aggregated_by === "word" || data.aggregated_by === "token") return;
    sentence(view, "bot-output", e, data.text, data.segment_id);
  },
  "bot-transcription"(view, e, data) {
    sentence(view, "bot-transcription", e, data.text);
  },
  "bot-tts-text"(view, e, data) {
    if (typeof data.text !== "string") return;
    view.tts.current_text = joinPiece(view.tts.current_text, data.text);
    if (!data.text.trim()) return;
    const item = botItem(view, "bot-tts-text", e);
    item.parts["bot-tts-text"] = joinPiece(item.parts["bot-tts-text"] || "", data.text);
    showBest(item);
  },
  "bot-llm-text"(view, e, data) {
    if (typeof data.text !== "string" || !data.text) return;
    view.llm.current_tokens += data.text;
    const item = botItem(view, "bot-llm-text", e);
    item.parts["bot-llm-text"] = (item.parts["bot-llm-text"] || "") + data.text;
    showBest(item);
  },
  "bot-interrupted"(view, e, data, at) {
    // Pipecat sends this at every user turn start: an interruption only while the bot speaks.
    if (!view.speaking.bot) return;
    const last = view.interruptions[view.interruptions.length - 1];
    if (last === undefined || Math.abs(at - last) >= 1) view.interruptions.push(at);
  },
  "bot-llm-started"(view, e, data, at) {
    laneStart(view, "llm_busy", at);
    view.llm.busy = true;
    view.llm.current_tokens = "";
  },
  "bot-llm-stopped"(view, e, data, at) {
    laneStop(view, "llm_busy", at);
    view.llm.busy = false;
  },
  "user-llm-text"(view, e, data) {
    if (typeof data.text === "string") view.llm.last_user_llm_text = data.text;
  },
  "bot-tts-started"(view, e, data, at) {
    laneStart(view, "tts_busy", at);
    view.tts.busy = true;
    view.tts.current_text = "";
  },
  "bot-tts-stopped"(view, e, data, at) {
    laneStop(view, "tts_busy", at);
    view.tts.busy = false;
  },
  error(view, e, data, at) {
    const fatal = data.fatal === true;
    view.errors.push({ seq: e.seq, at, message: data.message ?? data.error ?? "", fatal, type: "error" });
    view.fatal ||= fatal;
  },
  "server-message"(view, e, data, at) {
    view.serverMessages.push({ seq: e.seq, at, data: e.message.data ?? null });
  },
  "error-response"(view, e, data, at) {
    view.errors.push({ seq: e.seq, at, message: data.error ?? "", fatal: false, type: "error-response" });
  },
  metrics(view, e, data, at) {
    for (const [kind, entries] of Object.entries(data)) {
      if (!Array.isArray(entries)) continue;
      for (const entry of entries) {
        if (!entry || typeof entry !== "object") continue;
        if (kind === "tokens") {
          for (const key of ["prompt_tokens", "completion_tokens", "total_tokens"]) {
            if (typeof entry[key] === "number") view.totals[key] += entry[key];
          }
          if (typeof entry.total_tokens === "number") point(view, "tokens", entry, at, entry.total_tokens);
          continue;
        }
        // ttfa and ttfat carry their figure under their own name, not "value".
        const raw = typeof entry.value === "number" ? entry.value : entry[kind];
        if (typeof raw !== "number") continue;
        const value = TIME_METRICS.has(kind) ? Math.round(raw * 1e6) / 1e3 : raw;
        if (kind === "characters") view.totals.characters += value;
        point(view, kind, entry, at, value);
        if (kind === "ttfb" && view.pendingTurn) {
          const name = String(entry.processor || "").toLowerCase();
          const key = name.includes("llm") ? "llm_ttfb_ms" : name.includes("tts") ? "tts_ttfb_ms" : null;
          if (key && view.pendingTurn[key] === null) view.pendingTurn[key] = value;
        }
      }
    }
  },
};

function chat(view, e, text, at) {
  if (typeof text !== "string") return;
  const last = view.transcript[view.transcript.length - 1];
  if (last && last.role === "user" && last.source === "chat" && last.text === text) return;
  view.transcript.push({ role: "user", text, final: true, source: "chat", seq: e.seq, at, parts: {} });
  view.botItem = null;
}

for (const type of ["llm-function-call", "llm-function-call-started", "llm-function-call-in-progress", "llm-function-call-stopped", "llm-function-call-result"]) {
  HANDLERS[type] = (view, e, data, at) => {
    const id = typeof data.tool_call_id === "string" && data.tool_call_id ? data.tool_call_id : null;
    let call = id ? view.functionCalls.find((c) => c.tool_call_id === id) : null;
    if (!call && id) call = view.functionCalls.findLast((c) => c.tool_call_id === null && c.status !== "completed");
    if (!call) {
      call = { tool_call_id: id, function_name: null, args: null, status: "requested", result: null, started_at: at, seq: e.seq };
      view.functionCalls.push(call);
    }
    if (id) call.tool_call_id = id;
    if (typeof data.function_name === "string") call.function_name = data.function_name;
    if (type.endsWith("in-progress") && call.status === "requested") call.status = "in_progress";
    if (type.endsWith("stopped") || type.endsWith("result")) {
      call.status = data.cancelled ? "cancelled" : "completed";
      call.duration_ms = Math.round((at - call.started_at) * 1e6) / 1e3;
      if ("result" in data) call.result = data.result;
    }
  };
}

/**
 * Fold stored events (seq order, already de-duplicated) into the view.
 * Invalid and unknown messages only go to the log.
 */
export function applyEvents(view, events) {
  for (const event of events) {
    if (event.seq <= view.lastSeq) continue;
    view.lastSeq = event.seq;
    view.log.push(event);
    const message = event.message;
    if (!event.valid || !message || typeof message !== "object") continue;
    const handler = HANDLERS[message.type];
    if (!handler) continue;
    const data = message.data && typeof message.data === "object" ? message.data : {};
    handler(view, event, data, when(event));
  }
  if (view.log.length > MAX_LOG) view.log.splice(0, view.log.length - MAX_LOG);
  return view;
}

/** Who is speaking now: "user", "bot", "both" or "nobody". */
export function speaker(view) {
  const { user, bot } = view.speaking;
  return user && bot ? "both" : user ? "user" : bot ? "bot" : "nobody";
}

/** uPlot data for one metric kind: [xs, ...ys] aligned on the union of times, with series names. */
export function metricSeries(view, kind) {
  const series = view.metrics[kind] || {};
  const names = Object.keys(series).sort();
  const xs = [...new Set(names.flatMap((n) => series[n].map((p) => p[0])))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const ys = names.map((n) => {
    const column = new Array(xs.length).fill(null);
    for (const [x, y] of series[n]) column[index.get(x)] = y;
    return column;
  });
  return { names: names.map((n) => n.replace(/\|$/, "") || "(all)"), data: [xs, ...ys] };
}

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
export function timelineRows(view, from, to) {
  const clip = (spans) =>
    spans
      .map(([a, b]) => [a, b === null || b === undefined ? to : b])
      .filter(([a, b]) => b >= from && a <= to)
      .map(([a, b]) => [Math.max(a, from), Math.min(b, to)]);
  return LANES.map(([lane, label]) => {
    let spans;
    if (lane === "function_calls") {
      spans = view.functionCalls.map((c) => [c.started_at, c.duration_ms == null ? null : c.started_at + c.duration_ms / 1000]);
    } else if (lane === "interruptions") {
      spans = view.interruptions.map((t) => [t, t]);
    } else {
      spans = view.lanes[lane] || [];
    }
    return { lane, label, spans: clip(spans) };
  });
}
