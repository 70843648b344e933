// The call audio's waveform (audio_player.js assembles the player; `p` is the player it makes): both
// tracks' peaks on a canvas (the caller above, the bot below, dead air shaded, the call's clock under
// them), the playhead (or where a drag on it is) over them, and the time it is at beside the Play button.
// The waveform without its playhead is drawn once per size and recording into an offscreen canvas; the
// playhead on it every frame while the sound plays. A wider canvas than the peaks were fetched for asks
// for more of them.
import { mediaClock } from "./audio_format.js";
import { fetchPeaks, position, ready, recording, seekAt, setText } from "./audio_source.js";
import { clockOf, timeTicks } from "./session_view.js";

const MAX_POINTS = 20000; // the peaks API's most

const TRACKS = [
  ["user", "caller", "--user"],
  ["bot", "bot", "--bot"],
];

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

/** Where the waveform puts things, in CSS pixels, for the canvas's width. */
export function geometry(p) {
  const width = p.wave.clientWidth || 600;
  const narrow = width < 560;
  const left = narrow ? 48 : 64;
  const row = narrow ? 38 : 46;
  const top = 4;
  const axis = 18;
  return { width, narrow, left, row, top, axis, plot: Math.max(width - left - 8, 10), height: top + 2 * row + 4 + axis };
}

const color = (css, name) => css.getPropertyValue(name).trim() || "gray";

/** The waveform, the labels, dead air and the axis, drawn once per size and recording into an offscreen canvas. */
function background(p, g, ratio) {
  const answer = recording(p);
  const peaks = p.state.peaks;
  const key = `${g.width}x${g.height}@${ratio}:${answer.origin}:${answer.duration}:${peaks?.requested}:${peaks?.points}:${peaks?.origin}`;
  if (p.cache?.key === key) return p.cache.canvas;
  const canvas = p.cache?.canvas || document.createElement("canvas");
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
  p.cache = { canvas, key };
  return canvas;
}

/** The waveform and the playhead (or where a drag is) on it. */
export function draw(p) {
  const { wave, state } = p;
  if (!ready(p) || wave.closest("[hidden]")) return;
  const g = geometry(p);
  const ratio = window.devicePixelRatio || 1;
  if (wave.style.height !== `${g.height}px`) wave.style.height = `${g.height}px`;
  if (wave.width !== Math.round(g.width * ratio) || wave.height !== Math.round(g.height * ratio)) {
    wave.width = Math.round(g.width * ratio);
    wave.height = Math.round(g.height * ratio);
  }
  const ctx = wave.getContext("2d");
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, wave.width, wave.height);
  ctx.drawImage(background(p, g, ratio), 0, 0);
  // The playhead (or where a drag is).
  const answer = recording(p);
  const at = state.dragAt ?? position(p);
  const px = Math.round(g.left + ((at - answer.origin) / Math.max(answer.duration, 1e-3)) * g.plot) + 0.5;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.strokeStyle = color(getComputedStyle(document.documentElement), "--fg");
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  ctx.moveTo(px, g.top);
  ctx.lineTo(px, g.top + 2 * g.row + 4);
  ctx.stroke();
}

/** Where the playhead (or a drag) is, in words and for assistive technology, and what the Play button does. */
export function renderTime(p) {
  const { wave, state, audio, playButton } = p;
  if (!ready(p)) return;
  const answer = recording(p);
  const at = state.dragAt ?? position(p);
  const offset = Math.max(0, at - answer.origin);
  setText(document.getElementById("audio-time"), `${mediaClock(offset)} / ${mediaClock(answer.duration)}`);
  setText(document.getElementById("audio-clock"), `at ${clockOf(at)}`);
  wave.setAttribute("aria-valuemax", String(Math.round(answer.duration * 10) / 10));
  wave.setAttribute("aria-valuenow", String(Math.round(offset * 10) / 10));
  wave.setAttribute("aria-valuetext", `${mediaClock(offset)} of ${mediaClock(answer.duration)}, ${clockOf(at)}`);
  const playing = !audio.paused || state.pending?.play === true;
  setText(playButton, playing ? "❚❚ Pause" : "▶ Play");
  playButton.setAttribute("aria-label", playing ? "Pause" : "Play");
}

/** Move the playhead (audio_source.js's seekAt) and show it there at once. */
export function seek(p, at, startPlaying) {
  seekAt(p, at, startPlaying);
  draw(p);
  renderTime(p);
}

// Drawn on the next frame, and every frame while the sound plays; `p.whilePlaying(now)` on each of those.
function tick(p, now) {
  p.frame = 0;
  draw(p);
  renderTime(p);
  if (!ready(p) || p.audio.paused) return;
  p.whilePlaying(now);
  p.frame = requestAnimationFrame((next) => tick(p, next));
}

export function drawSoon(p) {
  if (!p.frame) p.frame = requestAnimationFrame((now) => tick(p, now));
}

/** The peaks for as many points as the waveform has device pixels across, then the waveform with them. */
export function loadPeaks(p) {
  const g = geometry(p);
  const requested = Math.min(MAX_POINTS, Math.max(50, Math.round(g.plot * (window.devicePixelRatio || 1))));
  fetchPeaks(p, requested).then((got) => {
    if (got) draw(p);
  });
}

/** The moment (epoch seconds) under a pointer event on the waveform, clamped to the recording. */
export function timeAt(p, event) {
  const g = geometry(p);
  const answer = recording(p);
  const x = event.clientX - p.wave.getBoundingClientRect().left;
  return answer.origin + (Math.min(Math.max(x - g.left, 0), g.plot) / g.plot) * answer.duration;
}

/** A wider canvas than the peaks were fetched for asks for more of them; any new size is drawn again. */
export function watchSize(p) {
  let resized = 0;
  new ResizeObserver(() => {
    drawSoon(p);
    clearTimeout(resized);
    resized = setTimeout(() => {
      const wanted = geometry(p).plot * (window.devicePixelRatio || 1);
      const peaks = p.state.peaks;
      if (ready(p) && peaks && peaks.requested < MAX_POINTS && wanted > peaks.requested * 1.25) loadPeaks(p);
    }, 300);
  }).observe(p.wave);
}
