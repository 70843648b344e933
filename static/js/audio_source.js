// The call audio's sound and data, fetched and decoded (audio_player.js assembles the player from this,
// audio_wave.js, audio_sync.js and audio_figures.js; `p` is the player it makes):
//
// - the recording's figures, GET audio/: every 5 s while the session is live, and once after it ends
//   (for the chunks a bot sends as it hangs up);
// - the peaks the waveform is drawn from, GET audio/peaks/: an older answer than the newest asked is dropped;
// - the call as stereo WAV in the <audio> element, which decodes it. The source is versioned by the
//   recording's chunks and origin: a recording that grew gets a new source, the playhead kept (a WAV's
//   length is in its header). While it plays, the new source waits until the old one runs out (or a seek
//   goes past it), so that the sound is not cut every 5 s. A seek that needs a source's metadata waits
//   for it (`state.pending`);
// - the audit log's "listened": the first time the sound plays on this page, a POST to audio/played/
//   (again on a later play if it failed). Opening the page, the preload of the WAV's header and seeking
//   are not listening, and say nothing.
//
// One clock: the recording's frame 0 is `origin`, epoch seconds on the clock of the messages, so the
// playhead is at origin + the audio's currentTime.

const POLL_MS = 5000;
const RETRY_MS = 15000;

const $ = (id) => document.getElementById(id);

export function setText(node, text) {
  if (node && node.textContent !== text) node.textContent = text;
}

/** The player's one line of news: why it did not play, what a seek could not reach; "" clears it. */
export function note(text) {
  setText($("audio-note"), text);
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

// --- positions, on the call's clock (epoch seconds) ---

/** The last GET audio/ answer if it has a recording, else null. */
export const recording = (p) => (p.state.answer?.recorded ? p.state.answer : null);

/** Whether this member may listen to a recording there is: then the player is shown. */
export const ready = (p) => p.mayPlay && recording(p) !== null && recording(p).listen === true;

/** Where the playhead is: a seek on its way, else the element's. */
export function position(p) {
  const { state } = p;
  if (state.pending) return state.pending.at;
  if (!state.source) return recording(p)?.origin ?? 0;
  return state.source.origin + (p.audio.currentTime || 0);
}

const sourceVersion = (p) => `${recording(p).chunks}-${recording(p).origin}`;
const stale = (p) => p.state.source !== null && p.state.source.version !== sourceVersion(p);

function loadSource(p, keep) {
  const { state, audio } = p;
  const answer = recording(p);
  state.pending = keep ?? state.pending ?? (state.source ? { at: position(p), play: !audio.paused } : null);
  state.source = { version: sourceVersion(p), origin: answer.origin };
  audio.src = `${p.urls.wav_url}?v=${encodeURIComponent(answer.chunks)}`;
}

/** A source for the recording as it is now: at once unless it is playing (then when the old one runs out). */
export function updateSource(p) {
  if (!p.state.source) loadSource(p, null);
  else if (stale(p) && p.audio.paused && !p.state.pending) loadSource(p, null);
}

export function play(p) {
  const promise = p.audio.play();
  promise?.catch((error) => {
    if (error.name === "AbortError") return; // a new source or a pause came first
    note(`The browser did not play it (${error.message}); press Play.`);
  });
}

/** Move the playhead to `at` (epoch seconds), clamped to the recording; play from there if asked. */
export function seekAt(p, at, startPlaying) {
  const { state, audio } = p;
  const answer = recording(p);
  const end = answer.origin + answer.duration;
  const target = Math.min(Math.max(at, answer.origin), end);
  const resume = startPlaying || (state.pending ? state.pending.play : !audio.paused);
  const offset = target - (state.source?.origin ?? answer.origin);
  // The source in the element has its metadata: it plays the moment unless the moment is past its end
  // (or before its start) and a newer source has it.
  const loaded = state.source !== null && !state.pending && audio.readyState >= 1;
  if (loaded && ((offset >= 0 && offset <= audio.duration + 1e-3) || !stale(p))) {
    audio.currentTime = Math.min(Math.max(offset, 0), audio.duration);
    if (resume && audio.paused) play(p);
  } else {
    // Once the source (a newer one if need be) has its metadata: loadedmetadata.
    state.pending = { at: target, play: resume };
    if (!state.source || loaded) loadSource(p, state.pending);
  }
}

/**
 * The element's events that are the source's: a seek waiting for metadata, the first play (the audit),
 * a call that went on past what the source holds, an error. `changed`: draw what the source did;
 * `stopped`: it played to the end of the call.
 */
export function listenSource(p, { changed, stopped }) {
  const { state, audio } = p;
  audio.addEventListener("loadedmetadata", () => {
    const wanted = state.pending;
    state.pending = null;
    if (wanted) {
      audio.currentTime = Math.min(Math.max(wanted.at - state.source.origin, 0), audio.duration);
      if (wanted.play) play(p);
    }
    changed();
  });
  audio.addEventListener("playing", () => tellPlayed(p));
  audio.addEventListener("ended", () => {
    if (recording(p) && stale(p)) {
      // The call went on past what this source holds: the rest, from here.
      loadSource(p, { at: position(p), play: true });
      return;
    }
    stopped();
  });
  audio.addEventListener("error", () => {
    state.pending = null; // no metadata is coming
    if (audio.error) note(`Could not play the recording (${audio.error.message || `error ${audio.error.code}`}).`);
  });
}

/** The sound is playing: the first time on this page, the audit log is told (again on a later play if it failed). */
function tellPlayed(p) {
  if (p.played !== "no" || !p.urls.played_url) return;
  p.played = "telling";
  const token = $("audio-player")?.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
  postJson(p.urls.played_url, token).then(
    () => {
      p.played = "told";
    },
    () => {
      p.played = "no";
    },
  );
}

// --- the data ---

/** The waveform's peaks, `requested` points of them; true once they are in `state.peaks` (an older answer is dropped). */
export async function fetchPeaks(p, requested) {
  const asked = ++p.peaksAsked;
  try {
    const peaks = await getJson(`${p.urls.peaks_url}?points=${requested}`);
    if (asked !== p.peaksAsked) return false;
    p.state.peaks = { ...peaks, requested };
    return true;
  } catch (error) {
    if (asked === p.peaksAsked) note(`Could not load the waveform (${error.message}).`);
    return false;
  }
}

/** GET audio/, then `render(before)` with the answer in `state.answer`; again while the session is live. */
export async function poll(p, render) {
  const { state, on } = p;
  const again = () => poll(p, render);
  if (document.hidden && state.answer) {
    setTimeout(again, POLL_MS); // nobody is looking: ask again later
    return;
  }
  let answer;
  try {
    answer = await getJson(p.urls.url);
  } catch (error) {
    setText($("audio-status"), `Could not load the recording (${error.message}); trying again.`);
    $("audio-status").hidden = false;
    setTimeout(again, RETRY_MS);
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
    setTimeout(again, POLL_MS);
  } else {
    state.polling = false;
  }
}
