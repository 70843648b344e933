"""A session's recorded audio: one row per session and track, its chunks as the bot uploaded them."""

from django.db import models
from django.utils import timezone

from rtvi_monitor.sessions.models import Session


class SessionAudio(models.Model):
    """A session's recording: where it sits on the session's clock, what it weighs, what its audio says.

    The chunks (AudioChunk) are the audio; this row is what a page needs first (rtvi_monitor/audio.py).
    """

    session = models.OneToOneField(Session, on_delete=models.CASCADE, primary_key=True, related_name="audio")
    sample_rate = models.PositiveIntegerField()
    origin = models.FloatField(help_text="Epoch seconds of the earliest chunk's first sample.")
    end = models.FloatField(help_text="Epoch seconds just after the latest sample.")
    chunks = models.PositiveIntegerField(default=0)
    stored_bytes = models.BigIntegerField(default=0, help_text="Compressed, in the audio storage.")
    seconds = models.FloatField(default=0, help_text="Of audio received, both tracks.")
    analysis = models.JSONField(default=dict, blank=True, help_text="Measured on the audio (audio.analyse).")
    # Figures for the agent pages, the Overview and /metrics (audio.summarise); the comparison with what the
    # bot's messages report is made once the session has ended (its turns are frozen then).
    voice_to_voice_p50 = models.FloatField(null=True, blank=True, help_text="Seconds, from the audio.")
    reported_p50 = models.FloatField(null=True, blank=True, help_text="Seconds, the same turns by the messages.")
    difference_p50 = models.FloatField(null=True, blank=True, help_text="Audio minus reported, per turn, median.")
    comparison = models.JSONField(default=list, blank=True, help_text="audio.compare, once the session has ended.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "session audio"

    def __str__(self) -> str:
        return f"audio of {self.session_id}: {self.seconds:.0f} s"


class AudioChunk(models.Model):
    """One uploaded chunk of one track, stored compressed (FLAC) in the audio storage; peaks and speech kept here."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="audio_chunks", db_index=False)
    track = models.CharField(max_length=4)  # "user" or "bot"
    index = models.PositiveIntegerField()
    start = models.FloatField(help_text="Epoch seconds of its first sample, as the bot stamped it.")
    samples = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    path = models.CharField(max_length=300)
    size = models.PositiveIntegerField(help_text="Compressed bytes.")
    peaks = models.BinaryField(help_text="Loudest sample per 20 ms, 0-255.")
    speech = models.JSONField(default=list, help_text="[[start, end], ...] epoch seconds the VAD heard speech.")
    stored_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "track", "index"], name="audio_chunk_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.track} chunk {self.index} of {self.session_id}"
