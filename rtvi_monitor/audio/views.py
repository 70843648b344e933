"""Audio over HTTP: a bot's uploads (ingest token) and what a page or script plays (members and keys).

- `GET /ingest/audio/<session>/` and `PUT /ingest/audio/<session>/<track>/<index>`: docs/PROTOCOL.md, section 4.
- `GET /api/sessions/<session>/audio/`: the recording's figures and what its audio says beside what the
  bot's messages report (figures: every member, viewers included).
- `GET /api/sessions/<session>/audio/peaks/?points=N`: both tracks' waveforms (listeners only).
- `GET /api/sessions/<session>/audio.wav`: the call as stereo WAV, with range requests; `?download=1` as a
  file (listeners only).
- `POST /api/sessions/<session>/audio/played/`: the page's player says the call's audio started playing.

The audit log says what happened: "listened" is written when the sound played, never when a page fetched
the WAV (its player preloads the header, and seeks fetch ranges). See `session_audio_played` for what one
entry covers. Every download (`?download=1`) is an entry; a private API key's GET of the WAV is a
download too (a script has no player: what it fetched, it has), once an hour per key and session.

Listeners: the organization's own scripts (a private API key) and members with the role its Settings →
Recording names (operators and admins by default; never viewers, who see no call contents).
"""

import asyncio
import math
import re

from django.conf import settings
from django.core.cache import cache
from django.http import HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_POST

from dashboard.access.auth import ingest_door, ingest_token, key_or_member_required
from dashboard.access.streams import awhile_key_valid
from dashboard.org import audit
from dashboard.web.http import BadParam, Query, StrictJsonResponse, json_error, json_methods, whole_number
from rtvi_monitor.audio import store as audio
from rtvi_monitor.audio.comparison import audio_summary, comparison_of  # noqa: F401
from rtvi_monitor.audio.models import AudioChunk, SessionAudio
from rtvi_monitor.live.dbthread import AUDIO_THREAD, in_db_thread
from rtvi_monitor.sessions import metrics
from rtvi_monitor.sessions.models import Session
from rtvi_monitor.sessions.queries import organization_session

MAX_INDEX = 999_999
RANGE_RE = re.compile(r"^bytes=([0-9]*)-([0-9]*)$")
MAX_RANGE_DIGITS = 18  # far past any recording (an hour's WAV has 10 digits of bytes); int() of more is refused
MAX_HEADER_NUMBER = 40  # characters of a number header (X-Audio-*): more is refused before it is converted
WINDOW_FRAMES = 16000 * 10  # frames rendered at a time while streaming


# The bot's side ----------------------------------------------------------------------------------------


def _session_or_wait(token, session_id: str):
    session = Session.objects.find(token.organization, session_id)
    if session is None:
        response = json_error(
            f"No session {session_id!r} in this organization yet: its messages start it. Send this chunk again later.",
            404,
        )
        response["Retry-After"] = "2"
        return None, response
    return session, None


@json_methods("GET")
@ingest_door
def ingest_status(request, session_id):
    token, refused = ingest_token(request)
    if refused:
        return refused
    organization = token.organization
    session = Session.objects.find(organization, session_id)
    try:
        agent = Query(request.GET, form=False).text("agent")  # the bot's agent id, as it sent it
    except BadParam:
        # No agent has such an id (over 200 characters, or two of them): the session's own names decide. A 400
        # here would leave the bot package asking again for ever (it reads one as "no answer yet").
        agent = ""
    names = (agent, session.agent_key, session.agent_name) if session else (agent,)
    record, why = organization.records_audio_of(*names)
    stored = SessionAudio.objects.filter(session=session).first() if session else None
    return StrictJsonResponse(
        {
            "record": record,
            "why": why,
            "max_chunk_bytes": settings.AUDIO_MAX_CHUNK_BYTES,
            "sample_rate": stored.sample_rate if stored else None,
            "tracks": audio.stored_runs(session) if session else {track: [] for track in audio.TRACKS},
        }
    )


