"""A session's errors: which messages are errors, how one reads, and the list the state keeps of them."""

from typing import TYPE_CHECKING, Any

from rtvi_monitor.core.patches import Tail
from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.reducer.limits import clip, json_size

if TYPE_CHECKING:
    from rtvi_monitor.core.state import Event

ERROR_TYPES = ("error", "error-response")  # the messages that are a session's errors
LOG_TYPES = ("system-log", *ERROR_TYPES)  # the messages that are its bot's log lines (the agents' logs API)


def error_of(msg_type: str, data: dict) -> tuple[Any, bool]:
    """An error message's text and whether it is fatal: the one reading of error and error-response.

    `error` carries its text in `message` (the spec, client-js) or `error`
    (Pipecat); `error-response` answers a client request and is never fatal.
    """
    if msg_type == "error-response":
        return data.get("error"), False
    text = data.get("message") if isinstance(data.get("message"), str) else data.get("error")
    return text, data.get("fatal") is True


class Errors:
    """The session's errors, oldest first: the bot's error messages and its error-responses."""

    __slots__ = ("errors",)

    def __init__(self):
        self.errors = Tail(limits.MAX_ITEMS, budget=limits.LIST_BUDGET, size=json_size)

    def error(self, event: "Event", data: dict, at: float) -> bool:
        """An error message: kept; whether it is fatal (which ends the session)."""
        text, fatal = error_of("error", data)
        self._add(event, at, clip(text) if isinstance(text, str) else text, fatal, "error", None, None)
        return fatal

    def response(self, event: "Event", data: dict, at: float, msg_id: Any, request_type: str | None) -> None:
        """An error-response: the bot refused the client's request `msg_id` (of `request_type`, when known)."""
        text, _ = error_of("error-response", data)
        self._add(event, at, clip(text), False, "error-response", msg_id, request_type)

    def _add(
        self, event: "Event", at: float, text: Any, fatal: bool, kind: str, msg_id: Any, request_type: Any
    ) -> None:
        self.errors.append(
            {
                "seq": event.seq,
                "at": at,
                "message": text,
                "fatal": fatal,
                "type": kind,
                "id": msg_id,
                "request_type": request_type,
            }
        )
