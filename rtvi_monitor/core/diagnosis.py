"""Why a turn went wrong: each turn of a session taken apart, from its messages (and spans). Plain Python.

`diagnose(events, traces)` walks a session's stored messages once and gives,
per turn, when each part of it happened (the milestones), the wait between
consecutive parts (the stages), the interruptions of the bot's reply, and,
for a turn whose breakdown misses a stage, which one and why. `summary` and
`aggregate` make the per-agent figures of it (rtvi_monitor/sessions/queries.py reads
the stored sessions; the pages and the API only show what these return).

A turn, as real Pipecat bots send it (tests/rtvi_samples.py, FIELD_NOTES.md):

    user-started-speaking, (user-input +) user-transcription partials, the final one,
    user-stopped-speaking, bot-llm-started, bot-llm-text tokens..., bot-tts-started,
    metrics ttfb (the TTS's), bot-started-speaking, bot-output / bot-tts-text..., bot-stopped-speaking

Its milestones are user started and stopped speaking, the final transcription,
the LLM started, its first token (the first bot-llm-text or llm-raw-text), the
first TTS audio (bot-tts-started plus the TTS's reported time to first byte,
when the bot reports it; bot-tts-started alone otherwise), and the bot started
speaking. The five stages between them add up to the turn's latency (user
stopped speaking to bot started speaking, the reducer's figure):

    transcription    user stopped -> final transcription (0 when the transcription came first,
                     as it does when a turn strategy ends the turn on it)
    llm_start        the later of those two -> LLM started
    llm_first_token  LLM started -> first token (a function call before the answer is in it)
    tts_first_audio  first token -> first TTS audio (the first sentence, then the TTS's first byte)
    bot_speaking     first TTS audio -> bot started speaking (the transport)

A stage whose two ends are known but out of order is flagged, never shown
negative; a stage with an end missing names it and why (the bot does not send
that message at all, the user spoke again first, the turn was started by the
bot...). A turn is complete when all five stages are measured.

Interruptions: the user starting to speak while the bot speaks (or a
bot-interrupted while it speaks, with no user speech: the client's doing). Each
is a real barge-in or a backchannel, never both:

- a backchannel when the bot says so (user-input with input_type
  "backchannel"); else, when the speech was transcribed, when its final text is
  at most `backchannel_words` words, all acknowledgements (BACKCHANNEL_WORDS:
  "mhm", "uh-huh", "yeah", "ok", "right"...), however long it took; else (no
  transcription) when it lasted under `backchannel_seconds`;
- a barge-in otherwise: "wait", "no" or "stop" are short but meant.

Bots since Pipecat 1.4 also send the raw voice activity
(vad-user-started-speaking .. vad-user-stopped-speaking) beside the user turn
their turn strategy decides (user-started-speaking, bot-interrupted). Voice
activity that begins while the bot speaks and that the bot does not take as a
turn is a backchannel whatever was said ("the bot spoke on"): a caller's "mhm"
under a minimum-words interruption strategy. The bot takes it with a
user-started-speaking, bot-interrupted or user-stopped-speaking during it, or
within VOICE_GRACE_S after it unless the bot has meanwhile spoken on to its
reply's end (such a strategy decides on the final transcription, which comes
after the speech). Its transcript is the final transcriptions that came within
it, shortly after it, or while the bot still spoke on; it is no turn, never cuts
the reply and moves no milestone. Voice activity the bot does take is the
turn's interruption, judged as above (its transcriptions, held until then, go
to the turn it opened). Bots without vad-* messages are read as before.

A user's speech that was a backchannel and left the bot speaking is not a turn
of its own; any other interruption starts the next turn. For a reply that was
cut (the bot stopped speaking during the interruption), how much of it had been
spoken: the words the TTS spoke (bot-tts-text, or bot-output's spoken progress)
against the words of the reply (the LLM's text, else bot-transcription, else
bot-output's sentences).
"""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rtvi_monitor.core import contributions
from rtvi_monitor.core.reducer.turns import percentile, told_again
from rtvi_monitor.core.services import service_kind
from rtvi_monitor.core.state import Event

BACKCHANNEL_SECONDS = 0.8  # the defaults of settings.TURN_BACKCHANNEL_SECONDS and TURN_BACKCHANNEL_WORDS
BACKCHANNEL_WORDS = 3
# Words that acknowledge without taking the turn (lower case; a transcript's punctuation is ignored), and
# phrases that do (each counts as one word).
ACKNOWLEDGEMENTS = frozenset(
    "mhm mhmm mm mmhm mm-hmm hm hmm uh-huh uhhuh uh huh um ah oh yeah yep yes ya ok okay right sure alright "
    "cool great nice".split()
)
ACK_PHRASES = ("i see", "got it")

MAX_TURNS = 2000  # kept per session (the newest); a session page shows them all
MAX_TEXT = 300  # characters of a turn's user and bot text kept for the table
CUT_S = 1.0  # the bot stopping this soon after the user began speaking over it (and stopped) was cut off by it
EPSILON = 0.0005  # seconds: clocks in ms; closer than this is "at the same time"
# Voice activity over the bot is still the bot's to take as a turn this long after it ended (a minimum-words
# strategy decides on the final transcription, which comes after the speech); its finals may come as late.
VOICE_GRACE_S = 1.0
VOICE_WHY = "the bot spoke on: its turn strategy did not take it as a turn"

MILESTONES = (
    "user_started",
    "user_stopped",
    "transcript",
    "text_sent",
    "llm_started",
    "llm_first_token",
    "tts_started",
    "tts_first_audio",
    "bot_started",
    "bot_stopped",
)
# (stage, from, to, what the table calls it)
STAGES = (
    ("transcription", "user_stopped", "transcript", "Final transcription"),
    ("llm_start", "user_done", "llm_started", "LLM started"),
    ("llm_first_token", "llm_started", "llm_first_token", "LLM first token"),
    ("tts_first_audio", "llm_first_token", "tts_first_audio", "First TTS audio"),
    ("bot_speaking", "tts_first_audio", "bot_started", "Bot speaking"),
)
STAGE_NAMES = tuple(stage for stage, *_ in STAGES)
MILESTONE_WORDS = {
    "user_started": "the user started speaking",
    "user_stopped": "the user stopped speaking",
    "user_done": "the user's turn ended",
    "transcript": "the final transcription",
    "llm_started": "the LLM started",
    "llm_first_token": "the LLM's first token",
    "tts_first_audio": "the first TTS audio",
    "bot_started": "the bot started speaking",
}

