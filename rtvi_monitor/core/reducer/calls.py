"""Function calls: each call the LLM made, from its announcement to its end, and whether it failed."""

import json
import re
from typing import TYPE_CHECKING, Any

from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.reducer.limits import bounded, cap_dict, clip

if TYPE_CHECKING:
    from rtvi_monitor.core.state import Event

# What Pipecat puts in a call's result when the function's handler raised
# (LLMService.FUNCTION_CALL_ERROR_MESSAGE_TEMPLATE).
PIPECAT_CALL_FAILED = re.compile(r"The function `[^`]*` failed and returned no result\.")
FAILED_STATUSES = frozenset({"error", "failed", "failure"})


def call_failure(result: Any) -> str | None:
    """What went wrong when a function call's result says the call failed; None when it does not.

    A call failed when its result is an object with a non-empty "error" (how a
    Pipecat function reports a failure: `result_callback({"error": "timed out"})`),
    an object whose "status" is "error", "failed" or "failure", or Pipecat's own
    text for a handler that raised. The text is the error's (or the message's),
    else the whole result. Any other result is a result, however it reads: a
    call is not guessed to have failed.
    """
    if isinstance(result, str):
        return result.strip() if PIPECAT_CALL_FAILED.fullmatch(result.strip()) else None
    if not isinstance(result, dict):
        return None
    error, status = result.get("error"), result.get("status")
    if not error and not (isinstance(status, str) and status.lower() in FAILED_STATUSES):
        return None  # {"error": null} and the like: a result that has room for an error, and none
    said = error.get("message") if isinstance(error, dict) else (error or result.get("message"))
    if isinstance(said, str) and said.strip():
        return clip(said.strip())
    return clip(json.dumps(error or result, ensure_ascii=False))


class Calls:
    """The session's function calls, in the order they were announced."""

    __slots__ = ("changed", "function_calls")

    def __init__(self):
        self.function_calls: dict[str, dict] = {}  # by tool_call_id, or "#<seq>" while the call has none
        self.changed = False  # since the last patch: the list is sent whole when any call changed

    def rows(self) -> list[dict]:
        """The calls as the state shows them (without their key)."""
        return [{k: v for k, v in c.items() if k != "key"} for c in self.function_calls.values()]

    def _call(self, data: dict, event: "Event", at: float) -> dict:
        """The call a message is about: by tool_call_id, else the oldest one announced without an id."""
        call_id = data.get("tool_call_id")
        call_id = call_id[: limits.MAX_KEY] if isinstance(call_id, str) and call_id else None
        name = data.get("function_name") if isinstance(data.get("function_name"), str) else None
        calls = self.function_calls
        call = calls.get(call_id) if call_id else None
        if call is None and call_id:
            # llm-function-call-started carries no id (often data: {}); the in-progress after it does.
            waiting = [c for c in calls.values() if c["tool_call_id"] is None and c["ended_at"] is None]
            call = next((c for c in waiting if name and c["function_name"] == name), waiting[0] if waiting else None)
            if call is not None:
                del calls[call["key"]]
                call["tool_call_id"] = call["key"] = call_id
                calls[call_id] = call
        if call is None:
            key = call_id or f"#{event.seq}"
            call = {
                "key": key,
                "tool_call_id": call_id,
                "function_name": None,
                "args": None,
                "status": "requested",
                "result": None,
                "error": None,  # what went wrong, when status is "failed"
                "started_at": at,
                "ended_at": None,
                "duration_ms": None,
                "seq": event.seq,
            }
            calls[key] = call
            cap_dict(calls, limits.MAX_CALLS)
        self.changed = True
        if name:
            call["function_name"] = clip(name, 200)
        args = data.get("args", data.get("arguments"))
        if args is not None and (call["args"] is None or args):  # a result may echo empty arguments
            call["args"] = bounded(args, event.seq)
        return call

    def _end(self, call: dict, status: str, at: float, result: Any = None) -> None:
        """The call is over: cancelled, else failed when its result says so (call_failure), else completed."""
        if status == "completed":
            call["error"] = call_failure(result)
            if call["error"] is not None:
                status = "failed"
        call["status"] = status
        if call["ended_at"] is None:
            call["ended_at"] = at
            call["duration_ms"] = round(max(0.0, at - call["started_at"]) * 1000, 3)

    def started(self, event, message, data, at):
        self._call(data, event, at)

    def in_progress(self, event, message, data, at):
        call = self._call(data, event, at)
        if call["status"] == "requested":
            call["status"] = "in_progress"

    def stopped(self, event, message, data, at):
        call = self._call(data, event, at)
        if data.get("result") is not None:
            call["result"] = bounded(data["result"], event.seq)
        self._end(call, "cancelled" if data.get("cancelled") is True else "completed", at, data.get("result"))

    def result(self, event, message, data, at):
        call = self._call(data, event, at)
        call["result"] = bounded(data["result"], event.seq)
        self._end(call, "completed", at, data["result"])
