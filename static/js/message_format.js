// Stored messages as the session page shows them, and the server's previews of long values in
// them: a value as text, a log row's type and one-line glimpse, the whole message, the newest
// messages kept by seq. Pure (tests/js/message_format.test.mjs).

const PREVIEW_KEYS = new Set(["truncated", "preview", "length", "seq"]);

/**
 * Whether a value is the server's stand-in for a long one:
 * {truncated: true, preview, length} (a message log row) or with the seq of the message that holds it whole.
 */
export function isPreview(value) {
  return (
    value !== null &&
    typeof value === "object" &&
    !Array.isArray(value) &&
    value.truncated === true &&
    typeof value.preview === "string" &&
    typeof value.length === "number" &&
    Object.keys(value).every((key) => PREVIEW_KEYS.has(key))
  );
}

/**
 * A value of the state as text: strings as they are, previews as their start and where the rest is, the rest as JSON.
 * @param {unknown} value
 * @param {number} [indent] JSON indentation
 */
export function formatValue(value, indent) {
  if (value === undefined) return "";
  if (typeof value === "string") return value;
  if (isPreview(value)) {
    const where = typeof value.seq === "number" ? `; full message #${value.seq}` : "";
    return `${value.preview}… (${value.length} characters${where})`;
  }
  return JSON.stringify(value, null, indent);
}

/** A log row's type: the stored type, else the message's, else "(not JSON)". */
export function eventType(event) {
  if (typeof event.type === "string" && event.type) return event.type;
  const message = event.message;
  if (message && typeof message === "object" && !isPreview(message) && typeof message.type === "string" && message.type) {
    return message.type;
  }
  return "(not JSON)";
}

/**
 * A glimpse of a stored message for its closed log row: what its data says, on one line, cut at `max`
 * characters ("" for a message that is only its type); raw text as it came; a preview by its length.
 */
export function messageSummary(message, max = 120) {
  if (isPreview(message)) return `${message.length} characters`;
  let text;
  if (message !== null && typeof message === "object" && !Array.isArray(message) && typeof message.type === "string") {
    text = message.data === undefined ? "" : formatValue(message.data);
  } else {
    text = formatValue(message);
  }
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/** A stored message as the log shows it: raw text as it came, previews as their start, JSON indented. */
export function messageText(message) {
  return formatValue(message, 2);
}

export const MAX_LOG = 2000;

/**
 * The message log with new events merged in: one per seq, in seq order, the newest `max` kept.
 * Returns `log` itself when nothing was new.
 */
export function mergeEvents(log, events, max = MAX_LOG) {
  const seen = new Set(log.map((e) => e.seq));
  const fresh = [];
  for (const event of events || []) {
    if (typeof event.seq !== "number" || seen.has(event.seq)) continue;
    seen.add(event.seq);
    fresh.push(event);
  }
  if (!fresh.length) return log;
  const merged = log.concat(fresh).sort((a, b) => a.seq - b.seq);
  return merged.length > max ? merged.slice(merged.length - max) : merged;
}
