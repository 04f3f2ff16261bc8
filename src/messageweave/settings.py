"""The process environment (boot settings, reference §4): the service's own five variables
(`REDIS_URL`, `CONFIG_ENCRYPTION_KEY`, `PORT`, `DEBUG_ENABLED`, `DEBUG_TOKEN`), plus the three
that describe the deployment in front of the service (`TRUSTED_PROXY_HEADER`,
`TRUSTED_PROXIES`, `GATEWAY_SECRET`, reference §3.4).

A missing or malformed required variable never crashes the process; it puts the service in
*setup mode* and is listed by name in `GET /api/status`. A malformed optional variable (`PORT`,
the three trust settings) is a `ValueError` naming the variable, at startup: guessing what was
meant could bind the wrong port, believe a header from the wrong peers or sign with a weak key.

Operator commands also look in the data directory of `messageweave run` for what the
environment lacks (`messageweave.runtime.settings_from_data_dir`): its embedded Redis and its
generated key.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PORT = 8080
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
KEY_FILE = "encryption.key"  # in the data directory
REDIS_DIR = "redis"  # the embedded Redis's directory inside the data directory
_TRUTHY = frozenset({"1", "true", "TRUE", "True", "yes", "YES"})
# `/debug/notify` sends any text from the owner's bot: its token must not be guessable.
DEBUG_TOKEN_MIN_CHARS = 32
# An HTTP field name (RFC 9110 §5.1: a token).
_FIELD_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# GATEWAY_SECRET: printable ASCII without spaces (the Worker's binding must be byte-equal), at
# least 32 characters (`openssl rand -hex 32` gives 64).
_GATEWAY_SECRET = re.compile(r"[!-~]{32,1024}")
# The shape of the multi-node `REDIS_URL` forms (reference §4; parsed in full, and the ports
# checked, by `messageweave.store.redis_url`): `[user:pass@]host[:port][,host[:port]…]`, and for
# a sentinel set the primary's name as the path. A wrong one is a setup-mode variable, never a
# client of the wrong kind.
_MULTI_NODE_SCHEME = re.compile(r"rediss?\+(cluster|sentinel)://", re.IGNORECASE)
_HOSTS = r"(?:[^@/?#\s]*@)?(?:\[[0-9A-Fa-f:.]+\]|[^,:@/?#\s\[\]]+)(?::\d{1,5})?"
_MULTI_NODE_URL = {
    "cluster": re.compile(rf"{_HOSTS}(?:,{_HOSTS})*/?(?:\?\S*)?"),
    "sentinel": re.compile(rf"{_HOSTS}(?:,{_HOSTS})*/[^/?#\s]+/?(?:\?\S*)?"),
}


def redis_url_well_formed(url: str) -> bool:
    """Blank is not; a single-server URL is left to redis-py; a cluster or sentinel URL must
    have its shape (a `redis+sentinel://` URL without a primary's name is not one)."""
    if not url.strip():
        return False
    scheme = _MULTI_NODE_SCHEME.match(url)
    if scheme is None:
        return True
    return _MULTI_NODE_URL[scheme.group(1).lower()].fullmatch(url, scheme.end()) is not None


@dataclass(frozen=True)
class Settings:
    redis_url: str
    # The raw CONFIG_ENCRYPTION_KEY string: the AES-256 key (hex) and the admin credential.
    admin_key: str = field(repr=False)
    port: int = DEFAULT_PORT
    debug_requested: bool = False
    debug_token: str = field(default="", repr=False)
    # The header a trusted proxy (the gateway) sets to the client's address, lowercase;
    # "" = the socket peer is the client. `TRUSTED_PROXIES`: the networks that header is
    # believed from, normalised and comma-separated; "" = from any peer.
    trusted_proxy_header: str = ""
    trusted_proxies: str = ""
    # The key the gateway signs forwarded requests with (`x-mw-gateway-signature`, reference
    # §3.3); "" = no signature is required (and the client-address header is not tied to one).
    gateway_secret: str = field(default="", repr=False)

    @property
    def missing(self) -> list[str]:
        """Names of required variables that are absent or invalid, in the documented order."""
        names = []
        if not redis_url_well_formed(self.redis_url):
            names.append("REDIS_URL")
        if not _HEX64.fullmatch(self.admin_key):
            names.append("CONFIG_ENCRYPTION_KEY")
        return names

    @property
    def configured(self) -> bool:
        return not self.missing

    @property
    def encryption_key(self) -> bytes:
        return bytes.fromhex(self.admin_key)

    @property
    def debug_enabled(self) -> bool:
        """The debug surface exists only when requested *and* a token of at least
        `DEBUG_TOKEN_MIN_CHARS` is set (SAF-DEBUG-GATE; the length rule is issue #23's)."""
        return self.debug_requested and len(self.debug_token) >= DEBUG_TOKEN_MIN_CHARS

    @property
    def debug_refusal(self) -> str | None:
        """Why a requested debug surface stays off (for the log; never the token), else None."""
        if not self.debug_requested or self.debug_enabled:
            return None
        if not self.debug_token:
            return "the debug surface stays off: DEBUG_TOKEN is not set"
        return (f"the debug surface stays off: DEBUG_TOKEN has {len(self.debug_token)} "
                f"characters, at least {DEBUG_TOKEN_MIN_CHARS} are needed")


def debug_surface_requested(cli_flag: bool, env: Mapping[str, str]) -> bool:
    return cli_flag or env.get("DEBUG_ENABLED", "") in _TRUTHY


def _port(raw: str | None) -> int:
    if raw is None or not raw.strip():
        return DEFAULT_PORT
    try:
        port = int(raw)
    except ValueError as exc:
        raise ValueError("PORT must be an integer between 1 and 65535") from exc
    if not 0 < port < 65536:
        raise ValueError("PORT must be an integer between 1 and 65535")
    return port


def _trusted_proxy_header(raw: str | None) -> str:
    name = (raw or "").strip()
    if name and not _FIELD_NAME.fullmatch(name):
        raise ValueError(f"TRUSTED_PROXY_HEADER must be an HTTP header name, got {name!r}")
    return name.lower()


def _trusted_proxies(raw: str | None, header: str) -> str:
    """Comma-separated IP addresses or CIDR networks, normalised (`10.0.0.7/8` → `10.0.0.0/8`,
    a bare address → its /32 or /128); blank = any peer."""
    entries = [p.strip() for p in (raw or "").split(",") if p.strip()]
    if not entries:
        return ""
    if not header:
        raise ValueError("TRUSTED_PROXIES is set but TRUSTED_PROXY_HEADER is not: "
                         "name the header those proxies set, or unset TRUSTED_PROXIES")
    nets = []
    for entry in entries:
        try:
            nets.append(str(ipaddress.ip_network(entry, strict=False)))
        except ValueError as exc:
            raise ValueError(
                "TRUSTED_PROXIES must be comma-separated IP addresses or CIDR networks "
                f"(e.g. 10.0.0.0/8,2001:db8::1), got {entry!r}") from exc
    return ",".join(nets)


def _gateway_secret(raw: str | None) -> str:
    """Blank = unset; else 32 to 1024 printable ASCII characters, no spaces. The value is
    never part of the message: it is a secret."""
    if raw is None or not raw.strip():
        return ""
    if not _GATEWAY_SECRET.fullmatch(raw):
        raise ValueError("GATEWAY_SECRET must be 32 to 1024 printable ASCII characters without "
                         "spaces or line breaks (e.g. `openssl rand -hex 32`); unset it to "
                         "serve without the gateway's signature")
    return raw


def from_env(env: Mapping[str, str] | None = None, *, debug_flag: bool = False) -> Settings:
    env = os.environ if env is None else env
    header = _trusted_proxy_header(env.get("TRUSTED_PROXY_HEADER"))
    return Settings(
        redis_url=env.get("REDIS_URL", "").strip(),
        admin_key=env.get("CONFIG_ENCRYPTION_KEY", "").strip(),
        port=_port(env.get("PORT")),
        debug_requested=debug_surface_requested(debug_flag, env),
        debug_token=env.get("DEBUG_TOKEN", ""),
        trusted_proxy_header=header,
        trusted_proxies=_trusted_proxies(env.get("TRUSTED_PROXIES"), header),
        gateway_secret=_gateway_secret(env.get("GATEWAY_SECRET")),
    )


def default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    return Path(xdg) / "messageweave" if xdg else Path(".messageweave")
