"""Record a call's audio and upload it to the dashboard while the call runs (docs/PROTOCOL.md, "4. Audio").

    from rtvi_dashboard.audio import AudioUploader

    uploader = AudioUploader("wss://dashboard.example.com", token, session_id, agent_id)
    await uploader.check()                          # optional: True/False once the dashboard answers
    uploader.submit("user", pcm, 16000, start)      # never blocks, never raises
    await uploader.close(timeout=10)                # sends what is left (bounded)

    from rtvi_dashboard.audio import DashboardAudioRecorder   # Pipecat: after transport.output()

Two tracks, `user` (what the caller said, as the input transport received it)
and `bot` (what the bot played, as the output transport sent it), go in
chunks of raw PCM (16-bit little-endian, mono), each with its sample rate and
the wall-clock time of its first sample, by `PUT /ingest/audio/<session>/<track>/<index>`
beside the ingest socket, with the same ingest token. Recording is off
unless both sides ask: the organization turns it on in the dashboard, and the
bot is started with RTVI_DASHBOARD_RECORD_AUDIO=1 (or `record_audio=True`).

AudioUploader: `check()` asks `GET /ingest/audio/<session>/` whether to record
and which chunk indices are stored; each track's indices continue after the
highest stored one, so a bot that restarts mid-call sends only new chunks and
never overwrites what an earlier process stored. `submit()` only queues; one
background task uploads the queue in order, keeping each chunk until the
dashboard answers 200/201 (stored, or already stored with the same content:
uploads are idempotent) or 409 (that index holds other content: logged,
dropped). A network error, a 5xx, a 429 or a 404 (the session is not there
yet: audio can reach the dashboard before the session's first message does)
is retried with exponential back-off, capped at 30 s (Retry-After, when the
dashboard gives one, is the least wait). 401, 403 (recording is off for the
organization or agent) and 410 (the session was erased) stop the recording:
the queue is dropped and nothing more is taken, with a log line that says why.
400/413/422 (a chunk the dashboard can never take) drop that chunk, logged.
Memory is bounded: at most `max_queued_seconds` of audio (both tracks
together; RTVI_DASHBOARD_AUDIO_MAX_QUEUED_SECONDS, 600 by default) waits; past
that the oldest chunks are dropped, and a log line says so.

HTTP is the standard library's (urllib.request, one request at a time in
`asyncio.to_thread`), not aiohttp: this package's only dependency is
`websockets`, and the uploader also serves bots that are not Pipecat bots
(the demo bot, or any bot with the base install). One upload every few
seconds per track needs neither connection pooling nor an async client; a
thread per request in flight (at most one per uploader) is cheap, and each
request has its own timeout.

DashboardAudioRecorder (needs Pipecat; defined on first use so that the base
install never imports it) is Pipecat's AudioBufferProcessor, recording from
the start, cutting both tracks every RTVI_DASHBOARD_AUDIO_CHUNK_SECONDS (10)
seconds and handing them to an uploader. The pipeline integration
(rtvi_dashboard.pipecat) places it right after the output transport.
"""

import asyncio
import json
import logging
import math
import os
import random
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

logger = logging.getLogger("rtvi_dashboard.audio")

TRACKS = ("user", "bot")
RECORD_AUDIO_ENV = "RTVI_DASHBOARD_RECORD_AUDIO"
CHUNK_SECONDS_ENV = "RTVI_DASHBOARD_AUDIO_CHUNK_SECONDS"
MAX_QUEUED_SECONDS_ENV = "RTVI_DASHBOARD_AUDIO_MAX_QUEUED_SECONDS"
# 10 s: half the uploads of 5 s for the same audio (the dashboard's cost is mostly per request: docs/BENCHMARKS.md);
# a live call's player is at most this far behind.
DEFAULT_CHUNK_SECONDS = 10.0
DEFAULT_MAX_QUEUED_SECONDS = 600.0  # ten minutes of audio, both tracks counted
DEFAULT_MAX_CHUNK_BYTES = 4 * 1024 * 1024  # the protocol's default; the dashboard's check says its own
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8000, 48000
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
CLOSING_BACKOFF = 1.0  # once close() waits, retries come at least this often
STOP_STATUSES = {401, 403, 410}  # recording is over for this session
RETRY_STATUSES = {404, 408, 425, 429}  # and every 5xx
_ON, _OFF = {"1", "true", "yes", "on"}, {"", "0", "false", "no", "off"}


