// The session page's message log: each stored message as a row (its time, direction, type and one
// line of what it says), filtered by type and direction, paged from the server
// (GET /api/sessions/<id>/events/), a row opening to the whole message (events/<seq>/).
// Everything a bot or client sent is written with textContent.
import { eventType, isPreview, messageText } from "./message_format.js";
import { LOG_PAGE, LogPager, absoluteTimeOf, clockOf, eventTime, indexAt, previewText } from "./session_view.js";

const DIRECTIONS = { "to-client": "bot→client", "from-client": "client→bot" };
const FEW = 50; // a filter that leaves fewer rows than this from the tail reads a page back at once
const BOTTOM_PX = 40; // this close to the end of the log counts as at its end (it then stays there)

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * @param {{pagesUrl: string, eventUrl: (seq: number) => string, tail: () => object[], pick: (event: object) => void}} options
 *   tail: the newest messages the socket brought (in seq order); pick: a row's time was chosen as the cursor
 */
export function createMessageLog({ pagesUrl, eventUrl, tail, pick }) {
  const log = {
    pagesUrl,
    eventUrl,
    tail,
    pick,
    body: $("log"),
    scroller: $("log-scroll"),
    typeSelect: $("log-filter"),
    directionSelect: $("log-direction"),
    pager: new LogPager(),
    rows: new Map(), // seq -> <tr>: a row keeps its element (an opened message stays open)
    loading: null, // the request on its way: one at a time
    generation: 0, // bumped when the filters change: an answer for older filters is dropped
    marked: null, // the row at the cursor
  };
  const reset = () => resetLog(log);
  const loadOlder = () => loadOlderPage(log);
  log.typeSelect.addEventListener("change", reset);
  log.directionSelect.addEventListener("change", reset);
  $("log-older").addEventListener("click", loadOlder);
  $("log-newer").addEventListener("click", () =>
    load(
      log,
      () => log.pager.newerCursor(),
      (page) => log.pager.newer(page, tail()),
    ),
  );
  $("log-live").addEventListener("click", reset);

  return {
    reset,

    /** Messages the socket brought. */
    live(events) {
      if (log.pager.live(events)) sync(log);
    },

    /** The types the type filter offers: the session's (state.counts.by_type) and those seen. */
    types(names) {
      offerTypes(log.typeSelect, names);
    },

    /**
     * Mark the row of a message (`seq`), or else the row at a moment. When the rows shown do not hold it, a page
     * is read from the message (or from `anchor`, a message at or before the moment: a transcript line's).
     * `scroll` brings the row into the log's view (not when the operator clicked it there).
     */
    show(at, options) {
      return show(log, at, options);
    },

    unmark() {
      log.marked?.classList.remove("cursor");
      log.marked = null;
    },

    get pager() {
      return log.pager;
    },
  };
}

/** A message as a row: its time (a button placing the cursor), direction, type, and its text, opening to the whole. */
function row(log, event) {
  const type = eventType(event);
  const tr = el("tr");
  tr.dataset.seq = String(event.seq);
  tr.dataset.type = type;
  tr.dataset.direction = event.direction;
  if (event.valid === false) tr.classList.add("invalid");
  const at = eventTime(event);
  const time = el("button", "link time", clockOf(at, { ms: true }));
  time.type = "button";
  time.title = `${absoluteTimeOf(at)} · #${event.seq} · place the cursor here`;
  time.addEventListener("click", () => log.pick(event));
  const timeCell = el("td", "log-time");
  timeCell.append(time);
  const details = el("details");
  const pre = el("pre");
  details.append(el("summary", "", previewText(event)), pre);
  details.addEventListener("toggle", () => {
    if (!details.open) return;
    log.pick(event);
    if (pre.textContent) return;
    pre.textContent = messageText(event.message);
    if (isPreview(event.message)) loadWhole(log, event.seq, pre);
  });
  const message = el("td", "log-msg");
  message.append(details);
  tr.append(timeCell, el("td", "log-dir", DIRECTIONS[event.direction] || event.direction), el("td", "log-type", type), message);
  return tr;
}

