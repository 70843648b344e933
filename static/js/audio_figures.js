// The call audio's card (audio_player.js assembles the player; `p` is the player it makes): what the
// recording says, for every member who reads the page: why there is none, its size, the figures measured
// on it beside what the bot reported, and the per-turn table (with a ▶ per turn for listeners). The
// template leaves the player out for members whose role may not listen: then the card says which role may.
//
// Everything the server sent is written with textContent.
import { audioFacts, bytesText, mediaClock, turnRows } from "./audio_format.js";
import { ready, setText } from "./audio_source.js";
import { playTurn } from "./audio_sync.js";

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** The card for the last GET audio/ answer; true when the player is shown (its drawing is the caller's). */
export function renderCard(p) {
  const { state, audio } = p;
  const answer = state.answer;
  const status = $("audio-status");
  const player = $("audio-player");
  const figures = $("audio-figures");
  const listen = $("audio-listen");
  if (!answer.recorded) {
    status.hidden = false;
    setText(status, `No recording: ${answer.why || "none was stored"}.`);
    if (player) player.hidden = true;
    if (audio && !audio.paused) audio.pause(); // erased meanwhile
    figures.hidden = true;
    listen.hidden = true;
    setText($("audio-size"), "");
    return false;
  }
  status.hidden = true;
  const size = `${mediaClock(answer.duration)} recorded · ${answer.chunks} chunk${answer.chunks === 1 ? "" : "s"} · ${bytesText(answer.stored_bytes)}${answer.live ? " · live" : ""}`;
  setText($("audio-size"), size);
  renderFigures(p, answer);
  figures.hidden = false;
  listen.hidden = answer.listen === true;
  setText(listen, answer.listen ? "" : `Listening needs the ${answer.listen_role} role.`);
  if (!player) return false;
  player.hidden = !ready(p);
  if (!ready(p)) {
    if (audio && !audio.paused) audio.pause();
    return false;
  }
  return true;
}

function renderFigures(p, answer) {
  const facts = audioFacts(answer).map((fact) => {
    const box = el("div");
    const dd = el("dd", "", fact.value);
    dd.dataset.fact = fact.key;
    if (fact.hint) dd.append(el("small", "muted", fact.hint));
    const dt = el("dt", "", fact.label);
    if (fact.title) dt.title = fact.title;
    box.append(dt, dd);
    return box;
  });
  $("audio-facts").replaceChildren(...facts);
  const summary = answer.summary || {};
  const turns = summary.turns ?? 0;
  const over = summary.bot_over_caller ? `, less the ${summary.bot_over_caller} the bot began over the caller` : "";
  setText(
    $("audio-facts-hint"),
    `Voice to voice: from the caller's last sound to the bot's first, over the ${turns} repl${turns === 1 ? "y" : "ies"} found in the recording${over}. ` +
      `Reported: the bot's own turn latency, for the ${summary.matched_turns ?? 0} turns found in both. Difference: audio minus reported.`,
  );
  const rows = turnRows(answer.comparison).map((row) => {
    const tr = el("tr");
    if (row.over) tr.classList.add("over");
    if (!row.found) tr.classList.add("missing");
    const th = el("th");
    th.scope = "row";
    if (ready(p) && p.on.turnStart && typeof row.index === "number") {
      const button = el("button", "link", `▶ ${row.turn}`);
      button.type = "button";
      button.title = `Play turn ${row.turn} from just before the caller stopped`;
      button.addEventListener("click", () => playTurn(p, row.index));
      th.append(button);
    } else {
      th.textContent = row.turn;
    }
    tr.append(th, el("td", "num", row.reported), el("td", "num", row.audio), el("td", "num", row.difference));
    if (!row.found) tr.cells[2].title = "No reply in the recording within 1.5 s of when the bot reported it began";
    return tr;
  });
  $("audio-turns").replaceChildren(...rows);
  $("audio-turns-none").hidden = rows.length > 0;
}
