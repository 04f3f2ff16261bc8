"""Which client a request comes from, for throttling failed credentials (reference §3.4).

By default the client is the socket peer. Behind a proxy every request has the proxy's
address, so a proxy that sets the client's address in a header can be trusted with it
(`ClientAddressPolicy.header`), optionally only when the peer is one of `proxies`. A header is
never trusted unless configured (`TRUSTED_PROXY_HEADER`, `TRUSTED_PROXIES`, reference §4): anyone
who reaches the backend directly can send any header.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from fastapi import Request

from messageweave.errors import ApiError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# Requests whose address cannot be read (no peer, a malformed trusted header) share one bucket:
# they are throttled together rather than not at all.
UNKNOWN_CLIENT = "unknown"
# One IPv6 subscriber usually holds a whole /64; per-address counting would not slow them down.
IPV6_PREFIX = 64


@dataclass(frozen=True)
class ClientAddressPolicy:
    """`header`: the lowercase name of the header a trusted proxy sets to the client address
    (the right-most value of a comma-separated list is used); None = the socket peer only.
    `proxies`: when not empty, the header is believed only from a peer in these networks."""

    header: str | None = None
    proxies: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, header: str, proxies: str) -> ClientAddressPolicy:
        """From two strings (a header name, comma-separated networks); blank = not set."""
        nets = tuple(ipaddress.ip_network(p.strip(), strict=False)
                     for p in proxies.split(",") if p.strip())
        return cls(header=header.strip().lower() or None, proxies=nets)


def _ip(raw: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address((raw or "").strip())
    except ValueError:
        return None


def _bucket(ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> str:
    if ip is None:
        return UNKNOWN_CLIENT
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped
        if mapped is not None:
            return str(mapped)
        return str(ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False))
    return str(ip)


def _within(ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None,
            nets: tuple[IPNetwork, ...]) -> bool:
    """Whether `ip` is in one of `nets`; an IPv4-mapped IPv6 peer (a dual-stack listener's
    view of an IPv4 client) is its IPv4 address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip is not None and any(ip in net for net in nets)


def client_of(request: Request, policy: ClientAddressPolicy) -> str:
    """The throttling bucket of the request's client: an IPv4 address or an IPv6 /64. Always
    a parsed address, so a header cannot choose an arbitrary Redis key."""
    peer = _ip(request.client.host if request.client else None)
    if policy.header is not None:
        trusted = not policy.proxies or _within(peer, policy.proxies)
        forwarded = request.headers.get(policy.header)
        if trusted and forwarded:
            return _bucket(_ip(forwarded.split(",")[-1]))
    return _bucket(peer)


def rate_limited(retry_after_s: int) -> ApiError:
    return ApiError(429, "rate_limited", headers={"Retry-After": str(max(1, retry_after_s))})
