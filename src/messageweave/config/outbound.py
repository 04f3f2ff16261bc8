"""The outbound and runtime parameters (`/api/config`): timeouts and the retry count."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from messageweave.config.model import ConfigInvalid, WireError
from messageweave.jsonio import is_int

# --- outbound / runtime parameters (`/api/config`) -----------------------------------------

TIMEOUT_MIN_MS = 100
TIMEOUT_MAX_MS = 300_000
MAX_RETRIES_CAP = 5


@dataclass(frozen=True)
class OutboundConfig:
    jmap_timeout_ms: int = 15_000
    telegram_timeout_ms: int = 10_000
    llm_timeout_ms: int = 30_000
    max_retries: int = 3

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


OUTBOUND_FIELDS = tuple(f.name for f in dataclasses.fields(OutboundConfig))


def parse_outbound(obj: object) -> OutboundConfig:
    """All four fields, integers (max_retries 0..255): else `WireError` (→ 400)."""
    if not isinstance(obj, dict) or set(obj) != set(OUTBOUND_FIELDS):
        raise WireError("outbound config needs exactly its four fields")
    if not all(is_int(obj[name]) and obj[name] >= 0 for name in OUTBOUND_FIELDS):
        raise WireError("outbound config fields must be non-negative integers")
    if obj["max_retries"] > 255:
        raise WireError("max_retries out of range")
    return OutboundConfig(**obj)


def validate_outbound(cfg: OutboundConfig) -> None:
    for name in ("jmap_timeout_ms", "telegram_timeout_ms", "llm_timeout_ms"):
        if not TIMEOUT_MIN_MS <= getattr(cfg, name) <= TIMEOUT_MAX_MS:
            raise ConfigInvalid(f"{name} must be between {TIMEOUT_MIN_MS} and {TIMEOUT_MAX_MS}")
    if cfg.max_retries > MAX_RETRIES_CAP:
        raise ConfigInvalid(f"max_retries must be at most {MAX_RETRIES_CAP}")
