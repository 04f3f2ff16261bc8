"""`GET /api/logs/audit` and `GET /api/logs/send`: the operation logs, newest first.

Paging: `?limit=` (1..200, default 50) and `?before=<id>` (the `next_before` of the previous
page); `/api/logs/send` also takes `?outcome=` and `?account=` (one account's records: its mail
stream's, and the chat stream's of its chats; absent = every record, as before accounts).
`next_before` is null on the last page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from messageweave.api.accounts import acting_account
from messageweave.api.credentials import require_admin, services
from messageweave.config.accounts import chats_of
from messageweave.errors import invalid_request, service_unavailable
from messageweave.mail.context import MailContext
from messageweave.store.keys import DEFAULT_ACCOUNT
from messageweave.store.oplog import CursorInvalid, OpLog, Page, audit_log, send_log
from messageweave.store.streams import STREAM_NAMES

Keep = Callable[[dict[str, Any]], bool]

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


def _of_account(mailbox: MailContext) -> Keep:
    """The send records of one account: an attempt at its mail stream (a record without
    `account` is `default`'s, `ops.sendlog`), or at the chat stream for one of its chats (a chat
    belongs to one account)."""
    account = mailbox.keys.account_id
    cfg = mailbox.config.config
    chats = frozenset(chats_of(cfg)) if cfg is not None else frozenset()

    def mine(record: dict[str, Any]) -> bool:
        if record.get("stream") == STREAM_NAMES[0]:
            return bool(record.get("account", DEFAULT_ACCOUNT) == account)
        return record.get("chat_id") in chats

    return mine


async def _page(request: Request, log: OpLog, keeps: list[Keep] | None = None) -> JSONResponse:
    limit = _limit(request.query_params.get("limit"))
    before = request.query_params.get("before") or None
    tests = keeps or []

    def keep(record: dict[str, Any]) -> bool:
        return all(test(record) for test in tests)

    try:
        page: Page = await log.page(before, limit, keep if tests else None)
    except CursorInvalid as exc:
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
    keeps: list[Keep] = []
    outcome = request.query_params.get("outcome") or None
    if outcome:
        keeps.append(lambda record: record.get("outcome") == outcome)
    if "account" in request.query_params:
        keeps.append(_of_account(await acting_account(request, mailbox=False)))
    return await _page(request, send_log(services(request).redis), keeps)
