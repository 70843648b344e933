"""Call audio: chunks a bot uploads, stored compressed, drawn as peaks, measured with a voice activity detector.

A bot records two tracks, `user` (what its input transport received) and
`bot` (what its output transport played), and uploads them in chunks while
the call runs (docs/PROTOCOL.md, section 4; the bot package's
DashboardAudioRecorder). Each chunk is stamped with the wall-clock time of
its first sample, the clock the session's messages are on, and placed by its
own stamp: a late, lost or resent chunk never shifts another.

At ingest, once per chunk:

- it is stored as FLAC (soundfile: libsndfile), lossless, in the `audio`
  storage (Django's storage API: the file system by default, S3-compatible
  storage through django-storages: settings.py);
- its peaks, the loudest sample of every 20 ms, are kept in its row, so a
  page draws an hour-long call from a few kilobytes (`peaks`);
- webrtcvad (the WebRTC voice activity detector: a few microseconds a
  frame, no model to load) finds where it holds speech; the session's
  analysis (`analyse`) is made again from every chunk's speech.

Playing: `wav_window` renders any stretch of the session as 16-bit stereo
(the caller left, the bot right) on one clock from the earliest chunk,
silence where nothing was sent, so a browser's <audio> element seeks it with
range requests (rtvi_monitor/audio/views.py).
"""

import hashlib
import io
import math
import struct
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import soundfile
import webrtcvad
from django.conf import settings
from django.core.cache import cache
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from rtvi_monitor.core.reducer.turns import percentile  # the messages' latency figures' rule: the same for the audio's

TRACKS = ("user", "bot")
MIN_RATE, MAX_RATE = 8000, 48000
PEAKS_PER_SECOND = 50  # one peak per 20 ms
VAD_RATES = (8000, 16000, 32000, 48000)  # what webrtcvad takes
VAD_FRAME_SECONDS = 0.03
SPEECH_GAP_SECONDS = 0.3  # a pause shorter than this is inside one run of speech
SPEECH_MIN_SECONDS = 0.12  # a run shorter than this is a click, not speech
BOT_TURN_GAP_SECONDS = 1.0  # bot speech after a pause this short, with no caller speech between, is one reply
WAV_HEADER_BYTES = 44
WAV_CHANNELS = 2  # the caller left, the bot right


def storage():
    return storages["audio"]


