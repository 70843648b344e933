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

    __slots__ = ("_lines", "_reported", "_transcript", "ended_at", "ended_by")

    def __init__(self, transcript: "Transcript"):
        self._transcript = transcript
        self._lines: dict[str, dict] = {}  # "dashboard-<control id>" -> its line
        self._reported: dict[str, dict] = {}  # the bot's reports of a send-text whose record has not come yet
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
        """The bot's report of the send-text an operator's action handed it; False for any other send-text.

        A bot reports it, so it proves nothing: any bot may send a send-text of id "dashboard-…". It is no line
        of its own, and its words are never the operator's: the line is the dashboard's record's, whose words
        are what the operator typed (`record`). The report gives the options, and the words only to a record
        that has none (those stored before records carried them); one that comes first gives the line its time."""
        msg_id = message.get("id")
        if not (isinstance(msg_id, str) and msg_id.startswith(PREFIX)):
            return False
        key = msg_id[: limits.MAX_KEY]
        self._transcript.remember_chat(msg_id)  # Pipecat may echo it as user-input too: not the caller's
        item = self._lines.get(key)
        reported = {"text": clip(data["content"].strip()), "options": _options(data.get("options", {}))}
        if item is None:
            self._reported[key] = {**reported, "seq": event.seq, "at": at}
            cap_dict(self._reported, limits.MAX_CALLS)
            return True
        if not item["text"] and item["_words_reported"]:
            item["text"] = reported["text"]
        item["options"] = item["options"] or reported["options"]
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
        item_key = msg_id[: limits.MAX_KEY]
        fresh = item_key not in self._lines
        item = self._line(item_key, event, at)
        item["action"] = about["action"]
        item["cancel"] = about.get("cancel") is True
        item["operator"] = clip(str(about.get("operator") or "an operator"), MAX_NAME)
        item["ok"] = about.get("ok") is True
        error = about.get("error")
        item["outcome"] = "the bot took it" if item["ok"] else clip(str(error or "no reason given"), 500)
        content = about.get("content")
        reported = self._reported.pop(item_key, None) if fresh else None
        if isinstance(content, str):
            item["text"] = clip(content.strip())  # the operator's words, as the dashboard sent them
        elif reported is not None and item["action"] == "send-text":
            item["text"] = reported["text"]  # a record stored before records carried the words
        item["_words_reported"] = not isinstance(content, str) and item["action"] == "send-text"
        if reported is not None:
            item["seq"], item["at"] = reported["seq"], reported["at"]
        item["options"] = item["options"] or _options(about.get("options")) or (reported or {}).get("options")
        if item["ok"] and item["action"] == "end" and not self.ended_by:
            self.ended_by, self.ended_at = item["operator"], at
        self._transcript.touch(item)
        return True