def _number_header(request, name: str, kind, low, high):
    raw = request.headers.get(name, "").strip()
    if not raw:
        raise audio.BadChunk(f"The {name} header is missing.")
    if len(raw) > MAX_HEADER_NUMBER:
        raise audio.BadChunk(f"{name}: {len(raw)} characters is not a number from {low} to {high}.")
    try:
        value = kind(raw)
    except ValueError:
        raise audio.BadChunk(f"{name}: {raw[:40]!r} is not a number.") from None
    if not (isinstance(value, int) or math.isfinite(value)) or not low <= value <= high:
        raise audio.BadChunk(f"{name}: {raw[:40]!r} is out of range ({low} to {high}).")
    return value


class _Pending:
    """Chunks this process has taken and not yet answered (they wait for the audio thread)."""

    count = 0


@json_methods("PUT")
@ingest_door
async def ingest_chunk(request, session_id, track, index):
    """A chunk is stored on the audio's own thread (rtvi_monitor/live/dbthread.py, AUDIO_THREAD): its encoding and
    analysis never queue behind pages' views, nor pages behind them, and one chunk at a time is written.
    Past AUDIO_MAX_PENDING waiting chunks the answer is 503 at once: a bot sends the chunk again later, and
    an overloaded process does not hold requests until they time out."""
    if _Pending.count >= settings.AUDIO_MAX_PENDING:
        metrics.AUDIO_BUSY.inc()
        response = json_error(
            f"This server has {_Pending.count} chunks waiting to be stored (AUDIO_MAX_PENDING); "
            "nothing was stored: send this chunk again after Retry-After seconds.",
            503,
        )
        response["Retry-After"] = "2"
        return response
    _Pending.count += 1
    try:
        return await in_db_thread(_ingest_chunk, request, session_id, track, index, executor=AUDIO_THREAD)
    finally:
        _Pending.count -= 1


def _ingest_chunk(request, session_id, track, index):
    token, refused = ingest_token(request)
    if refused:
        return refused
    if track not in audio.TRACKS:
        return json_error(f"track: {track!r} is not one of {', '.join(audio.TRACKS)}.", 400)
    if index > MAX_INDEX:
        return json_error(f"index: at most {MAX_INDEX}.", 400)
    length = request.headers.get("Content-Length", "")
    if length and whole_number(length) is None:
        return json_error(f"Content-Length {length[:40]!r} is not a number of bytes.", 400)
    if length and whole_number(length) > settings.AUDIO_MAX_CHUNK_BYTES:
        return json_error(f"The chunk is {length} bytes; the limit is {settings.AUDIO_MAX_CHUNK_BYTES}.", 413)
    session, refused = _session_or_wait(token, session_id)
    if refused:
        return refused
    record, why = token.organization.records_audio_of(session.agent_key, session.agent_name)
    if not record:
        return StrictJsonResponse({"error": f"Not stored: {why}.", "why": why}, status=403)
    if session.contents_purged_at is not None:
        return json_error(f"Session {session_id!r}'s contents were purged; its audio is not kept.", 410)
    try:
        rate = _number_header(request, "X-Audio-Sample-Rate", int, audio.MIN_RATE, audio.MAX_RATE)
        start = _number_header(request, "X-Audio-Start", float, 1e9, 1e10)
        body = request.read(settings.AUDIO_MAX_CHUNK_BYTES + 1)
        if len(body) > settings.AUDIO_MAX_CHUNK_BYTES:
            return json_error(f"The chunk is over {settings.AUDIO_MAX_CHUNK_BYTES} bytes.", 413)
        stored, new = audio.store_chunk(session, track, index, rate, start, body)
    except audio.BadChunk as exc:
        return json_error(str(exc), exc.status)
    if new:
        metrics.AUDIO_SECONDS.labels(str(session.organization_id), session.agent_key, track).inc(stored["seconds"])
    return StrictJsonResponse({"stored": stored, **({} if new else {"duplicate": True})}, status=201 if new else 200)


