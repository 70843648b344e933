// The call audio's words (pure, no DOM): a player's clock, signed seconds, sizes, and the recording's
// figures and per-turn table as the session page's audio card (audio_figures.js) shows them.
import { formatDuration } from "./format.js";

const pad = (n) => String(n).padStart(2, "0");

/** A player's clock, to the tenth and rounded down: "0:04.2", "12:07.0", "1:02:03.5". */
export function mediaClock(seconds) {
  const value = typeof seconds === "number" && Number.isFinite(seconds) && seconds > 0 ? seconds : 0;
  const tenths = Math.floor(value * 10 + 1e-6);
  const whole = Math.floor(tenths / 10);
  const hours = Math.floor(whole / 3600);
  const minutes = Math.floor((whole % 3600) / 60);
  const rest = `${pad(whole % 60)}.${tenths % 10}`;
  return hours ? `${hours}:${pad(minutes)}:${rest}` : `${minutes}:${rest}`;
}

/**
 * A difference of seconds with its sign, to the hundredth: "+0.24 s", "−0.31 s", "±0.00 s"; "—" when unknown.
 * The same words as dashboard/templatetags/dashboard_format.py's `signed_seconds` (the viewer's page).
 */
export function signedSeconds(seconds) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds)) return "—";
  const text = Math.abs(seconds).toFixed(2);
  if (text === "0.00") return "±0.00 s";
  return `${seconds > 0 ? "+" : "−"}${text} s`;
}

/** Seconds as format.js's durations ("820 ms", "1.4 s"); "—" when unknown. */
export function secondsText(seconds) {
  return typeof seconds === "number" && Number.isFinite(seconds) ? formatDuration(seconds * 1000) : "—";
}

/** Stored bytes as a person reads them: "830 B", "42 kB", "1.3 MB". */
export function bytesText(bytes) {
  if (typeof bytes !== "number" || !Number.isFinite(bytes)) return "—";
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1e6) return `${Math.round(bytes / 1000)} kB`;
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

/**
 * The recording's figures as the card shows them, from GET audio/'s summary and analysis.
 * @returns {{key: string, label: string, value: string, hint?: string, title?: string}[]}
 */
export function audioFacts(answer) {
  const summary = answer.summary || {};
  const analysis = answer.analysis || {};
  const v2v = analysis.voice_to_voice || {};
  const none = (seconds) => (seconds ? secondsText(seconds) : "none");
  return [
    {
      key: "voice-to-voice",
      label: "Voice to voice, p50 (audio)",
      value: secondsText(summary.voice_to_voice_p50),
      hint: typeof v2v.p95 === "number" ? `p95 ${secondsText(v2v.p95)} · max ${secondsText(v2v.max)}` : "",
      title: "From the end of the caller's speech to the bot's first sound, measured on the recording",
    },
    {
      key: "reported",
      label: "Reported by the bot, p50",
      value: secondsText(summary.reported_p50),
      title: "The turn latency the bot's messages give, for the turns found in the recording too",
    },
    {
      key: "difference",
      label: "Difference, p50",
      value: signedSeconds(summary.difference_p50),
      title: "Audio minus reported, turn by turn: what the caller waited beyond what the bot reports",
    },
    { key: "talk-over", label: "Talk-over", value: none(summary.talk_over_seconds), title: "Both speaking at once, in all" },
    { key: "barge-ins", label: "Barge-ins", value: String(summary.barge_ins ?? 0), title: "The caller began speaking while the bot spoke" },
    { key: "over-caller", label: "Bot started over the caller", value: String(summary.bot_over_caller ?? 0), title: "Replies the bot began before the caller had stopped" },
    {
      key: "dead-air",
      label: "Dead air",
      value: none(summary.dead_air_seconds),
      hint: typeof analysis.dead_air_threshold === "number" ? `silences over ${secondsText(analysis.dead_air_threshold)}` : "",
      title: "Silences of both, between the first and the last speech",
    },
  ];
}

/**
 * The per-turn table's rows, from GET audio/'s comparison: each turn the bot reported beside the audio's
 * measure of it. `index` is the state's turn index (0-based); `turn` is how the page numbers it (1-based).
 */
export function turnRows(comparison) {
  return (comparison || []).map((row) => {
    const found = typeof row.audio_seconds === "number";
    const over = row.over_caller === true;
    return {
      index: row.index,
      turn: typeof row.index === "number" ? String(row.index + 1) : "?",
      reported: secondsText(row.reported_seconds),
      audio: !found ? "not found" : over ? `${signedSeconds(row.audio_seconds)}, over the caller` : secondsText(row.audio_seconds),
      difference: typeof row.difference_seconds === "number" ? signedSeconds(row.difference_seconds) : "—",
      found,
      over,
    };
  });
}
