"""The Overview's error groups: the errors of the last hour, grouped by what they say.

An error's group is its text with numbers and ids masked ("TTS websocket
reconnected after 1532 ms" and "... after 88 ms" are one group), its agent,
and whether it was fatal. The errors are the stored `error` and
`error-response` messages, read as the reducer reads them (`reducer.errors.error_of`),
through a partial index that holds only those rows.
"""

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models.functions import Right, Substr

from rtvi_monitor.core.reducer.errors import ERROR_TYPES, error_of
from rtvi_monitor.sessions.events import stored_message
from rtvi_monitor.sessions.models import Event

MAX_ROWS = 20_000  # newest errors read per Overview; an hour with more is summarised from these
MAX_TEXT = 300
SESSIONS_SHOWN = 8

MAX_READ = 4000  # characters of a stored error message read: its text is near the start
TAIL_READ = 200  # and of its end, where Pipecat's `fatal` comes after a long text


def _id_or_word(match: re.Match) -> str:
    """A word that mixes letters and digits (req_7f3a9c, call_abc123, a UUID) is an id."""
    word = match.group(0)
    return "<id>" if any(c.isdigit() for c in word) and any(c.isalpha() for c in word) else word


# Linear-time patterns only (a bot chooses the text): ids first, then what is left of numbers.
_MASKS = [
    (re.compile(r"[\w-]{6,}"), _id_or_word),
    (re.compile(r"\d+(?:[.,]\d+)*"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def normalise(text) -> str:
    """An error's text with numbers and ids masked: what errors of one kind have in common."""
    if not isinstance(text, str):
        text = "(no message)" if text is None else json.dumps(text, sort_keys=True)
    text = text[: MAX_TEXT * 2]  # what is masked is bounded, whatever a bot sent
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return text.strip()[:MAX_TEXT] or "(empty message)"


_TEXT_FIELD = re.compile(r'"(?:error|message)"\s*:\s*"((?:[^"\\]|\\.){0,' + str(MAX_TEXT) + "})")


def _text_of_head(head: str) -> str:
    """The error text at the start of a stored message too long to read whole (bounded pattern: linear)."""
    found = _TEXT_FIELD.search(head)
    if found is None:
        return head[:MAX_TEXT]
    try:
        return json.loads(f'"{found.group(1)}"')
    except ValueError:  # cut inside an escape
        return found.group(1)


@dataclass
class ErrorGroup:
    text: str  # normalised
    example: str  # the newest error's own text
    agent_id: str | None
    fatal: bool
    count: int = 0
    first_at: float = 0.0
    last_at: float = 0.0
    sessions: dict[str, None] = field(default_factory=dict)  # session ids, newest first
    spark: list[int] = field(default_factory=list)  # errors per bucket, oldest first
    agent_name: str = ""  # as its newest session names it (the page may know a newer name)

    @property
    def session_count(self) -> int:
        return len(self.sessions)

    @property
    def shown_sessions(self) -> list[str]:
        return list(self.sessions)[:SESSIONS_SHOWN]

    @property
    def first_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.first_at).astimezone()

    @property
    def last_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.last_at).astimezone()


def error_groups(
    organization, now: datetime, window: timedelta = timedelta(hours=1), buckets: int = 12
) -> list[ErrorGroup]:
    """The organization's errors since `now - window`, grouped; fatal groups first, then the biggest."""
    end = now.timestamp()
    start = end - window.total_seconds()
    width = window.total_seconds() / buckets
    rows = (
        Event.objects.filter(
            type__in=ERROR_TYPES,
            valid=True,
            received_at__gte=start,
            session__organization=organization,
            session__eval_run="",  # an eval run's calls are no fleet's errors (Session.objects.calls)
        )
        .order_by("-received_at")
        .annotate(head=Substr("message", 1, MAX_READ), tail=Right("message", TAIL_READ))
        .values_list(
            "session__session_id", "session__agent_key", "session__agent_name", "type", "received_at", "head", "tail"
        )[:MAX_ROWS]
    )
    groups: dict[tuple, ErrorGroup] = {}
    for session_id, agent_id, agent_name, msg_type, at, raw, tail in rows:
        message = stored_message(raw)
        data = message.get("data") if isinstance(message, dict) else None
        if isinstance(data, dict):
            text, fatal = error_of(msg_type, data)
        else:  # longer than what is read: the start of its text stands for it
            # "fatal" comes before the text (the spec's order) or after it (Pipecat's): look at both ends.
            fatal = any('"fatal":true' in end.replace(" ", "") for end in (raw, tail))
            text = _text_of_head(raw)
        agent = agent_id or None
        key = (normalise(text), agent, fatal)
        group = groups.get(key)
        if group is None:  # rows come newest first
            example = text if isinstance(text, str) else normalise(text)
            group = groups[key] = ErrorGroup(
                key[0], example[:MAX_TEXT], agent, fatal, last_at=at, spark=[0] * buckets, agent_name=agent_name
            )
        group.count += 1
        group.first_at = at
        group.sessions.setdefault(session_id, None)
        group.spark[min(buckets - 1, max(0, int((at - start) // width)))] += 1
    return sorted(groups.values(), key=lambda g: (not g.fatal, -g.count, -g.last_at))
