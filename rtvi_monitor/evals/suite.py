"""An agent's suite: its saved scenarios as the folder `pipecat eval` runs, and the caller's speech cut for them.

The folder (a zip to download) holds `<agent>/<scenario>.yaml` for each scenario and, when the caller's
recording is there and the downloader may listen to calls, `<agent>/audio/<scenario>/turn-<n>.wav`: the
caller's own track (never the bot's) from the first to the last run of speech the voice activity detector
heard in that turn, padded by SPEECH_PAD_SECONDS, 16-bit mono at the recording's rate. Without it a scenario
has its `text` modality only. Run it with `pipecat eval <agent>/` (see the README).
"""

import io
import wave
import zipfile

from rtvi_monitor.audio import store
from rtvi_monitor.audio.models import AudioChunk, SessionAudio
from rtvi_monitor.evals import scenario as scenarios
from rtvi_monitor.evals.models import Scenario


def caller_runs(session) -> list[list[float]] | None:
    """The caller's speech in the recording, as the VAD heard it: [[start, end], ...] epoch seconds, in order; None
    when the call has no recording of the caller (so no turn offers a clip)."""
    chunks = list(AudioChunk.objects.filter(session=session, track="user").values_list("speech", flat=True))
    if not chunks:
        return None
    runs = []
    for speech in chunks:
        runs.extend(run for run in speech or [] if isinstance(run, list) and len(run) == 2)
    return store.merge_runs(sorted(runs))


def recording_of(session) -> SessionAudio | None:
    return SessionAudio.objects.filter(session=session).first()


def cut(audio: SessionAudio, chunks, start: float, end: float) -> bytes:
    """The caller's track from `start` to `end` (epoch seconds, padded) as a mono 16-bit WAV file."""
    rate = audio.sample_rate
    first = max(0, round((start - scenarios.SPEECH_PAD_SECONDS - audio.origin) * rate))
    last = min(store.total_frames(audio), round((end + scenarios.SPEECH_PAD_SECONDS - audio.origin) * rate))
    frames = store.render(store.placed_chunks(audio, chunks), first, max(0, last - first))
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(frames[:, store.TRACKS.index("user")].tobytes())
    return out.getvalue()


def clips(saved: Scenario) -> dict[int, bytes]:
    """Each included turn's clip of the caller's speech; empty when the call has no recording of them."""
    audio = recording_of(saved.session)
    if audio is None:
        return {}
    chunks = list(AudioChunk.objects.filter(session=saved.session, track="user"))
    if not chunks:
        return {}
    found = {}
    for turn in saved.included:
        speech = turn.get("speech")
        if speech and len(speech) == 2:
            found[turn["number"]] = cut(audio, chunks, float(speech[0]), float(speech[1]))
    return found


def about(saved: Scenario) -> str:
    lines = [
        f"From call {saved.session.session_id} of agent {saved.agent_name or saved.agent_key},"
        f" saved by {saved.created_by_name}"
        f" on {saved.created_at:%Y-%m-%d %H:%M} UTC (RTVI dashboard).",
        "Run: pipecat eval <this folder>",
    ]
    lines += [f"Note: {line}" for line in saved.note.splitlines() if line.strip()]
    return "\n".join(lines)


def files(saved: Scenario, with_audio: bool) -> dict[str, bytes]:
    """The scenario's files, by their path inside its agent's folder."""
    made = clips(saved) if with_audio else {}
    paths = {number: f"audio/{saved.name}/turn-{number}.wav" for number in made}
    out = {f"audio/{saved.name}/turn-{n}.wav": data for n, data in made.items()}
    text = scenarios.document(saved.name, saved.turns, paths or None, about(saved))
    out[f"{saved.name}.yaml"] = text.encode()
    return out


def zip_of(organization, agent_key: str, with_audio: bool) -> tuple[bytes, int, int, str]:
    """The agent's suite as a zip of its folder; with how many scenarios and audio clips it holds, and the folder."""
    buffer, count, clips_ = io.BytesIO(), 0, 0
    saved = list(Scenario.objects.filter(organization=organization, agent_key=agent_key).select_related("session"))
    folder = saved[0].folder if saved else scenarios.slug(agent_key, "agent")
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for one in saved:
            for path, data in files(one, with_audio).items():
                archive.writestr(f"{folder}/{path}", data)
                clips_ += path.endswith(".wav")
            count += 1
    return buffer.getvalue(), count, clips_, folder
