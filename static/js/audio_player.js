// The session page's call audio: what the recording says (GET /api/sessions/<id>/audio/) for every member
// who reads the page, and for listeners a player: the call as stereo WAV (audio.wav: the caller left, the
// bot right) in an <audio> element, both tracks' waveforms (audio/peaks/) on a canvas to seek on, and a
// download link. The template leaves the player out for members whose role may not listen: then nothing
// here asks for the sound.
//
// This module assembles the player from its parts, each holding its own rules:
// audio_source.js (the sound and the data: polling the figures, the peaks, the <audio> element's source,
// the audit's "listened"), audio_wave.js (the waveform, the playhead and the time on it), audio_sync.js
// (the page's cursor: it follows the playhead, and a transcript line or a turn's ▶ plays from there),
// audio_figures.js (the card's figures and per-turn table) and audio_format.js (their words, pure).
// They share one object, the player `p`, made here.
import { renderCard } from "./audio_figures.js";
import { listenSource, note, play, poll, position, ready, recording, updateSource } from "./audio_source.js";
import { followPlayhead, listenWave, report, seekTo } from "./audio_sync.js";
import { draw, drawSoon, geometry, loadPeaks, renderTime, seek, watchSize } from "./audio_wave.js";

export { audioFacts, bytesText, mediaClock, secondsText, signedSeconds, turnRows } from "./audio_format.js";
export { callerSpeechStart } from "./audio_sync.js";
export { binPeaks } from "./audio_wave.js";

function createPlayer(on) {
  const $ = (id) => document.getElementById(id);
  const audio = $("audio"); // absent unless this member may listen
  const wave = $("audio-wave");
  const urls = on.urls || {};
  return {
    on,
    urls,
    audio,
    wave,
    playButton: $("audio-play"),
    mayPlay: Boolean(audio && wave && urls.wav_url && urls.peaks_url),
    state: {
      answer: null, // the last GET audio/ answer
      peaks: null, // {origin, points, seconds_per_point, user, bot, requested}
      polling: false,
      sawLive: false, // the session was live while this page had it: one more look after it ends
      lastLook: false,
      source: null, // {version, origin}: what the <audio> element holds
      pending: null, // {at, play}: a seek (epoch seconds) waiting for the source's metadata
      dragAt: null, // where a drag on the waveform is, before it is let go
    },
    peaksAsked: 0, // audio_source.js: the newest peaks request, an older answer is dropped
    played: "no", // audio_source.js: "no", "telling" or "told": whether the server knows this page played the call
    frame: 0, // audio_wave.js: the animation frame asked for
    cache: null, // audio_wave.js: the waveform without its playhead, {canvas, key}
    whilePlaying(now) {
      followPlayhead(this, now); // audio_wave.js: each frame the sound plays
    },
    lastFollow: -Infinity, // audio_sync.js: when the cursor last followed the playhead
    lastAt: null, // audio_sync.js: where the cursor was last put, by the player or the page
  };
}

/** A new GET audio/ answer: the card, and for listeners the peaks (again if the recording grew), the source and the waveform. */
function render(p, before) {
  if (!renderCard(p)) return;
  const answer = p.state.answer;
  const grew = !before?.recorded || before.chunks !== answer.chunks || before.origin !== answer.origin || before.duration !== answer.duration;
  if (grew || !p.state.peaks) loadPeaks(p);
  updateSource(p);
  draw(p);
  renderTime(p);
}

/** The player's events: the <audio> element's, the Play button, the waveform's pointer, keys and size. */
function listen(p) {
  const { audio, state } = p;
  const stopped = () => {
    report(p, false);
    drawSoon(p);
  };
  listenSource(p, { changed: () => drawSoon(p), stopped });
  audio.addEventListener("play", () => drawSoon(p));
  audio.addEventListener("pause", stopped);
  audio.addEventListener("seeked", () => drawSoon(p));
  p.playButton.addEventListener("click", () => {
    if (!ready(p)) return;
    note("");
    if (state.pending) {
      state.pending.play = !state.pending.play;
    } else if (audio.paused) {
      if (audio.ended || (audio.duration && audio.currentTime >= audio.duration - 0.01)) seek(p, recording(p).origin, true);
      else play(p);
    } else {
      audio.pause();
    }
    renderTime(p);
  });
  listenWave(p);
  watchSize(p);
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
  const p = createPlayer(on);
  if (p.mayPlay) listen(p);
  poll(p, (before) => render(p, before));

  return {
    /** The page's cursor moved (not by the player): audio_sync.js's seekTo. */
    seekTo(at, options) {
      seekTo(p, at, options);
    },

    /** For the tests: where the waveform puts things (CSS pixels) and the recording's span. */
    get layout() {
      const answer = recording(p);
      return ready(p) ? { ...geometry(p), ratio: window.devicePixelRatio || 1, origin: answer.origin, duration: answer.duration } : null;
    },

    /** For the tests and the curious: what the player holds. */
    get state() {
      return p.state;
    },
    get position() {
      return ready(p) ? position(p) : null;
    },
  };
}
