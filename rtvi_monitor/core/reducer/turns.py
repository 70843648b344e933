"""The turns: the user stops speaking, the bot starts; each turn's latency, its waterfall, its interruption.

A turn is measured from user-stopped-speaking to the next bot-started-speaking
(the user talking on in between restarts it). While the user waits, the
reply's parts are noted as the messages say they began (the LLM, its first
token, the TTS), and the first LLM and TTS time-to-first-byte metrics attach
to it: the waterfall the page draws.
"""

from typing import Any

from rtvi_monitor.core import contributions
from rtvi_monitor.core.patches import Tail
from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.services import service_kind

INTERRUPTION_MERGE_S = 1.0  # a bot-interrupted this close to the last interruption is that one, told again


def told_again(last: float | None, at: float) -> bool:
    """Whether a bot-interrupted at `at` is the session's last interruption (at `last`) told again.

    Pipecat sends bot-interrupted as a user's speech cuts the bot off, just
    after that speech's user-started-speaking: within INTERRUPTION_MERGE_S of
    the last interruption it is that one, not one of its own. Later, or with
    no interruption before it, it is one (the client's doing). A user's speech
    over the bot is always its own interruption, however close to the last.
    The one rule for the reducer (Turns.interrupted) and the turn diagnosis
    (rtvi_monitor/core/diagnosis.py); clocks may be skewed, so either side.
    """
    return last is not None and abs(at - last) < INTERRUPTION_MERGE_S


def percentile(ordered: list[float], p: float) -> float | None:
    """The p-th percentile of sorted values, nearest rank (None for none)."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


class Turns:
    """The session's turns and interruptions, and the turn under way."""

    __slots__ = ("_latency", "interruptions", "metrics_turn", "pending", "turns")

    def __init__(self):
        self.turns = Tail(limits.MAX_ITEMS)
        self.interruptions = Tail(limits.MAX_ITEMS)
        self.pending: dict | None = None  # the user stopped; the bot has not started speaking yet
        self.metrics_turn: dict | None = None  # the turn ttfb metrics still attach to
        self._latency: dict | None = None  # cached until a turn is added

    def user_started(self) -> None:
        self.metrics_turn = None
        if self.pending is not None:
            self.pending = None  # the user went on talking: the turn is measured from the next stop

    def user_stopped(self, at: float) -> None:
        self.pending = self.metrics_turn = {
            "index": None,
            "user_stopped_at": at,
            "bot_started_at": None,
            "latency_ms": None,
            "llm_ttfb_ms": None,
            "tts_ttfb_ms": None,
            # When the reply's parts began, where the messages say (epoch seconds): the waterfall.
            "llm_started_at": None,
            "llm_first_token_at": None,
            "tts_started_at": None,
            "interrupted": False,
            # The bot's own breakdown of the wait (rtvi-dashboard-latency, core/contributions.py), when it sends one.
            "contributions": None,
            "contributions_total_ms": None,
            "contributions_user_turn_ms": None,
        }

    def bot_started(self, at: float) -> dict | None:
        """The bot started speaking: the turn it ends, when the user was waiting (else None)."""
        turn = self.pending
        if turn is not None:
            turn["bot_started_at"] = at
            turn["latency_ms"] = round((at - turn["user_stopped_at"]) * 1000, 3)
            turn["index"] = self.turns.next_position()
            self.turns.append(turn)
            self._latency = None
            self.pending = None
        return turn

    def interrupted(self, at: float, by_user: bool) -> None:
        """The bot was cut off (by a user's speech, else by a bot-interrupted): an interruption, of the last turn."""
        if not by_user and told_again(self.interruptions[-1] if self.interruptions else None, at):
            return
        self.interruptions.append(at)
        if self.turns:
            self.turns[-1]["interrupted"] = True
            self.turns.touch(-1)

    def milestone(self, key: str, at: float) -> None:
        """The first time a part of the reply began, while the user waits for it."""
        turn = self.pending
        if turn is not None and turn[key] is None:
            turn[key] = at

    def ttfb(self, processor: Any, value_ms: float) -> None:
        """The first LLM and TTS time-to-first-byte of a turn (the start-of-session zeros excluded).

        An STT's, or an unknown processor's, is neither.
        """
        turn = self.metrics_turn
        if turn is None:
            return
        key = {"llm": "llm_ttfb_ms", "tts": "tts_ttfb_ms"}.get(service_kind(processor))
        if key and turn[key] is None:
            turn[key] = value_ms
            if turn["index"] is not None:
                self.turns.touch_position(turn["index"])

    def latency_breakdown(self, event, message, data, at) -> None:
        """The bot's breakdown of a turn's wait: kept on the turn whose bot started speaking as it was made.

        Not a turn's (the greeting's, or a malformed one a server before this
        type stored as unknown): nothing. Which turn: contributions.pick.
        """
        if contributions.check(data) or not contributions.of_a_turn(data):
            return
        pending, last = self.pending, (self.turns[-1] if self.turns else None)
        waiting = (pending, pending["user_stopped_at"]) if pending and pending["contributions"] is None else None
        spoken = None
        if last is not None and last["contributions"] is None:
            spoken = (last, last["user_stopped_at"], last["bot_started_at"])
        turn = contributions.pick(at, contributions.released_at(data, at), waiting, spoken)
        if turn is None:
            return
        kept = contributions.read(data)
        turn["contributions"] = kept["contributions"]
        turn["contributions_total_ms"] = kept["total_ms"]
        turn["contributions_user_turn_ms"] = kept["user_turn_ms"]
        if turn is last:
            self.turns.touch(-1)

    def latency(self) -> dict:
        """p50, p95 and max of the turns' latency in ms (None when no turn has one)."""
        if self._latency is None:
            values = sorted(t["latency_ms"] for t in self.turns if t["latency_ms"] is not None)
            self._latency = {
                "p50": percentile(values, 50),
                "p95": percentile(values, 95),
                "max": values[-1] if values else None,
            }
        return dict(self._latency)


def with_waterfall(turn: dict) -> dict:
    """A turn with its waterfall: the parts of the wait, in ms after the user stopped speaking.

    Each part is {"part", "from_ms", "to_ms"}; a part the messages only
    half tell (no first token, no TTS time-to-first-byte) has to_ms None.
    The page draws these bars as they are.
    """
    start = turn["user_stopped_at"]

    def offset(at: float | None) -> float | None:
        return None if at is None else round(max(0.0, at - start) * 1000, 1)

    parts = []
    llm_at, tts_at = turn.get("llm_started_at"), turn.get("tts_started_at")
    if llm_at is not None:
        first = turn.get("llm_first_token_at")
        if first is None and turn["llm_ttfb_ms"] is not None:
            first = llm_at + turn["llm_ttfb_ms"] / 1000
        parts.append({"part": "llm_first_token", "from_ms": offset(llm_at), "to_ms": offset(first)})
    if tts_at is not None:
        audio = tts_at + turn["tts_ttfb_ms"] / 1000 if turn["tts_ttfb_ms"] is not None else None
        parts.append({"part": "tts_first_audio", "from_ms": offset(tts_at), "to_ms": offset(audio)})
    if turn["latency_ms"] is not None:
        parts.append({"part": "bot_speaking", "from_ms": 0.0, "to_ms": round(turn["latency_ms"], 1)})
    return {**turn, "waterfall": parts}
