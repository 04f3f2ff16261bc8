"""The process environment: five variables, nothing else (SPEC Part A, reference §5.1).

A missing or malformed required variable never crashes the process; it puts the service in
*setup mode* and is listed by name in `GET /api/status`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_PORT = 8080
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_TRUTHY = frozenset({"1", "true", "TRUE", "True", "yes", "YES"})


@dataclass(frozen=True)
class Settings:
    redis_url: str
    # The raw CONFIG_ENCRYPTION_KEY string: the AES-256 key (hex) and the admin credential.
    admin_key: str = field(repr=False)
    port: int = DEFAULT_PORT
    debug_requested: bool = False
    debug_token: str = field(default="", repr=False)

    @property
    def missing(self) -> list[str]:
        """Names of required variables that are absent or invalid, in the documented order."""
        names = []
        if not self.redis_url.strip():
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
        """The debug surface exists only when requested *and* a token is set (SAF-DEBUG-GATE)."""
        return self.debug_requested and bool(self.debug_token)


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


def from_env(env: Mapping[str, str] | None = None, *, debug_flag: bool = False) -> Settings:
    env = os.environ if env is None else env
    return Settings(
        redis_url=env.get("REDIS_URL", "").strip(),
        admin_key=env.get("CONFIG_ENCRYPTION_KEY", "").strip(),
        port=_port(env.get("PORT")),
        debug_requested=debug_surface_requested(debug_flag, env),
        debug_token=env.get("DEBUG_TOKEN", ""),
    )
