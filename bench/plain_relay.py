"""The floor for bench/relay.py: a plain `websockets` relay, no framework.

A bot's frames on /ws/ingest/<session_id>/ go, as they are, to every socket
watching /ws/sessions/<session_id>/. No validation, storage, auth, acks or
channel layer: what a WebSocket relay costs on this machine and no more.

    .venv/bin/python bench/plain_relay.py --port 8101
"""

import argparse
import asyncio

import websockets

viewers: dict[str, set] = {}


async def handle(socket):
    path = socket.request.path.split("?")[0].strip("/").split("/")
    if len(path) != 3 or path[0] != "ws":
        await socket.close(4404)
        return
    kind, session_id = path[1], path[2]
    if kind == "sessions":
        watching = viewers.setdefault(session_id, set())
        watching.add(socket)
        try:
            await socket.wait_closed()
        finally:
            watching.discard(socket)
        return
    async for frame in socket:
        websockets.broadcast(viewers.get(session_id, ()), frame)


async def main(port: int) -> None:
    async with websockets.serve(handle, "127.0.0.1", port, max_queue=None):
        await asyncio.Future()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(main(parser.parse_args().port))