async function loadWhole(log, seq, pre) {
  const note = el("p", "muted", "loading the whole message…");
  pre.after(note);
  try {
    const response = await fetch(log.eventUrl(seq), { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    pre.textContent = messageText((await response.json()).message);
    note.remove();
  } catch (error) {
    note.textContent = `Could not load the whole message (${error.message}); close and open it to try again.`;
    pre.textContent = "";
  }
}

/** The rows as the pager has them: rows that went are removed, new ones put in their place by seq. */
function sync(log) {
  const { pager, rows, scroller } = log;
  const atEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < BOTTOM_PX;
  const wanted = new Set(pager.events.map((e) => e.seq));
  for (const [seq, tr] of rows) {
    if (!wanted.has(seq)) {
      tr.remove();
      rows.delete(seq);
    }
  }
  // What is left in the table is in seq order, as are the wanted rows: walk both, insert what is missing.
  let next = log.body.firstElementChild;
  for (const event of pager.events) {
    const existing = rows.get(event.seq);
    if (existing) {
      next = existing.nextElementSibling;
      continue;
    }
    const tr = row(log, event);
    rows.set(event.seq, tr);
    log.body.insertBefore(tr, next);
  }
  if (pager.following && atEnd) scroller.scrollTop = scroller.scrollHeight;
  $("log-older").hidden = !pager.hasOlder;
  $("log-start").hidden = pager.hasOlder;
  $("log-newer").hidden = pager.following;
  $("log-live").hidden = pager.following;
  const first = pager.events[0]?.seq;
  const last = pager.events.at(-1)?.seq;
  $("log-shown").textContent = pager.events.length
    ? `${pager.events.length} shown, #${first}–#${last}${pager.following ? ", the newest as they come" : ""}`
    : "No message matches.";
}

/** One page from the server, folded in by `apply`; requests go one at a time, each cursor read when it starts. */
async function load(log, cursorOf, apply) {
  while (log.loading) await log.loading;
  const mine = log.generation;
  const status = $("log-status");
  status.textContent = "loading…";
  log.loading = (async () => {
    try {
      const response = await fetch(`${log.pagesUrl}?${log.pager.query(cursorOf(), LOG_PAGE)}`, {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      const answer = await response.json();
      if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
      if (mine !== log.generation) return; // the filters changed meanwhile
      apply(answer);
      status.textContent = "";
      sync(log);
    } catch (error) {
      status.textContent = `Could not load messages (${error.message}).`;
    } finally {
      log.loading = null;
    }
  })();
  return log.loading;
}

function loadOlderPage(log) {
  return load(
    log,
    () => log.pager.olderCursor(log.tail()),
    (page) => log.pager.older(page),
  );
}

/** The filters changed (or the newest rows were asked for): the log again from its tail. */
function resetLog(log) {
  log.generation++;
  log.pager.reset({ type: log.typeSelect.value, direction: log.directionSelect.value }, log.tail());
  sync(log);
  log.scroller.scrollTop = log.scroller.scrollHeight;
  if (log.pager.events.length < FEW && log.pager.hasOlder) loadOlderPage(log);
}

function offerTypes(typeSelect, names) {
  const have = new Set([...typeSelect.options].map((o) => o.value));
  const missing = names.filter((name) => !have.has(name));
  if (!missing.length) return;
  const chosen = typeSelect.value;
  const all = [...new Set([...have, ...missing])].filter(Boolean).sort();
  typeSelect.replaceChildren(new Option("all types", ""), ...all.map((name) => new Option(name, name)));
  typeSelect.value = chosen;
}

/** createMessageLog's show: the row of a message or a moment marked, a page read first if need be. */
async function show(log, at, { seq, anchor, scroll = true } = {}) {
  const { pager, rows, scroller } = log;
  const events = pager.events;
  const held = typeof seq === "number" ? rows.has(seq) : events.length && eventTime(events[0]) <= at && (pager.following || eventTime(events.at(-1)) >= at);
  const from = seq ?? anchor;
  if (!held && typeof from === "number") {
    log.generation++;
    await load(
      log,
      () => ({ after: Math.max(from - 1, 0) }),
      (page) => pager.around(page, log.tail()),
    );
  }
  log.marked?.classList.remove("cursor");
  log.marked = rows.get(seq) || null;
  if (!log.marked) {
    const index = indexAt(pager.events, at, eventTime);
    log.marked = index < 0 ? null : rows.get(pager.events[index].seq) || null;
  }
  if (!log.marked) return;
  log.marked.classList.add("cursor");
  if (!scroll) return;
  // Scroll the log alone, never the page: the operator is looking at whatever they clicked.
  const offset = log.marked.getBoundingClientRect().top - scroller.getBoundingClientRect().top;
  scroller.scrollTop += offset - scroller.clientHeight / 2;
}