def record_audio_from_env(record_audio: bool | None = None) -> bool:
    """Whether to record: the argument, else RTVI_DASHBOARD_RECORD_AUDIO (1/true/yes/on); off by default."""
    if record_audio is not None:
        return bool(record_audio)
    raw = os.environ.get(RECORD_AUDIO_ENV, "").strip().lower()
    if raw in _ON:
        return True
    if raw not in _OFF:
        logger.warning("%s=%r is not 1/true/yes/on or 0/false/no/off; audio is not recorded", RECORD_AUDIO_ENV, raw)
    return False


def _positive_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        logger.warning("%s=%r is not a positive number of seconds; using %s", name, raw, default)
        return default
    return value


def chunk_seconds_from_env(chunk_seconds: float | None = None) -> float:
    """How long each uploaded chunk is: the argument, else RTVI_DASHBOARD_AUDIO_CHUNK_SECONDS, else 10 s."""
    if chunk_seconds is not None:
        if not (math.isfinite(chunk_seconds) and chunk_seconds > 0):
            raise ValueError(f"chunk_seconds must be a positive number, not {chunk_seconds!r}")
        return float(chunk_seconds)
    return _positive_from_env(CHUNK_SECONDS_ENV, DEFAULT_CHUNK_SECONDS)


def http_base(url: str) -> str:
    """The dashboard's HTTP base from the ingest URL a bot is given: ws:// becomes http://, wss:// https://."""
    parts = urlsplit(url.strip())
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme.lower(), parts.scheme.lower())
    if scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not a dashboard URL (ws://, wss://, http:// or https://): {url!r}")
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def stored_runs(runs) -> list[tuple[int, int]]:
    """The valid [first, last] runs of a check's `tracks` entry (anything else is ignored)."""
    valid = []
    for run in runs if isinstance(runs, list) else ():
        if (
            isinstance(run, list | tuple)
            and len(run) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in run)
            and run[0] <= run[1]
        ):
            valid.append((run[0], run[1]))
    return valid


