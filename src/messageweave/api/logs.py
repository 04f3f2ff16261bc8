"""`GET /api/logs/audit` and `GET /api/logs/send`: the operation logs, newest first.

Paging: `?limit=` (1..200, default 50) and `?before=<id>` (the `next_before` of the previous
page); `/api/logs/send` also takes `?outcome=`. `next_before` is null on the last page.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from messageweave.api.credentials import require_admin, services
from messageweave.errors import invalid_request, service_unavailable
from messageweave.store.oplog import InvalidCursor, OpLog, Page, audit_log, send_log

router = APIRouter()

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError as exc:
        raise invalid_request() from exc
    if not 1 <= value <= MAX_LIMIT:
        raise invalid_request()
    return value


async def _page(request: Request, log: OpLog, outcome: str | None = None) -> JSONResponse:
    limit = _limit(request.query_params.get("limit"))
    before = request.query_params.get("before") or None

    def keep(record: dict[str, Any]) -> bool:
        return record.get("outcome") == outcome

    try:
        page: Page = await log.page(before, limit, keep if outcome else None)
    except InvalidCursor as exc:
        raise invalid_request() from exc
    except RedisError as exc:
        raise service_unavailable() from exc
    return JSONResponse({"records": page.records, "next_before": page.next_before})


@router.get("/api/logs/audit")
async def get_audit_log(request: Request) -> JSONResponse:
    await require_admin(request)
    return await _page(request, audit_log(services(request).redis))


@router.get("/api/logs/send")
async def get_send_log(request: Request) -> JSONResponse:
    await require_admin(request)
    outcome = request.query_params.get("outcome") or None
    return await _page(request, send_log(services(request).redis), outcome)
