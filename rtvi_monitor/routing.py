"""WebSocket routes, served by dashboard/asgi.py.

Bots and browsers get different stacks: a bot sends a bearer ingest token and
no Origin header (AllowedHostsOriginValidator would reject it); a browser
sends a session cookie and must pass the Origin check.
"""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from rtvi_monitor.consumers import IngestConsumer, SessionConsumer, SessionListConsumer


def for_browsers(consumer):
    """Staff session from the cookie, and the Origin must be an allowed host."""
    return AllowedHostsOriginValidator(AuthMiddlewareStack(consumer))


websocket_urlpatterns = [
    path("ws/ingest/<str:session_id>/", IngestConsumer.as_asgi()),
    path("ws/sessions/", for_browsers(SessionListConsumer.as_asgi())),
    path("ws/sessions/<str:session_id>/", for_browsers(SessionConsumer.as_asgi())),
]
