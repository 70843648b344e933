"""WebSocket routes of the live side, served by dashboard/asgi.py.

Bots and browsers get different stacks: a bot sends a bearer ingest token and
no Origin header (AllowedHostsOriginValidator would reject it); a browser
sends a session cookie and must pass the Origin check.
"""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator


def for_browsers(consumer):
    """Staff session from the cookie, and the Origin must be an allowed host."""
    return AllowedHostsOriginValidator(AuthMiddlewareStack(consumer))


websocket_urlpatterns = []
