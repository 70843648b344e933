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

DashboardAudioRecorder (needs Pipecat: rtvi_dashboard/recorder.py, imported on
first use so that the base install never imports it) is Pipecat's AudioBufferProcessor, recording from
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


class _Queue:
    """The chunks waiting for the dashboard, oldest first: each track's numbered in order, the oldest dropped
    while more than a given length of audio waits (never the one being uploaded), with a log line."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        self.chunks: deque[_Chunk] = deque()
        self.seconds = 0.0  # of audio waiting, both tracks
        self.in_flight: _Chunk | None = None  # the chunk being uploaded
        self.dropped = 0  # in all, over the bound
        self._numbers = dict.fromkeys(TRACKS, 0)
        self._last_drop_log = -math.inf
        self._dropped_since_log = 0

    def __len__(self) -> int:
        return len(self.chunks)

    def __iter__(self):
        return iter(self.chunks)

    def add(self, track: str, pcm: bytes, sample_rate: int, start: float, max_bytes: int) -> int:
        """Queue a track's audio, split into chunks of at most `max_bytes`; how many."""
        step = max(2, max_bytes - max_bytes % 2)
        added = 0
        for offset in range(0, len(pcm), step):
            part = pcm[offset : offset + step]
            chunk = _Chunk(track, self._numbers[track], part, sample_rate, start + offset / 2 / sample_rate)
            self._numbers[track] += 1
            self.chunks.append(chunk)
            self.seconds += chunk.seconds
            added += 1
        return added

    def bound(self, max_seconds: float) -> int:
        """Drop the oldest chunks (never the one being uploaded) while more than max_seconds wait; how many."""
        dropped, seconds = 0, 0.0
        while self.seconds > max_seconds and len(self.chunks) > 1:
            position = 1 if self.chunks[0] is self.in_flight else 0
            if position >= len(self.chunks):
                break
            chunk = self.chunks[position]
            del self.chunks[position]
            self.seconds -= chunk.seconds
            dropped, seconds = dropped + 1, seconds + chunk.seconds
        if not dropped:
            return 0
        self.dropped += dropped
        self._dropped_since_log += dropped
        now = time.monotonic()
        if now - self._last_drop_log >= 30:  # a line at the first drop, then at most one each 30 s
            logger.warning(
                "Dashboard audio for %s: the dashboard has not taken the chunks in time; dropped the oldest %d "
                "chunk(s) (%.1f s of audio just now, %d in all) to keep at most %.0f s waiting (%s)",
                self.session_id, self._dropped_since_log, seconds, self.dropped, max_seconds, MAX_QUEUED_SECONDS_ENV,
            )  # fmt: skip
            self._last_drop_log, self._dropped_since_log = now, 0
        return dropped

    def done(self, chunk: _Chunk) -> None:
        """The dashboard answered for this chunk (the oldest) for good."""
        if self.chunks and self.chunks[0] is chunk:
            self.chunks.popleft()
            self.seconds -= chunk.seconds
        if not self.chunks:
            self.seconds = 0.0  # no float drift

    def clear(self) -> None:
        self.chunks.clear()
        self.seconds = 0.0


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
        self._queue = _Queue(session_id)
        self._uploads = _Uploads(self, self._queue)

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
        self._uploads.start()

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
        self.stats["submitted"] += self._queue.add(track, pcm, sample_rate, start, self.max_chunk_bytes)
        self.stats["dropped"] += self._queue.bound(self.max_queued_seconds)
        self._uploads.kick()
        return True

    def finish(self) -> None:
        """No more chunks are coming (the call ended): upload what is left, retrying sooner, then stop."""
        self._uploads.finish()

    async def close(self, timeout: float = 10.0) -> bool:
        """Try to upload what is left (for at most `timeout` seconds), then stop. True when nothing is left."""
        await self._uploads.close(timeout)
        left = len(self._queue)
        if left and self.recording:
            logger.warning(
                "Dashboard audio for %s: %d chunk(s) (%.1f s) not uploaded when the bot closed (%s)",
                self.session_id, left, self._queue.seconds, self.last_error or "no answer in time",
            )  # fmt: skip
        self.stopped = True
        return left == 0

    # --- what the dashboard answers ------------------------------------------------

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
            self._queue.clear()
            logger.info("Dashboard audio for %s: not recorded (%s)", self.session_id, self.why)

    def _answered(self, chunk: _Chunk, index: int, answer: Answer) -> None:
        """The dashboard's answer for good to a chunk: stored, or dropped (another's index, or never storable)."""
        self._queue.done(chunk)
        if answer.status in (200, 201):
            self.stats["sent"] += 1
            self.stats["seconds_sent"] += chunk.seconds
            if answer.status == 200:
                self.stats["duplicates"] += 1
        elif answer.status == 409:
            self.stats["conflicts"] += 1
            logger.warning(
                "Dashboard audio for %s: %s chunk %d holds other content on the dashboard; this one is dropped",
                self.session_id, chunk.track, index,
            )  # fmt: skip
        else:  # 400, 413, 422...: this chunk can never be stored
            self.stats["rejected"] += 1
            self.last_error = answer.why
            logger.warning(
                "Dashboard audio for %s: %s chunk %d refused (%d: %s); dropped",
                self.session_id, chunk.track, index, answer.status, answer.why,
            )  # fmt: skip

    def _stop(self, answer: Answer) -> None:
        self.stopped = True
        self.why = answer.why
        dropped = len(self._queue)
        self._queue.clear()
        logger.warning(
            "Dashboard audio for %s: recording stopped, the dashboard answered %d (%s); %d chunk(s) dropped",
            self.session_id, answer.status, answer.why, dropped,
        )  # fmt: skip

    # --- HTTP ---------------------------------------------------------------------

    def _session_path(self) -> str:
        return f"/ingest/audio/{quote(self.session_id, safe='')}"

    async def _put(self, chunk: _Chunk, index: int) -> Answer:
        """Upload one chunk as the track's `index`."""
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Audio-Sample-Rate": str(chunk.sample_rate),
            "X-Audio-Start": f"{chunk.start:.6f}",
        }
        return await self._request("PUT", f"{self._session_path()}/{chunk.track}/{index}", chunk.pcm, headers)

    async def _request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> Answer:
        request = urllib.request.Request(
            self.base + path,
            data=body,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Accept": "application/json", **(headers or {})},
        )
        return await asyncio.to_thread(_send, request, self.request_timeout)


