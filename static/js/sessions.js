// The sessions page: the live table follows the socket (sessions start, update, go away and come
// back, and leave as they end), and the history's rows update in place.
//
// Why in place, rather than moving an ended session to the top of the history: the history is the
// server's answer to a filtered, paginated query. Whether a session that just ended matches "words
// said" or "with errors", or belongs on this page at all, is the server's to say, and the browser
// derives nothing. So the page keeps the rows it has true (a session in it that ends reads "ended"
// at once), and says when a reload would show the history as it now is.
import { liveSocket } from "./live.js";
import { formatDuration, shortId, showTime } from "./format.js";
import { latencyPair, newestFirst, sessionStatus } from "./session_row.js";

const config = JSON.parse(document.getElementById("sessions-config").textContent);
const liveBody = document.querySelector("#live-sessions tbody");
const empty = liveBody.querySelector("tr.empty");
const live = new Map(); // session id -> {row, session}: the live table, in no particular order
const history = new Map([...document.querySelectorAll("#history tr[data-session]")].map((row) => [row.dataset.session, row]));
const stale = document.getElementById("history-stale");

// The columns' names, as each cell carries them for the stacked rows of a phone (dashboard.css, table.stack).
const LABELS = ["Session", "Status", "Agent", "Started", "Duration", "Events", "Turns", "Latency p50 / p95", "Interruptions", "Errors"];

function cell(...content) {
  const td = document.createElement("td");
  td.append(...content); // strings become text nodes: a bot's words are never HTML
  return td;
}

function pill(kind, text) {
  const span = document.createElement("span");
  span.className = `pill ${kind}`;
  span.textContent = text;
  return span;
}

// As web/_when.html writes a moment; showTime makes it "4 min ago", base.html keeps it ageing.
function when(iso) {
  const time = document.createElement("time");
  time.className = "when";
  time.setAttribute("datetime", iso);
  showTime(time);
  return time;
}

/**
 * One session's cells, from a row the socket sent, as templates/rtvi_monitor/_session_cells.html
 * renders them from the database: keep both in step (tests/sessions/test_browser_session_list.py compares them).
 */
function sessionCells(session) {
  const link = document.createElement("a");
  link.className = "id"; // kept on one line, as the server's session_link (dashboard.css a.id)
  // Session ids are URL-safe by rule (rtvi_monitor.models.SESSION_ID_RE); ":" stays, as Django's reverse() writes it.
  link.href = `${config.session_url}${encodeURIComponent(session.id).replaceAll("%3A", ":")}/`;
  link.title = session.id; // shown short (a UUID by its first 8 characters), whole on hover
  link.textContent = shortId(session.id);
  const status = sessionStatus(session, null);
  const duration = session.duration_s == null ? null : session.duration_s * 1000;
  const agent = cell(session.agent_name || "—");
  if (session.agent_id) agent.title = session.agent_id; // the name to read, the id on hover
  const cells = [
    cell(link),
    cell(pill(status.pill, status.text)),
    agent,
    cell(when(session.started_at)),
    cell(formatDuration(duration)),
    cell(String(session.event_count)),
    cell(String(session.turn_count)),
    cell(latencyPair(session.latency)),
    cell(String(session.interruption_count)),
    cell(session.error_count ? pill("error", String(session.error_count)) : "0"),
  ];
  for (const [i, td] of cells.entries()) td.setAttribute("data-label", LABELS[i]);
  return cells;
}

function fill(row, session) {
  row.dataset.status = session.status;
  row.dataset.bot = session.bot || "";
  row.replaceChildren(...sessionCells(session));
}

// A row of the live table, made or refilled; a new one goes where its start puts it, newest first.
function showLive(session) {
  const known = live.get(session.id);
  if (known) {
    known.session = session;
    return fill(known.row, session);
  }
  const row = document.createElement("tr");
  row.dataset.session = session.id;
  fill(row, session);
  // From the bottom up, past the rows of sessions that started earlier: a first frame, sorted, costs nothing.
  let next = null;
  for (let i = liveBody.rows.length - 1; i >= 0; i--) {
    const other = live.get(liveBody.rows[i].dataset.session);
    if (other && newestFirst(other.session, session) < 0) break;
    next = liveBody.rows[i];
  }
  live.set(session.id, { row, session });
  liveBody.insertBefore(row, next);
  empty.remove();
}

function forgetLive(id) {
  live.get(id)?.row.remove();
  live.delete(id);
  if (!live.size) liveBody.append(empty);
}

// A session of this page ended and the page cannot show it as it now is: its history row is out of
// date (it ended while the socket was down), or the newest page would list it on a reload.
function missedEnd(id) {
  if (history.has(id) || config.newest_page) stale.hidden = false;
}

function showSession(session) {
  if (session.status === "ended") {
    forgetLive(session.id);
    if (!history.has(session.id)) return missedEnd(session.id);
  } else {
    showLive(session);
  }
  if (history.has(session.id)) fill(history.get(session.id), session);
}

// The socket's first frame, and again after each reconnection: every live session as it is now.
function showAllLive(sessions) {
  const now = new Set(sessions.map((session) => session.id));
  const wasLive = [...live.keys(), ...[...history].filter(([, row]) => row.dataset.status === "live").map(([id]) => id)];
  for (const id of wasLive) if (!now.has(id)) missedEnd(id);
  for (const id of [...live.keys()]) forgetLive(id);
  for (const session of [...sessions].sort(newestFirst)) showSession(session);
}

/**
 * The writer's figures for a session (one of an "updated" frame's): a row read when it stored, which can be
 * older than the latest started/away/back/ended frame. Those frames alone say whether it is live and
 * where its bot is; an update refreshes the figures of a row the page shows, and adds none.
 */
function showUpdate(session) {
  const known = live.get(session.id);
  if (known) {
    known.session = { ...session, status: known.session.status, bot: known.session.bot };
    fill(known.row, known.session);
  }
  const row = history.get(session.id);
  if (row) fill(row, { ...session, status: row.dataset.status || session.status, bot: row.dataset.bot ?? session.bot });
}

function onFrame(frame) {
  if (frame.type === "live") {
    showAllLive(frame.sessions);
  } else if (frame.type === "updated") {
    for (const session of frame.sessions) showUpdate(session); // one flush's rows in one frame
  } else if (["started", "away", "back", "ended"].includes(frame.type)) {
    showSession(frame.session);
  }
}

liveSocket(() => config.ws, onFrame, document.getElementById("conn"));
