"""The audit log: one record per admin action, never a secret (reference §1.7).

Call `record_audit(ctx, action, **fields)` (any `AuditContext`; `Services` is one) after an
admin action succeeded. Field values are JSON values (names, counts, booleans, lists of
names). A field named like a secret is dropped and every configured secret value is scrubbed
from strings, so a careless call site still cannot write a credential. Names are never
rewritten: keys are kept as given, and a secret inside a longer name that a value lists (the
field names of `changed_fields`) is not a whole value, so it stays. The request id of the
request being served is added. Recording never fails the action: a Redis error is logged and
swallowed.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from redis.exceptions import RedisError

from messageweave.config.model import SECRET_FIELDS
from messageweave.logs import request_id_var, scrub_values
from messageweave.store.oplog import audit_log
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)

# The actions the service records; other values are accepted (new routes add their own).
SESSION_CREATED = "session_created"
SESSION_REVOKED = "session_revoked"
CONFIG_BOOTSTRAPPED = "config_bootstrapped"
CONFIG_SAVED = "config_saved"
ENABLED_CHANGED = "enabled_changed"
OUTBOUND_CHANGED = "outbound_changed"
WEBHOOK_REGISTERED = "webhook_registered"
WEBHOOK_DELETED = "webhook_deleted"
PUSH_REGISTERED = "push_registered"
PUSH_DISABLED = "push_disabled"
DLQ_REPLAYED = "dlq_replayed"
# Failed credentials locked a client address out (`client`, `lock_s`, `method`, `path`).
AUTH_THROTTLED = "auth_throttled"
# The gap auditor records `gap_audit` (`mail.gap_audit.GAP_AUDIT`): a run someone asked for, or
# any run that found missing mail.


class AuditContext(Protocol):
    """What recording needs: where to write, and every secret to keep out of the record."""

    @property
    def redis(self) -> Redis: ...

    def secrets(self) -> list[str | None]: ...


def _clean(value: Any, secrets: list[str | None]) -> Any:
    """Secrets removed from the values only: a key (a field name, e.g.
    `telegram_webhook_secret` while the JMAP password is `secret`) is kept as it is."""
    return scrub_values(value, secrets, drop=SECRET_FIELDS)


def audit_record(ctx: AuditContext, action: str, fields: dict[str, Any]) -> dict[str, Any]:
    secrets = ctx.secrets()
    record: dict[str, Any] = {"action": action}
    record.update({k: _clean(v, secrets) for k, v in fields.items() if k not in SECRET_FIELDS})
    rid = request_id_var.get()
    if rid is not None:
        record["request_id"] = rid
    return record


async def record_audit(ctx: AuditContext, action: str, **fields: Any) -> None:
    record = audit_record(ctx, action, fields)
    try:
        await audit_log(ctx.redis).append(record)
    except RedisError as exc:
        log.warning("audit record %s not written: %s", action, type(exc).__name__)
        return
    log.info("audit %s", action, extra={"fields": {"event": "audit", **record}})


def changed_fields(patch: object) -> list[str]:
    """The field names a configuration patch named (never their values)."""
    if not isinstance(patch, dict):
        return []
    return sorted(str(name) for name in patch if name != "revision")
