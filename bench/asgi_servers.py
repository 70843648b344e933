"""dashboard.asgi's application for ASGI servers other than daphne (bench/relay.py --target servers).

Under daphne the process's background work starts with twisted's reactor, not with a request:
rtvi_monitor/apps.py calls `process.start_server()` (the writer, the session sweep, the alerts,
retention's purges) once the reactor runs, and live/process.py stores what is pending and lets go
of the process's sessions before the reactor stops. uvicorn and granian have no reactor; they
tell an application that it starts and stops through ASGI's lifespan protocol, which
dashboard.asgi does not answer (Channels' ProtocolTypeRouter knows no "lifespan"). This answers
it around dashboard.asgi's application with the same two steps, so that each server runs the
same process as daphne does; every other scope goes to dashboard.asgi's application unchanged.

    .venv/bin/python -m uvicorn --ws websockets --lifespan on bench.asgi_servers:application
    .venv/bin/granian --interface asgi bench.asgi_servers:application
"""

from dashboard.asgi import application as dashboard


async def application(scope, receive, send):
    if scope["type"] != "lifespan":
        return await dashboard(scope, receive, send)
    from rtvi_monitor.apps import start_server
    from rtvi_monitor.live import lifecycle, process

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            start_server()  # as rtvi_monitor/apps.py does when daphne's reactor runs
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await process.start().flush()  # as live/process.py does before daphne's reactor stops
            await lifecycle.release()
            await send({"type": "lifespan.shutdown.complete"})
            return
