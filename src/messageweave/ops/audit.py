"""The audit log: one record per admin action, never a secret (SPEC D.6).

Call `record_audit(svc, action, **fields)` after an admin action succeeded. Field values are
JSON values (names, counts, booleans, lists of names). A field named like a secret is dropped
and every configured secret value is scrubbed from strings, so a careless call site still
cannot write a credential. The request id of the request being served is added. Recording
never fails the action: a Redis error is logged and swallowed.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from messageweave.api.services import Services
from messageweave.config.model import SECRET_FIELDS
from messageweave.config.runtime import scrub
from messageweave.logs import request_id_var
from messageweave.ops.secrets import service_secrets
from messageweave.store.oplog import audit_log

log = logging.getLogger(__name__)

# The actions the service records; other values are accepted (new routes add their own).
SESSION_CREATED = "session_created"
SESSION_REVOKED = "session_revoked"
CONFIG_BOOTSTRAPPED = "config_bootstrapped"
CONFIG_SAVED = "config_saved"
ENABLED_CHANGED = "enabled_changed"
OUTBOUND_CHANGED = "outbound_changed"
WEBHOOK_REGISTERED = "webhook_registered"
PUSH_REGISTERED = "push_registered"
PUSH_DISABLED = "push_disabled"
DLQ_REPLAYED = "dlq_replayed"
# Failed credentials locked a client address out (`client`, `lock_s`, `method`, `path`).
AUTH_THROTTLED = "auth_throttled"
# The gap auditor: a run someone asked for, or any run that found missing mail.
GAP_AUDIT = "gap_audit"


def _clean(value: Any, secrets: list[str | None]) -> Any:
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, list | tuple):
        return [_clean(v, secrets) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v, secrets) for k, v in value.items() if k not in SECRET_FIELDS}
    if value is None or isinstance(value, bool | int | float):
        return value
    return scrub(str(value), secrets)


def audit_record(svc: Services, action: str, fields: dict[str, Any]) -> dict[str, Any]:
    secrets = service_secrets(svc)
    record: dict[str, Any] = {"action": action}
    record.update({k: _clean(v, secrets) for k, v in fields.items() if k not in SECRET_FIELDS})
    rid = request_id_var.get()
    if rid is not None:
        record["request_id"] = rid
    return record


async def record_audit(svc: Services, action: str, **fields: Any) -> None:
    record = audit_record(svc, action, fields)
    try:
        await audit_log(svc.redis).append(record)
    except RedisError as exc:
        log.warning("audit record %s not written: %s", action, type(exc).__name__)
        return
    log.info("audit %s", action, extra={"fields": {"event": "audit", **record}})


def changed_fields(patch: object) -> list[str]:
    """The field names a configuration patch named (never their values)."""
    if not isinstance(patch, dict):
        return []
    return sorted(str(name) for name in patch if name != "revision")
