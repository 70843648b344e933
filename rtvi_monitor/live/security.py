"""Who may open a socket: the same-origin check for browsers, and the refusal for everyone else.

Channels' AllowedHostsOriginValidator compares host names only, so a page on
another port of an allowed host (any other app on 127.0.0.1:9999, say) could
open a member's socket: the browser sends the session cookie along, and cookies
are not scoped by port. Here the Origin must be the very site the socket was
opened on, as Django's CSRF check asks of a POST.
"""

from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


async def refuse_handshake(scope, receive, send):
    """Close before accepting, which daphne answers with HTTP 403.

    daphne does not offer ASGI's WebSocket denial response extension, so a
    404 (or any other status) cannot be sent for a socket; 403 it is. No
    channel layer, no consumer: a refusal costs nothing and logs no error.
    """
    await receive()  # websocket.connect
    await send({"type": "websocket.close"})


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) origin with the default port filled in, or None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def _is_secure(scope, headers: dict[bytes, str]) -> bool:
    """wss directly, or https at the proxy when SECURE_PROXY_SSL_HEADER trusts its header (as Django's is_secure)."""
    if scope.get("scheme") == "wss":
        return True
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not proxy_header:
        return False
    name, secure_value = proxy_header  # ("HTTP_X_FORWARDED_PROTO", "https")
    value = headers.get(name.removeprefix("HTTP_").replace("_", "-").lower().encode())
    return value is not None and value.split(",", 1)[0].strip() == secure_value


def _trusted(origin: tuple[str, str, int]) -> bool:
    """Listed in CSRF_TRUSTED_ORIGINS, read as Django reads it: https://*.example.com covers the subdomains."""
    scheme, host, port = origin
    for pattern in settings.CSRF_TRUSTED_ORIGINS:
        trusted = _origin(pattern.replace("://*.", "://", 1))
        if trusted is None or (trusted[0], trusted[2]) != (scheme, port):
            continue
        if host == trusted[1] or ("://*." in pattern and host.endswith("." + trusted[1])):
            return True
    return False


def same_origin(scope) -> bool:
    """The Host is in ALLOWED_HOSTS, and the Origin is its own scheme://host:port or a trusted origin."""
    headers = {name: value.decode("latin1") for name, value in scope.get("headers", [])}
    host = headers.get(b"host", "")
    domain, _ = split_domain_port(host)
    allowed_hosts = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed_hosts:  # as Django's HttpRequest.get_host
        allowed_hosts = [".localhost", "127.0.0.1", "[::1]"]
    if not domain or not validate_host(domain, allowed_hosts):
        return False
    origin = _origin(headers.get(b"origin", ""))
    if origin is None:
        return False
    scheme = "https" if _is_secure(scope, headers) else "http"
    return origin == _origin(f"{scheme}://{host}") or _trusted(origin)


class SameOriginValidator:
    """ASGI middleware for browser sockets: refuses the handshake unless `same_origin(scope)`."""

    def __init__(self, application):
        self.application = application

    async def __call__(self, scope, receive, send):
        if not same_origin(scope):
            return await refuse_handshake(scope, receive, send)
        return await self.application(scope, receive, send)
