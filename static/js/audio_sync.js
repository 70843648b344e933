// The call audio and the session page's cursor (audio_player.js assembles the player; `p` is the player
// it makes). The page owns the cursor, which the timeline, the transcript (session.js marks the line at
// it), the charts and the log point at:
//
// - while the audio plays, the player reports where it is (`on.follow`, ten times a second), and when it
//   stops or is moved by hand (a click, a drag or a key on the waveform, a turn's ▶);
// - a cursor placed elsewhere moves the playhead (`seekTo`); a transcript line also starts playing, a
//   caller's line from the start of the words it transcribes. A moment outside the recording is said so.
import { note, position, ready, recording } from "./audio_source.js";
import { drawSoon, seek, timeAt } from "./audio_wave.js";
import { clockOf } from "./session_view.js";

const FOLLOW_MS = 100; // the cursor follows the playhead ten times a second
const FOLLOW_EPSILON = 0.05; // seconds: a playhead this near the cursor leaves it where it is
const OUTSIDE_SLACK = 0.5; // seconds: a moment this near the recording's ends is in it
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

/** The page's cursor goes where the playhead is, unless it is there already (`force`: even so). */
export function report(p, force) {
  if (!ready(p) || !p.state.source || p.state.pending) return;
  const at = position(p);
  if (!force && p.lastAt !== null && Math.abs(at - p.lastAt) < FOLLOW_EPSILON) return;
  p.lastAt = at;
  p.on.follow(at);
}

/** A frame while the sound plays (audio_wave.js's): the cursor follows, ten times a second. */
export function followPlayhead(p, now) {
  if (now - p.lastFollow >= FOLLOW_MS) {
    p.lastFollow = now;
    report(p, false);
  }
}

/** The player moved the playhead to `at` itself: the page's cursor goes there too, within the recording. */
function seekAndTell(p, at, startPlaying) {
  const answer = recording(p);
  p.lastAt = at;
  seek(p, at, startPlaying);
  p.on.follow(Math.min(Math.max(at, answer.origin), answer.origin + answer.duration));
}

/** A turn's ▶ in the figures' table: play from just before the caller stopped. */
export function playTurn(p, index) {
  const stopped = p.on.turnStart(index);
  if (typeof stopped !== "number") return;
  note("");
  seekAndTell(p, stopped - TURN_LEAD, true);
}

/**
 * The page's cursor moved (not by the player): the playhead goes there; `play` starts it (a transcript line;
 * a caller's line from the start of the words it transcribes: callerSpeechStart).
 * A moment outside the recording is said so, and the playhead goes to its nearest end.
 */
export function seekTo(p, at, { play: startPlaying = false, role } = {}) {
  if (!ready(p) || typeof at !== "number") return;
  const answer = recording(p);
  // A caller's line plays their words, which came before the line did.
  if (role === "user") at = callerSpeechStart(answer.analysis?.speech?.user, at);
  const end = answer.origin + answer.duration;
  p.lastAt = at;
  if (at < answer.origin - OUTSIDE_SLACK || at > end + OUTSIDE_SLACK) {
    note(`${clockOf(at)} is outside the recording (${clockOf(answer.origin)} – ${clockOf(end)}${answer.live ? ", so far" : ""}).`);
    seek(p, at, startPlaying && at < answer.origin);
    return;
  }
  note("");
  seek(p, at, startPlaying);
}

/** Seeking on the waveform by hand: a click or a drag (drawn as it goes), or a key; the cursor goes along. */
export function listenWave(p) {
  const { wave, state } = p;
  let press = false;
  wave.addEventListener("pointerdown", (event) => {
    if (!ready(p) || event.button !== 0) return;
    press = true;
    wave.setPointerCapture(event.pointerId);
    state.dragAt = timeAt(p, event);
    drawSoon(p);
  });
  wave.addEventListener("pointermove", (event) => {
    if (!press) return;
    state.dragAt = timeAt(p, event);
    drawSoon(p);
  });
  wave.addEventListener("pointerup", (event) => {
    if (!press) return;
    press = false;
    const at = timeAt(p, event);
    state.dragAt = null;
    note("");
    p.lastAt = at;
    seek(p, at, false);
    p.on.follow(at);
  });
  wave.addEventListener("pointercancel", () => {
    press = false;
    state.dragAt = null;
    drawSoon(p);
  });
  wave.addEventListener("keydown", (event) => onKey(p, event));
}

function onKey(p, event) {
  if (!ready(p)) return;
  const answer = recording(p);
  const moves = {
    ArrowLeft: () => position(p) - KEY_STEP,
    ArrowRight: () => position(p) + KEY_STEP,
    Home: () => answer.origin,
    End: () => answer.origin + answer.duration,
  };
  if (event.key === " " || event.key === "k") {
    event.preventDefault();
    p.playButton.click();
  } else if (moves[event.key]) {
    event.preventDefault();
    seekAndTell(p, moves[event.key](), false);
  }
}
