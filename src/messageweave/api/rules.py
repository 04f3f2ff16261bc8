"""`POST /api/rules/dry-run`: which rule each of the newest mails of the notify mailboxes would
meet (`pipeline.routing.dry_run`), with the saved rules or with values not saved yet."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from messageweave.api.accounts import acting_account
from messageweave.api.admin import invalid_configuration
from messageweave.api.credentials import require_admin
from messageweave.config.live import NotConfigured
from messageweave.config.model import (
    BusinessConfig,
    ConfigInvalid,
    WireError,
    merge,
    parse_patch,
    validate,
)
from messageweave.errors import invalid_request, service_unavailable
from messageweave.jsonio import json_object
from messageweave.mail.errors import MailError
from messageweave.pipeline.routing import dry_run

log = logging.getLogger(__name__)

router = APIRouter()

# The fields a dry run may try before they are saved.
TRIED_FIELDS = ("notify_rules", "quiet_hours")

_MAIL: dict[str, Any] = {
    "type": "object",
    "required": ["email_id", "from", "subject", "received_at", "rule", "action", "chat_id",
                 "thread_id", "silent", "quiet"],
    "properties": {
        "email_id": {"type": "string"}, "from": {"type": ["string", "null"]},
        "subject": {"type": ["string", "null"]}, "received_at": {"type": ["integer", "null"]},
        "rule": {"type": ["string", "null"]}, "action": {"enum": ["notify", "mute"]},
        "chat_id": {"type": "integer"}, "thread_id": {"type": ["integer", "null"]},
        "silent": {"type": "boolean"}, "quiet": {"type": "boolean"},
    },
}
_DRY_RUN: dict[str, Any] = {
    "type": "object",
    "required": ["checked", "mails"],
    "properties": {"checked": {"type": "integer", "minimum": 0},
                   "mails": {"type": "array", "items": _MAIL}},
}


def _tried(cfg: BusinessConfig, body: bytes) -> BusinessConfig:
    """The configuration to judge with: the live one, with the body's fields in place (400 for
    a body that is not an object of `TRIED_FIELDS`, 422 naming the field for a wrong value)."""
    if not body.strip():
        return cfg
    obj = json_object(body)
    if not set(obj) <= set(TRIED_FIELDS):
        raise invalid_request()
    try:
        changes, _ = parse_patch(obj)
        tried = merge(cfg, changes)
        # A rule's chat must be in the allowlist, as on a save; the size and strength limits
        # are the saved configuration's business (one loaded from before them still serves).
        validate(tried, limits=False)
    except WireError as exc:
        raise invalid_request() from exc
    except ConfigInvalid as exc:
        raise invalid_configuration(str(exc)) from exc
    return tried


@router.post("/api/rules/dry-run", responses={200: {
    "description": "What the rules decide for the newest mails of the notify mailboxes",
    "content": {"application/json": {"schema": _DRY_RUN}}}})
async def post_dry_run(request: Request) -> JSONResponse:
    """Sends nothing and writes nothing; an empty body (or `{}`) tries the saved rules."""
    await require_admin(request)
    mailbox = await acting_account(request, mailbox=True)
    body = await request.body()
    cfg = mailbox.config.config  # the account's effective configuration (its rules, zone)
    if cfg is None:
        raise service_unavailable()
    tried = _tried(cfg, body)
    try:
        answer = await dry_run(tried, await mailbox.mail())
    except (MailError, NotConfigured) as exc:
        log.warning("rules dry run failed: %s", type(exc).__name__)
        raise service_unavailable() from exc
    return JSONResponse(answer)
