"""WebSocket routes, served by dashboard/asgi.py.

Bots and browsers get different stacks: a bot sends a bearer ingest token and
no Origin header (an Origin check would reject it); a browser sends a session
cookie and must come from a page of this very site (rtvi_monitor/live/security.py).
Any other path is refused at the handshake (HTTP 403 under daphne), not
answered with the router's 500.
"""

from channels.auth import AuthMiddlewareStack
from django.urls import path, re_path

from dashboard.access.auth import public
from rtvi_monitor.live.consumers import IngestConsumer, SessionConsumer, SessionListConsumer
from rtvi_monitor.live.security import SameOriginValidator, refuse_handshake


def for_browsers(consumer):
    """Staff session from the cookie, and the Origin must be this site's own."""
    return SameOriginValidator(AuthMiddlewareStack(consumer))


websocket_urlpatterns = [
    path("ws/ingest/<str:session_id>/", IngestConsumer.as_asgi()),
    path("ws/sessions/", for_browsers(SessionListConsumer.as_asgi())),
    path("ws/sessions/<str:session_id>/", for_browsers(SessionConsumer.as_asgi())),
    # Last: every path the routes above do not match, "/ws/ingest/..%2F/" included.
    re_path(r"", public("it refuses every handshake it gets")(refuse_handshake)),
]
