"""Reading values out of the server's JSON, trusting nothing: a value of the wrong type reads
as absent (or empty), so one odd field never fails a whole answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from messageweave.mail.jmap.errors import JmapProtocolError


def dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def strs(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def positive_int(value: Any, default: int) -> int:
    n = opt_int(value)
    return n if n is not None and n > 0 else default


def req_str(res: Mapping[str, Any], key: str, method: str) -> str:
    value = res.get(key)
    if not isinstance(value, str):
        raise JmapProtocolError(f"{method} response has no {key}")
    return value
