"""Real speech for the audio tests: espeak-ng (Debian's package) speaks a line, resampled to the rate asked."""

import functools
import shutil
import subprocess

import numpy as np

ESPEAK = shutil.which("espeak-ng")


def need_espeak():
    if ESPEAK is None:
        from tests.conftest import skip_or_fail  # a bench imports this module without Django

        skip_or_fail("espeak-ng is not installed (apt-get install espeak-ng)")


@functools.cache
def _spoken(text: str, voice: str) -> tuple[bytes, int]:
    need_espeak()
    wav = subprocess.run([ESPEAK, "-v", voice, "-s", "170", "--stdout", text], capture_output=True, check=True).stdout
    # A WAV from espeak-ng: 16-bit mono; its rate is in the header (22050 Hz), the samples after "data".
    rate = int.from_bytes(wav[24:28], "little")
    data = wav.index(b"data") + 8
    return wav[data:], rate


def speak(text: str, voice: str = "en-us", rate: int = 16000) -> np.ndarray:
    """The line as int16 samples at `rate`, trimmed of espeak's leading and trailing silence."""
    raw, source = _spoken(text, voice)
    samples = np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<i2").astype(np.float64)
    loud = np.flatnonzero(np.abs(samples) > 300)
    samples = samples[loud[0] : loud[-1] + 1] if len(loud) else samples
    count = int(len(samples) * rate / source)
    return np.interp(np.arange(count) * (source / rate), np.arange(len(samples)), samples).astype(np.int16)


def silence(seconds: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.int16)