REPLY = ("llm_started", "llm_first_token", "tts_started", "bot_started")  # a turn with one of these has a reply
LLM_TEXT = ("bot-llm-text", "llm-raw-text")
TTS_TEXT = ("bot-tts-text", "tts-raw-text")
FUNCTION_STARTS = ("llm-function-call-started", "llm-function-call-start", "llm-function-call")
# The message types diagnose() reads: a loader may fetch only these.
TYPES = frozenset(
    {
        "user-started-speaking",
        "user-stopped-speaking",
        "vad-user-started-speaking",
        "vad-user-stopped-speaking",
        "user-transcription",
        "user-input",
        "send-text",
        "bot-llm-started",
        *LLM_TEXT,
        *TTS_TEXT,
        "bot-tts-started",
        "bot-started-speaking",
        "bot-stopped-speaking",
        "bot-interrupted",
        "bot-output",
        "bot-transcription",
        "metrics",
        *FUNCTION_STARTS,
        "llm-function-call-in-progress",
        contributions.LATENCY_TYPE,
    }
)

WORD = re.compile(r"[\w'’-]+")


def words_of(text: str) -> list[str]:
    """The words of a text, lower case, without punctuation ("Uh-huh." -> ["uh-huh"])."""
    return [w.strip("-'’") for w in WORD.findall(text.lower()) if w.strip("-'’")]


def is_acknowledgement(text: str, most: int = BACKCHANNEL_WORDS) -> bool:
    """Whether a transcript is only a backchannel: at most `most` words (a phrase of ACK_PHRASES is one),
    every one an acknowledgement."""
    lowered = f" {' '.join(words_of(text))} "
    for phrase in ACK_PHRASES:
        lowered = lowered.replace(f" {phrase} ", " · ").replace(f" {phrase} ", " · ")
    tokens = lowered.split()
    return 0 < len(tokens) <= most and all(token == "·" or token in ACKNOWLEDGEMENTS for token in tokens)


@dataclass
class Interruption:
    """The user (or the client) speaking over the bot's reply."""

    at: float
    by: str  # "user" or "client"
    turn: "_Turn"  # the turn whose reply was spoken over
    kind: str = "barge_in"  # or "backchannel"
    why: str = ""
    decided: bool = True  # False while the user is still speaking and nothing else tells
    speech_end: float | None = None
    text: str = ""  # the interrupting speech's final transcription
    marked_backchannel: bool = False  # the bot called it one (user-input backchannel)
    cut_at: float | None = None  # when the bot stopped speaking because of it
    spoken_words: int = 0  # of the reply, when it was cut (or when it began, if never cut)
    opened: "_Turn | None" = None  # the turn the interrupting speech started
    voice: bool = False  # voice activity (vad-user-*) the bot did not take as a turn: a backchannel, never a cut

    def speech_ms(self) -> float | None:
        return None if self.speech_end is None else round(max(0.0, self.speech_end - self.at) * 1000, 1)


@dataclass
class _Voice:
    """The user's voice activity that began while the bot spoke, not (yet) taken by the bot as a turn."""

    start: float
    over: "_Turn"  # the turn whose reply the bot was speaking
    spoken_words: int  # of that reply, when the voice began
    end: float | None = None
    finals: list = field(default_factory=list)  # (at, text): final transcriptions held until it is settled
    marked: str | None = None  # the text of a user-input "backchannel" the bot sent for it
    spoke_on: bool = False  # the bot went on speaking after it ended, to its reply's end: no longer the bot's to take


@dataclass
class _Turn:
    started_by: str  # "user", "bot" or "text"
    at: dict = field(default_factory=dict)  # milestone -> epoch seconds
    sources: dict = field(default_factory=dict)  # milestone -> "message", "metric" or "span"
    finals: list = field(default_factory=list)  # (at, text) of final transcriptions
    text_sent: str = ""
    llm_text: str = ""
    transcription: list = field(default_factory=list)  # bot-transcription sentences
    segments: dict = field(default_factory=dict)  # bot-output segment key -> [text, spoken words]
    tts_words: int = 0
    tts_text: str = ""
    llm_ttfb_ms: float | None = None
    tts_ttfb_ms: float | None = None
    function_calls: int = 0
    call_before_token: bool = False
    interruptions: list = field(default_factory=list)
    resumed: int = 0  # times the user paused and went on before any reply
    superseded: bool = False  # the user spoke again (or another turn began) before this one's reply was spoken
    span_turn: dict | None = None
    removed: bool = False
    spoken_past: bool = False  # speech over the bot's reply, which the bot then spoke on past to its end
    breakdown: dict | None = None  # the bot's own latency contributions (core/contributions.py read())

    def mark(self, milestone: str, at: float, source: str = "message", last: bool = False) -> None:
        if last or self.at.get(milestone) is None:
            self.at[milestone] = at
            self.sources[milestone] = source

    def has_reply(self) -> bool:
        return any(self.at.get(m) is not None for m in REPLY)

    def spoken_words(self) -> int:
        from_output = sum(spoken for _, spoken in self.segments.values())
        return max(self.tts_words, from_output)

    def reply_words(self) -> int:
        sentences = [text for text, _ in self.segments.values()]
        return max(
            len(words_of(self.llm_text)),
            len(words_of(" ".join(self.transcription))),
            len(words_of(" ".join(sentences))),
        )

    def bot_text(self) -> str:
        if self.llm_text.strip():
            return self.llm_text.strip()
        if self.transcription:
            return " ".join(s.strip() for s in self.transcription)
        return " ".join(text for text, _ in self.segments.values()).strip() or self.tts_text.strip()

    def user_text(self) -> str:
        if self.started_by == "text":
            return self.text_sent
        texts: list[str] = []
        for _, text in self.finals:
            if not texts or texts[-1] != text:
                texts.append(text)
        return " ".join(texts)


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + " […]"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


class _Floor:
    """The turns so far and who has the floor: what every part of the walk reads and moves (see diagnose)."""

    def __init__(self):
        self.turns: list[_Turn] = []
        self.turn: _Turn | None = None  # the newest turn
        self.speaking: _Turn | None = None  # the turn whose reply the bot is speaking now
        self.open: Interruption | None = None  # the user's speech over the bot that has not ended yet
        self.interruptions: list[Interruption] = []

    def new_turn(self, started_by: str) -> _Turn:
        if self.turn is not None and self.turn.at.get("bot_started") is None:
            self.turn.superseded = True
        turn = _Turn(started_by)
        self.turns.append(turn)
        self.turn = turn
        return turn

    def replying(self) -> _Turn:
        """The turn a reply's message belongs to: the one the bot is speaking; else the newest, unless its reply
        is over (then a new turn, started by the bot)."""
        if self.speaking is not None:
            return self.speaking  # a backchannel's turn, opened while the bot speaks, has no reply yet
        turn = self.turn
        if turn is None or turn.at.get("bot_stopped") is not None:
            return self.new_turn("bot")
        return turn

    def spoken_over(self, at: float, by: str, turn: _Turn, **fields: Any) -> Interruption:
        """A new interruption of `turn`'s reply, with the words of it spoken so far (unless `fields` say)."""
        if "spoken_words" not in fields:
            fields["spoken_words"] = turn.spoken_words()
        interruption = Interruption(at=at, by=by, turn=turn, **fields)
        turn.interruptions.append(interruption)
        self.interruptions.append(interruption)
        return interruption

    def last_told(self) -> float | None:
        """When the last interruption that a bot-interrupted may tell again began: any but voice activity the
        bot did not take (that never cut it off, and sends none)."""
        return next((i.at for i in reversed(self.interruptions) if not i.voice), None)