class BadChunk(ValueError):
    """A chunk that cannot be stored; the message says why (the status goes with it)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# What a chunk holds --------------------------------------------------------------------------------------


def samples_of(body: bytes) -> np.ndarray:
    if len(body) < 2 or len(body) % 2:
        raise BadChunk(
            f"The body is {len(body)} bytes: send 16-bit samples (an even number of bytes, at least one sample).", 422
        )
    return np.frombuffer(body, dtype="<i2")


def encode_flac(samples: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format="FLAC", subtype="PCM_16")
    return out.getvalue()


def decode(data: bytes) -> np.ndarray:
    samples, _ = soundfile.read(io.BytesIO(data), dtype="int16", always_2d=False)
    return samples


def peaks(samples: np.ndarray, rate: int) -> bytes:
    """The loudest sample of every 20 ms, 0-255 (a short last bucket counts as one)."""
    per = max(1, rate // PEAKS_PER_SECOND)
    count = math.ceil(len(samples) / per)
    padded = np.zeros(count * per, dtype=np.int32)
    padded[: len(samples)] = np.abs(samples.astype(np.int32))
    loudest = padded.reshape(count, per).max(axis=1)
    return np.minimum(loudest >> 7, 255).astype(np.uint8).tobytes()


def _for_vad(samples: np.ndarray, rate: int) -> tuple[np.ndarray, int]:
    """The samples at a rate webrtcvad takes: as they are, or linearly resampled to 16 kHz (22.05 and 24 kHz)."""
    if rate in VAD_RATES:
        return samples, rate
    count = int(len(samples) * 16000 / rate)
    positions = np.arange(count) * (rate / 16000)
    return np.interp(positions, np.arange(len(samples)), samples).astype(np.int16), 16000


def speech_runs(samples: np.ndarray, rate: int, start: float, aggressiveness: int | None = None) -> list[list[float]]:
    """Where the chunk holds speech: [[start, end], ...] in epoch seconds, pauses under SPEECH_GAP_SECONDS joined."""
    vad = webrtcvad.Vad(settings.AUDIO_VAD_AGGRESSIVENESS if aggressiveness is None else aggressiveness)
    samples, rate = _for_vad(samples, rate)
    frame = int(rate * VAD_FRAME_SECONDS)
    runs: list[list[float]] = []
    data = samples.tobytes()
    for i in range(len(samples) // frame):
        if not samples[i * frame : (i + 1) * frame].any():
            continue  # digital silence (what a recorder pads with): no need to ask
        if vad.is_speech(data[i * frame * 2 : (i + 1) * frame * 2], rate):
            at = start + i * VAD_FRAME_SECONDS
            if runs and at - runs[-1][1] < SPEECH_GAP_SECONDS:
                runs[-1][1] = at + VAD_FRAME_SECONDS
            else:
                runs.append([at, at + VAD_FRAME_SECONDS])
    return [[round(a, 3), round(b, 3)] for a, b in runs]


# The session's analysis ---------------------------------------------------------------------------------


def merge_runs(runs, gap: float = SPEECH_GAP_SECONDS, shortest: float = SPEECH_MIN_SECONDS) -> list[list[float]]:
    """Runs from every chunk as one sorted list: overlapping or nearly touching runs joined, clicks dropped."""
    merged: list[list[float]] = []
    for a, b in sorted((float(a), float(b)) for a, b in runs if b > a):
        if merged and a - merged[-1][1] < gap:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [run for run in merged if run[1] - run[0] >= shortest]


def _overlap(a: list[float], b: list[float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


@dataclass
class AudioTurn:
    user_stopped_at: float
    bot_started_at: float
    over_caller: bool  # the bot began before the caller had stopped

    @property
    def seconds(self) -> float:
        return self.bot_started_at - self.user_stopped_at


def audio_turns(user: list[list[float]], bot: list[list[float]]) -> list[AudioTurn]:
    """Each reply: a run of bot speech with caller speech since the bot last spoke, and when the caller stopped.

    Voice to voice is the caller's last speech ending before the bot's first sound; a bot that starts
    while the caller is still speaking is a turn `over_caller`, measured to the end of that speech
    (negative). Bot speech resumed after a pause under BOT_TURN_GAP_SECONDS is the same reply unless the
    caller began speaking in that pause (a barge-in that began while the bot spoke is not a new question:
    `analyse` counts it as a barge-in).
    """
    # Runs are merged (sorted, apart): starts and ends both rise, so each question is two bisections, and an
    # hour's call (thousands of runs) costs what a minute's does per run.
    starts, ends = [u[0] for u in user], [u[1] for u in user]
    turns, last_bot_end = [], -math.inf
    for run in bot:
        before = bisect_left(starts, run[0])  # user[:before] began before this bot run
        since = bisect_right(ends, last_bot_end)  # user[since:] ended after the bot last spoke
        if since < before:  # the caller spoke since the bot last did
            caller = user[before - 1]
            began_since = caller[0] >= last_bot_end
            if began_since or run[0] - last_bot_end >= BOT_TURN_GAP_SECONDS:
                turns.append(AudioTurn(caller[1], run[0], over_caller=caller[1] > run[0]))
        last_bot_end = max(last_bot_end, run[1])
    return turns


def analyse(user_runs, bot_runs, dead_air: float | None = None) -> dict:
    """What the audio says of the call: each turn's voice-to-voice seconds, talk-over, barge-ins, dead air.

    - turns: (audio_turns) caller stopped -> bot audio started, per reply; `over_caller` when the bot
      began while the caller still spoke;
    - talk_over_seconds: both speaking at once, in all;
    - barge_ins: caller speech that began while the bot spoke, and how long the bot went on over it;
    - dead_air: silences of both longer than AUDIO_DEAD_AIR_SECONDS between the first and last speech.
    """
    dead_air = settings.AUDIO_DEAD_AIR_SECONDS if dead_air is None else dead_air
    user, bot = merge_runs(user_runs), merge_runs(bot_runs)
    turns = audio_turns(user, bot)
    talk_over, i, j = 0.0, 0, 0
    while i < len(user) and j < len(bot):  # both sorted and apart: one sweep
        talk_over += _overlap(user[i], bot[j])
        if user[i][1] < bot[j][1]:
            i += 1
        else:
            j += 1
    bot_starts = [b[0] for b in bot]
    barge_ins = []
    for u in user:
        k = bisect_left(bot_starts, u[0]) - 1  # the bot run that began last before the caller did
        if k >= 0 and u[0] < bot[k][1]:
            barge_ins.append({"at": round(u[0], 3), "bot_went_on_seconds": round(bot[k][1] - u[0], 3)})
    silences = []
    spoken = merge_runs(user + bot, gap=0.0, shortest=0.0)
    for before, after in pairwise(spoken):
        if after[0] - before[1] >= dead_air:
            silences.append({"at": round(before[1], 3), "seconds": round(after[0] - before[1], 3)})
    latencies = [t.seconds for t in turns if not t.over_caller]
    return {
        "turns": [
            {
                "user_stopped_at": round(t.user_stopped_at, 3),
                "bot_started_at": round(t.bot_started_at, 3),
                "seconds": round(t.seconds, 3),
                "over_caller": t.over_caller,
            }
            for t in turns
        ],
        "voice_to_voice": {
            "p50": _round(percentile(sorted(latencies), 50)),
            "p95": _round(percentile(sorted(latencies), 95)),
            "max": _round(max(latencies) if latencies else None),
        },
        "bot_over_caller": sum(t.over_caller for t in turns),
        "talk_over_seconds": round(talk_over, 3),
        "barge_ins": barge_ins,
        "barge_in_seconds": round(sum(b["bot_went_on_seconds"] for b in barge_ins), 3),
        "dead_air": silences,
        "dead_air_seconds": round(sum(s["seconds"] for s in silences), 3),
        "dead_air_threshold": dead_air,
        "speech": {
            "user": [[round(a, 3), round(b, 3)] for a, b in user],
            "bot": [[round(a, 3), round(b, 3)] for a, b in bot],
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def compare(audio_turns_: list[dict], reported_turns: list[dict], within: float = 1.5) -> list[dict]:
    """Each turn the bot's messages report beside the audio's measure of it: the same reply, found by when the
    bot began (the nearest audio turn within `within` seconds), and the difference (audio minus reported)."""
    starts = [t["bot_started_at"] for t in audio_turns_]
    rows = []
    for turn in reported_turns:
        reported_at, latency_ms = turn.get("bot_started_at"), turn.get("latency_ms")
        if reported_at is None or latency_ms is None:
            continue
        row = {"index": turn.get("index"), "reported_seconds": round(latency_ms / 1000, 3), "audio_seconds": None}
        i = bisect_left(starts, reported_at)
        near = [j for j in (i - 1, i) if 0 <= j < len(starts) and abs(starts[j] - reported_at) <= within]
        if near:
            match = audio_turns_[min(near, key=lambda j: abs(starts[j] - reported_at))]
            row["audio_seconds"] = match["seconds"]
            row["difference_seconds"] = round(match["seconds"] - row["reported_seconds"], 3)
            row["over_caller"] = match["over_caller"]
        rows.append(row)
    return rows


# Storing a chunk ---------------------------------------------------------------------------------------


def chunk_path(session, track: str, index: int, digest: str) -> str:
    """Named by its content too: a file left by an upload that failed half-way is never mistaken for another."""
    return f"{session.organization_id}/{session.pk}/{track}/{index:06d}-{digest[:16]}.flac"


def store_chunk(session, track: str, index: int, rate: int, start: float, body: bytes) -> tuple[dict, bool]:
    """Store one chunk (idempotent): (what was stored, whether it is new). Raises BadChunk."""
    from rtvi_monitor.audio.models import AudioChunk, SessionAudio

    samples = samples_of(body)
    digest = hashlib.sha256(body).hexdigest()
    stored = {"track": track, "index": index, "samples": len(samples), "seconds": round(len(samples) / rate, 3)}
    path = chunk_path(session, track, index, digest)
    data = encode_flac(samples, rate)
    runs = speech_runs(samples, rate, start)
    # The session's analysis is not made here: it needs every chunk's speech, so a long call would read all
    # of them again for each chunk (quadratic in its length) and rewrite the whole analysis inside the write
    # transaction. `current_analysis` makes it when somebody reads it, and `settle` when the call ends.
    name = storage().save(path, ContentFile(data))  # before the row: a row never names a file that is not there
    end = start + len(samples) / rate
    try:
        with transaction.atomic():
            AudioChunk.objects.create(
                session=session,
                track=track,
                index=index,
                start=start,
                samples=len(samples),
                sha256=digest,
                path=name,
                size=len(data),
                peaks=peaks(samples, rate),
                speech=runs,
            )
            grown = SessionAudio.objects.filter(session=session, sample_rate=rate).update(
                origin=Least(F("origin"), start),
                end=Greatest(F("end"), end),
                chunks=F("chunks") + 1,
                stored_bytes=F("stored_bytes") + len(data),
                seconds=F("seconds") + len(samples) / rate,
                updated_at=timezone.now(),
            )
            if not grown:  # the session's first chunk, or one at another rate than its first
                audio, made = SessionAudio.objects.get_or_create(
                    session=session,
                    defaults={
                        "sample_rate": rate,
                        "origin": start,
                        "end": end,
                        "chunks": 1,
                        "stored_bytes": len(data),
                        "seconds": len(samples) / rate,
                    },
                )
                if not made:
                    raise BadChunk(
                        f"This session's audio is {audio.sample_rate} Hz; chunk {index} says {rate} Hz. "
                        "Send every chunk at one rate.",
                        422,
                    )
    except IntegrityError:  # a concurrent upload of the same chunk got there first
        storage().delete(name)
        existing = AudioChunk.objects.filter(session=session, track=track, index=index).first()
        if existing is not None and existing.sha256 == digest:
            return stored, False
        raise BadChunk(
            f"Chunk {index} of the {track} track is stored with other content; nothing changed.", 409
        ) from None
    except BaseException:
        storage().delete(name)
        raise
    if session.status == session.Status.ENDED:  # a chunk that came after the call ended
        settle(session, list((session.state or {}).get("turns") or []))
    return stored, True


def analysis_of(session) -> dict:
    runs = {track: [] for track in TRACKS}
    for track, speech in session.audio_chunks.values_list("track", "speech"):
        runs[track].extend(speech)
    return analyse(runs["user"], runs["bot"])


ANALYSIS_CACHE_SECONDS = 60


def analysis_cache_key(session_pk: int, chunks: int) -> str:
    """Where a live recording's analysis is cached, per number of chunks stored (privacy/contents.py erases it)."""
    return f"audio-analysis:{session_pk}:{chunks}"


