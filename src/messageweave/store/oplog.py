"""Append-only operation logs in Redis streams: the audit log and the send log.

Each record is one stream entry with a single field `r` holding compact JSON. Every append
trims the stream by count (`XADD ... MAXLEN <max entries>`) and by age (`XTRIM ... MINID
<now - retention>`), in one transaction, both exact: these logs are small, and an approximate
trim would keep old entries until a whole node expires. The count bound is what holds when
requests from anyone write records faster than the age trims them (issue #23: every throttle
lock is an audit record). Stream ids are millisecond timestamps, which gives each record its
time and a stable paging cursor.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from messageweave.jsonio import dump_json
from messageweave.store import keys
from messageweave.store.redis import Redis

_FIELD = "r"
_STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")
MAX_PAGE = 200
_SCAN_BATCH = 200
_SCAN_LIMIT = 5000  # entries a filtered page may look through before it stops


class CursorInvalid(ValueError):
    """A `before` value that is not a stream id."""


@dataclass(frozen=True)
class Page:
    records: list[dict[str, Any]]
    next_before: str | None


def valid_stream_id(value: str) -> bool:
    return _STREAM_ID.fullmatch(value) is not None


class OpLog:
    def __init__(self, redis: Redis, key: str, retention_s: int, max_entries: int) -> None:
        self.redis = redis
        self.key = key
        self.retention_s = retention_s
        self.max_entries = max_entries

    async def append(self, record: dict[str, Any], *, now_ms: int | None = None) -> str:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        min_id = max(now - self.retention_s * 1000, 0)
        payload = dump_json(record)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(self.key, {_FIELD: payload}, maxlen=self.max_entries, approximate=False)
            pipe.xtrim(self.key, minid=min_id, approximate=False)
            entry_id, _trimmed = await pipe.execute()
        return str(entry_id)

    async def append_many(self, records: list[dict[str, Any]]) -> None:
        """`append` of several records in one transaction, trimmed once after them."""
        now = int(time.time() * 1000)
        async with self.redis.pipeline(transaction=True) as pipe:
            for record in records:
                payload = dump_json(record)
                pipe.xadd(self.key, {_FIELD: payload})
            pipe.xtrim(self.key, maxlen=self.max_entries, approximate=False)
            pipe.xtrim(self.key, minid=max(now - self.retention_s * 1000, 0), approximate=False)
            await pipe.execute()

    async def page(
        self,
        before: str | None,
        limit: int,
        keep: Callable[[dict[str, Any]], bool] | None = None,
    ) -> Page:
        """Newest first, strictly older than `before`; `keep` filters (scanning a bounded
        number of entries, so a rare match cannot make one request read the whole stream)."""
        if before is not None and not valid_stream_id(before):
            raise CursorInvalid(before)
        limit = max(1, min(limit, MAX_PAGE))
        out: list[dict[str, Any]] = []
        cursor = before
        scanned = 0
        while len(out) < limit and scanned < _SCAN_LIMIT:
            upper = "+" if cursor is None else f"({cursor}"
            count = limit if keep is None else _SCAN_BATCH
            entries = await self.redis.xrevrange(self.key, max=upper, min="-", count=count)
            if not entries:
                return Page(out, None)
            for raw_id, fields in entries:
                scanned += 1
                entry_id = cursor = str(raw_id)
                record = _decode(entry_id, fields or {})
                if keep is None or keep(record):
                    out.append(record)
                    if len(out) == limit:
                        return Page(out, entry_id)
            if len(entries) < count:
                return Page(out, None)
        return Page(out, cursor)

    async def since(self, start_ms: int, keep: Callable[[dict[str, Any]], bool],
                    limit: int = MAX_PAGE) -> list[dict[str, Any]]:
        """Oldest first from `start_ms` on, the records `keep` accepts (at most `limit`,
        looking through at most `_SCAN_LIMIT` entries): what followed one event."""
        out: list[dict[str, Any]] = []
        lower = f"{max(start_ms, 0)}-0"
        scanned = 0
        while len(out) < limit and scanned < _SCAN_LIMIT:
            entries = await self.redis.xrange(self.key, min=lower, max="+",
                                              count=_SCAN_BATCH) or []
            for raw_id, fields in entries:
                scanned += 1
                lower = f"({raw_id!s}"
                record = _decode(str(raw_id), fields or {})
                if keep(record):
                    out.append(record)
            if len(entries) < _SCAN_BATCH:
                break
        return out[:limit]


def _decode(entry_id: str, fields: dict[Any, Any]) -> dict[str, Any]:
    try:
        value = json.loads(fields.get(_FIELD) or "{}")
    except ValueError:
        value = {}
    record = value if isinstance(value, dict) else {}
    millis = int(entry_id.split("-", 1)[0])
    return {"id": entry_id, "time": iso_time(millis), **record}


def iso_time(millis: int) -> str:
    """A record's `time`: ISO 8601 UTC with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(millis / 1000)) + \
        f".{millis % 1000:03d}Z"


def audit_log(redis: Redis) -> OpLog:
    return OpLog(redis, keys.AUDIT_LOG, keys.AUDIT_LOG_RETENTION_S, keys.AUDIT_LOG_MAX_ENTRIES)


def send_log(redis: Redis) -> OpLog:
    return OpLog(redis, keys.SEND_LOG, keys.SEND_LOG_RETENTION_S, keys.SEND_LOG_MAX_ENTRIES)
