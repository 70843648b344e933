// The session page's turn diagnosis: each turn's wait stage by stage, what is missing from it and why,
// and its interruptions (barge-in or backchannel, and how much of the reply had been said), as the server
// took them apart (GET /api/sessions/<id>/turns/, rtvi_monitor/core/diagnosis.py). This module only words and
// places what it is given; every figure and every reason is the server's. Fetched again every 5 s while
// the call is live. Text goes in with textContent only: what callers and bots said is never HTML.
import { formatDuration, percentText } from "./format.js";
import { clockOf } from "./session_view.js";

export const EVERY_MS = 5000;

/** Where a turn is on the clock: the first of its milestones the messages gave. */
export function turnStart(turn) {
  const at = turn.at || {};
  for (const name of ["user_started", "user_stopped", "text_sent", "transcript", "llm_started", "bot_started"]) {
    if (typeof at[name] === "number") return at[name];
  }
  return null;
}

const STARTED_BY = { user: "the user spoke", bot: "started by the bot", text: "text sent" };

/** "42 %" for a share from 0 to 1; "—" for none: every page's one rule (format.js percentText). */
export const percent = percentText;

/**
 * One interruption in words: its kind, how much of the reply had been said when it was cut, and why it is
 * that kind. `text` is what the user said (null when the reader may not see it).
 * @returns {string}
 */
export function interruptionText(interruption) {
  const i = interruption;
  const parts = [];
  const kind = i.kind === "backchannel" ? "backchannel" : "barge-in";
  const said = typeof i.text === "string" && i.text ? ` “${i.text}”` : "";
  parts.push(`${kind}${said}${i.by === "client" ? " (by the client)" : ""}${i.decided === false ? " (so far)" : ""}`);
  if (i.cut && i.reply_words > 0) {
    parts.push(`cut after ${percent(i.spoken_share)} of the reply (${i.spoken_words} of ${i.reply_words} words)`);
  } else if (i.cut) {
    parts.push("cut (the reply's words unknown)");
  } else {
    parts.push("the bot spoke on");
  }
  if (typeof i.speech_ms === "number") parts.push(`spoke ${formatDuration(i.speech_ms)}`);
  if (i.why) parts.push(i.why);
  return parts.join(" · ");
}

/**
 * The table's rows, as plain data: per turn its cells, each {label, lines, title?, className?} (a cell of
 * several lines shows each on its own). From the payload's stage_names ({stage, label}) and contents.
 */
export function turnRows(payload) {
  const names = payload.stage_names || [];
  return (payload.turns || []).map((turn) => {
    const cells = [];
    const start = turnStart(turn);
    const who = STARTED_BY[turn.started_by] || turn.started_by;
    cells.push({
      label: "Turn",
      lines: [`${turn.number} · ${start === null ? "?" : clockOf(start)}`, who],
      className: "turn-id",
    });
    if (payload.contents) {
      const said = [];
      if (turn.user_text) said.push(`User: ${turn.user_text}`);
      if (turn.bot_text) said.push(`Bot: ${turn.bot_text}`);
      cells.push({ label: "Said", lines: said.length ? said : ["—"], className: "said" });
    } else {
      cells.push({ label: "Said", lines: ["hidden (needs the operator role)"], className: "said muted" });
    }
    cells.push({
      label: "Latency",
      lines: [turn.latency_ms === null ? "—" : formatDuration(turn.latency_ms)],
      className: "num",
    });
    // The longest stage is marked: the first of them, when two take as long.
    const measured = turn.stages.filter((s) => typeof s.ms === "number" && s.ms > 0);
    const worst = measured.length > 1 ? measured.reduce((a, b) => (b.ms > a.ms ? b : a)) : null;
    for (const name of names) {
      const stage = turn.stages.find((s) => s.stage === name.stage) || { ms: null, problem: "" };
      if (typeof stage.ms === "number") {
        const className = worst !== null && stage.stage === worst.stage ? "num worst" : "num";
        cells.push({ label: name.label, lines: [formatDuration(stage.ms)], className });
      } else {
        cells.push({ label: name.label, lines: ["—"], title: stage.problem || "", className: "num missing" });
      }
    }
    cells.push(contributionsCell(turn));
    cells.push({
      label: "Interruptions",
      lines: turn.interruptions.length ? turn.interruptions.map(interruptionText) : ["—"],
      className: "interruptions",
    });
    const missing = turn.missing.map((m) => {
      const label = names.find((n) => n.stage === m.stage)?.label || m.stage;
      return `${label}: ${m.why}`;
    });
    const notes = [...missing, ...turn.notes];
    cells.push({
      label: turn.complete ? "Notes" : "Missing",
      lines: notes.length ? notes : [turn.complete ? "complete" : "—"],
      className: turn.complete ? "notes" : "notes incomplete",
    });
    const classes = [];
    if (!turn.complete) classes.push("incomplete");
    if (turn.in_progress) classes.push("in-progress");
    if (turn.interruptions.some((i) => i.kind === "barge_in")) classes.push("barged");
    return { number: turn.number, className: classes.join(" "), cells };
  });
}

