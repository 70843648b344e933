// The sessions page: the live table follows the socket (sessions start, update, go away and come
// back, and leave as they end), and the history, ended sessions only, is the server's.
//
// A session is listed once: in the live table while it is live (its bot away within the grace
// included), in the history once it ended. The history is the server's answer to a filtered, paged
// query: whether a session that just ended matches "words said" or "with errors", or belongs on this
// page at all, is the server's to say, and the browser derives nothing. So when a session ends, or an
// ended one comes back, the page fetches its history again (?part=history), at most once a second.
import { liveSocket } from "./live.js";
import { formatDuration, shortId, showTime, upgradeTimes } from "./format.js";
import { latencyPair, newestFirst, sessionStatus } from "./session_row.js";

const config = JSON.parse(document.getElementById("sessions-config").textContent);
const liveBody = document.querySelector("#live-sessions tbody");
const empty = liveBody.querySelector("tr.empty");
const live = new Map(); // session id -> {row, session}: the live table, in no particular order
const historyPart = document.getElementById("history-part");
const stale = document.getElementById("history-stale");
const REFRESH_GAP_MS = 1000; // at most one fetch of the history a second, however many sessions end

// The columns' names, as each cell carries them for the stacked rows of a phone (dashboard.css, table.stack).
const LABELS = ["Session", "Status", "Agent", "Started", "Duration", "Messages", "Turns", "Latency p50 / p95", "Interruptions", "Errors"];

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
 * One session's cells, from a row the socket sent, as templates/sessions/_session_cells.html renders an
 * ended one's from the database: keep both in step (tests/sessions/test_browser_session_list.py compares them).
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

// The history as the server has it now: this page's filters and cursor, the fragment the page was rendered with.
let lastRefresh = 0;
let refreshTimer = null;
let refreshing = false;
let again = false; // a change came while a fetch was under way: fetch once more after it

async function refreshHistory() {
  refreshTimer = null;
  if (refreshing) {
    again = true; // one fetch at a time
    return;
  }
  refreshing = true;
  lastRefresh = Date.now();
  const url = new URL(location.href);
  url.searchParams.set("part", "history");
  try {
    const response = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    if (response.redirected || !response.ok) throw new Error(`HTTP ${response.status}`);
    // Server-rendered and escaped by Django's templates: bot text in it is text, never markup.
    historyPart.replaceChildren(document.createRange().createContextualFragment(await response.text()));
    upgradeTimes(historyPart);
    stale.hidden = true;
  } catch (error) {
    stale.hidden = false; // the rows shown may list a session as it no longer is: say so
    console.error("the history could not be refreshed", error);
  } finally {
    refreshing = false;
    if (again) {
      again = false;
      historyChanged();
    }
  }
}

// A session ended, or an ended one came back: the history may have changed. The last change is never left out.
function historyChanged() {
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(refreshHistory, Math.max(0, lastRefresh + REFRESH_GAP_MS - Date.now()));
}

function showSession(session) {
  if (session.status === "ended") {
    forgetLive(session.id);
    historyChanged();
    return;
  }
  const ended = [...historyPart.querySelectorAll("#history tr[data-session]")].find((row) => row.dataset.session === session.id);
  if (ended) {
    // It ended, and its bot came back (the session reopened): live, so listed in the live table alone.
    ended.remove();
    historyChanged();
  }
  showLive(session);
}

// The socket's first frame, and again after each reconnection: every live session as it is now. Sessions may have
// ended meanwhile (while the page loaded, while the socket was down): the history is fetched again.
function showAllLive(sessions) {
  for (const id of [...live.keys()]) forgetLive(id);
  for (const session of [...sessions].sort(newestFirst)) showSession(session);
  historyChanged();
}

/**
 * The writer's figures for a live session (one of an "updated" frame's): a row read when it stored, which can be
 * older than the latest started/away/back/ended frame. Those frames alone say whether it is live and where its bot
 * is; an update refreshes the figures of a row the live table shows, and adds none.
 */
function showUpdate(session) {
  const known = live.get(session.id);
  if (!known) return;
  known.session = { ...session, status: known.session.status, bot: known.session.bot };
  fill(known.row, known.session);
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
