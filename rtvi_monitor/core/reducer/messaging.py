"""Client-server messaging: the client's requests and messages, the bot's answers, and its server messages."""

from rtvi_monitor.core.patches import Tail
from rtvi_monitor.core.reducer import limits
from rtvi_monitor.core.reducer.errors import Errors
from rtvi_monitor.core.reducer.limits import bounded, cap_dict, clip, json_size


class Messaging:
    """The client's messages (client-message) and their answers, the server messages, the requests' types."""

    __slots__ = ("_errors", "_request_types", "changed", "client_messages", "server_messages")

    def __init__(self, errors: Errors):
        self.client_messages: dict[str, dict] = {}  # by id, or "#<seq>" for one without
        self.changed = False  # since the last patch: the list is sent whole when any message changed
        self.server_messages = Tail(limits.MAX_ITEMS, budget=limits.LIST_BUDGET, size=json_size)
        self._request_types: dict[str, str] = {}  # id -> type of what the client sent, for error-response
        self._errors = errors

    def rows(self) -> list[dict]:
        """The client's messages as the state shows them."""
        return [dict(m) for m in self.client_messages.values()]

    def request(self, event, message, data, at):
        """Anything the client sends with an id may be answered with error-response."""
        msg_id = message.get("id")
        if isinstance(msg_id, str) and event.direction == "from-client":
            self._request_types[msg_id] = message["type"]
            cap_dict(self._request_types)

    def client_message(self, event, message, data, at):
        msg_id = message.get("id")
        if event.direction == "to-client" and msg_id in self.client_messages:
            self.response(event, message, data, at)  # the spec's erratum: a response typed client-message
            return
        self.request(event, message, data, at)
        key = msg_id if isinstance(msg_id, str) and msg_id else f"#{event.seq}"
        self.changed = True
        self.client_messages[key] = {
            "id": key,
            "t": clip(data["t"], 200),
            "d": bounded(data.get("d"), event.seq),
            "sent_at": at,
            "status": "pending",
            "response": None,
            "response_ms": None,
        }
        cap_dict(self.client_messages, limits.MAX_CALLS)

    def response(self, event, message, data, at):
        msg_id = message.get("id")
        failed = message["type"] == "error-response"
        if failed:
            self._errors.response(event, data, at, msg_id, self._request_types.get(msg_id))
        request = self.client_messages.get(msg_id) if isinstance(msg_id, str) else None
        if request is not None and request["status"] == "pending":
            self.changed = True
            request["status"] = "failed" if failed else "answered"
            request["response"] = bounded(data, event.seq)
            request["response_ms"] = round(max(0.0, at - request["sent_at"]) * 1000, 3)

    def server_message(self, event, message, data, at):
        self.server_messages.append({"seq": event.seq, "at": at, "data": bounded(message.get("data"), event.seq)})
