// The sessions page: live sessions appear, update, go away and come back, and leave as they end.
import { liveSocket } from "./live.js";
import { sessionStatus } from "./format.js";

const config = JSON.parse(document.getElementById("sessions-config").textContent);
const body = document.querySelector("#live-sessions tbody");
const empty = body.querySelector("tr.empty");
const rows = new Map();

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;
  return td;
}

// The row's own words (the session page's status pill): live, or bot away since when.
function statusCell(session) {
  const status = sessionStatus(session, null);
  const pill = document.createElement("span");
  pill.className = `pill ${status.kind}`;
  pill.textContent = status.text;
  const td = document.createElement("td");
  td.append(pill);
  return td;
}

function render(session) {
  if (session.status === "ended") return forget(session);
  let row = rows.get(session.id);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.session = session.id;
    rows.set(session.id, row);
    body.prepend(row);
  }
  row.dataset.bot = session.bot || "";
  const link = document.createElement("a");
  link.href = `${config.session_url}${encodeURIComponent(session.id)}/`;
  link.textContent = session.id;
  const first = document.createElement("td");
  first.append(link);
  const latency = session.latency && session.latency.p50 != null ? `${Math.round(session.latency.p50)} / ${Math.round(session.latency.p95)} ms` : "—";
  row.replaceChildren(first, statusCell(session), cell(session.agent_name || "—"), cell(new Date(session.started_at).toLocaleTimeString()),
    cell(String(session.event_count)), cell(String(session.turn_count)), cell(latency), cell(String(session.interruption_count)),
    cell(String(session.error_count)));
  empty.remove();
}

function forget(session) {
  rows.get(session.id)?.remove();
  rows.delete(session.id);
  if (!rows.size) body.append(empty);
}

function onFrame(frame) {
  if (frame.type === "live") {
    for (const row of rows.values()) row.remove();
    rows.clear();
    body.append(empty);
    frame.sessions.forEach(render);
  } else if (["started", "updated", "away", "back"].includes(frame.type)) {
    render(frame.session);
  } else if (frame.type === "ended") {
    forget(frame.session);
  }
}

liveSocket(() => config.ws, onFrame, document.getElementById("conn"));
