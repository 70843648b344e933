// The session page's call audio: what the recording says (GET /api/sessions/<id>/audio/) for every member
// who reads the page, and for listeners a player: the call as stereo WAV (audio.wav: the caller left, the
// bot right) in an <audio> element, both tracks' waveforms (audio/peaks/) on a canvas to seek on, and a
// download link. The template leaves the player out for members whose role may not listen: then nothing
// here asks for the sound.
//
// One clock: the recording's frame 0 is `origin`, epoch seconds on the clock of the messages, so a moment
// of the page (a transcript line, the timeline's cursor) is origin + the audio's currentTime. The page
// owns the cursor: while the audio plays the player reports where it is (`follow`, ten times a second),
// and a cursor placed elsewhere moves the playhead (`seekTo`; a transcript line also starts playing).
//
// Live calls: the figures are fetched every 5 s while the session is live (and once after it ends, for
// the chunks a bot sends as it hangs up). A recording that grew gets its peaks again and a new source,
// the playhead kept: a WAV's length is in its header. While it plays, the new source waits until the
// old one runs out (or a seek goes past it), so that the sound is not cut every 5 s.
//
// The audit log's "listened": the first time the sound plays on this page, the player POSTs to
// audio/played/ (the server keeps one entry per listener and session an hour). Opening the page, the
// preload of the WAV's header and seeking are not listening, and say nothing.
//
// Everything the server sent is written with textContent.
import { formatDuration } from "./format.js";
import { clockOf, timeTicks } from "./session_view.js";

const POLL_MS = 5000;
const RETRY_MS = 15000;
const FOLLOW_MS = 100; // the cursor follows the playhead ten times a second
const FOLLOW_EPSILON = 0.05; // seconds: a playhead this near the cursor leaves it where it is
const OUTSIDE_SLACK = 0.5; // seconds: a moment this near the recording's ends is in it
const MAX_POINTS = 20000; // the peaks API's most
const KEY_STEP = 5; // seconds an arrow key seeks
const TURN_LEAD = 1.5; // seconds before the caller stopped that a turn's ▶ plays from
const SPOKEN_BEFORE = 4; // seconds: a caller's line arrives at most this long after their words end
const SAME_UTTERANCE = 1; // seconds: speech after a pause this short is the same utterance
const LEAD_IN = 0.05; // seconds of silence played before the caller's first word

/**
 * Where a caller's transcript line is heard: its line arrives when the speech-to-text's final comes,
 * after the words. The start of the caller's speech (the audio's VAD runs, [[start, end], ...]) that
 * ends at most SPOKEN_BEFORE before `at` and begins before it, with the runs before it that pauses
 * under SAME_UTTERANCE join to it; `at` itself when the audio heard no such speech.
 */
export function callerSpeechStart(runs, at) {
  const list = Array.isArray(runs) ? runs : [];
  let i = -1;
  for (let j = 0; j < list.length; j++) {
    const [start, end] = list[j];
    if (start <= at && end >= at - SPOKEN_BEFORE) i = j;
  }
  if (i < 0) return at;
  while (i > 0 && list[i][0] - list[i - 1][1] < SAME_UTTERANCE) i--;
  return list[i][0] - LEAD_IN;
}

const TRACKS = [
  ["user", "caller", "--user"],
  ["bot", "bot", "--bot"],
];

// --- pure helpers (no DOM) ---------------------------------------------------------------

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

/**
 * Peaks (0-255, one every `step` seconds from `start`) as `columns` values over [from, to]: the loudest of
 * the peaks each column covers (a column between two peaks takes the nearer one's), 0 outside them.
 */
export function binPeaks(values, { start, step }, { from, to }, columns) {
  const out = new Uint8Array(Math.max(0, columns));
  if (!values.length || !(step > 0) || !(to > from)) return out;
  const per = (to - from) / columns;
  for (let c = 0; c < columns; c++) {
    const first = Math.floor((from + c * per - start) / step + 1e-9);
    const last = Math.max(first + 1, Math.ceil((from + (c + 1) * per - start) / step - 1e-9)); // one at least
    const a = Math.max(0, first);
    const b = Math.min(values.length, last);
    let loudest = 0;
    for (let i = a; i < b; i++) if (values[i] > loudest) loudest = values[i];
    out[c] = loudest;
  }
  return out;
}

