"""The server's own floor for bench/relay.py: plain_relay.py's relay as a bare ASGI app under daphne.

No Django, no Channels, no validation, storage, auth or acks: a bot's frames on
/ws/ingest/<session_id>/ go, as they are, to every socket watching
/ws/sessions/<session_id>/. What daphne (twisted and autobahn) costs per frame,
the part of the dashboard's cost that no change to its own code can take away:

    .venv/bin/python -m daphne -p 8102 bench.daphne_relay:application

`acking` is the same relay that also answers each bot frame with {"ack": seq}
(the frame parsed as JSON for its seq, as any server that acks must): the
three frames a message costs a bot without ranged acks (in, its ack, its
relay), measured rather than estimated (bench/relay.py --target floors).
`acking_tuned` is that with the dashboard's changes to daphne installed
(dashboard/server/daphne_tuning.py: write-through, small frames unmasked in one step):
daphne as the dashboard runs it.
"""

import json

viewers: dict[str, set] = {}


async def application(scope, receive, send, acks: bool = False):
    if scope["type"] != "websocket":
        return
    parts = scope["path"].strip("/").split("/")
    if len(parts) != 3 or parts[0] != "ws":
        await send({"type": "websocket.close", "code": 4404})
        return
    kind, session_id = parts[1], parts[2]
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    watching = viewers.setdefault(session_id, set())
    if kind == "sessions":
        watching.add(send)
    try:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if kind == "ingest":
                frame = {"type": "websocket.send", "text": message.get("text"), "bytes": message.get("bytes")}
                for viewer in list(watching):
                    await viewer(frame)
                # The ack after the relay, as the dashboard: a bot closed after its last frame still has it relayed.
                if acks:
                    seq = json.loads(message.get("text") or message.get("bytes"))["seq"]
                    await send({"type": "websocket.send", "text": json.dumps({"ack": seq})})
    finally:
        watching.discard(send)


async def acking(scope, receive, send):
    """The relay that also acknowledges each bot frame, one {"ack": seq} frame each."""
    await application(scope, receive, send, acks=True)


async def acking_tuned(scope, receive, send):
    """`acking` on daphne as the dashboard runs it (dashboard/server/daphne_tuning.py)."""
    from dashboard.server import daphne_tuning

    daphne_tuning.install()  # before this connection's first write; idempotent
    await application(scope, receive, send, acks=True)