class _Uploads:
    """The background task that uploads an uploader's queue, in order: it asks the dashboard first when it has
    not answered the check, keeps each chunk until the dashboard answers for it for good, and backs off while
    there is no answer (less once the call is over: close() has a deadline)."""

    def __init__(self, uploader: "AudioUploader", queue: _Queue):
        self.uploader = uploader
        self.queue = queue
        self.task: asyncio.Task | None = None
        self.wake: asyncio.Event | None = None
        self.closing: asyncio.Event | None = None

    def start(self) -> None:
        if self.task is None or self.task.done():
            loop = asyncio.get_running_loop()
            self.wake, self.closing = asyncio.Event(), asyncio.Event()
            if self.uploader.stopped:
                return
            self.task = loop.create_task(self.run(), name=f"rtvi-dashboard-audio-{self.uploader.session_id}")

    def kick(self) -> None:
        """A chunk was queued: start, or wake, the task (when there is a loop here)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop here: the chunks wait for start() or close()
        self.start()
        self.wake.set()

    def finish(self) -> None:
        if self.closing is not None:
            self.closing.set()
            self.wake.set()

    async def close(self, timeout: float) -> None:
        """Let the task upload what is left, for at most `timeout` seconds; then it is stopped."""
        if (self.task is None or self.task.done()) and self.queue and self.uploader.recording:
            self.start()  # chunks queued outside a running loop's task (or after a crash): one more try
        if self.task is None or self.task.done():
            return
        self.finish()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            self.task.cancel()
            raise
        except Exception as exc:
            logger.warning("Dashboard audio for %s: uploader failed: %s", self.uploader.session_id, exc)
        if not self.task.done():
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass

    async def run(self) -> None:
        uploader, queue = self.uploader, self.queue
        failures = 0
        while not uploader.stopped:
            if uploader.record is None:
                if await uploader.check() is None:
                    failures += 1
                    if self.closing.is_set() and not queue:
                        return
                    await self.back_off(failures, None)
                    continue
                failures = 0
                continue
            if uploader.record is False:
                return
            if not queue:
                if self.closing.is_set():
                    return
                self.wake.clear()
                await self.wake.wait()
                continue
            chunk = queue.in_flight = queue.chunks[0]
            try:
                index = uploader.base_index[chunk.track] + chunk.number
                answer = await uploader._put(chunk, index)
            finally:
                queue.in_flight = None
            if answer.status in STOP_STATUSES:
                uploader._stop(answer)
                return
            if answer.status == 0 or answer.status >= 500 or answer.status in RETRY_STATUSES:
                failures += 1
                uploader.stats["retries"] += 1
                uploader.last_error = answer.why
                if failures in (1, 5) or failures % 20 == 0:
                    logger.info(
                        "Dashboard audio for %s: %s chunk %d not stored yet (%s); retrying",
                        uploader.session_id, chunk.track, index, answer.why,
                    )  # fmt: skip
                await self.back_off(failures, answer.retry_after)
                continue
            failures = 0
            uploader._answered(chunk, index, answer)

    async def back_off(self, failures: int, retry_after: float | None) -> None:
        delay = min(self.uploader.max_backoff, FIRST_BACKOFF * 2 ** min(failures - 1, 16))
        delay *= random.uniform(0.8, 1.2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.uploader.max_backoff))
        if self.closing.is_set():
            delay = min(delay, CLOSING_BACKOFF)
        try:
            # close() cuts a long wait short: its timeout is better spent on a few more tries.
            await asyncio.wait_for(self.closing.wait(), delay)
            await asyncio.sleep(min(delay, CLOSING_BACKOFF))
        except TimeoutError:
            pass


def _send(request: urllib.request.Request, timeout: float) -> Answer:
    """One request to the dashboard, in a thread: its answer (status 0 when there was none)."""
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
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
    # DashboardAudioRecorder subclasses Pipecat's AudioBufferProcessor (rtvi_dashboard/recorder.py): it is
    # imported on first use, so that the base install (and the demo bot) never imports Pipecat.
    if name == "DashboardAudioRecorder":
        from rtvi_dashboard.recorder import DashboardAudioRecorder

        globals()[name] = DashboardAudioRecorder
        return DashboardAudioRecorder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
