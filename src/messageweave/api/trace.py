"""`GET /api/trace?q=<email id | subject words>`: where a mail is (`pipeline.trace`)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from messageweave.api.accounts import acting_account
from messageweave.api.credentials import require_admin
from messageweave.config.live import NotConfigured
from messageweave.errors import invalid_request, service_unavailable
from messageweave.mail.errors import MailError
from messageweave.pipeline.trace import QueryInvalid, trace

log = logging.getLogger(__name__)

router = APIRouter()

_TRACE: dict[str, Any] = {
    "type": "object",
    "required": ["query", "by", "jmap", "found", "mails"],
    "properties": {"query": {"type": "string"}, "by": {"enum": ["email_id", "subject"]},
                   "jmap": {"type": "string"}, "found": {"type": "boolean"},
                   "mails": {"type": "array", "items": {"type": "object"}}},
}


@router.get("/api/trace", responses={200: {
    "description": "Every recorded step of the matching mails",
    "content": {"application/json": {"schema": _TRACE}}}})
async def get_trace(request: Request) -> JSONResponse:
    await require_admin(request)
    mailbox = await acting_account(request, mailbox=True)
    try:
        answer = await trace(mailbox, request.query_params.get("q") or "")
    except QueryInvalid as exc:
        raise invalid_request() from exc
    except (RedisError, MailError, NotConfigured) as exc:
        log.warning("trace failed: %s", type(exc).__name__)
        raise service_unavailable() from exc
    return JSONResponse(answer.json())
