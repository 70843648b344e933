"""Where an outbound call may go: nowhere inside the dashboard's own network unless a setting says so.

A URL from outside the operator's hands (a rule author's webhook, an organization's agents API) must not
reach the dashboard's neighbours: Redis, PostgreSQL, a cloud's metadata service at 169.254.169.254. So,
before a call, its host is resolved once and every address it resolves to must be public; one that is
loopback, link-local, private, multicast, reserved or unspecified refuses the call (`Refused`, saying
which address, what it is and which setting allows it). The call then goes to the address that was
checked (`check` returns it; dashboard/net/outbound.py puts it in the URL and keeps the name for the Host
header, TLS's SNI and the certificate check), so a name that answers differently the second time (DNS
rebinding) gains nothing.

What is allowed anyway, without a look at its addresses:

- the hosts OUTBOUND_ALLOWED_HOSTS names: a host ("agents.internal", "10.1.2.3"), every host under a
  domain (".corp.example"), a network ("10.0.0.0/8": a host whose addresses all fall inside it or are
  public), or "*" (no check at all);
- the hosts the caller passes (`allow_hosts`): the ones an operator's own setting names for that call,
  e.g. AGENTS_API_BASE_URL's host for the agents API (by default the dashboard itself, on loopback).

A caller may skip the check altogether (outbound's `guard=False`: ALERT_WEBHOOK_ALLOW_PRIVATE, or a URL
that only the operator sets).
"""

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from dashboard.net.errors import Refused, Unreachable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

WHY = (
    "no outbound call goes to a private address (loopback, link-local, private network, multicast, reserved) "
    "unless OUTBOUND_ALLOWED_HOSTS names the host"
)


def ip_of(text: str) -> Address | None:
    """`text` as an IP address ("[::1]" and "fe80::1%eth0" too), None for a name."""
    try:
        ip = ipaddress.ip_address(text.strip("[]").split("%")[0])
    except ValueError:
        return None
    return (ip.ipv4_mapped or ip) if ip.version == 6 else ip


def blocked(address: str | Address) -> str:
    """What `address` is when no call may go there by default ("loopback", "link-local", ...); '' if public.

    A name is '' here: it is what it resolves to that counts.
    """
    ip = address if not isinstance(address, str) else ip_of(address)
    if ip is None:
        return ""
    for what, test in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("not globally routable", not ip.is_global),
    ):
        if test:
            return what
    return ""


def describe(what: str, address: str) -> str:
    if what == "link-local" and address.startswith("169.254."):
        return "a link-local address (where cloud metadata services answer)"
    article = "an" if what[0] in "aeiou" else "a"
    return f"{article} {what} address"


@dataclass(frozen=True)
class Allowed:
    """A parsed allow-list: every host, some names, the names under some domains, some networks."""

    everything: bool = False
    names: frozenset[str] = frozenset()
    domains: tuple[str, ...] = ()  # ".corp.example": the domain and every name under it
    networks: tuple[Network, ...] = ()

    @classmethod
    def of(cls, entries: Iterable[str]) -> "Allowed":
        everything, names, domains, networks = False, set(), [], []
        for entry in entries:
            entry = (entry or "").strip().lower().rstrip(".")
            if not entry:
                continue
            if entry == "*":
                everything = True
            elif entry.startswith("."):
                domains.append(entry)
            else:
                try:
                    networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                except ValueError:
                    names.add(entry)
        return cls(everything, frozenset(names), tuple(domains), tuple(networks))

    def names_host(self, host: str) -> bool:
        """Whether `host` (as the URL writes it) is allowed whatever it resolves to."""
        host = host.lower().rstrip(".")
        if self.everything or host in self.names:
            return True
        if any(host == domain[1:] or host.endswith(domain) for domain in self.domains):
            return True
        ip = ip_of(host)
        return ip is not None and any(ip in network and network.num_addresses == 1 for network in self.networks)

    def covers(self, address: str) -> bool:
        """Whether a host may resolve to `address` (inside a network the list names)."""
        ip = ip_of(address)
        return ip is not None and any(ip in network for network in self.networks)


def allowed(allow_hosts: Iterable[str] = ()) -> Allowed:
    """OUTBOUND_ALLOWED_HOSTS and the caller's own hosts (host names, or URLs whose host counts)."""
    extra = [(urlsplit(h).hostname or "") if "://" in h else h for h in allow_hosts if h]
    return Allowed.of([*getattr(settings, "OUTBOUND_ALLOWED_HOSTS", []), *extra])


async def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to, in the resolver's order (OSError when it resolves to none)."""
    infos = await asyncio.to_thread(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


async def check(url: str, *, allow_hosts: Iterable[str] = (), kind: str = "") -> str | None:
    """Where a call to `url` may connect: None (as the URL says) or the address to pin it to.

    Raises Refused when the host is, or resolves to, an address no call may reach; Unreachable when it
    does not resolve.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    rules = allowed(allow_hosts)
    if not host or rules.names_host(host):
        return None
    literal = ip_of(host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = await resolve(host, port)
        except OSError as exc:
            raise Unreachable(f"could not resolve {host}: {exc}", kind=kind, url=url) from None
    if not addresses:
        raise Unreachable(f"could not resolve {host}: no address", kind=kind, url=url)
    bad = [(address, what) for address in addresses if (what := blocked(address)) and not rules.covers(address)]
    if bad:
        address, what = bad[0]
        that = f"{host} is" if literal is not None else f"{host} resolves to {address},"
        raise Refused(f"{that} {describe(what, address)}: {WHY}", kind=kind, url=url)
    return None if literal is not None else addresses[0]