// --- the player -----------------------------------------------------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function setText(node, text) {
  if (node && node.textContent !== text) node.textContent = text;
}

async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  let answer = null;
  try {
    answer = await response.json();
  } catch {
    // an error page, not JSON: the status says enough
  }
  if (!response.ok) throw new Error(answer?.error || `HTTP ${response.status}`);
  return answer;
}

/** POST with the page's CSRF token; resolves when the server took it, rejects otherwise. */
async function postJson(url, token) {
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { Accept: "application/json", "X-CSRFToken": token },
  });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
}

/**
 * @param {{
 *   urls: {url: string, peaks_url?: string, wav_url?: string, played_url?: string},
 *   live: () => boolean | null,
 *   follow: (at: number) => void,
 *   turnStart?: (index: number) => number | null,
 * }} on
 *   urls: the session config's audio URLs (peaks and WAV only for listeners); live: whether the session is
 *   live, as the page knows it (null before it knows); follow: the playhead is at `at` (epoch seconds);
 *   turnStart: when the caller stopped in a turn the bot reported (epoch seconds)
 */
export function createAudioPlayer(on) {
  const $ = (id) => document.getElementById(id);
  const audio = $("audio"); // absent unless this member may listen
  const wave = $("audio-wave");
  const playButton = $("audio-play");
  const urls = on.urls || {};
  const mayPlay = Boolean(audio && wave && urls.wav_url && urls.peaks_url);
  const state = {
    answer: null, // the last GET audio/ answer
    peaks: null, // {origin, points, seconds_per_point, user, bot, requested}
    polling: false,
    sawLive: false, // the session was live while this page had it: one more look after it ends
    lastLook: false,
    source: null, // {version, origin}: what the <audio> element holds
    pending: null, // {at, play}: a seek (epoch seconds) waiting for the source's metadata
    dragAt: null, // where a drag on the waveform is, before it is let go
  };
  let frame = 0;
  let lastFollow = -Infinity;
  let lastAt = null; // where the cursor was last put, by the player or the page
  let peaksAsked = 0; // the newest peaks request: an older answer is dropped
  let cache = null; // the waveform without its playhead: {canvas, key}
  let played = "no"; // "no", "telling" or "told": whether the server knows this page played the call

  // --- positions, on the call's clock (epoch seconds) ---

  const recording = () => (state.answer?.recorded ? state.answer : null);
  const ready = () => mayPlay && recording() !== null && recording().listen === true;
  /** Where the playhead is: a seek on its way, else the element's. */
  function position() {
    if (state.pending) return state.pending.at;
    if (!state.source) return recording()?.origin ?? 0;
    return state.source.origin + (audio.currentTime || 0);
  }
  const sourceVersion = () => `${recording().chunks}-${recording().origin}`;
  const stale = () => state.source !== null && state.source.version !== sourceVersion();

  function loadSource(keep) {
    const answer = recording();
    state.pending = keep ?? state.pending ?? (state.source ? { at: position(), play: !audio.paused } : null);
    state.source = { version: sourceVersion(), origin: answer.origin };
    audio.src = `${urls.wav_url}?v=${encodeURIComponent(answer.chunks)}`;
  }

  function play() {
    const promise = audio.play();
    promise?.catch((error) => {
      if (error.name === "AbortError") return; // a new source or a pause came first
      note(`The browser did not play it (${error.message}); press Play.`);
    });
  }

  /** Move the playhead to `at` (epoch seconds), clamped to the recording; play from there if asked. */
  function seekAt(at, startPlaying) {
    const answer = recording();
    const end = answer.origin + answer.duration;
    const target = Math.min(Math.max(at, answer.origin), end);
    const resume = startPlaying || (state.pending ? state.pending.play : !audio.paused);
    const offset = target - (state.source?.origin ?? answer.origin);
    // The source in the element has its metadata: it plays the moment unless the moment is past its end
    // (or before its start) and a newer source has it.
    const loaded = state.source !== null && !state.pending && audio.readyState >= 1;
    if (loaded && ((offset >= 0 && offset <= audio.duration + 1e-3) || !stale())) {
      audio.currentTime = Math.min(Math.max(offset, 0), audio.duration);
      if (resume && audio.paused) play();
    } else {
      // Once the source (a newer one if need be) has its metadata: loadedmetadata.
      state.pending = { at: target, play: resume };
      if (!state.source || loaded) loadSource(state.pending);
    }
    draw();
    renderTime();
  }

  function note(text) {
    setText($("audio-note"), text);
  }

  // --- the cursor follows the playhead ---

  function report(force) {
    if (!ready() || !state.source || state.pending) return;
    const at = position();
    if (!force && lastAt !== null && Math.abs(at - lastAt) < FOLLOW_EPSILON) return;
    lastAt = at;
    on.follow(at);
  }

  function tick(now) {
    frame = 0;
    draw();
    renderTime();
    if (!ready() || audio.paused) return;
    if (now - lastFollow >= FOLLOW_MS) {
      lastFollow = now;
      report(false);
    }
    frame = requestAnimationFrame(tick);
  }

  const drawSoon = () => {
    if (!frame) frame = requestAnimationFrame(tick);
  };

  // --- the waveform ---

  function geometry() {
    const width = wave.clientWidth || 600;
    const narrow = width < 560;
    const left = narrow ? 48 : 64;
    const row = narrow ? 38 : 46;
    const top = 4;
    const axis = 18;
    return { width, narrow, left, row, top, axis, plot: Math.max(width - left - 8, 10), height: top + 2 * row + 4 + axis };
  }

  const color = (css, name) => css.getPropertyValue(name).trim() || "gray";

  /** The waveform, the labels, dead air and the axis, drawn once per size and recording into an offscreen canvas. */
  function background(g, ratio) {
    const answer = recording();
    const peaks = state.peaks;
    const key = `${g.width}x${g.height}@${ratio}:${answer.origin}:${answer.duration}:${peaks?.requested}:${peaks?.points}:${peaks?.origin}`;
    if (cache?.key === key) return cache.canvas;
    const canvas = cache?.canvas || document.createElement("canvas");
    canvas.width = Math.round(g.width * ratio);
    canvas.height = Math.round(g.height * ratio);
    const ctx = canvas.getContext("2d");
    const css = getComputedStyle(document.documentElement);
    const from = answer.origin;
    const to = answer.origin + Math.max(answer.duration, 1e-3);
    const x = (t) => g.left + ((t - from) / (to - from)) * g.plot;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, g.width, g.height);
    ctx.font = `${g.narrow ? 11 : 12}px system-ui, sans-serif`;
    ctx.textBaseline = "middle";
    const bottom = g.top + 2 * g.row;

    // Dead air: a faint band across both tracks.
    ctx.fillStyle = color(css, "--warn");
    ctx.globalAlpha = 0.16;
    for (const silence of answer.analysis?.dead_air || []) {
      ctx.fillRect(x(silence.at), g.top, Math.max(1, x(silence.at + silence.seconds) - x(silence.at)), 2 * g.row);
    }
    ctx.globalAlpha = 1;

    // The axis: round steps of the call's clock.
    const { ticks } = timeTicks(from, to, Math.floor(g.plot / (g.narrow ? 70 : 90)));
    ctx.strokeStyle = color(css, "--line");
    ctx.fillStyle = color(css, "--muted");
    ctx.lineWidth = 1;
    ctx.textAlign = "center";
    for (const tick of ticks) {
      const tx = Math.round(x(tick.at)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(tx, g.top);
      ctx.lineTo(tx, bottom + 3);
      ctx.stroke();
      ctx.fillText(tick.label, Math.min(Math.max(tx, g.left + 22), g.width - 26), bottom + 4 + g.axis / 2);
    }
    ctx.textAlign = "left";

    // Each track: its label, its middle line, and a bar per device pixel, as loud as the loudest peak under it.
    const columns = Math.max(1, Math.round(g.plot * ratio));
    TRACKS.forEach(([track, label, colour], i) => {
      const middle = g.top + i * g.row + g.row / 2;
      ctx.fillStyle = color(css, "--muted");
      ctx.fillText(label, 4, middle, g.left - 8);
      ctx.strokeStyle = color(css, "--line");
      ctx.beginPath();
      ctx.moveTo(g.left, Math.round(middle) + 0.5);
      ctx.lineTo(g.left + g.plot, Math.round(middle) + 0.5);
      ctx.stroke();
      if (!peaks) return;
      const values = binPeaks(peaks[track] || [], { start: peaks.origin, step: peaks.seconds_per_point }, { from, to }, columns);
      ctx.save();
      ctx.setTransform(1, 0, 0, 1, 0, 0);
      ctx.fillStyle = color(css, colour);
      const half = (g.row / 2 - 3) * ratio;
      const mid = middle * ratio;
      const left = g.left * ratio;
      for (let c = 0; c < columns; c++) {
        if (!values[c]) continue;
        const h = Math.max(1, (values[c] / 255) * half);
        ctx.fillRect(left + c, mid - h, 1, 2 * h);
      }
      ctx.restore();
    });
    cache = { canvas, key };
    return canvas;
  }

  function draw() {
    if (!ready() || wave.closest("[hidden]")) return;
    const g = geometry();
    const ratio = window.devicePixelRatio || 1;
    if (wave.style.height !== `${g.height}px`) wave.style.height = `${g.height}px`;
    if (wave.width !== Math.round(g.width * ratio) || wave.height !== Math.round(g.height * ratio)) {
      wave.width = Math.round(g.width * ratio);
      wave.height = Math.round(g.height * ratio);
    }
    const ctx = wave.getContext("2d");
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, wave.width, wave.height);
    ctx.drawImage(background(g, ratio), 0, 0);
    // The playhead (or where a drag is).
    const answer = recording();
    const at = state.dragAt ?? position();
    const px = Math.round(g.left + ((at - answer.origin) / Math.max(answer.duration, 1e-3)) * g.plot) + 0.5;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.strokeStyle = color(getComputedStyle(document.documentElement), "--fg");
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(px, g.top);
    ctx.lineTo(px, g.top + 2 * g.row + 4);
    ctx.stroke();
  }

  function renderTime() {
    if (!ready()) return;
    const answer = recording();
    const at = state.dragAt ?? position();
    const offset = Math.max(0, at - answer.origin);
    setText($("audio-time"), `${mediaClock(offset)} / ${mediaClock(answer.duration)}`);
    setText($("audio-clock"), `at ${clockOf(at)}`);
    wave.setAttribute("aria-valuemax", String(Math.round(answer.duration * 10) / 10));
    wave.setAttribute("aria-valuenow", String(Math.round(offset * 10) / 10));
    wave.setAttribute("aria-valuetext", `${mediaClock(offset)} of ${mediaClock(answer.duration)}, ${clockOf(at)}`);
    const playing = !audio.paused || state.pending?.play === true;
    setText(playButton, playing ? "❚❚ Pause" : "▶ Play");
    playButton.setAttribute("aria-label", playing ? "Pause" : "Play");
  }

  async function loadPeaks() {
    const asked = ++peaksAsked;
    const g = geometry();
    const requested = Math.min(MAX_POINTS, Math.max(50, Math.round(g.plot * (window.devicePixelRatio || 1))));
    try {
      const peaks = await getJson(`${urls.peaks_url}?points=${requested}`);
      if (asked !== peaksAsked) return;
      state.peaks = { ...peaks, requested };
      draw();
    } catch (error) {
      if (asked === peaksAsked) note(`Could not load the waveform (${error.message}).`);
    }
  }

  // --- the figures ---

  function renderFigures(answer) {
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
      if (ready() && on.turnStart && typeof row.index === "number") {
        const button = el("button", "link", `▶ ${row.turn}`);
        button.type = "button";
        button.title = `Play turn ${row.turn} from just before the caller stopped`;
        button.addEventListener("click", () => playTurn(row.index));
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

  function playTurn(index) {
    const stopped = on.turnStart(index);
    if (typeof stopped !== "number") return;
    const at = stopped - TURN_LEAD;
    lastAt = at;
    note("");
    seekAt(at, true);
    on.follow(Math.min(Math.max(at, recording().origin), recording().origin + recording().duration));
  }

  function render(before) {
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
      return;
    }
    status.hidden = true;
    const size = `${mediaClock(answer.duration)} recorded · ${answer.chunks} chunk${answer.chunks === 1 ? "" : "s"} · ${bytesText(answer.stored_bytes)}${answer.live ? " · live" : ""}`;
    setText($("audio-size"), size);
    renderFigures(answer);
    figures.hidden = false;
    listen.hidden = answer.listen === true;
    setText(listen, answer.listen ? "" : `Listening needs the ${answer.listen_role} role.`);
    if (!player) return;
    player.hidden = !ready();
    if (!ready()) {
      if (audio && !audio.paused) audio.pause();
      return;
    }
    const grew = !before?.recorded || before.chunks !== answer.chunks || before.origin !== answer.origin || before.duration !== answer.duration;
    if (grew || !state.peaks) loadPeaks();
    // A source for the recording as it is now: at once unless it is playing (then when the old one runs out).
    if (!state.source) loadSource(null);
    else if (stale() && audio.paused && !state.pending) loadSource(null);
    draw();
    renderTime();
  }

  // --- polling ---

  async function poll() {
    if (document.hidden && state.answer) {
      setTimeout(poll, POLL_MS); // nobody is looking: ask again later
      return;
    }
    let answer;
    try {
      answer = await getJson(urls.url);
    } catch (error) {
      setText($("audio-status"), `Could not load the recording (${error.message}); trying again.`);
      $("audio-status").hidden = false;
      setTimeout(poll, RETRY_MS);
      return;
    }
    const before = state.answer;
    state.answer = answer;
    render(before);
    const live = on.live() ?? answer.live === true;
    if (live) state.sawLive = true;
    if (live || (state.sawLive && !state.lastLook)) {
      if (!live) state.lastLook = true; // once more after the end: a bot's last chunks come as it hangs up
      state.polling = true;
      setTimeout(poll, POLL_MS);
    } else {
      state.polling = false;
    }
  }

  /** The sound is playing: the first time on this page, the audit log is told (again on a later play if it failed). */
  function tellPlayed() {
    if (played !== "no" || !urls.played_url) return;
    played = "telling";
    const token = $("audio-player")?.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
    postJson(urls.played_url, token).then(
      () => {
        played = "told";
      },
      () => {
        played = "no";
      },
    );
  }

  // --- events ---

  if (mayPlay) {
    audio.addEventListener("loadedmetadata", () => {
      const wanted = state.pending;
      state.pending = null;
      if (wanted) {
        audio.currentTime = Math.min(Math.max(wanted.at - state.source.origin, 0), audio.duration);
        if (wanted.play) play();
      }
      drawSoon();
    });
    audio.addEventListener("play", drawSoon);
    audio.addEventListener("playing", tellPlayed);
    audio.addEventListener("pause", () => {
      report(false);
      drawSoon();
    });
    audio.addEventListener("seeked", drawSoon);
    audio.addEventListener("ended", () => {
      if (recording() && stale()) {
        // The call went on past what this source holds: the rest, from here.
        loadSource({ at: position(), play: true });
        return;
      }
      report(false);
      drawSoon();
    });
    audio.addEventListener("error", () => {
      state.pending = null; // no metadata is coming
      if (audio.error) note(`Could not play the recording (${audio.error.message || `error ${audio.error.code}`}).`);
    });

    playButton.addEventListener("click", () => {
      if (!ready()) return;
      note("");
      if (state.pending) {
        state.pending.play = !state.pending.play;
      } else if (audio.paused) {
        if (audio.ended || (audio.duration && audio.currentTime >= audio.duration - 0.01)) seekAt(recording().origin, true);
        else play();
      } else {
        audio.pause();
      }
      renderTime();
    });

    const timeAt = (event) => {
      const g = geometry();
      const answer = recording();
      const x = event.clientX - wave.getBoundingClientRect().left;
      return answer.origin + (Math.min(Math.max(x - g.left, 0), g.plot) / g.plot) * answer.duration;
    };
    let press = false;
    wave.addEventListener("pointerdown", (event) => {
      if (!ready() || event.button !== 0) return;
      press = true;
      wave.setPointerCapture(event.pointerId);
      state.dragAt = timeAt(event);
      drawSoon();
    });
    wave.addEventListener("pointermove", (event) => {
      if (!press) return;
      state.dragAt = timeAt(event);
      drawSoon();
    });
    wave.addEventListener("pointerup", (event) => {
      if (!press) return;
      press = false;
      const at = timeAt(event);
      state.dragAt = null;
      note("");
      lastAt = at;
      seekAt(at, false);
      on.follow(at);
    });
    wave.addEventListener("pointercancel", () => {
      press = false;
      state.dragAt = null;
      drawSoon();
    });
    wave.addEventListener("keydown", (event) => {
      if (!ready()) return;
      const answer = recording();
      const moves = {
        ArrowLeft: () => position() - KEY_STEP,
        ArrowRight: () => position() + KEY_STEP,
        Home: () => answer.origin,
        End: () => answer.origin + answer.duration,
      };
      if (event.key === " " || event.key === "k") {
        event.preventDefault();
        playButton.click();
      } else if (moves[event.key]) {
        event.preventDefault();
        const at = moves[event.key]();
        lastAt = at;
        seekAt(at, false);
        on.follow(Math.min(Math.max(at, answer.origin), answer.origin + answer.duration));
      }
    });

    // A wider canvas than the peaks were fetched for asks for more of them; any new size is drawn again.
    let resized = 0;
    new ResizeObserver(() => {
      drawSoon();
      clearTimeout(resized);
      resized = setTimeout(() => {
        const wanted = geometry().plot * (window.devicePixelRatio || 1);
        if (ready() && state.peaks && state.peaks.requested < MAX_POINTS && wanted > state.peaks.requested * 1.25) loadPeaks();
      }, 300);
    }).observe(wave);
  }

  poll();

  return {
    /**
     * The page's cursor moved (not by the player): the playhead goes there; `play` starts it (a transcript line;
     * a caller's line from the start of the words it transcribes: callerSpeechStart).
     * A moment outside the recording is said so, and the playhead goes to its nearest end.
     */
    seekTo(at, { play: startPlaying = false, role } = {}) {
      if (!ready() || typeof at !== "number") return;
      const answer = recording();
      // A caller's line plays their words, which came before the line did.
      if (role === "user") at = callerSpeechStart(answer.analysis?.speech?.user, at);
      const end = answer.origin + answer.duration;
      lastAt = at;
      if (at < answer.origin - OUTSIDE_SLACK || at > end + OUTSIDE_SLACK) {
        note(`${clockOf(at)} is outside the recording (${clockOf(answer.origin)} – ${clockOf(end)}${answer.live ? ", so far" : ""}).`);
        seekAt(at, startPlaying && at < answer.origin);
        return;
      }
      note("");
      seekAt(at, startPlaying);
    },

    /** For the tests: where the waveform puts things (CSS pixels) and the recording's span. */
    get layout() {
      const answer = recording();
      return ready() ? { ...geometry(), ratio: window.devicePixelRatio || 1, origin: answer.origin, duration: answer.duration } : null;
    },

    /** For the tests and the curious: what the player holds. */
    get state() {
      return state;
    },
    get position() {
      return ready() ? position() : null;
    },
  };
}
