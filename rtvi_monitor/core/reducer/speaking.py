"""Who is speaking, and what the LLM and the TTS are doing: the timeline's lanes, and what they move.

The speaking messages end one turn and begin the next (rtvi_monitor/reducer/turns.py)
and open and close the transcript's lines (rtvi_monitor/reducer/transcript.py).
bot-interrupted comes at every user turn start, whether or not the bot was
saying anything: it counts as an interruption only when the bot was speaking.
"""

from rtvi_monitor.core.patches import Tail
from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.reducer.limits import clip
from rtvi_monitor.core.reducer.transcript import Transcript, join_piece
from rtvi_monitor.core.reducer.turns import Turns

LANES = ("user_speaking", "bot_speaking", "llm_busy", "tts_busy")


class Lane:
    """Intervals of one activity (speaking, busy) that never overlap themselves."""

    __slots__ = ("intervals", "open")

    def __init__(self):
        self.intervals = Tail(limits.MAX_INTERVALS)
        self.open = False

    def start(self, at: float) -> bool:
        if self.open:
            return False
        if self.intervals and self.intervals[-1][1] is not None and at < self.intervals[-1][1]:
            at = self.intervals[-1][1]  # received out of order: never overlap the previous interval
        self.intervals.append([at, None])
        self.open = True
        return True

    def stop(self, at: float) -> bool:
        if not self.open:
            return False
        self.intervals[-1][1] = max(at, self.intervals[-1][0])
        self.intervals.touch(-1)
        self.open = False
        return True


class Speaking:
    """The lanes (LANES, by name), the LLM's and the TTS's state, and the rules that move them."""

    __slots__ = (
        "_bot",
        "_lanes",
        "_llm_busy",
        "_text_sources",
        "_transcript",
        "_tts_busy",
        "_turns",
        "_user",
        "llm",
        "tts",
    )

    def __init__(self, lanes: dict[str, Lane], turns: Turns, transcript: Transcript):
        self._lanes = lanes
        self._user, self._bot = lanes["user_speaking"], lanes["bot_speaking"]
        self._llm_busy, self._tts_busy = lanes["llm_busy"], lanes["tts_busy"]
        self._turns = turns
        self._transcript = transcript
        self.llm = {"busy": False, "current_tokens": "", "last_user_llm_text": ""}
        self.tts = {"busy": False, "current_text": ""}
        self._text_sources: dict[str, str] = {}  # "llm"/"tts" -> the message type that carries it here

    # --- who is speaking -----------------------------------------------------------

    def user_started(self, event, message, data, at):
        if not self._user.start(at):
            return
        if self._bot.open:
            self._interrupt(at, by_user=True)
        self._transcript.user_started_speaking()
        self._turns.user_started()

    def user_stopped(self, event, message, data, at):
        self._user.stop(at)
        self._turns.user_stopped(at)

    def bot_started(self, event, message, data, at):
        self._bot.start(at)
        self._transcript.bot_started_speaking()
        turn = self._turns.bot_started(at)
        if turn is not None:
            self._transcript.answers(turn)

    def bot_stopped(self, event, message, data, at):
        self._bot.stop(at)
        self._transcript.bot_stopped_speaking()

    def bot_interrupted(self, event, message, data, at):
        # Pipecat sends this at every user turn start; it cuts the bot off only when it was speaking.
        if self._bot.open:
            self._interrupt(at, by_user=False)

    def _interrupt(self, at: float, by_user: bool) -> None:
        """The user (or the client) cut the bot off while it was speaking.

        Pipecat cancels the reply's LLM and TTS work then, and often sends no
        bot-llm-stopped or bot-tts-stopped for it: their lanes end here.
        """
        self._transcript.cut_unspoken()
        for lane, service in ((self._llm_busy, self.llm), (self._tts_busy, self.tts)):
            if lane.stop(at):
                service["busy"] = False
        self._turns.interrupted(at, by_user)

    def end(self, at: float) -> None:
        """The session ended: nobody speaks or works any more."""
        for lane in self._lanes.values():
            lane.stop(at)
        self.llm["busy"] = self.tts["busy"] = False

    # --- the LLM and the TTS -----------------------------------------------------

    def _work_started(self, lane: Lane, service: dict, text_key: str, at: float) -> None:
        if lane.start(at):
            service["busy"] = True
            service[text_key] = ""

    def _work_stopped(self, lane: Lane, service: dict, at: float) -> None:
        lane.stop(at)
        service["busy"] = False

    def llm_started(self, event, message, data, at):
        self._work_started(self._llm_busy, self.llm, "current_tokens", at)
        self._transcript.llm_started()
        self._turns.milestone("llm_started_at", at)

    def llm_stopped(self, event, message, data, at):
        self._work_stopped(self._llm_busy, self.llm, at)

    def user_llm_text(self, event, message, data, at):
        self.llm["last_user_llm_text"] = clip(data["text"])

    def tts_started(self, event, message, data, at):
        self._work_started(self._tts_busy, self.tts, "current_text", at)
        self._turns.milestone("tts_started_at", at)

    def tts_stopped(self, event, message, data, at):
        self._work_stopped(self._tts_busy, self.tts, at)

    def _one_source(self, kind: str, msg_type: str) -> bool:
        """Whether this message is the session's source of `kind` text ("llm" or "tts").

        Pipecat 1.13+ sends clients of protocol 2.2 both the deprecated
        bot-llm-text / bot-tts-text and the llm-raw-text / tts-raw-text that
        replace them (2.0 sends only the new ones): the same text twice. The
        type that comes first in a session is its source; the other is skipped.
        """
        source = self._text_sources.setdefault(kind, msg_type)
        return source == msg_type

    def tts_text(self, event, message, data, at):
        if not self._one_source("tts", message["type"]):
            return
        text = clip(data["text"])
        self.tts["current_text"] = clip(join_piece(self.tts["current_text"], text))
        if text.strip():
            self._transcript.tts_text(event, text, at)

    def llm_text(self, event, message, data, at):
        if not self._one_source("llm", message["type"]):
            return
        text = clip(data["text"])
        turn = self._turns.pending
        if text and turn is not None and turn["llm_first_token_at"] is None:
            # The first token of a new reply: the LLM's text starts over even when no bot-llm-started
            # said so (a bot with the LLM's messages off but its raw text on).
            self.llm["current_tokens"] = ""
        if text:
            self._turns.milestone("llm_first_token_at", at)
        self.llm["current_tokens"] = clip(self.llm["current_tokens"] + text)
        if text:
            self._transcript.llm_text(event, text, at)