class _VoiceActivity:
    """Pipecat 1.4+'s raw voice activity (vad-user-*) over the bot: speech the bot may or may not take as a turn.

    Until the bot takes it (a user turn), or lets it pass (VOICE_GRACE_S after it, or when the bot speaks on
    to its reply's end), its final transcriptions are held: whose they are depends on which.
    """

    def __init__(self, floor: _Floor):
        self.floor = floor
        self.current: _Voice | None = None  # voice activity over the bot the bot has not taken as a turn (yet)
        self.aside: Interruption | None = None  # the last such voice settled as a backchannel

    def lapse(self, at: float) -> None:
        """Time went by: voice activity over VOICE_GRACE_S ago that the bot did not take is a backchannel."""
        voice = self.current
        if voice is not None and voice.end is not None and at - voice.end > VOICE_GRACE_S:
            self.settle()

    def started(self, at: float) -> None:
        voice, floor = self.current, self.floor
        if voice is not None and not voice.spoke_on:
            voice.end = None  # the same speech going on after a pause (or the start sent again)
            return
        self.settle()
        if floor.speaking is not None and floor.open is None:
            self.current = _Voice(at, floor.speaking, floor.speaking.spoken_words())

    def stopped(self, at: float) -> None:
        if self.current is not None and self.current.end is None:
            self.current.end = at

    def take(self) -> list:
        """The bot started (or ended) a user turn: the voice activity under way (or just over) was that turn, not
        a backchannel; its held finals are the turn's. Unless the bot spoke on past its end: then a backchannel,
        and the turn is new speech."""
        voice = self.current
        if voice is None:
            return []
        if voice.spoke_on:
            self.settle()
            return []
        self.current = None
        return voice.finals

    def settle(self, decided: bool = True) -> None:
        """The voice activity over the bot passed without the bot taking it: a backchannel of that reply."""
        voice, self.current = self.current, None
        if voice is None:
            return
        texts: list[str] = []
        for _, text in voice.finals:
            if text.strip() and (not texts or texts[-1] != text):
                texts.append(text)
        self.aside = self.floor.spoken_over(
            voice.start,
            "user",
            voice.over,
            speech_end=voice.end,
            text=" ".join(texts) or (voice.marked or ""),
            marked_backchannel=voice.marked is not None,
            spoken_words=voice.spoken_words,
            voice=True,
            decided=decided,
        )

    def bot_stopped(self, turn: _Turn) -> None:
        voice = self.current
        if voice is not None and voice.over is turn and voice.end is not None:
            voice.spoke_on = True  # its finals may still come (within VOICE_GRACE_S); a user turn now is new speech

    def hold(self, at: float, text: str) -> bool:
        """Whether a final transcription is the voice activity's (held until it is settled, or a late one of the
        backchannel it was), not a turn's."""
        if self.current is not None:
            if len(self.current.finals) < 256:
                self.current.finals.append((at, text))  # whose it is depends on whether the bot takes the speech
            return True
        return self._late_aside(text)

    def _late_aside(self, text: str) -> bool:
        """A final that comes after a backchannel's grace while the bot still speaks on: that backchannel's."""
        aside, floor = self.aside, self.floor
        if (
            aside is None
            or floor.speaking is not aside.turn
            or floor.open is not None
            or floor.interruptions[-1] is not aside
            or floor.turn is not aside.turn
        ):
            return False
        if text.strip() and not aside.text.endswith(text):
            aside.text = f"{aside.text} {text}".strip()
        return True

    def mark(self, text: str) -> bool:
        """The bot called the voice activity under way a backchannel: one backchannel, not two."""
        if self.current is None or self.floor.open is not None:
            return False
        self.current.marked = self.current.marked or text
        return True


class _User:
    """The user's side of the turns: their speech, its final transcriptions, typed text, backchannels marked."""

    def __init__(self, floor: _Floor, voice: _VoiceActivity):
        self.floor = floor
        self.voice = voice
        self.chat_ids: set[str] = set()  # send-text ids, whose user-input "chat" echo is the same text

    def started(self, at: float) -> None:
        floor = self.floor
        if floor.speaking is not None:
            speaking = floor.speaking
            turn = floor.new_turn("user")
            turn.mark("user_started", at)
            floor.open = floor.spoken_over(at, "user", speaking, opened=turn)
            return
        turn = floor.turn
        # More speech after a pause continues the user's turn; not after words the bot spoke on past (those
        # were over, a backchannel, or words it never answered): then the user starts a turn of their own.
        if turn is not None and turn.started_by == "user" and not turn.has_reply() and not turn.spoken_past:
            if turn.at.get("user_stopped") is not None:
                turn.resumed += 1  # a pause, then more: the turn is measured from the last stop
                turn.at.pop("user_stopped")
            turn.mark("user_started", at)
            return
        floor.new_turn("user").mark("user_started", at)

    def stopped(self, at: float) -> None:
        floor = self.floor
        turn = floor.turn
        # The user's own turn, unless the bot has answered it already (then this stop starts one with no start).
        fits = (
            turn is not None
            and turn.started_by == "user"
            and turn.at.get("bot_started") is None
            and (not turn.has_reply() or turn.at.get("user_stopped") is None)
        )
        if not fits:
            turn = floor.new_turn("user")
        turn.mark("user_stopped", at, last=True)
        if floor.open is not None:
            floor.open.speech_end = at
            floor.open = None

    def finals(self, held: list) -> None:
        for at, text in held:
            self.final(at, text)

    def final(self, at: float, text: str) -> None:
        if self.voice.hold(at, text):
            return
        floor = self.floor
        turn = floor.turn
        fits = (
            turn is not None
            and turn.started_by == "user"
            and (not turn.has_reply() or (turn.at.get("transcript") is None and turn.at.get("bot_started") is None))
        )
        if not fits:
            turn = floor.new_turn("user")
        if turn.at.get("llm_started") is None and turn.at.get("bot_started") is None:
            turn.mark("transcript", at, last=True)  # the last final before the reply is what the LLM answered
        else:
            turn.mark("transcript", at)
        turn.finals.append((at, text))
        interruption = next((i for i in floor.interruptions[::-1] if i.opened is turn), None)
        if interruption is not None:
            interruption.text = turn.user_text()

    def transcription(self, at: float, data: dict) -> None:
        if data.get("final") is True and isinstance(data.get("text"), str):
            self.final(at, data["text"])

    def user_input(self, at: float, data: dict) -> None:
        kind, text = data.get("input_type"), data.get("text")
        if not isinstance(text, str):
            return
        if kind == "transcription" and data.get("final") is not False:
            self.final(at, text)
        elif kind == "chat" and data.get("msg_id") not in self.chat_ids:
            self.text(at, text)
        elif kind == "backchannel":
            self.backchannel(at, text)

    def send_text(self, at: float, data: dict, message: dict, event: Event) -> None:
        if event.direction != "from-client" or not isinstance(data.get("content"), str):
            return
        if isinstance(message.get("id"), str):
            self.chat_ids.add(message["id"])
        self.text(at, data["content"])

    def text(self, at: float, text: str) -> None:
        turn = self.floor.new_turn("text")
        turn.mark("text_sent", at)
        turn.text_sent = text

    def backchannel(self, at: float, text: str) -> None:
        """The bot itself called the user's words a backchannel (Pipecat's user-input "backchannel")."""
        if self.voice.mark(text):
            return
        floor = self.floor
        interruption = floor.open
        if interruption is None or interruption.by != "user":
            if floor.speaking is None:
                return
            interruption = floor.spoken_over(at, "user", floor.speaking, speech_end=at)
        interruption.marked_backchannel = True
        interruption.text = interruption.text or text