def current_analysis(recording, session) -> dict:
    """The recording's analysis as of the chunks stored now: the stored one once the call has ended and been
    settled; while it is live, made from every chunk's speech, once per number of chunks stored (a page polls
    a live call's figures every few seconds; a chunk comes every few seconds per track)."""
    if session.status == session.Status.ENDED and recording.comparison:
        return recording.analysis
    key = analysis_cache_key(recording.pk, recording.chunks)
    analysis = cache.get(key)
    if analysis is None:
        analysis = analysis_of(session)
        cache.set(key, analysis, ANALYSIS_CACHE_SECONDS)
    return analysis


def stored_runs(session) -> dict:
    """Each track's stored chunk indices as [first, last] runs (for a bot that resumes)."""
    from rtvi_dashboard.wire import ack_ranges

    indices = {track: [] for track in TRACKS}
    for track, index in session.audio_chunks.values_list("track", "index"):
        indices[track].append(index)
    return {track: ack_ranges(values) for track, values in indices.items()}


def delete_audio(session_pks) -> int:
    """Delete these sessions' recordings, files and rows (the files once the transaction commits): chunks gone."""
    from rtvi_monitor.audio.models import AudioChunk, SessionAudio

    chunks = AudioChunk.objects.filter(session_id__in=list(session_pks))
    paths = list(chunks.values_list("path", flat=True))
    if not paths:
        return 0
    count = chunks.delete()[0]
    SessionAudio.objects.filter(session_id__in=list(session_pks)).delete()
    transaction.on_commit(lambda: delete_files(paths))
    return count