const KIND_WORDS = { service: "service", setting: "setting", bot: "the bot's code", pipeline: "pipeline" };

/** How many of a turn's parts show before "+N more": its largest. */
export const PARTS_SHOWN = 4;

/** One part of the breakdown as the cell shows it: "key ms" on its line; its owner and kind on hover, and for
 * screen readers. */
function contributionPart(c) {
  const kind = KIND_WORDS[c.kind] || String(c.kind || "?");
  const owner = String(c.owner || "").replace(/^config: /, "");
  const who = owner ? `${kind}: ${owner}` : kind;
  const label = c.label || c.key;
  return {
    key: String(c.key),
    ms: formatDuration(c.ms),
    text: `${c.key} ${formatDuration(c.ms)}`,
    who,
    title: `${label} — ${who}`,
    setting: c.kind === "setting",
  };
}

/**
 * The bot's own breakdown of the wait (Pipecat's UserBotLatencyObserver, sent by the bot package), beside the
 * stages the messages give, compact: one short line per part, "key ms", the largest first; its owner and kind
 * on hover (title) and for screen readers; a setting marked as one. Past PARTS_SHOWN parts the rest are behind
 * "+N more". Then their total. Where the breakdown and the stages disagree the server says so among the turn's
 * notes. A turn without one: "—", and why on hover.
 * `lines` are the visible lines in order (every part's, then the total's), for a reader of the plain data.
 * @returns {{label: string, lines: string[], title?: string, className: string, parts?: object[], shown?: number,
 *   more?: string, totals?: string[], totalTitle?: string}}
 */
export function contributionsCell(turn) {
  const given = turn.contributions;
  if (!Array.isArray(given) || given.length === 0) {
    return {
      label: "Contributions",
      lines: ["—"],
      title: "the bot sent no latency breakdown for this turn (Pipecat's UserBotLatencyObserver, through the bot package)",
      className: "contributions missing",
    };
  }
  const msOf = (c) => (typeof c.ms === "number" && Number.isFinite(c.ms) ? c.ms : -1);
  const sorted = given.map((c, i) => ({ c, i })).sort((a, b) => msOf(b.c) - msOf(a.c) || a.i - b.i);
  const parts = sorted.map(({ c }) => contributionPart(c));
  const shown = Math.min(parts.length, PARTS_SHOWN);
  const total = given.reduce((sum, c) => sum + (typeof c.ms === "number" ? c.ms : 0), 0);
  const before = turn.contributions_user_turn_ms;
  const totals = [`total ${formatDuration(total)}`];
  if (typeof before === "number") totals.push(`${formatDuration(total - before)} after release`);
  return {
    label: "Contributions",
    lines: [...parts.map((p) => p.text), ...totals],
    className: "contributions",
    parts,
    shown,
    more: parts.length > shown ? `+${parts.length - shown} more` : "",
    totals,
    totalTitle:
      `${formatDuration(total)} from the user's silence` +
      (typeof before === "number" ? `; ${formatDuration(total - before)} after the turn was released` : ""),
  };
}

/** A part's line: its key and ms; its owner and kind in its title and, for screen readers, in hidden text. */
function partElement(part) {
  const line = document.createElement("span");
  line.className = part.setting ? "line part setting" : "line part";
  line.title = part.title;
  const key = document.createElement("span");
  key.className = "key";
  key.textContent = part.key;
  const ms = document.createElement("span");
  ms.className = "ms";
  ms.textContent = part.ms;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = ` (${part.who})`;
  line.append(key, " ", ms, who);
  return line;
}