class _Reply:
    """The bot's reply: when its parts began (the LLM, its first token, the TTS), its words written and spoken,
    the time-to-first-byte metrics and the function calls in it."""

    def __init__(self, floor: _Floor):
        self.floor = floor
        self.text_source: dict[str, str] = {}  # "llm"/"tts" -> the type that carries it (as the reducer decides)

    def _one_source(self, kind: str, msg_type: str) -> bool:
        # Pipecat 1.13+ may send both types: the first one the session has is its source.
        return self.text_source.setdefault(kind, msg_type) == msg_type

    def llm_started(self, at: float) -> None:
        self.floor.replying().mark("llm_started", at)

    def llm_text(self, at: float, data: dict, msg_type: str) -> None:
        text = data.get("text")
        if not isinstance(text, str) or not self._one_source("llm", msg_type) or not text:
            return
        turn = self.floor.replying()
        turn.mark("llm_first_token", at)
        if len(turn.llm_text) < 20 * MAX_TEXT:
            turn.llm_text += text

    def tts_started(self, at: float) -> None:
        self.floor.replying().mark("tts_started", at)

    def tts_text(self, data: dict, msg_type: str) -> None:
        text = data.get("text")
        if not isinstance(text, str) or not self._one_source("tts", msg_type):
            return
        turn = self.floor.speaking or self.floor.turn
        if turn is None or (turn.interruptions and turn.interruptions[-1].cut_at is not None):
            return  # words after the cut were not heard
        turn.tts_words += len(words_of(text))
        if len(turn.tts_text) < 20 * MAX_TEXT:
            turn.tts_text = f"{turn.tts_text} {text}".strip()

    def output(self, data: dict) -> None:
        text = data.get("text")
        if not isinstance(text, str) or not text.strip():
            return
        turn = self.floor.speaking or self.floor.turn
        if turn is None or data.get("output_type") in ("word", "token") or data.get("aggregated_by") == "word":
            return  # per-word progress: bot-tts-text counts those words
        key = data.get("segment_id")
        key = key if isinstance(key, int | str) and not isinstance(key, bool) else text.strip()
        if key not in turn.segments and len(turn.segments) >= 256:
            return
        segment = turn.segments.setdefault(key, [text.strip(), 0])
        progress = data.get("spoken_progress")
        if data.get("spoken_status") == "completed" or data.get("spoken") is True:
            segment[1] = len(words_of(segment[0]))
        elif isinstance(progress, dict) and isinstance(progress.get("accumulated_text"), str):
            segment[1] = max(segment[1], len(words_of(progress["accumulated_text"])))

    def transcription(self, data: dict) -> None:
        text = data.get("text")
        if isinstance(text, str) and text.strip():
            turn = self.floor.replying()
            if len(turn.transcription) < 256:
                turn.transcription.append(text.strip())

    def metrics(self, data: dict) -> None:
        entries = data.get("ttfb")
        turn = self.floor.speaking or self.floor.turn
        if not isinstance(entries, list) or turn is None:
            return
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            value = _number(entry.get("value"))
            if value is None or value <= 0:  # the start-of-session zeros
                continue
            kind = service_kind(entry.get("processor"))
            if kind == "llm" and turn.llm_ttfb_ms is None and turn.at.get("llm_started") is not None:
                turn.llm_ttfb_ms = round(value * 1000, 1)
            elif kind == "tts" and turn.tts_ttfb_ms is None and turn.at.get("tts_started") is not None:
                turn.tts_ttfb_ms = round(value * 1000, 1)

    def function_call(self) -> None:
        turn = self.floor.replying()
        turn.function_calls += 1
        if turn.at.get("llm_first_token") is None:
            turn.call_before_token = True

    def function_in_progress(self) -> None:
        if not self.floor.replying().function_calls:
            self.function_call()  # bots that announce a call only this way


