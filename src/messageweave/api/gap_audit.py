"""`GET /api/audit` (the last gap audit) and `POST /api/audit` (run one now)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from messageweave.api.accounts import acting_account
from messageweave.api.credentials import require_admin, require_enabled
from messageweave.config.live import NotConfigured
from messageweave.errors import invalid_request, service_unavailable
from messageweave.mail.errors import MailError
from messageweave.mail.gap_audit import TRIGGER_API, run_audit
from messageweave.store import gaps

log = logging.getLogger(__name__)

router = APIRouter()

# The answers' shapes for /openapi.json; neither route reads a body or a query, so
# `api.openapi.OPERATIONS` has nothing to add for them.
_COUNTS: dict[str, Any] = {
    "type": "object",
    "required": ["checked", "missing", "enqueued"],
    "properties": {name: {"type": "integer", "minimum": 0}
                   for name in ("checked", "missing", "enqueued")},
}
_LAST: dict[str, Any] = {
    "type": "object",
    "required": ["last"],
    "properties": {"last": {"type": ["object", "null"]}},
}


def _answer(description: str, schema: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description,
                  "content": {"application/json": {"schema": schema}}}}


@router.get("/api/audit", responses=_answer("The last gap audit", _LAST))
async def get_audit(request: Request) -> JSONResponse:
    await require_admin(request)
    mailbox = await acting_account(request, mailbox=False)
    try:
        last = await gaps.read_last(mailbox.redis, mailbox.keys)
    except RedisError as exc:
        raise service_unavailable() from exc
    return JSONResponse({"last": last})


@router.post("/api/audit", responses=_answer("The audit's counts", _COUNTS))
async def post_audit(request: Request) -> JSONResponse:
    """One gap audit now; it takes no body (anything in it is a 400)."""
    await require_admin(request)
    mailbox = await acting_account(request, mailbox=True)
    if await request.body():
        raise invalid_request()
    await require_enabled(request)
    try:
        result = await run_audit(mailbox, TRIGGER_API)
    except (RedisError, MailError, NotConfigured) as exc:
        log.warning("gap audit failed: %s", type(exc).__name__)
        raise service_unavailable() from exc
    return JSONResponse(result.answer())