def delete_files(paths) -> None:
    store = storage()
    for path in paths:
        store.delete(path)


# Serving ------------------------------------------------------------------------------------------------


def wav_header(frames: int, rate: int) -> bytes:
    data = frames * WAV_CHANNELS * 2
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, WAV_CHANNELS, rate, rate * WAV_CHANNELS * 2, WAV_CHANNELS * 2, 16)
        + b"data"
        + struct.pack("<I", data)
    )


@dataclass(frozen=True)
class PlacedChunk:
    track: str
    first: int  # its first sample's frame on the session's audio clock
    samples: int
    path: str


def placed_chunks(audio, chunks) -> list[PlacedChunk]:
    """Chunks on the recording's clock (frame 0 is the earliest sample), in the order later ones overwrite."""
    rate = audio.sample_rate
    return [
        PlacedChunk(c.track, round((c.start - audio.origin) * rate), c.samples, c.path)
        for c in sorted(chunks, key=lambda c: (c.start, c.index))
    ]


def total_frames(audio) -> int:
    return max(0, round((audio.end - audio.origin) * audio.sample_rate))


def render(placed: list[PlacedChunk], first: int, count: int, read=None) -> np.ndarray:
    """Frames [first, first + count) as interleaved stereo int16: the caller left, the bot right, silence between."""
    read = read or (lambda path: decode(storage().open(path, "rb").read()))
    out = np.zeros((count, WAV_CHANNELS), dtype=np.int16)
    for chunk in placed:
        a, b = max(first, chunk.first), min(first + count, chunk.first + chunk.samples)
        if a >= b:
            continue
        samples = read(chunk.path)
        column = TRACKS.index(chunk.track)
        out[a - first : b - first, column] = samples[a - chunk.first : b - chunk.first]
    return out


