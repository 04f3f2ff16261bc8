"""The value checks the validation rules use (reference §5.2): URLs, hosts, addresses, PEM
certificates and time zones."""

from __future__ import annotations

import ipaddress
import re
import ssl
import zoneinfo
from functools import cache
from urllib.parse import SplitResult, urlsplit

# The reference's 16 fixed-offset zones: the admin page's shortlist (any IANA zone is accepted).
SHORTLIST_TIMEZONES = (
    "Etc/UTC", "Africa/Cairo", "Europe/Istanbul", "Africa/Nairobi", "Asia/Dubai", "Asia/Karachi",
    "Asia/Kolkata", "Asia/Bangkok", "Asia/Ho_Chi_Minh", "Asia/Shanghai", "Asia/Hong_Kong",
    "Asia/Taipei", "Asia/Singapore", "Asia/Manila", "Asia/Tokyo", "Asia/Seoul",
)
# One PEM block: its label and its base64 body.
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)
# A DNS name: dot-separated labels of letters, digits and inner hyphens (IDNs as punycode).
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def valid_timezone(name: str) -> bool:
    return name in _zones()


def all_timezones() -> list[str]:
    """The shortlist first, then every other IANA zone this installation knows."""
    rest = sorted(_zones() - set(SHORTLIST_TIMEZONES))
    return [*SHORTLIST_TIMEZONES, *rest]


def parse_url(raw: str) -> SplitResult | None:
    try:
        parts = urlsplit(raw.strip())
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts


def clean_origin(parts: SplitResult) -> bool:
    return parts.username is None and parts.password is None and not parts.query and \
        not parts.fragment


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def https_or_loopback_http(parts: SplitResult) -> bool:
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and is_loopback_host(parts.hostname or "")


def blank(value: str | None) -> bool:
    return value is None or not value.strip()


def is_host(value: str) -> bool:
    """A bare host name or IP address: no scheme, port, path, space or credentials."""
    try:
        ipaddress.ip_address(value)
        return True
    except ValueError:
        pass
    labels = value.removesuffix(".").split(".")
    return len(value) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def has_control(value: str) -> bool:
    """A control character (a line break, NUL, ...): it has no place in a login or a mailbox
    name, and would end a protocol line."""
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def pem_certificates_only(text: str) -> bool:
    """True when `text` holds one or more PEM certificates and nothing else but whitespace,
    each one loadable by OpenSSL as a trust anchor (what `build_ssl_context` does with it).
    A private key pasted by mistake is refused, not stored."""
    blocks = list(_PEM_BLOCK.finditer(text))
    if not blocks or _PEM_BLOCK.sub("", text).strip():
        return False
    for block in blocks:
        if block.group(1) != "CERTIFICATE":
            return False
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=block.group(0))
        except ssl.SSLError:
            return False
    return True
