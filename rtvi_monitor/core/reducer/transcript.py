"""The transcript: what the user and the bot said, one line per utterance, from the messages that carry it.

What real Pipecat bots send shapes the rules (docs/PROTOCOL.md, and a real
Pipecat 1.14 pipeline's traffic, see tests/rtvi_samples.py):

- The user's words arrive twice, as user-input (input_type "transcription")
  and user-transcription, partials then a final: one transcript line, the
  partials replaced by the final text.
- A bot sentence arrives up to five ways: bot-output (v2: "new", then
  "in-progress" per word, then "completed"; v1 clients also get one per
  word), bot-tts-text, bot-transcription, bot-llm-text tokens. A bot turn is
  one transcript line, built from the best source the bot sends, each
  sentence once (bot-output segments are keyed by segment_id).

Who is speaking (rtvi_monitor/reducer/speaking.py) opens and closes the
lines, and hands this the bot's LLM and TTS text.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rtvi_monitor.core.patches import Tail
from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.reducer.limits import cap_dict, clip

if TYPE_CHECKING:
    from rtvi_monitor.core.reducer.speaking import Lane
    from rtvi_monitor.core.state import Event

WORD_TYPES = frozenset({"word", "token"})  # bot-output of single words: progress, not sentences

# Where a bot turn's text comes from, best first: what was spoken beats what was written.
BOT_SOURCES = ("bot-output", "bot-tts-text", "bot-transcription", "bot-llm-text")


def join_piece(text: str, piece: str) -> str:
    """Join streamed words that may or may not carry their own spaces."""
    if not text:
        return piece.lstrip()
    if piece[:1].isspace() or text[-1:].isspace() or piece[:1] in ",.;:!?'":
        return text + piece
    return f"{text} {piece}"


class Segment:
    """One bot-output segment (a sentence, usually) of a bot transcript line."""

    __slots__ = ("cut", "from_words", "item", "spoken", "text", "will_be_spoken")

    def __init__(self, item: dict, text: str, from_words: bool):
        self.item = item
        self.text = text
        self.from_words = from_words  # built from v1 per-word messages until its sentence arrives
        self.spoken = ""  # the longest spoken-so-far text reported
        self.will_be_spoken: bool | None = None
        self.cut = False  # interrupted: only what was spoken of it shows

    def shown(self) -> str:
        return self.spoken if self.cut else self.text

    def hear(self, data: dict, text: str, word: bool) -> None:
        """How much of it has been spoken, as a bot-output about it says (an interruption cuts the rest)."""
        status = data.get("spoken_status")
        progress = data.get("spoken_progress")
        if not word and data.get("will_be_spoken") is not None:
            self.will_be_spoken = data["will_be_spoken"]
        if status == "completed" or (data.get("spoken") is True and not word):
            self.spoken, self.cut = self.text, False  # all of it said, even if late
        elif isinstance(progress, dict) and isinstance(progress.get("accumulated_text"), str):
            spoken = progress["accumulated_text"].strip()
            if len(spoken) > len(self.spoken):
                self.spoken = spoken
        elif word:  # 1.x clients: the words of the sentence, as each is spoken
            self.spoken = self.text if self.from_words else clip(join_piece(self.spoken, text.strip()))


class Sentences:
    """The bot's sentences from bot-output: which segment each message is about, each sentence once.

    A current bot keys its segments by segment_id (updates of one may come
    late, after its line is over); an old v1 bot has none, and its sentences
    are matched by their text, within the line.
    """

    __slots__ = ("_by_key",)

    def __init__(self):
        self._by_key: dict[Any, Segment] = {}  # segment_id -> segment, for updates that come late

    def about(
        self, data: dict, text: str, word: bool, current: dict | None, line: Callable[[], dict]
    ) -> Segment | None:
        """The segment a bot-output is about: a known one, or a new one on `line()` (the bot line under way, else
        a new one; `current` is the line under way, if any). None: nothing of it to show."""
        key = data.get("segment_id")
        if not isinstance(key, (int, str)) or isinstance(key, bool):
            key = None
        elif isinstance(key, str):
            key = key[: limits.MAX_KEY]
        segment = self._by_key.get(key) if key is not None else None
        if segment is not None and segment.item is not current and segment.text != text.strip():
            # Not a late status of that sentence (those repeat its text): an id used again in a
            # later turn, as bots that count segments per turn do.
            segment = None
        if segment is None and not text.strip():
            return None
        if segment is None:
            item = line()
            if len(item["_order"]) >= limits.MAX_SEGMENTS or len(item["text"]) >= limits.MAX_TEXT:
                return None  # the line is full: what it would add is never shown, so it is not kept
            if key is None:
                return self._unkeyed(item, text.strip(), word, data)
            segment = Segment(item, text.strip(), word)
            item["_order"].append(segment)
            self._by_key[key] = segment
            cap_dict(self._by_key, limits.MAX_SEGMENTS)
        elif word:
            if segment.from_words:
                segment.text = clip(join_piece(segment.text, text.strip()))  # v1 words before their sentence
        else:
            segment.text, segment.from_words = text.strip(), False
        return segment

    @staticmethod
    def _unkeyed(item: dict, text: str, word: bool, data: dict) -> Segment | None:
        """Old v1 bots: no segment_id; a sentence comes unspoken, then spoken (or as words).

        Sentences are matched by their text, so a sentence a bot repeats word
        for word within one turn is shown once.
        """
        order = item["_order"]
        if word:
            if any(not s.from_words for s in order):
                return None  # its sentence is there already: a word only says it is being spoken
            if order and order[-1].from_words:
                order[-1].text = clip(join_piece(order[-1].text, text))
                return order[-1]
        else:
            same = [s for s in order if s.text == text]
            if same:
                if data.get("spoken") is True:
                    return next((s for s in same if not s.spoken), None)  # the unspoken one it confirms
                return None  # the same sentence again
        segment = Segment(item, text, word)
        order.append(segment)
        return segment


class Transcript:
    """The transcript's lines, oldest first; a line's keys starting with "_" are its bookkeeping."""

    __slots__ = (
        "_after_operator",
        "_bot",
        "_bot_item",
        "_chat_ids",
        "_reply_turn",
        "_sentences",
        "_user",
        "_user_item",
        "lines",
    )

    def __init__(self, lanes: dict[str, "Lane"]):
        self.lines = Tail(limits.MAX_ITEMS, budget=limits.TRANSCRIPT_BUDGET, size=lambda item: len(item["text"]) + 64)
        self._user = lanes["user_speaking"]
        self._bot = lanes["bot_speaking"]
        self._user_item: dict | None = None  # the voice line partials update, and finals complete
        self._bot_item: dict | None = None  # the bot line of the current turn
        self._sentences = Sentences()  # the bot-output segments
        self._chat_ids: dict[str, None] = {}  # send-text ids, to skip Pipecat's user-input echo of them
        self._reply_turn: int | None = None  # the turn whose reply the next new bot line is
        self._after_operator = False  # an operator's line came: the bot's next answer is a line of its own

    # --- what who-is-speaking tells it ------------------------------------------

    def user_started_speaking(self) -> None:
        """A user turn: the bot's line is over, the user's next words start a new line."""
        self._close_bot_item()
        self._user_item = None
        self._reply_turn = None
        self._after_operator = False

    def llm_started(self) -> None:
        """The LLM runs: after an operator's line, on their text (the bot's answer to it is a line of its own)."""
        if self._after_operator:
            self._after_operator = False
            self._close_bot_item()

    def bot_started_speaking(self) -> None:
        if self._after_operator and (self._bot_item is None or self._bot_item["final"]):
            self.llm_started()  # a bot that says no LLM ran: speaking again after an operator's line
        if self._bot_item is not None:
            self._bot_item["final"] = False  # speaking again after a pause mid-answer
            self._touch(self._bot_item)

    def bot_stopped_speaking(self) -> None:
        if self._bot_item is not None:
            self._bot_item["final"] = True
            self._touch(self._bot_item)

    def answers(self, turn: dict) -> None:
        """The bot line that answers this turn: the one under way (tokens come before the speech), or the next."""
        item = self._bot_item
        if item is not None and item["turn"] is None and item["at"] >= turn["user_stopped_at"]:
            item["turn"] = turn["index"]
            self._touch(item)
        else:
            self._reply_turn = turn["index"]

    def cut_unspoken(self) -> None:
        """An interruption: what the bot meant to say but had not yet said leaves its line."""
        item = self._bot_item
        if item is None:
            return
        item["interrupted"] = True
        for segment in item["_order"]:
            if segment.will_be_spoken and segment.spoken != segment.text:
                segment.cut = True
        self._show(item)

    # --- the user ------------------------------------------------------------------

    def _voice(self, event: "Event", text: str, final: bool, at: float) -> None:
        item = self._user_item
        if item is not None and item["final"]:
            if final and item["text"] == text:
                return  # the same final again: user-input and user-transcription both carry it
            item = None
        text = clip(text)
        if item is None:
            item = {"role": "user", "text": text, "final": final, "source": "voice", "seq": event.seq, "at": at}
            user = self._user
            # Words while the bot speaks, from a bot that marks user turns and has none under way: a "mhm" its
            # turn strategy let pass (Pipecat 1.4+ sends it as voice activity and a transcription). Like a
            # backchannel, it does not end the bot's line, which goes on.
            if not (self._bot.open and user.intervals and not user.open):
                self._close_bot_item()
            self._append(item)
            self._user_item = item
        else:
            item["text"], item["final"], item["seq"], item["at"] = text, final, event.seq, at
            self._touch(item)

    def user_transcription(self, event, message, data, at):
        self._voice(event, data["text"], data["final"] is True, at)

    def user_input(self, event, message, data, at):
        kind = data.get("input_type")
        if kind == "transcription":
            self._voice(event, data["text"], data.get("final") is not False, at)
        elif kind == "chat":
            if data.get("msg_id") not in self._chat_ids:
                self._chat(event, data["text"], at)
        elif kind == "backchannel":
            # A "mhm" while the bot talks: it does not interrupt, nor end the bot's line.
            self._append(
                {
                    "role": "user",
                    "text": clip(data["text"]),
                    "final": True,
                    "source": "backchannel",
                    "seq": event.seq,
                    "at": at,
                }
            )
        # Older bots send user-input without input_type beside every transcription: nothing new.

    def send_text(self, event, message, data, at):
        self.remember_chat(message.get("id"))
        self._chat(event, data["content"], at)

    def remember_chat(self, msg_id) -> None:
        """A send-text's id: Pipecat's user-input echo of it is not said again."""
        if isinstance(msg_id, str):
            self._chat_ids[msg_id] = None
            cap_dict(self._chat_ids, 1000)

    def interject(self, item: dict) -> None:
        """A line that is neither the caller's nor the model's (an operator's, reducer/operators.py). What the bot
        is saying goes on in its line; what it says next (its LLM run again) is a line of its own, never glued onto
        the reply before: a bot may answer an operator's text at once or at its next turn."""
        self._after_operator = True  # what the caller is saying goes on in their line too
        self._append(item)

    def _chat(self, event: "Event", text: str, at: float) -> None:
        last = self.lines[-1] if self.lines else None
        if last is not None and last["source"] == "chat" and last["text"] == text:
            return  # send-text from the client, then Pipecat's user-input for it
        self._close_bot_item()
        self._user_item = None
        self._append({"role": "user", "text": clip(text), "final": True, "source": "chat", "seq": event.seq, "at": at})

    def _append(self, item: dict) -> None:
        item["_pos"] = self.lines.next_position()
        self.lines.append(item)

    def _touch(self, item: dict) -> None:
        """A transcript line changed after it was added."""
        self.lines.touch_position(item["_pos"])

    touch = _touch

    # --- the bot -------------------------------------------------------------------

    def _close_bot_item(self) -> None:
        if self._bot_item is not None:
            self._bot_item["final"] = True
            self._touch(self._bot_item)
            self._bot_item = None

    def _bot_line(self, source: str, event: "Event", at: float) -> dict:
        item = self._bot_item
        if item is None:
            item = {
                "role": "bot",
                "text": "",
                "final": False,
                "source": source,
                "seq": event.seq,
                "at": at,
                "interrupted": False,
                "turn": self._reply_turn,  # the index of the turn this line answers, if any
                "_order": [],  # bot-output segments in the order they first came
                "_parts": {},  # source -> its text of this turn
            }
            self._append(item)
            self._bot_item = item
            self._user_item = None
            self._reply_turn = None
        return item

    def _show(self, item: dict) -> None:
        """The line's text: from the best source it has."""
        self._pick_text(item)
        item["text"] = clip(item["text"])
        self._touch(item)

    def _pick_text(self, item: dict) -> None:
        parts = item["_parts"]
        order = item["_order"]
        fallbacks = BOT_SOURCES[1:]
        if order:
            text = " ".join(filter(None, (s.shown() for s in order))).strip()
            if text:
                item["source"], item["text"] = "bot-output", text
                return
            fallbacks = ("bot-tts-text",)  # all of it cut off: only what the TTS spoke was said
        for source in fallbacks:
            part = parts.get(source)
            if part:
                item["source"] = source
                item["text"] = " ".join(part).strip() if isinstance(part, list) else part.strip()
                return
        item["text"] = ""

    def bot_output(self, event, message, data, at):
        text = clip(data["text"])
        word = (data.get("output_type") or data.get("text_type") or data.get("aggregated_by")) in WORD_TYPES
        segment = self._sentences.about(
            data, text, word, self._bot_item, lambda: self._bot_line("bot-output", event, at)
        )
        if segment is not None:
            segment.hear(data, text, word)
            self._show(segment.item)

    def bot_transcription(self, event, message, data, at):
        text = clip(data["text"].strip())
        if text:
            item = self._bot_line("bot-transcription", event, at)
            sentences = item["_parts"].setdefault("bot-transcription", [])
            if len(sentences) < limits.MAX_SEGMENTS and sum(map(len, sentences)) < limits.MAX_TEXT:
                sentences.append(text)
            self._show(item)

    def tts_text(self, event: "Event", text: str, at: float) -> None:
        """What the TTS said (bot-tts-text or tts-raw-text, not blank): the line's second-best source."""
        item = self._bot_line("bot-tts-text", event, at)
        parts = item["_parts"]
        parts["bot-tts-text"] = clip(join_piece(parts.get("bot-tts-text", ""), text))
        if not item["_order"]:
            self._show(item)

    def llm_text(self, event: "Event", text: str, at: float) -> None:
        """The LLM's tokens (bot-llm-text or llm-raw-text, not empty): the line's last resort."""
        item = self._bot_line("bot-llm-text", event, at)
        parts = item["_parts"]
        parts["bot-llm-text"] = clip(parts.get("bot-llm-text", "") + text)
        # Tokens are the last resort: rebuild the line only while nothing better has come.
        if item["source"] == "bot-llm-text":
            item["text"] = parts["bot-llm-text"].strip()
            self._touch(item)