def peaks_of(audio, chunks, points: int) -> dict:
    """Each track's peaks over the whole recording in `points` buckets (the loudest in each), 0-255."""
    buckets = max(1, math.ceil((audio.end - audio.origin) * PEAKS_PER_SECOND))
    tracks = {track: np.zeros(buckets, dtype=np.uint8) for track in TRACKS}
    for chunk in sorted(chunks, key=lambda c: (c.start, c.index)):
        values = np.frombuffer(bytes(chunk.peaks), dtype=np.uint8)
        at = round((chunk.start - audio.origin) * PEAKS_PER_SECOND)
        values = values[: max(0, buckets - at)]
        if at < 0 or not len(values):
            continue
        line = tracks[chunk.track]
        line[at : at + len(values)] = np.maximum(line[at : at + len(values)], values)
    points = max(1, min(points, buckets))
    edges = np.linspace(0, buckets, points + 1).astype(int)
    out = {}
    for track, line in tracks.items():
        out[track] = [int(line[a:b].max()) if b > a else 0 for a, b in pairwise(edges)]
    return {"points": points, "seconds_per_point": round((audio.end - audio.origin) / points, 6), **out}


# Figures: the pages, the Overview and /metrics -----------------------------------------------------------


def summary(recording, comparison: list[dict], analysis: dict | None = None) -> dict:
    """The recording's figures beside the messages': medians of the same turns, and of their differences."""
    analysis = (recording.analysis if analysis is None else analysis) or {}
    reported = [row["reported_seconds"] for row in comparison if row.get("audio_seconds") is not None]
    differences = [row["difference_seconds"] for row in comparison if row.get("difference_seconds") is not None]
    return {
        "voice_to_voice_p50": (analysis.get("voice_to_voice") or {}).get("p50"),
        "reported_p50": _round(percentile(sorted(reported), 50)),
        "difference_p50": _round(percentile(sorted(differences), 50)),
        "turns": len(analysis.get("turns") or []),
        "matched_turns": len(differences),
        "bot_over_caller": analysis.get("bot_over_caller", 0),
        "talk_over_seconds": analysis.get("talk_over_seconds", 0.0),
        "barge_ins": len(analysis.get("barge_ins") or []),
        "barge_in_seconds": analysis.get("barge_in_seconds", 0.0),
        "dead_air_seconds": analysis.get("dead_air_seconds", 0.0),
    }


def settle(session, reported: list[dict]) -> None:
    """An ended session's recording compared, once its turns are frozen: stored for the agent pages and metrics."""
    from rtvi_monitor.audio.models import SessionAudio
    from rtvi_monitor.sessions import metrics

    with transaction.atomic():
        recording = SessionAudio.objects.select_for_update().filter(session=session).first()
        if recording is None:
            return
        first = not recording.comparison
        recording.analysis = analysis_of(session)  # from every chunk stored, whatever raced before
        recording.comparison = compare(recording.analysis.get("turns", []), reported)
        figures = summary(recording, recording.comparison)
        recording.voice_to_voice_p50 = figures["voice_to_voice_p50"]
        recording.reported_p50 = figures["reported_p50"]
        recording.difference_p50 = figures["difference_p50"]
        recording.save()
    if first:
        metrics.record_audio_session(session, recording)


def settle_ended(sender, session, **kwargs) -> None:
    """A session ended (rtvi_monitor.live.signals.session_ended, which rtvi_monitor/apps.py connects this to; on the
    lifecycle's thread, once per ended session): its recording, if it has one, compared with its frozen turns. One
    indexed look-up for a session without one."""
    from rtvi_monitor.audio.models import SessionAudio

    if not SessionAudio.objects.filter(session_id=session.pk).exists():
        return
    settle(session, list((session.state or {}).get("turns") or []))