class _Walk:
    """One pass over a session's messages (see diagnose): each message to the part whose concern it is, and
    the bot's speaking, which moves them all."""

    def __init__(self):
        self.floor = _Floor()
        self.voice = _VoiceActivity(self.floor)
        self.user = _User(self.floor, self.voice)
        self.reply = _Reply(self.floor)
        self.seen: set[str] = set()  # message types the session has
        user, reply, voice = self.user, self.reply, self.voice
        # Each message type's handler, called with (at, data, message, event).
        self.routes: dict[str, Callable[[float, dict, dict, Event], None]] = {
            "user-started-speaking": self.user_started_speaking,
            "user-stopped-speaking": self.user_stopped_speaking,
            "vad-user-started-speaking": lambda at, data, message, event: voice.started(at),
            "vad-user-stopped-speaking": lambda at, data, message, event: voice.stopped(at),
            "user-transcription": lambda at, data, message, event: user.transcription(at, data),
            "user-input": lambda at, data, message, event: user.user_input(at, data),
            "send-text": user.send_text,
            "bot-llm-started": lambda at, data, message, event: reply.llm_started(at),
            **dict.fromkeys(LLM_TEXT, lambda at, data, message, event: reply.llm_text(at, data, message["type"])),
            "bot-tts-started": lambda at, data, message, event: reply.tts_started(at),
            **dict.fromkeys(TTS_TEXT, lambda at, data, message, event: reply.tts_text(data, message["type"])),
            "bot-output": lambda at, data, message, event: reply.output(data),
            "bot-transcription": lambda at, data, message, event: reply.transcription(data),
            "metrics": lambda at, data, message, event: reply.metrics(data),
            **dict.fromkeys(FUNCTION_STARTS, lambda at, data, message, event: reply.function_call()),
            "llm-function-call-in-progress": lambda at, data, message, event: reply.function_in_progress(),
            "bot-started-speaking": lambda at, data, message, event: self.bot_started_speaking(at),
            "bot-stopped-speaking": lambda at, data, message, event: self.bot_stopped_speaking(at),
            "bot-interrupted": lambda at, data, message, event: self.bot_interrupted(at),
            contributions.LATENCY_TYPE: lambda at, data, message, event: self.latency_breakdown(at, data),
        }

    @property
    def turns(self) -> list[_Turn]:
        return self.floor.turns

    @property
    def interruptions(self) -> list[Interruption]:
        return self.floor.interruptions

    def apply(self, event: Event) -> None:
        message = event.message
        if not event.valid or not isinstance(message, dict):
            return
        kind = message.get("type")
        if kind not in TYPES:
            return
        at = _number(event.received_at)
        if at is None:
            return
        data = message.get("data") if isinstance(message.get("data"), dict) else {}
        self.seen.add(kind)
        self.voice.lapse(at)  # voice activity the bot let pass: a backchannel
        handler = self.routes.get(kind)
        if handler is not None:
            handler(at, data, message, event)

    def settle(self, live: bool) -> None:
        """The messages are over: speech over the bot still under way is, so far, spoken on through."""
        self.voice.settle(decided=not live)

    # --- the user's speech, which the bot may take from voice activity under way ---

    def user_started_speaking(self, at: float, data: dict, message: dict, event: Event) -> None:
        held = self.voice.take()
        self.user.started(at)
        self.user.finals(held)  # the words the bot took the turn on belong to the turn it opened

    def user_stopped_speaking(self, at: float, data: dict, message: dict, event: Event) -> None:
        self.user.finals(self.voice.take())  # a turn whose start was not sent: its words came first
        self.user.stopped(at)

    # --- the bot's speaking: its reply begins, ends, or is cut ---

    def bot_started_speaking(self, at: float) -> None:
        floor = self.floor
        if floor.speaking is not None:
            return
        turn = floor.replying()
        turn.mark("bot_started", at)
        floor.speaking = turn

    def bot_stopped_speaking(self, at: float) -> None:
        floor = self.floor
        turn, floor.speaking = floor.speaking, None
        if turn is None:
            return
        turn.mark("bot_stopped", at, last=True)
        self.voice.bot_stopped(turn)
        for interruption in turn.interruptions:
            if interruption.cut_at is not None or interruption.voice:
                continue  # cut already; or voice activity the bot did not take, which never cuts
            if interruption is floor.open or interruption.speech_end is None or at - interruption.at < CUT_S:
                interruption.cut_at = at
                interruption.spoken_words = turn.spoken_words()
            elif interruption.opened is not None:
                interruption.opened.spoken_past = True  # the user had stopped; the bot spoke on past it

    def bot_interrupted(self, at: float) -> None:
        # Pipecat sends it at every user turn start; it is an interruption only while the bot speaks, and not
        # when it tells of the last one again (the user's speech just before it: turns.told_again, the reducer's
        # rule too).
        turn = self.floor.speaking
        held = self.voice.take()  # the bot took the speech under way as a turn
        if turn is not None and not told_again(self.floor.last_told(), at):
            self.floor.spoken_over(at, "client", turn, speech_end=at)
        self.user.finals(held)

    def latency_breakdown(self, at: float, data: dict) -> None:
        """The bot's breakdown of a turn's wait, on the turn whose bot started speaking as it was made (the one
        still waiting for its reply, or the last the bot spoke to): contributions.pick, the reducer's rule too."""
        if contributions.check(data) or not contributions.of_a_turn(data):
            return
        newest = self.floor.turn
        waiting = None
        if newest is not None and newest.at.get("bot_started") is None and newest.breakdown is None:
            waiting = (newest, newest.at.get("user_stopped"))
        last = next((t for t in reversed(self.turns[-3:]) if t.at.get("bot_started") is not None), None)
        spoken = None
        if last is not None and last.breakdown is None:
            spoken = (last, last.at.get("user_stopped"), last.at["bot_started"])
        turn = contributions.pick(at, contributions.released_at(data, at), waiting, spoken)
        if turn is not None:
            turn.breakdown = contributions.read(data)


def _classify(interruption: Interruption, seconds: float, most: int, live: bool) -> None:
    """Barge-in or backchannel, and why (see the module's docstring)."""
    if interruption.by == "client":
        interruption.kind = "barge_in"
        interruption.why = "the bot was interrupted with no user speech (the client's send-text, or its pipeline)"
        return
    if interruption.marked_backchannel:
        interruption.kind, interruption.why = "backchannel", "the bot marked it a backchannel"
        return
    if interruption.voice:
        interruption.kind, interruption.why = "backchannel", VOICE_WHY
        return
    speech = interruption.speech_ms()
    text = interruption.text.strip()
    if text:
        n = len(words_of(text))
        if is_acknowledgement(text, most):
            interruption.kind = "backchannel"
            interruption.why = f"{n} word{'s' if n != 1 else ''}, only acknowledgements"
        else:
            interruption.kind = "barge_in"
            interruption.why = f"{n} word{'s' if n != 1 else ''}, not only acknowledgements"
        return
    limit_ms = seconds * 1000
    if speech is not None:
        short = speech < limit_ms
        interruption.kind = "backchannel" if short else "barge_in"
        interruption.why = (
            f"no transcription; spoke {speech:.0f} ms ({'under' if short else 'at least'} {limit_ms:.0f} ms)"
        )
        return
    # Still speaking (or its stop never came): the bot's reaction is all that tells, for now.
    interruption.decided = not live
    interruption.kind = "barge_in" if interruption.cut_at is not None else "backchannel"
    interruption.why = "no transcription and no end of speech yet; " + (
        "the bot stopped" if interruption.cut_at else "the bot spoke on"
    )


ANCHORS = ("user_stopped", "text_sent", "llm_started", "tts_started", "bot_started")  # where a turn is on the clock