# The reader's side -------------------------------------------------------------------------------------


def _listener(request) -> str:
    key = getattr(request, "api_key", None)
    return f"key:{key.pk}" if key is not None else f"user:{request.user.pk}"


def _audit_once_an_hour(request, session, action: str) -> bool:
    """`action` in the audit log unless this listener has one for this session within
    AUDIO_LISTEN_AUDIT_SECONDS; whether it was written."""
    if not cache.add(f"audio-{action}:{session.pk}:{_listener(request)}", 1, settings.AUDIO_LISTEN_AUDIT_SECONDS):
        return False
    audit.record(session.organization, action, session.session_id, request=request)
    return True


@json_methods("GET")
@key_or_member_required("sessions.figures")
def session_audio(request, session_id):
    session = organization_session(request.organization, session_id)
    recording = SessionAudio.objects.filter(session=session).first()
    _, why = request.organization.records_audio_of(session.agent_key, session.agent_name)
    if recording is None:
        return StrictJsonResponse(
            {"recorded": False, "why": why or "the bot sent no audio (it records with RTVI_DASHBOARD_RECORD_AUDIO=1)"}
        )
    analysis = audio.current_analysis(recording, session)
    comparison = comparison_of(recording, session, analysis)
    listener = request.can.audio_listen
    return StrictJsonResponse(
        {
            "recorded": True,
            "live": session.status == Session.Status.LIVE,
            "sample_rate": recording.sample_rate,
            "origin": recording.origin,
            "end": recording.end,
            "duration": round(recording.end - recording.origin, 3),
            "chunks": recording.chunks,
            "stored_bytes": recording.stored_bytes,
            "analysis": analysis,
            "comparison": comparison,
            "summary": audio.summary(recording, comparison, analysis),
            "listen": listener,
            "listen_role": request.organization.audio_role,
        }
    )


def _heard_recording(request, session_id):
    """(session, recording, None) for a recorded session (the door let a listener in), else (None, None, a 404)."""
    session = organization_session(request.organization, session_id)
    recording = SessionAudio.objects.filter(session=session).first()
    if recording is None:
        return None, None, json_error(f"Session {session_id!r} has no audio.", 404)
    return session, recording, None


@json_methods("GET")
@key_or_member_required("audio.listen")
def session_audio_peaks(request, session_id):
    session, recording, refused = _heard_recording(request, session_id)
    if refused:
        return refused
    try:
        points = Query(request.GET).whole_number("points", 1000, 1, 20000)
    except BadParam as exc:
        return json_error(str(exc), 400)
    chunks = AudioChunk.objects.filter(session=session).only("track", "index", "start", "peaks")
    return StrictJsonResponse({"origin": recording.origin, **audio.peaks_of(recording, chunks, points)})


def _byte_range(header: str, size: int):
    """(first, last) bytes asked for, None for the whole (no Range, or one this does not read: several
    ranges, another unit), or why the range cannot be served (a 416 that says so)."""
    match = RANGE_RE.match(header.strip()) if header else None
    if not match or (not match[1] and not match[2]):
        return None
    if len(match[1]) > MAX_RANGE_DIGITS or len(match[2]) > MAX_RANGE_DIGITS:
        return f"Range: a byte position has at most {MAX_RANGE_DIGITS} digits; this recording is {size} bytes."
    if not match[1]:  # the last N bytes
        n = int(match[2])
        return (max(0, size - n), size - 1) if n else "Range: the last 0 bytes is nothing to send."
    first = int(match[1])
    if first >= size:
        return f"Range: byte {first} is past the end of this {size}-byte recording."
    last = min(int(match[2]), size - 1) if match[2] else size - 1
    if last < first:
        return f"Range: it ends (byte {last}) before it starts (byte {first})."
    return first, last


