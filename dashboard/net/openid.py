"""An OpenID provider's discovery document, read when single sign-on first needs it, once per process.

dashboard/settings.py used to fetch it while the settings loaded, so that every process (a migration, a
shell, each server) stopped on the network, and failed to start, when the provider was slow or down. Now
the endpoints it does not set are lazy strings: the first use (the login page's button, the callback's
token call) reads `/.well-known/openid-configuration` through the outbound client, checks its issuer as
before, and keeps it; a failure is raised to that request, ImproperlyConfigured with the same words as
before, and the next use asks again.

`call` is how single sign-on's other calls (token, userinfo, keys) reach the provider: mozilla-django-oidc
would make them with `requests`, outside the one client (dashboard/access/oidc.py overrides them).

Synchronous, for mozilla-django-oidc's synchronous views and backend: called on a thread of the
server's (daphne's) sync-to-async pool, the call runs on the server's loop and its shared client.
"""

import threading

from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured

from dashboard.net import outbound

_documents: dict[str, dict] = {}
_lock = threading.Lock()


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def discovery(issuer: str, timeout: float = 10) -> dict:
    """The provider's discovery document, its `issuer` checked against `issuer` (ImproperlyConfigured if not)."""
    if issuer in _documents:
        return _documents[issuer]
    with _lock:  # the first requests at once: one asks
        if issuer in _documents:
            return _documents[issuer]
        url = discovery_url(issuer)
        try:
            response = async_to_sync(outbound.get)(
                url,
                kind="oidc",
                timeouts=outbound.Timeouts(connect=timeout, read=timeout, total=3 * timeout),
                retries=1,
                allow_hosts=[issuer],  # the operator's own setting names it
            )
            if not response.is_success:
                raise ValueError(f"HTTP {response.status_code}")
            document = response.json()
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
        except (outbound.OutboundError, ValueError) as error:
            raise ImproperlyConfigured(f"OIDC_ISSUER: could not read {url}: {error}") from None
        if document.get("issuer") != issuer:
            raise ImproperlyConfigured(f"OIDC_ISSUER is {issuer!r}, its discovery says {document.get('issuer')!r}")
        _documents[issuer] = document
        return document


def call(method: str, url: str, timeout: float = 10, **options) -> outbound.Response:
    """One call to the provider (its token, userinfo or keys endpoint) through the outbound client; raises an
    OutboundError when there is no answer. The endpoints are the operator's own settings (or the provider's
    discovery, which they named), so their hosts are allowed even when private, as the discovery's is."""
    url = str(url)  # the settings' endpoints may be lazy (discovered at first use)
    return async_to_sync(outbound.request)(
        method,
        url,
        kind="oidc",
        timeouts=outbound.Timeouts(connect=timeout, read=timeout, total=3 * timeout),
        retries=1 if method.upper() == "GET" else 0,  # a code is good once: its POST is never sent twice
        allow_hosts=[url],
        **options,
    )


def endpoint(issuer: str, key: str, setting: str, timeout: float = 10) -> str:
    """One endpoint of the issuer's discovery document (`key`, e.g. "token_endpoint"); `setting` names it here."""
    value = discovery(issuer, timeout).get(key)
    if not isinstance(value, str) or not value:
        raise ImproperlyConfigured(f"OIDC_ISSUER's discovery ({discovery_url(issuer)}) has no {key}: set {setting}")
    return value