def _span_milestones(turn: _Turn, traces: dict | None, used: set) -> None:
    """Fill the turn's LLM and TTS milestones from the bot's spans where its messages have none."""
    if not traces:
        return
    anchor = next((turn.at[m] for m in ANCHORS if turn.at.get(m) is not None), None)
    if anchor is None:
        return
    best = None
    for index, span_turn in enumerate(traces.get("turns") or ()):
        start = _number(span_turn.get("start"))
        duration = _number(span_turn.get("duration_ms")) or 0.0
        if start is None or index in used:
            continue
        if start - 0.25 <= anchor <= start + duration / 1000 + 0.25:
            if best is None or abs(start - anchor) < abs(best[1]["start"] - anchor):
                best = (index, span_turn)
    if best is None:
        return
    used.add(best[0])
    turn.span_turn = best[1]
    for span in best[1].get("spans") or ():
        name = span.get("name")
        start_ms, ttfb = _number(span.get("start_ms")), _number(span.get("ttfb_ms"))
        if start_ms is None or name not in ("llm", "tts"):
            continue
        began = best[1]["start"] + start_ms / 1000
        if name == "llm" and turn.at.get("llm_started") is None:
            turn.mark("llm_started", began, "span")
            if turn.at.get("llm_first_token") is None and ttfb is not None:
                turn.mark("llm_first_token", began + ttfb / 1000, "span")
        if name == "tts":
            if turn.at.get("tts_started") is None:
                turn.mark("tts_started", began, "span")
            if turn.tts_ttfb_ms is None and ttfb is not None:
                turn.tts_ttfb_ms = ttfb


# Per milestone: the message that says it, and what the bot is probably not sending when a session has none.
SENT_BY = {
    "user_stopped": (
        ("user-stopped-speaking",),
        "the bot sends no user speaking events (RTVIObserver's user_speaking_enabled off?)",
    ),
    "transcript": (
        ("user-transcription", "user-input"),
        "the bot sends no user transcriptions (RTVIObserver's user_transcription_enabled off?)",
    ),
    "llm_started": (
        ("bot-llm-started",),
        "the bot's RTVI observer does not send LLM events (Pipecat's RTVIObserver with bot_llm_enabled off?), "
        "and no llm span",
    ),
    "llm_first_token": (LLM_TEXT, "the bot sends no LLM text (RTVIObserver's bot_llm_enabled off?), and no llm span"),
    "tts_first_audio": (
        ("bot-tts-started",),
        "the bot's RTVI observer does not send TTS events (RTVIObserver's bot_tts_enabled off?), and no tts span",
    ),
    "bot_started": (
        ("bot-started-speaking",),
        "the bot sends no speaking events (RTVIObserver's bot_speaking_enabled off?)",
    ),
}
SENT_BY["user_done"] = SENT_BY["user_stopped"]


def _why_missing(milestone: str, turn: _Turn, walk: _Walk, last: bool, live: bool) -> str:
    """Why a turn has no `milestone`, from what the session's messages say."""
    message = _message_of(milestone)
    if milestone in ("user_stopped", "user_done", "transcript") and turn.started_by == "bot":
        return f"no {message}: the turn was started by the bot"
    if milestone in ("user_stopped", "user_done", "transcript") and turn.started_by == "text":
        return "no speech: the turn was started by text the client sent (send-text)"
    unanswered = turn.at.get("bot_started") is None
    if turn.superseded and unanswered and milestone not in ("user_stopped", "user_done", "transcript"):
        return f"no {message}: the user spoke again before the bot answered (its reply was cancelled)"
    if last and live and unanswered:
        return f"not yet: no {message} so far"
    types, off = SENT_BY.get(milestone, ((), ""))
    if types and not walk.seen & set(types):
        return f"no {message}: {off}"
    if milestone in ("user_stopped", "user_done"):
        return f"no {message} for this turn (the message was lost, or the session ended first)"
    if milestone == "transcript":
        return f"no {message} for this turn: the STT heard no words (noise, or speech too short?)"
    if milestone == "llm_started":
        return f"no {message} in this turn: the reply did not come from the LLM (a scripted line?)"
    if milestone == "llm_first_token":
        if turn.function_calls:
            return f"no {message} in this turn: the LLM only called a function"
        return f"no {message} in this turn"
    if milestone == "tts_first_audio":
        return f"no {message} in this turn: a text-only reply (send-text with audio_response false?)"
    if milestone == "bot_started":
        return f"no {message}: the session ended first" if last else f"no {message}: the bot never spoke in this turn"
    return f"no {message}"


def _message_of(milestone: str) -> str:
    return {
        "user_started": "user-started-speaking",
        "user_stopped": "user-stopped-speaking",
        "user_done": "user-stopped-speaking",
        "transcript": "final transcription",
        "llm_started": "bot-llm-started",
        "llm_first_token": "bot-llm-text",
        "tts_first_audio": "bot-tts-started",
        "bot_started": "bot-started-speaking",
    }.get(milestone, milestone)


def _ms(a: float, b: float) -> float:
    return round((b - a) * 1000, 1)


def _turn_json(number: int, turn: _Turn, walk: _Walk, last: bool, live: bool) -> dict:
    at, sources = _milestones(turn)
    stages, missing = _stages(turn, at, walk, last, live)
    latency = _latency(turn, at)
    return {
        "number": number,
        "started_by": turn.started_by,
        "at": {m: at.get(m) for m in (*MILESTONES, "user_done")},
        "sources": sources,
        "stages": stages,
        "latency_ms": latency,
        "llm_ttfb_ms": turn.llm_ttfb_ms,
        "tts_ttfb_ms": turn.tts_ttfb_ms,
        "complete": not missing,
        "missing": missing,
        "in_progress": last and live and (at.get("bot_stopped") is None),
        "notes": _notes(turn, latency),
        "contributions": turn.breakdown["contributions"] if turn.breakdown else None,
        "contributions_total_ms": turn.breakdown["total_ms"] if turn.breakdown else None,
        "contributions_user_turn_ms": turn.breakdown["user_turn_ms"] if turn.breakdown else None,
        "interruptions": [_interruption_json(interruption, turn) for interruption in turn.interruptions],
        "function_calls": turn.function_calls,
        "trace_turn": turn.span_turn.get("turn_number") if turn.span_turn else None,
        "user_text": _clip(turn.user_text()),
        "bot_text": _clip(turn.bot_text()),
    }


