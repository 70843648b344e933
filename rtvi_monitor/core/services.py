"""Which kind of service a Pipecat processor is: speech-to-text, LLM or text-to-speech. Plain Python.

A bot's metrics name the processor that measured them as Pipecat names a
processor: its class name, "#" and an instance number ("DeepgramSTTService#0",
"OpenAILLMService#1"), unless the bot gave it a `name=` of its own. Pipecat's
service classes end in STTService, LLMService or TTSService (every one under
src/pipecat/services/ but the two in KNOWN), and so do the base classes a bot's
own services subclass: the end of the name says the kind, and nothing else in it
does ("DeepgramSTTService" holds "tts" once lowercased, "ElevenLabsTTSService"
holds "stt").

The rule; the first step that applies decides:

1. Drop a trailing "#<digits>", the instance number.
2. A Pipecat class named otherwise (KNOWN): its kind.
3. Drop a trailing "Service"; what is left ends in "STT", "LLM" or "TTS", in
   capitals as in a class name: that kind ("DeepgramSTT", "OpenAIRealtimeBetaLLM",
   "PlayHTTTS", "XTTS", a bot's own "ScriptedLLM").
4. Split on anything not a letter or digit ("deepgram-stt", "my_tts_2"): when
   exactly one kind is a whole word, in any case, that kind.
5. Otherwise "unknown": a name that does not say is not guessed at ("Watts" is
   no TTS, "MoondreamService" is none of the three).
"""

import functools
import re

KINDS = ("stt", "llm", "tts")
UNKNOWN = "unknown"

# The Pipecat services whose class names do not end in their kind.
KNOWN = {"WhisperSTTServiceMLX": "stt", "GoogleLLMOpenAIBetaService": "llm"}

_INSTANCE = re.compile(r"#\d+$")
_NOT_WORD = re.compile(r"[^A-Za-z0-9]+")


def service_kind(processor: object) -> str:
    """The kind of service a processor's name says: "stt", "llm", "tts" or "unknown" (the rule above)."""
    if not isinstance(processor, str):
        return UNKNOWN
    return _kind_of_name(processor)


@functools.lru_cache(maxsize=4096)  # a bot names a few processors, in every metrics message: the rule runs once each
def _kind_of_name(processor: str) -> str:
    name = _INSTANCE.sub("", processor.strip())
    if name in KNOWN:
        return KNOWN[name]
    stem = name.removesuffix("Service")
    for kind in KINDS:
        if stem.endswith(kind.upper()):
            return kind
    words = {word.lower() for word in _NOT_WORD.split(name)}
    named = [kind for kind in KINDS if kind in words]
    return named[0] if len(named) == 1 else UNKNOWN
