"""DashboardAudioRecorder: Pipecat's AudioBufferProcessor, recording a call into the dashboard (needs Pipecat).

Bots import it from rtvi_dashboard.audio (or get it from rtvi_dashboard.pipecat),
which imports this module on first use: the base install never imports Pipecat.
The uploading is rtvi_dashboard.audio's AudioUploader.
"""

import os
import time

from pipecat.frames.frames import CancelFrame, EndFrame, Frame
from pipecat.processors.audio.audio_buffer_processor import AudioBufferProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from rtvi_dashboard.audio import (
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    TRACKS,
    AudioUploader,
    chunk_seconds_from_env,
    logger,
)


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


DashboardAudioRecorder.__module__ = "rtvi_dashboard.audio"  # where bots import it from