def _milestones(turn: _Turn) -> tuple[dict, dict]:
    """The turn's milestones (epoch seconds) and their sources, with those derived from others: the first TTS
    audio, the LLM's first token from its ttfb when no token came, and when the user's turn ended."""
    at = dict(turn.at)
    sources = dict(turn.sources)
    if turn.at.get("tts_started") is not None:
        if turn.tts_ttfb_ms is not None:
            at["tts_first_audio"] = turn.at["tts_started"] + turn.tts_ttfb_ms / 1000
            sources["tts_first_audio"] = "bot-tts-started + TTS ttfb"
        else:
            at["tts_first_audio"] = turn.at["tts_started"]
            sources["tts_first_audio"] = "bot-tts-started (no TTS ttfb reported)"
    if at.get("llm_first_token") is None and at.get("llm_started") is not None and turn.llm_ttfb_ms is not None:
        at["llm_first_token"] = at["llm_started"] + turn.llm_ttfb_ms / 1000
        sources["llm_first_token"] = "bot-llm-started + LLM ttfb"
    stopped, transcript = at.get("user_stopped"), at.get("transcript")
    if turn.started_by == "text":
        at["user_done"] = at.get("text_sent")
    elif stopped is not None and transcript is not None:
        at["user_done"] = max(stopped, transcript)
    else:
        at["user_done"] = stopped if stopped is not None else transcript
    return at, sources


def _stages(turn: _Turn, at: dict, walk: _Walk, last: bool, live: bool) -> tuple[list, list]:
    """The turn's five stages (ms, or the problem that leaves one unmeasured), and the missing ones with why."""
    stages = []
    missing = []
    for stage, start, end, label in STAGES:
        a, b = at.get(start), at.get(end)
        # A bot's own turn has no user part to wait for, a typed one no speech: those stages do not apply.
        applies = not (
            (turn.started_by == "bot" and stage in ("transcription", "llm_start"))
            or (turn.started_by == "text" and stage == "transcription")
        )
        entry = {"stage": stage, "label": label, "ms": None, "problem": None, "applies": applies}
        if stage == "transcription" and a is not None and b is not None and b < a:
            entry["ms"] = 0.0  # Pipecat's usual order: the turn ends on its transcription, nothing waited for it
        elif a is not None and b is not None:
            if b + EPSILON < a:
                entry["problem"] = (
                    f"out of order: {MILESTONE_WORDS[end]} came {_ms(b, a):.0f} ms before {MILESTONE_WORDS[start]}"
                )
            else:
                entry["ms"] = max(0.0, _ms(a, b))
        else:
            gone = start if a is None else end
            entry["problem"] = _why_missing(gone, turn, walk, last, live)
        if entry["problem"]:
            missing.append({"stage": stage, "why": entry["problem"]})
        stages.append(entry)
    return stages, missing


def _latency(turn: _Turn, at: dict) -> float | None:
    """The user's stop (or the text sent) to the bot's first word, in ms; None without both, or out of order."""
    anchor = at.get("user_stopped") if turn.started_by == "user" else at.get("text_sent")
    if anchor is not None and at.get("bot_started") is not None and at["bot_started"] + EPSILON >= anchor:
        return max(0.0, _ms(anchor, at["bot_started"]))
    return None


def _notes(turn: _Turn, latency: float | None) -> list[str]:
    notes = []
    if turn.resumed:
        notes.append(
            f"the user paused and went on {turn.resumed} time{'s' if turn.resumed > 1 else ''} before the reply"
        )
    if turn.call_before_token:
        notes.append("the LLM called a function before its first token: that stage includes the call")
    if turn.span_turn is not None and turn.span_turn.get("user_bot_latency_ms") is not None and latency is not None:
        notes.append(f"its trace says {turn.span_turn['user_bot_latency_ms']:.0f} ms user to bot")
    disagreement = contributions.disagreement(turn.breakdown, latency)
    if disagreement:
        notes.append(disagreement)
    return notes


def _interruption_json(interruption: Interruption, turn: _Turn) -> dict:
    reply_words = max(turn.reply_words(), interruption.spoken_words)
    return {
        "at": interruption.at,
        "by": interruption.by,
        "kind": interruption.kind,
        "decided": interruption.decided,
        "why": interruption.why,
        "speech_ms": interruption.speech_ms(),
        "text": _clip(interruption.text),
        "cut": interruption.cut_at is not None,
        "spoken_words": interruption.spoken_words,
        "reply_words": reply_words,
        "spoken_share": round(interruption.spoken_words / reply_words, 3) if reply_words else None,
    }


def diagnose(
    events: Iterable[Event],
    traces: dict | None = None,
    *,
    backchannel_seconds: float = BACKCHANNEL_SECONDS,
    backchannel_words: int = BACKCHANNEL_WORDS,
    live: bool = False,
) -> dict:
    """Every turn of a session taken apart: {"turns": [...], "interruptions": {...}, "stages": [...]}.

    `events` are the session's stored messages in the order they were stored,
    each at its event time (events.event_time); `traces` is
    traces.session_traces()'s answer (None without spans). `live`: the session
    has not ended, so its last turn may still be under way ("not yet").
    Each turn (see _turn_json): its milestones (`at`, epoch seconds, and their
    `sources`), its five `stages` (ms, or the problem that leaves one
    unmeasured), `latency_ms`, `complete` and the `missing` stages with why,
    its `interruptions` (kind, why, speech_ms, cut, spoken_words of
    reply_words), notes, and the user's and the bot's text (clipped).
    """
    walk = _Walk()
    for event in events:
        walk.apply(event)
    walk.settle(live)
    for interruption in walk.interruptions:
        _classify(interruption, backchannel_seconds, backchannel_words, live and interruption.speech_end is None)
        opened = interruption.opened
        # A backchannel the bot spoke on through is not a turn: its speech folds back into the reply it was over.
        if (
            interruption.kind == "backchannel"
            and interruption.cut_at is None
            and opened is not None
            and not opened.has_reply()
        ):
            opened.removed = True
    turns = [t for t in walk.turns if not t.removed][-MAX_TURNS:]
    used: set = set()
    for turn in turns:
        _span_milestones(turn, traces, used)
    out = [_turn_json(i + 1, turn, walk, i == len(turns) - 1, live) for i, turn in enumerate(turns)]
    return {"turns": out, **summary(out)}


