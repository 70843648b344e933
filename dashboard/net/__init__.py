"""Outbound HTTP: the one client every call out of the dashboard goes through.

- `outbound`: the client (one `httpx.AsyncClient` per event loop), timeouts, retries, metrics, errors.
- `guard`: which addresses a call may reach (no private, loopback, link-local, multicast or reserved
  address unless a setting allows the host), resolved once and pinned.
- `openid`: an OpenID provider's discovery document, read at first use.

Only this package imports httpx (tests/house/test_architecture.py holds it to that).
"""
