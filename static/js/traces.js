// The session page's traces: what the bot's OpenTelemetry spans say of each turn, as the server
// joined them (GET /api/sessions/<id>/traces/). Rendered as given; fetched again every 15 s, since
// exporters send spans in batches, some after the turn they describe.
import { formatDuration } from "./format.js";

const section = document.getElementById("traces");
const body = section.querySelector("tbody");
const EVERY_MS = 15000;

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function turnRow(turn) {
  const tr = document.createElement("tr");
  tr.className = "trace-turn";
  const facts = [`Turn ${turn.turn_number}`];
  if (turn.user_bot_latency_ms !== null) facts.push(`user → bot ${formatDuration(turn.user_bot_latency_ms)}`);
  if (turn.interrupted) facts.push("interrupted");
  tr.append(cell(facts.join(" · ")), cell(""), cell(""), cell(formatDuration(turn.duration_ms), "num"), cell(""), cell(""));
  return tr;
}

function spanRow(span) {
  const tr = document.createElement("tr");
  if (span.error) tr.className = "trace-error";
  const model = [span.model, span.provider].filter(Boolean).join(" · ");
  const tokens = span.tokens ? `${span.tokens.input_tokens ?? "—"} / ${span.tokens.output_tokens ?? "—"}` : "";
  tr.append(
    cell(`  ${span.name}`, "trace-span"),
    cell(model),
    cell(`+${formatDuration(span.start_ms)}`, "num"),
    cell(formatDuration(span.duration_ms), "num"),
    cell(span.ttfb_ms === null ? "" : formatDuration(span.ttfb_ms), "num"),
    cell(tokens),
  );
  return tr;
}

async function refresh() {
  try {
    const response = await fetch(section.dataset.url, { credentials: "same-origin" });
    if (!response.ok) return;
    const { traces } = await response.json();
    if (!traces) return;
    const rows = [];
    for (const turn of traces.turns) rows.push(turnRow(turn), ...turn.spans.map(spanRow));
    body.replaceChildren(...rows);
    section.hidden = false;
  } catch (error) {
    console.error("traces", error);
  }
}

refresh();
setInterval(refresh, EVERY_MS);