async def _wav_bytes(recording, placed, first: int, last: int):
    """Bytes [first, last] of the session's WAV, rendered a window at a time off the event loop."""
    header = audio.wav_header(audio.total_frames(recording), recording.sample_rate)
    frame_bytes = audio.WAV_CHANNELS * 2
    if first < len(header):
        yield header[first : last + 1]
        first = len(header)
    while first <= last:
        frame = (first - len(header)) // frame_bytes
        count = min(WINDOW_FRAMES, (last - len(header)) // frame_bytes - frame + 1)
        pcm = (await asyncio.to_thread(audio.render, placed, frame, count)).tobytes()
        offset = (first - len(header)) - frame * frame_bytes
        piece = pcm[offset : offset + last - first + 1]
        if not piece:
            break
        yield piece
        first += len(piece)


@json_methods("GET", "HEAD")
@key_or_member_required("audio.listen")
def session_audio_wav(request, session_id):
    session, recording, refused = _heard_recording(request, session_id)
    if refused:
        return refused
    try:
        download = Query(request.GET).boolean("download", default=False)
    except BadParam as exc:
        return json_error(str(exc), 400)
    placed = audio.placed_chunks(
        recording, AudioChunk.objects.filter(session=session).only("track", "index", "start", "samples", "path")
    )
    size = audio.WAV_HEADER_BYTES + audio.total_frames(recording) * audio.WAV_CHANNELS * 2
    wanted = _byte_range(request.headers.get("Range", ""), size)
    if isinstance(wanted, str):
        response = json_error(wanted, 416)
        response["Content-Range"] = f"bytes */{size}"
        return response
    if download:
        audit.record(session.organization, audit.Action.AUDIO_DOWNLOAD, session.session_id, request=request)
    elif getattr(request, "api_key", None) is not None:
        _audit_once_an_hour(request, session, audit.Action.AUDIO_DOWNLOAD)
    # A member's GET (the player's preload, a seek's range) writes nothing: playing does (session_audio_played).
    first, last = wanted or (0, size - 1)
    if wanted and last - first + 1 > settings.AUDIO_RANGE_MAX_BYTES:
        # A player asks for "bytes=N-": it gets the next AUDIO_RANGE_MAX_BYTES and asks again as it plays.
        # daphne buffers what a slow listener has not read yet, so an hour's WAV is never rendered at once.
        last = first + settings.AUDIO_RANGE_MAX_BYTES - 1
    if request.method == "HEAD":
        response = HttpResponse(status=206 if wanted else 200)
    else:
        wav = awhile_key_valid(request, _wav_bytes(recording, placed, first, last))  # a short body: the player stops
        response = StreamingHttpResponse(wav, status=206 if wanted else 200)
    response["Content-Type"] = "audio/wav"
    response["Accept-Ranges"] = "bytes"
    response["Content-Length"] = str(last - first + 1)
    response["Cache-Control"] = "private, no-store"
    if wanted:
        response["Content-Range"] = f"bytes {first}-{last}/{size}"
    if download:
        response["Content-Disposition"] = f'attachment; filename="{_file_name(session)}.wav"'
    return response


@require_POST  # and CSRF-protected: not json_methods, which exempts machine endpoints (a bearer key has no player)
@key_or_member_required("audio.listen")
def session_audio_played(request, session_id):
    """POST, from the session page's player when the call's audio starts playing (its "playing" event).

    One entry "listened to a call's audio" covers a listener's plays of one session within
    AUDIO_LISTEN_AUDIT_SECONDS (an hour): the page sends this once, at its first play, and the server
    writes it unless the same listener has such an entry for the session within the hour (another page, a
    reload). Opening the page, its preload of the WAV, seeking and pausing write nothing. A member who may
    not listen (access.py `audio.listen`, as for the WAV) is refused, and nothing is written.
    """
    session, _, refused = _heard_recording(request, session_id)
    if refused:
        return refused
    logged = _audit_once_an_hour(request, session, audit.Action.AUDIO_LISTEN)
    return StrictJsonResponse({"logged": logged})


def _file_name(session) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"call-{session.session_id}")[:120]