/** The contributions cell's content, built with textContent only: owners and keys are the bot's words. */
export function fillContributions(td, cell) {
  td.append(...cell.parts.slice(0, cell.shown).map(partElement));
  if (cell.more) {
    const details = document.createElement("details");
    details.className = "more";
    const summary = document.createElement("summary");
    summary.textContent = cell.more;
    details.append(summary, ...cell.parts.slice(cell.shown).map(partElement));
    td.append(details);
  }
  cell.totals.forEach((text, i) => {
    const line = document.createElement("span");
    line.className = i === 0 ? "line total" : "line total after";
    line.textContent = text;
    line.title = cell.totalTitle;
    td.append(line);
  });
  td.tabIndex = 0; // focused, each part shows its owner and kind (turns.css), as hovering shows its title
}

/** The column heads, in the rows' order. */
export function headings(payload) {
  return [
    "Turn",
    "Said",
    "Latency",
    ...(payload.stage_names || []).map((n) => n.label),
    "Contributions",
    "Interruptions",
    "Missing / notes",
  ];
}

/** The line above the table: how many turns, complete, interrupted, and by what thresholds. */
export function summaryText(payload) {
  const c = payload.counts || {};
  if (!c.turns) return payload.live ? "No turn yet." : "No turn in this call.";
  const t = payload.thresholds || {};
  const seconds = typeof t.backchannel_seconds === "number" ? formatDuration(t.backchannel_seconds * 1000) : "?";
  return (
    `${c.turns} turn${c.turns === 1 ? "" : "s"}, ${c.complete} with every stage measured; ` +
    `${c.barge_ins} barge-in${c.barge_ins === 1 ? "" : "s"}, ${c.backchannels} backchannel${c.backchannels === 1 ? "" : "s"} ` +
    `(a backchannel: at most ${t.backchannel_words ?? "?"} words of acknowledgement, or under ${seconds} untranscribed).`
  );
}

// --- the page ---------------------------------------------------------------------------------------

function render(section, payload) {
  const table = section.querySelector("table");
  const head = document.createElement("tr");
  for (const text of headings(payload)) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = text;
    head.append(th);
  }
  table.tHead.replaceChildren(head);
  // A "+N more" opened stays open through the next read (every 5 s while live).
  const open = table.tBodies[0].querySelectorAll("tr:has(details.more[open])");
  const opened = new Set([...open].map((tr) => tr.dataset.turn));
  const rows = turnRows(payload).map((row) => {
    const tr = document.createElement("tr");
    if (row.className) tr.className = row.className;
    tr.dataset.turn = String(row.number);
    tr.id = `turn-${row.number}`; // the agent page's slowest turns link here
    for (const cell of row.cells) {
      const td = document.createElement("td");
      td.dataset.label = cell.label;
      if (cell.parts) {
        fillContributions(td, cell);
        if (opened.has(String(row.number))) td.querySelector("details.more")?.setAttribute("open", "");
      } else if (cell.lines.length === 1) {
        td.textContent = cell.lines[0];
      } else {
        for (const line of cell.lines) {
          const span = document.createElement("span");
          span.className = "line";
          span.textContent = line;
          td.append(span);
        }
      }
      if (cell.title) td.title = cell.title;
      if (cell.className) td.className = cell.className;
      tr.append(td);
    }
    return tr;
  });
  table.tBodies[0].replaceChildren(...rows);
  section.querySelector("#turns-status").textContent = summaryText(payload);
  showLinkedTurn(table);
}

/** A link to one turn (`#turn-3`, from the agent page's slowest turns): its row, once it exists, in view and marked. */
function showLinkedTurn(table) {
  const wanted = /^#turn-\d+$/.test(location.hash) ? location.hash.slice(1) : "";
  const row = wanted ? table.querySelector(`tr[id="${wanted}"]`) : null;
  if (!row) return;
  row.classList.add("linked");
  if (table.dataset.shown === wanted) return; // scrolled once: later reads (every 5 s while live) leave it be
  table.dataset.shown = wanted;
  row.scrollIntoView({ block: "start" });
}

function start(section) {
  let timer = null;
  async function refresh() {
    try {
      const response = await fetch(section.dataset.url, { credentials: "same-origin" });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        section.querySelector("#turns-status").textContent = `The turns could not be read: ${body.error || response.status}`;
        return;
      }
      const payload = await response.json();
      render(section, payload);
      if (!payload.live && timer !== null) {
        clearInterval(timer); // an ended call's turns no longer change
        timer = null;
      }
    } catch (error) {
      console.error("turns", error);
    }
  }
  refresh();
  timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, EVERY_MS);
}

if (typeof document !== "undefined") {
  const section = document.getElementById("turns");
  if (section) start(section);
}
