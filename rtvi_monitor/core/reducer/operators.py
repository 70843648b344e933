"""What the dashboard's operators did in a call (rtvi_monitor/live/control.py): one transcript line an action.

An operator's words are neither the caller's nor the model's, and the transcript says whose they are. They
reach a session two ways, in either order (two writers: the bot's batch and the dashboard's answer):

- the dashboard's own record of the action: a server-message on the "dashboard" stream, id
  "dashboard-<control id>", its data's `dashboard` saying who did what and what the bot answered. Only the
  dashboard writes that stream (live/intake.py), so a bot cannot pass its own message off as an operator's;
- for send-text, the bot's report of the RTVI send-text it was handed: from-client, the same id (the
  rtvi-dashboard package's Pipecat integration reports every client message it handles).

Either makes the action's ONE line, role "operator", and the other completes it: who (`operator`, from the
record), the action ("send-text", "end"; `cancel` for an end at once), the words sent (`text`), the
options, and what the bot answered (`ok`, `outcome`; None and "" until the record says). What the bot is
saying when it comes goes on in its line; the bot's next answer (its LLM run again: the operator's words,
spoken, at once or at its next turn) is a line of its own, never glued onto its previous reply.

An end the bot took is the session's end as an operator meant it: `ended_by` names them
(rtvi_monitor/live/lifecycle.py `end_of`).
"""

from typing import TYPE_CHECKING

from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.reducer.limits import cap_dict, clip

if TYPE_CHECKING:
    from rtvi_monitor.core.reducer.transcript import Transcript
    from rtvi_monitor.core.state import Event

STREAM = "dashboard"  # the stream the dashboard stores the operators' actions under (live/control.py)
PREFIX = "dashboard-"  # the id of an action's record, and of the send-text the bot was handed for it
ACTIONS = frozenset({"end", "send-text"})
OPTIONS = ("run_immediately", "audio_response")
MAX_NAME = 200  # characters of an operator's name (live/control.py keeps as many)


def _options(value) -> dict | None:
    """send-text's options as the spec reads them: each true unless it is false."""
    if not isinstance(value, dict):
        return None
    return {name: value.get(name) is not False for name in OPTIONS}


class Operators:
    """The operators' lines, by their action's id, and who ended the call."""

    __slots__ = ("_lines", "_transcript", "ended_at", "ended_by")

    def __init__(self, transcript: "Transcript"):
        self._transcript = transcript
        self._lines: dict[str, dict] = {}  # "dashboard-<control id>" -> its line
        self.ended_by = ""  # the operator whose end the bot took; "" when none did
        self.ended_at: float | None = None

    def _line(self, key: str, event: "Event", at: float) -> dict:
        item = self._lines.get(key)
        if item is None:
            item = {
                "role": "operator",
                "action": "send-text",
                "cancel": False,
                "operator": "",
                "text": "",
                "options": None,
                "ok": None,
                "outcome": "",
                "final": True,
                "source": STREAM,
                "seq": event.seq,
                "at": at,
            }
            self._transcript.interject(item)
            self._lines[key] = item
            cap_dict(self._lines, limits.MAX_CALLS)
        return item

    def sent(self, event: "Event", message: dict, data: dict, at: float) -> bool:
        """The bot's report of the send-text an operator's action handed it; False for any other send-text."""
        msg_id = message.get("id")
        if not (isinstance(msg_id, str) and msg_id.startswith(PREFIX)):
            return False
        key = msg_id[: limits.MAX_KEY]
        self._transcript.remember_chat(msg_id)  # Pipecat may echo it as user-input too: not the caller's
        item = self._line(key, event, at)
        item["text"] = clip(data["content"].strip())
        item["options"] = item["options"] or _options(data.get("options", {}))
        self._transcript.touch(item)
        return True

    def record(self, event: "Event", message: dict, data: dict, at: float) -> bool:
        """The dashboard's record of an action (stream "dashboard"); False for any other server-message."""
        about = data.get("dashboard")
        msg_id = message.get("id")
        if event.stream != STREAM or not isinstance(about, dict) or not isinstance(msg_id, str):
            return False
        if about.get("action") not in ACTIONS:
            return False
        item = self._line(msg_id[: limits.MAX_KEY], event, at)
        item["action"] = about["action"]
        item["cancel"] = about.get("cancel") is True
        item["operator"] = clip(str(about.get("operator") or "an operator"), MAX_NAME)
        item["ok"] = about.get("ok") is True
        error = about.get("error")
        item["outcome"] = "the bot took it" if item["ok"] else clip(str(error or "no reason given"), 500)
        content = about.get("content")
        if isinstance(content, str) and not item["text"]:
            item["text"] = clip(content.strip())
        item["options"] = item["options"] or _options(about.get("options"))
        if item["ok"] and item["action"] == "end" and not self.ended_by:
            self.ended_by, self.ended_at = item["operator"], at
        self._transcript.touch(item)
        return True