def summary(turns: list[dict]) -> dict:
    """A session's turns in a few figures: counts, and each stage's values (ms), for the agent's figures.

    Compact and JSON: what is cached per session (rtvi_monitor/sessions/queries.py) and merged by `aggregate`.
    """
    stages: dict[str, list[float]] = {name: [] for name in STAGE_NAMES}
    missing: dict[str, int] = {name: 0 for name in STAGE_NAMES}
    latency: list[float] = []
    kinds = {"barge_in": 0, "backchannel": 0}
    replies = 0
    breakdowns: list[list] = []  # each turn's [total ms, [[key, kind, ms], ...], number] (core/contributions.py)
    for turn in turns:
        if turn["at"].get("bot_started") is not None:
            replies += 1
        # Turn latency counts spoken turns only, as the reducer's (a session's own p50/p95, /metrics) does: a typed
        # turn's wait is from its text, not from a voice (core/figure_names.py TURN_LATENCY).
        if turn["latency_ms"] is not None and turn["started_by"] == "user":
            latency.append(turn["latency_ms"])
        for stage in turn["stages"]:
            if stage["ms"] is not None:
                stages[stage["stage"]].append(stage["ms"])
            elif not turn["in_progress"] and stage.get("applies", True):
                missing[stage["stage"]] += 1
        for interruption in turn["interruptions"]:
            kinds[interruption["kind"]] += 1
        if turn.get("contributions"):
            parts = [[part["key"], part["kind"], part["ms"]] for part in turn["contributions"]]
            breakdowns.append([turn["contributions_total_ms"], parts, turn["number"]])
    return {
        "counts": {
            "turns": len(turns),
            "complete": sum(1 for t in turns if t["complete"]),
            "replies": replies,
            "interruptions": kinds["barge_in"] + kinds["backchannel"],
            "barge_ins": kinds["barge_in"],
            "backchannels": kinds["backchannel"],
        },
        "missing": missing,
        "values": {**stages, "latency": latency},
        "breakdowns": breakdowns,
    }


def empty_summary() -> dict:
    return summary([])


def aggregate(summaries: Iterable[dict]) -> dict:
    """Sessions' summaries merged: rates per spoken reply and p50/p95 of each stage and of the latency.

    interruption_rate: the user (or client) spoke over a reply, per reply the bot spoke; barge_in_rate and
    backchannel_rate split it. Percentiles are nearest-rank over every turn's value (state.percentile).
    """
    counts = {key: 0 for key in empty_summary()["counts"]}
    values: dict[str, list[float]] = {name: [] for name in (*STAGE_NAMES, "latency")}
    missing = {name: 0 for name in STAGE_NAMES}
    breakdowns: list[list] = []
    sessions = 0
    for item in summaries:
        sessions += 1
        breakdowns.extend(item.get("breakdowns", ()))
        for key in counts:
            counts[key] += item["counts"].get(key, 0)
        for name in values:
            values[name].extend(item["values"].get(name, ()))
        for name in missing:
            missing[name] += item["missing"].get(name, 0)
    replies = counts["replies"]

    def rate(n: int) -> float | None:
        return round(n / replies, 4) if replies else None

    def spread(name: str) -> dict:
        ordered = sorted(values[name])
        return {"p50": percentile(ordered, 50), "p95": percentile(ordered, 95), "n": len(ordered)}

    return {
        "sessions": sessions,
        **counts,
        "interruption_rate": rate(counts["interruptions"]),
        "barge_in_rate": rate(counts["barge_ins"]),
        "backchannel_rate": rate(counts["backchannels"]),
        "stages": [
            {"stage": stage, "label": label, **spread(stage), "missing": missing[stage]}
            for stage, _, _, label in STAGES
        ],
        "latency": spread("latency"),
        "made_of": made_of(breakdowns),
    }


MIDDLE_BAND = (0.4, 0.6)  # the turns around the median wait, whose parts make the p50
SLOWEST_LISTED = 10  # the slowest turns named, each one click from its call's page


def _named(slowest: list[list]) -> list[dict]:
    """The slowest turns whose call is known (a breakdown as the agent's figures give it: [total, parts, turn
    number, session id]), slowest first, each with its largest part."""
    named = []
    for total, parts, *where in sorted(slowest, key=lambda b: b[0], reverse=True):
        if len(where) < 2:
            continue
        key, kind, ms = max(parts, key=lambda part: part[2]) if parts else ("", "", 0.0)
        named.append({"session_id": where[1], "turn": where[0], "wait_ms": total, "part": key, "kind": kind, "part_ms": ms})  # fmt: skip # noqa: E501
        if len(named) == SLOWEST_LISTED:
            break
    return named


def _mean_parts(group: list[list]) -> dict[tuple[str, str], float]:
    sums: dict[tuple[str, str], float] = {}
    for _, parts, *_ in group:
        for key, kind, ms in parts:
            sums[(key, kind)] = sums.get((key, kind), 0.0) + ms
    return {part: total / len(group) for part, total in sums.items()}


def made_of(breakdowns: list[list]) -> dict | None:
    """What the waits are made of, from the bots' own breakdowns (core/contributions.py): at the median (the
    turns between the 40th and 60th percentile of the wait) and at the slowest (the p95 turn and every one
    slower), each part's mean ms and its share of those turns' mean wait; and the SLOWEST_LISTED slowest turns by
    name where their calls are known (`_named`). The slowest turns are not the average ones made longer: a VAD's
    stop time is a fixed part of every turn, an LLM's queue only of some. None without any breakdown."""
    if not breakdowns:
        return None
    ordered = sorted(breakdowns, key=lambda b: b[0])
    n = len(ordered)
    low, high = int(MIDDLE_BAND[0] * n), max(int(MIDDLE_BAND[1] * n), int(MIDDLE_BAND[0] * n) + 1)
    middle, slowest = ordered[low:high], ordered[max(0, -(-95 * n // 100) - 1) :]
    at_p50, at_p95 = _mean_parts(middle), _mean_parts(slowest)
    wait50 = sum(b[0] for b in middle) / len(middle)
    wait95 = sum(b[0] for b in slowest) / len(slowest)
    totals = [b[0] for b in ordered]
    parts = [
        {
            "key": key,
            "kind": kind,
            "p50_ms": round(at_p50.get((key, kind), 0.0), 1),
            "p50_share": round(at_p50.get((key, kind), 0.0) / wait50, 4) if wait50 else None,
            "p95_ms": round(at_p95.get((key, kind), 0.0), 1),
            "p95_share": round(at_p95.get((key, kind), 0.0) / wait95, 4) if wait95 else None,
        }
        for key, kind in {**at_p50, **at_p95}
    ]
    parts.sort(key=lambda part: part["p95_ms"], reverse=True)
    return {
        "turns": n,
        "p50_ms": percentile(totals, 50),
        "p95_ms": percentile(totals, 95),
        "slowest_turns": len(slowest),
        "slowest": _named(ordered[-SLOWEST_LISTED:]),
        "parts": parts,
    }


def without_words(diagnosis: dict) -> dict:
    """The diagnosis without what anybody said (for members who may not read call contents): timings stay."""
    turns = []
    for turn in diagnosis["turns"]:
        turns.append(
            {
                **turn,
                "user_text": None,
                "bot_text": None,
                "interruptions": [{**i, "text": None} for i in turn["interruptions"]],
            }
        )
    return {**diagnosis, "turns": turns}
