"""Every secret value one running instance knows, for redaction (logs, audit records)."""

from __future__ import annotations

from messageweave.api.services import Services
from messageweave.config.runtime import secrets_of
from messageweave.logs import redis_url_password


def service_secrets(svc: Services) -> list[str | None]:
    values: list[str | None] = [
        svc.settings.admin_key, svc.settings.debug_token,
        redis_url_password(svc.settings.redis_url),
    ]
    for cfg in (svc.config.config, svc.config.runtime.config if svc.config.runtime else None):
        if cfg is not None:
            values.extend(secrets_of(cfg))
    return values
