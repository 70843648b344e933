"""The server's own floor for bench/relay.py: plain_relay.py's relay as a bare ASGI app under daphne.

No Django, no Channels, no validation, storage, auth or acks: a bot's frames on
/ws/ingest/<session_id>/ go, as they are, to every socket watching
/ws/sessions/<session_id>/. What daphne (twisted and autobahn) costs per frame,
the part of the dashboard's cost that no change to its own code can take away:

    .venv/bin/python -m daphne -p 8102 bench.daphne_relay:application
"""

viewers: dict[str, set] = {}


async def application(scope, receive, send):
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
    finally:
        watching.discard(send)
