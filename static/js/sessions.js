// The sessions page: live sessions appear, update and leave as bots connect and end.
import { liveSocket } from "./live.js";

const config = JSON.parse(document.getElementById("sessions-config").textContent);
const body = document.querySelector("#live-sessions tbody");
const rows = new Map();

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text;
  return td;
}

function render(session) {
  let row = rows.get(session.id);
  if (!row) {
    row = document.createElement("tr");
    row.dataset.session = session.id;
    rows.set(session.id, row);
    body.prepend(row);
  }
  const link = document.createElement("a");
  link.href = `${config.session_url}${encodeURIComponent(session.id)}/`;
  link.textContent = session.id;
  const first = document.createElement("td");
  first.append(link);
  const latency = session.latency && session.latency.p50 != null ? `${Math.round(session.latency.p50)} / ${Math.round(session.latency.p95)} ms` : "—";
  row.replaceChildren(first, cell(session.agent_name || "—"), cell(new Date(session.started_at).toLocaleTimeString()), cell(String(session.event_count)),
    cell(String(session.turn_count)), cell(latency), cell(String(session.interruption_count)), cell(String(session.error_count)));
  body.querySelector("tr.empty")?.remove();
}

function onFrame(frame) {
  if (frame.type === "live") {
    body.querySelectorAll("tr[data-session]").forEach((tr) => tr.remove());
    rows.clear();
    frame.sessions.forEach(render);
  } else if (frame.type === "started" || frame.type === "updated") {
    render(frame.session);
  } else if (frame.type === "ended") {
    rows.get(frame.session.id)?.remove();
    rows.delete(frame.session.id);
  }
}

liveSocket(() => config.ws, onFrame, document.getElementById("conn"));