@dataclass
class _Chunk:
    track: str
    number: int  # this uploader's count of the track's chunks, from 0
    pcm: bytes
    sample_rate: int
    start: float

    @property
    def seconds(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate


@dataclass
class Answer:
    """What the dashboard answered one request: its status (0: no answer), Retry-After, and its JSON body."""

    status: int
    retry_after: float | None = None
    body: dict | None = None
    error: str = ""

    @property
    def why(self) -> str:
        body = self.body or {}
        return str(body.get("why") or body.get("error") or body.get("detail") or self.error or f"HTTP {self.status}")


class AudioUploader:
    """Uploads one session's audio chunks to the dashboard, in order, in the background.

    `url` is the dashboard's URL as the bot's DashboardClient is given it
    (RTVI_DASHBOARD_URL: ws://, wss://, or http(s)://). Use it on one event loop.
    """

    def __init__(
        self,
        url: str,
        token: str,
        session_id: str,
        agent_id: str | None = None,
        *,
        max_queued_seconds: float | None = None,
        max_backoff: float = MAX_BACKOFF,
        request_timeout: float = 10.0,
    ):
        self.base = http_base(url)
        self.token = token
        self.session_id = session_id
        self.agent_id = agent_id
        self.max_queued_seconds = (
            max_queued_seconds
            if max_queued_seconds is not None
            else _positive_from_env(MAX_QUEUED_SECONDS_ENV, DEFAULT_MAX_QUEUED_SECONDS)
        )
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        # None until the dashboard has answered a check; then whether it wants this session's audio.
        self.record: bool | None = None
        self.why = ""  # why not, when the dashboard said no (or stopped the recording)
        self.stopped = False  # recording is over: nothing more is taken
        self.max_chunk_bytes = DEFAULT_MAX_CHUNK_BYTES
        self.session_sample_rate: int | None = None
        self.stored: dict[str, list[tuple[int, int]]] = {track: [] for track in TRACKS}
        # Each track's first index for this uploader's chunks: after the highest stored (set by the first check).
        self.base_index: dict[str, int] | None = None
        self.stats = {
            "submitted": 0,
            "sent": 0,  # stored (201) or found already stored (200)
            "duplicates": 0,
            "conflicts": 0,  # 409: dropped
            "rejected": 0,  # 400/413/422: dropped
            "dropped": 0,  # the oldest, over max_queued_seconds
            "retries": 0,
            "seconds_sent": 0.0,
        }
        self.last_error = ""
        self._numbers = dict.fromkeys(TRACKS, 0)
        self._queue: deque[_Chunk] = deque()
        self._queued_seconds = 0.0
        self._in_flight: _Chunk | None = None
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._closing: asyncio.Event | None = None
        self._last_drop_log = -math.inf
        self._dropped_since_log = 0

    # --- the bot's side --------------------------------------------------------

    @property
    def recording(self) -> bool:
        """Whether chunks are still taken (the dashboard has not said no, and recording was not stopped)."""
        return not self.stopped and self.record is not False

    @property
    def pending(self) -> int:
        """Chunks not yet answered for good."""
        return len(self._queue)

    def start(self) -> None:
        """Start uploading in the background (idempotent; needs a running event loop). submit() calls it."""
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()
            self._wake, self._closing = asyncio.Event(), asyncio.Event()
            if self.stopped:
                return
            self._task = loop.create_task(self._run(), name=f"rtvi-dashboard-audio-{self.session_id}")

    def submit(self, track: str, pcm: bytes, sample_rate: int, start_time: float) -> bool:
        """Queue one chunk of a track: raw PCM s16le mono, its sample rate, the Unix time of its first sample.

        It gets the track's next index when it is uploaded (after the
        highest index the dashboard holds for the track). A chunk over the
        dashboard's `max_chunk_bytes` is split. Returns whether it was
        queued; never blocks, never raises.
        """
        try:
            return self._submit(track, bytes(pcm), int(sample_rate), float(start_time))
        except Exception as exc:  # whatever the bot hands us, the bot goes on
            self.last_error = f"audio chunk dropped: {type(exc).__name__}: {exc}"
            logger.warning("Dashboard audio: %s", self.last_error)
            return False

    def _submit(self, track: str, pcm: bytes, sample_rate: int, start: float) -> bool:
        if track not in TRACKS:
            raise ValueError(f"track must be one of {TRACKS}, not {track!r}")
        if not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
            raise ValueError(f"sample rate {sample_rate} is outside {MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz")
        if not self.recording or not pcm:
            return False
        if len(pcm) % 2:
            pcm = pcm[:-1]  # 16-bit samples: a stray byte cannot be a sample
        step = max(2, self.max_chunk_bytes - self.max_chunk_bytes % 2)
        for offset in range(0, len(pcm), step):
            part = pcm[offset : offset + step]
            chunk = _Chunk(track, self._numbers[track], part, sample_rate, start + offset / 2 / sample_rate)
            self._numbers[track] += 1
            self._queue.append(chunk)
            self._queued_seconds += chunk.seconds
            self.stats["submitted"] += 1
        self._bound_queue()
        self._kick()
        return True

    def _kick(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop here: the chunks wait for start() or close()
        self.start()
        self._wake.set()

    def _bound_queue(self) -> None:
        """Drop the oldest chunks (never the one being uploaded) while more than max_queued_seconds wait."""
        dropped, seconds = 0, 0.0
        while self._queued_seconds > self.max_queued_seconds and len(self._queue) > 1:
            position = 1 if self._queue[0] is self._in_flight else 0
            if position >= len(self._queue):
                break
            chunk = self._queue[position]
            del self._queue[position]
            self._queued_seconds -= chunk.seconds
            dropped, seconds = dropped + 1, seconds + chunk.seconds
        if not dropped:
            return
        self.stats["dropped"] += dropped
        self._dropped_since_log += dropped
        now = time.monotonic()
        if now - self._last_drop_log >= 30:  # a line at the first drop, then at most one each 30 s
            logger.warning(
                "Dashboard audio for %s: the dashboard has not taken the chunks in time; dropped the oldest %d "
                "chunk(s) (%.1f s of audio just now, %d in all) to keep at most %.0f s waiting (%s)",
                self.session_id, self._dropped_since_log, seconds, self.stats["dropped"],
                self.max_queued_seconds, MAX_QUEUED_SECONDS_ENV,
            )  # fmt: skip
            self._last_drop_log, self._dropped_since_log = now, 0

    async def check(self) -> bool | None:
        """Ask the dashboard whether to record this session, and what it stores already.

        True or False as the dashboard says (False also when the token is
        refused or the session was erased: then recording is stopped); None
        when there is no answer yet (network, a 5xx, 404 or 429): uploads
        then ask again before they start. The first answer also sets where
        each track's indices continue.
        """
        query = f"?{urlencode({'agent': self.agent_id}, quote_via=quote)}" if self.agent_id else ""
        answer = await self._request("GET", f"{self._session_path()}/{query}")
        if answer.status == 200 and isinstance(answer.body, dict):
            self._learn(answer.body)
            return self.record
        if answer.status in STOP_STATUSES:
            self._stop(answer)
            return False
        self.last_error = answer.why
        return None

    def _learn(self, body: dict) -> None:
        tracks = body.get("tracks") if isinstance(body.get("tracks"), dict) else {}
        self.stored = {track: stored_runs(tracks.get(track)) for track in TRACKS}
        if self.base_index is None:
            self.base_index = {track: max((last + 1 for _, last in self.stored[track]), default=0) for track in TRACKS}
        size = body.get("max_chunk_bytes")
        if isinstance(size, int) and not isinstance(size, bool) and size >= 2:
            self.max_chunk_bytes = size
        rate = body.get("sample_rate")
        self.session_sample_rate = rate if isinstance(rate, int) and not isinstance(rate, bool) else None
        if body.get("record") is True:
            self.record = True
        else:
            self.record = False
            self.why = str(body.get("why") or "the dashboard does not record this session")
            self._drop_queue()
            logger.info("Dashboard audio for %s: not recorded (%s)", self.session_id, self.why)

    def finish(self) -> None:
        """No more chunks are coming (the call ended): upload what is left, retrying sooner, then stop."""
        if self._closing is not None:
            self._closing.set()
            self._wake.set()

    async def close(self, timeout: float = 10.0) -> bool:
        """Try to upload what is left (for at most `timeout` seconds), then stop. True when nothing is left."""
        if self._task is None or self._task.done():
            if self._queue and self.recording:
                self.start()  # chunks queued outside a running loop's task (or after a crash): one more try
        if self._task is not None and not self._task.done():
            self._closing.set()
            self._wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                self._task.cancel()
                raise
            except Exception as exc:
                logger.warning("Dashboard audio for %s: uploader failed: %s", self.session_id, exc)
            if not self._task.done():
                self._task.cancel()
                try:
                    await self._task
                except (asyncio.CancelledError, Exception):
                    pass
        left = len(self._queue)
        if left and self.recording:
            logger.warning(
                "Dashboard audio for %s: %d chunk(s) (%.1f s) not uploaded when the bot closed (%s)",
                self.session_id, left, self._queued_seconds, self.last_error or "no answer in time",
            )  # fmt: skip
        self.stopped = True
        return left == 0

    # --- the background task ------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while not self.stopped:
            if self.record is None:
                if await self.check() is None:
                    failures += 1
                    if self._closing.is_set() and not self._queue:
                        return
                    await self._back_off(failures, None)
                    continue
                failures = 0
                continue
            if self.record is False:
                return
            if not self._queue:
                if self._closing.is_set():
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            chunk = self._in_flight = self._queue[0]
            try:
                index = self.base_index[chunk.track] + chunk.number
                answer = await self._put(chunk, index)
            finally:
                self._in_flight = None
            if answer.status in (200, 201):
                failures = 0
                self._done(chunk)
                self.stats["sent"] += 1
                self.stats["seconds_sent"] += chunk.seconds
                if answer.status == 200:
                    self.stats["duplicates"] += 1
            elif answer.status == 409:
                failures = 0
                self._done(chunk)
                self.stats["conflicts"] += 1
                logger.warning(
                    "Dashboard audio for %s: %s chunk %d holds other content on the dashboard; this one is dropped",
                    self.session_id, chunk.track, index,
                )  # fmt: skip
            elif answer.status in STOP_STATUSES:
                self._stop(answer)
                return
            elif answer.status == 0 or answer.status >= 500 or answer.status in RETRY_STATUSES:
                failures += 1
                self.stats["retries"] += 1
                self.last_error = answer.why
                if failures in (1, 5) or failures % 20 == 0:
                    logger.info(
                        "Dashboard audio for %s: %s chunk %d not stored yet (%s); retrying",
                        self.session_id, chunk.track, index, answer.why,
                    )  # fmt: skip
                await self._back_off(failures, answer.retry_after)
            else:  # 400, 413, 422...: this chunk can never be stored
                failures = 0
                self._done(chunk)
                self.stats["rejected"] += 1
                self.last_error = answer.why
                logger.warning(
                    "Dashboard audio for %s: %s chunk %d refused (%d: %s); dropped",
                    self.session_id, chunk.track, index, answer.status, answer.why,
                )  # fmt: skip

    def _done(self, chunk: _Chunk) -> None:
        if self._queue and self._queue[0] is chunk:
            self._queue.popleft()
            self._queued_seconds -= chunk.seconds
        if not self._queue:
            self._queued_seconds = 0.0  # no float drift

    async def _back_off(self, failures: int, retry_after: float | None) -> None:
        delay = min(self.max_backoff, FIRST_BACKOFF * 2 ** min(failures - 1, 16))
        delay *= random.uniform(0.8, 1.2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        if self._closing.is_set():
            delay = min(delay, CLOSING_BACKOFF)
        try:
            # close() cuts a long wait short: its timeout is better spent on a few more tries.
            await asyncio.wait_for(self._closing.wait(), delay)
            await asyncio.sleep(min(delay, CLOSING_BACKOFF))
        except TimeoutError:
            pass

    def _stop(self, answer: Answer) -> None:
        self.stopped = True
        self.why = answer.why
        dropped = len(self._queue)
        self._drop_queue()
        logger.warning(
            "Dashboard audio for %s: recording stopped, the dashboard answered %d (%s); %d chunk(s) dropped",
            self.session_id, answer.status, answer.why, dropped,
        )  # fmt: skip

    def _drop_queue(self) -> None:
        self._queue.clear()
        self._queued_seconds = 0.0

    # --- HTTP ---------------------------------------------------------------------

    def _session_path(self) -> str:
        return f"/ingest/audio/{quote(self.session_id, safe='')}"

    async def _put(self, chunk: _Chunk, index: int) -> Answer:
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Audio-Sample-Rate": str(chunk.sample_rate),
            "X-Audio-Start": f"{chunk.start:.6f}",
        }
        return await self._request("PUT", f"{self._session_path()}/{chunk.track}/{index}", chunk.pcm, headers)

    async def _request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> Answer:
        return await asyncio.to_thread(self._request_sync, method, path, body, headers or {})

    def _request_sync(self, method: str, path: str, body: bytes | None, headers: dict) -> Answer:
        request = urllib.request.Request(
            self.base + path,
            data=body,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Accept": "application/json", **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as response:
                return Answer(response.status, _retry_after(response.headers), _json(response.read()))
        except urllib.error.HTTPError as error:
            try:
                text = error.read()
            except Exception:
                text = b""
            return Answer(error.code, _retry_after(error.headers), _json(text))
        except Exception as exc:  # no answer: refused, reset, timed out, a bad certificate...
            reason = getattr(exc, "reason", None) or exc
            return Answer(0, error=f"{type(exc).__name__}: {reason}"[:300])


def _json(raw: bytes) -> dict | None:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def _retry_after(headers) -> float | None:
    try:
        value = float((headers or {}).get("Retry-After", ""))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


# --- Pipecat ---------------------------------------------------------------------------


def __getattr__(name: str):
    # DashboardAudioRecorder subclasses Pipecat's AudioBufferProcessor: it is made on first use, so
    # that the base install (and the demo bot) never imports Pipecat.
    if name == "DashboardAudioRecorder":
        recorder = _define_recorder()
        globals()[name] = recorder
        return recorder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _define_recorder():
    from pipecat.frames.frames import CancelFrame, EndFrame, Frame
    from pipecat.processors.audio.audio_buffer_processor import AudioBufferProcessor
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup

    class DashboardAudioRecorder(AudioBufferProcessor):
        """Pipecat's AudioBufferProcessor, recording the call into the dashboard.

        Place it right after the output transport (rtvi_dashboard.pipecat does,
        when recording is on): there it sees the caller's audio as the input
        transport received it (InputAudioRawFrame) and the bot's as the output
        transport sent it (OutputAudioRawFrame, pushed on once written).

        It records from the StartFrame, at the pipeline's output sample rate
        (or `sample_rate`), one channel, and cuts both tracks every
        `chunk_seconds` (RTVI_DASHBOARD_AUDIO_CHUNK_SECONDS, 10 s):
        AudioBufferProcessor hands over the user and bot tracks with equal
        length, each chunk goes to the uploader. At the start (setup) the
        uploader asks the dashboard whether to record, in the background so
        that the pipeline never waits for it; when the dashboard says no,
        recording stops and nothing is uploaded. On EndFrame and CancelFrame
        the last partial chunk goes too, and cleanup waits (at most
        `close_timeout` seconds) for the queue to be uploaded.

        Each chunk is stamped on its own: its start is the wall-clock time
        when it is handed over (its last sample has just reached this
        processor) minus its duration. AudioBufferProcessor's buffers are a
        sample count, not a clock: it pads silence by heuristics (a gap of
        over 200 ms, the other track's length, not while someone speaks), so a
        sample count from the start of the call drifts from the wall clock
        the transcript is timed by. Anchoring each chunk's end to the clock
        bounds the error to what one chunk's heuristics add; it never
        accumulates over the call, and a lost chunk shifts nothing.

        Each track's chunk is what that track holds, without the silence
        AudioBufferProcessor pads the shorter one with at its end to even them
        out: that silence stands for no time that passed (the input
        resampler hands the caller's audio over in bursts of ~70 ms, so the
        tracks' lengths differ by up to one), and kept, it would put all of
        the shorter track's audio that much too early. So the user and bot
        chunks of one cut may differ in length and start by a few tens of
        milliseconds; each ends when the cut was made.
        """

        def __init__(
            self,
            *,
            uploader: AudioUploader | None = None,
            dashboard_url: str | None = None,
            token: str | None = None,
            session_id: str | None = None,
            agent_id: str | None = None,
            chunk_seconds: float | None = None,
            sample_rate: int | None = None,
            close_timeout: float = 10.0,
            **kwargs,
        ):
            super().__init__(sample_rate=sample_rate, num_channels=1, auto_start_recording=True, **kwargs)
            if uploader is None:
                if not session_id:
                    raise ValueError("DashboardAudioRecorder needs an uploader or a session_id")
                uploader = AudioUploader(
                    dashboard_url or os.environ.get("RTVI_DASHBOARD_URL", "ws://127.0.0.1:8000"),
                    token if token is not None else os.environ.get("RTVI_DASHBOARD_TOKEN", ""),
                    session_id,
                    agent_id,
                )
            self.uploader = uploader
            self.chunk_seconds = chunk_seconds_from_env(chunk_seconds)
            self.close_timeout = close_timeout
            self.chunks = dict.fromkeys(TRACKS, 0)  # chunks handed to the uploader, per track
            self._is_set_up = False
            self._closed = False

        async def setup(self, setup: FrameProcessorSetup):
            if self._is_set_up:
                return  # placed into a pipeline that was already setting up, and set up by whoever placed it
            self._is_set_up = True
            await super().setup(setup)
            if not MIN_SAMPLE_RATE <= self.sample_rate <= MAX_SAMPLE_RATE:
                logger.warning(
                    "Dashboard audio: the pipeline's %d Hz is outside %d-%d Hz; nothing is recorded",
                    self.sample_rate, MIN_SAMPLE_RATE, MAX_SAMPLE_RATE,
                )  # fmt: skip
                self._auto_start_recording = False
                return
            self._buffer_size = max(2, int(self.sample_rate * self.chunk_seconds)) * 2
            self.uploader.start()  # the check first, in the background

        async def _ensure_set_up(self, setup: FrameProcessorSetup) -> None:
            """Set up now, unless the pipeline has (for one who placed it while the pipeline was setting up)."""
            if self._is_set_up:
                return
            self._setup_started()
            try:
                await self.setup(setup)
            finally:
                self._setup_finished()

        async def process_frame(self, frame: Frame, direction: FrameDirection):
            if self._recording and not self.uploader.recording:
                # The dashboard said no (or stopped the recording): stop buffering audio that nobody takes.
                logger.info("Dashboard audio for %s: not recording (%s)", self.uploader.session_id, self.uploader.why)
                await self.stop_recording()
            await super().process_frame(frame, direction)  # on EndFrame and CancelFrame, the last chunk goes
            if isinstance(frame, EndFrame | CancelFrame):
                self.uploader.finish()  # what is left goes now, retried sooner; cleanup waits for it

        def _align_track_buffers(self):
            # How much each track really holds, before the shorter one is padded with silence at its end.
            self._real_lengths = (len(self._user_audio_buffer), len(self._bot_audio_buffer))
            super()._align_track_buffers()

        async def _call_event_handler(self, event_name: str, *args, **kwargs):
            # Event handlers run in tasks of their own; the chunk is stamped here, as it is handed over.
            if event_name == "on_track_audio_data" and len(args) >= 3:
                self._submit(args[0], args[1], args[2], time.time())
            await super()._call_event_handler(event_name, *args, **kwargs)

        def _submit(self, user: bytes, bot: bytes, sample_rate: int, now: float) -> None:
            real, self._real_lengths = getattr(self, "_real_lengths", None), None
            if not sample_rate:
                return
            lengths = real or (len(user), len(bot))
            for track, pcm, length in (("user", user, lengths[0]), ("bot", bot, lengths[1])):
                pcm = bytes(pcm[:length])  # without the silence that only evened the tracks out
                if pcm and self.uploader.submit(track, pcm, sample_rate, now - len(pcm) / 2 / sample_rate):
                    self.chunks[track] += 1

        async def cleanup(self):
            await super().cleanup()
            await self.close()

        async def close(self) -> bool:
            """Upload what is left (bounded by close_timeout) and stop; True when all was stored."""
            if self._closed:
                return self.uploader.pending == 0
            self._closed = True
            return await self.uploader.close(self.close_timeout)

    DashboardAudioRecorder.__module__ = __name__
    return DashboardAudioRecorder
