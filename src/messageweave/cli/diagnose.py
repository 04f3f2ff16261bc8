"""The checks behind `messageweave diagnose`: each one ok, warn or fail, with a one-line remedy.

They run against what the environment points at (Redis, the stored configuration, the peers it
names), in order; a check whose prerequisite failed is reported as failed with the remedy of
the prerequisite, so the first failing line is the one to fix.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from redis.exceptions import RedisError

from messageweave.chat.telegram import TelegramClient, TelegramSendError
from messageweave.config.model import BusinessConfig
from messageweave.config.service import ConfigService, StoredConfigInvalid, StoreUnavailable
from messageweave.mail.push import health as push_health
from messageweave.probes import jmap_session_failure, probe_telegram_get_me
from messageweave.settings import Settings
from messageweave.store.opstats import stream_stats
from messageweave.store.redis import Redis, connect
from messageweave.store.state import ConfigStore

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    remedy: str = ""


def _ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


async def run_checks(settings: Settings) -> list[Check]:
    if settings.missing:
        return [Check("environment", "fail", "missing or invalid: " + ", ".join(settings.missing),
                      "set REDIS_URL and CONFIG_ENCRYPTION_KEY (64 hex characters)")]
    checks = [_ok("environment", "REDIS_URL and CONFIG_ENCRYPTION_KEY set")]
    redis = connect(settings.redis_url)
    try:
        checks.extend(await _with_redis(settings, redis))
    finally:
        await redis.aclose()
    return checks


async def _with_redis(settings: Settings, redis: Redis) -> list[Check]:
    store = ConfigStore(redis)
    try:
        await asyncio.wait_for(store.ping(), 10)
    except (RedisError, OSError, TimeoutError) as exc:
        return [Check("redis", "fail", f"unreachable ({type(exc).__name__})",
                      "check REDIS_URL and that Redis is running")]
    checks = [_ok("redis", "answers PING")]
    service = ConfigService(store, settings.encryption_key)
    try:
        _, cfg = await service.read_stored()
    except StoreUnavailable:
        return [*checks, Check("configuration", "fail", "stored configuration cannot be decrypted",
                               "CONFIG_ENCRYPTION_KEY is not the key it was saved with")]
    except StoredConfigInvalid as exc:
        return [*checks, Check("configuration", "fail", f"stored configuration invalid: {exc}",
                               "fix it on the admin page")]
    if cfg is None:
        return [*checks, Check("configuration", "fail", "nothing configured yet",
                               "save a configuration on the admin page or run "
                               "`messageweave bootstrap --file config.json`")]
    checks.append(_ok("configuration", "stored and valid"))
    checks.append(await _enabled(store))
    checks.extend(await _peers(cfg))
    checks.append(await _push(redis, cfg, time.time()))
    checks.extend(await _queues(redis))
    return checks


async def _enabled(store: ConfigStore) -> Check:
    if await store.enabled():
        return _ok("enabled", "the service switch is on")
    return Check("enabled", "fail", "the service switch is off (every business route is 503)",
                 "turn it on on the admin page (PUT /api/enabled)")


async def _peers(cfg: BusinessConfig) -> list[Check]:
    jmap_failure, telegram_error = await asyncio.gather(
        jmap_session_failure(cfg), probe_telegram_get_me(cfg)
    )
    checks = [
        _ok("jmap session", cfg.jmap_session_url) if jmap_failure is None else
        Check("jmap session", "fail", f"{jmap_failure.detail}: {jmap_failure.cause}",
              jmap_failure.remedy),
        _ok("telegram getMe", "the bot token is accepted") if telegram_error is None else
        Check("telegram getMe", "fail", telegram_error,
              "check the bot token and the Telegram API base URL"),
    ]
    if telegram_error is None:
        checks.append(await _webhook(cfg))
    return checks


async def _webhook(cfg: BusinessConfig) -> Check:
    try:
        async with TelegramClient(cfg.bot_token, api_base_url=cfg.telegram_api_base_url,
                                  timeout_s=5) as bot:
            url = await bot.get_webhook_info()
    except TelegramSendError as exc:
        return Check("telegram webhook", "fail", f"getWebhookInfo failed ({exc.failure_class})",
                     "retry; check the Telegram API base URL")
    if not url:
        return Check("telegram webhook", "warn", "no webhook set: the bot hears nothing",
                     "register it on the admin page (POST /api/telegram/register-webhook)")
    return _ok("telegram webhook", url)


_PUSH_REMEDIES = {
    "not_verified": "check that the callback URL reaches this service's /push/jmap, then disable "
                    "and register push again on the admin page",
    "url_unknown": "register push again on the admin page (POST /api/push/register) with the "
                   "same callback URL",
}
_PUSH_RETRY = ("check that the JMAP server answers PushSubscription/get and /set; the service "
               "retries every minute while its switch is on")


def _age(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


async def _push(redis: Redis, cfg: BusinessConfig, now: float) -> Check:
    """Push is `warn` unless `ok`: while it is off or degraded mail still arrives by reconcile
    (every `degraded_reconcile_interval_s` while degraded)."""
    health = await push_health(redis, now)
    last = ("no StateChange yet" if health.last_state_change is None
            else f"last StateChange {_age(now - health.last_state_change)} ago")
    expiry = ("no expiry" if health.expires is None else "expires "
              + datetime.fromtimestamp(health.expires, UTC).strftime("%Y-%m-%d %H:%M UTC"))
    if health.state == "off":
        return Check("jmap push", "warn", "no push registration: new mail waits for reconcile",
                     "register push on the admin page (POST /api/push/register)")
    if health.state == "degraded":
        every = cfg.degraded_reconcile_interval_s
        return Check("jmap push", "warn",
                     f"{health.label} (subscription {health.subscription_id}, {expiry}, {last}): "
                     f"new mail waits for the reconcile every {every} s",
                     _PUSH_REMEDIES.get(health.reason or "", _PUSH_RETRY))
    return _ok("jmap push", f"ok (subscription {health.subscription_id}, {expiry}, {last})")


async def _queues(redis: Redis) -> list[Check]:
    checks = []
    for s in await stream_stats(redis):
        detail = f"{s.length} entries, {s.pending} pending, {s.dlq} in the DLQ"
        if s.dlq:
            checks.append(Check(f"queue {s.stream}", "warn", detail,
                                "inspect and replay the dead letters (`messageweave dlq`)"))
        else:
            checks.append(_ok(f"queue {s.stream}", detail))
    return checks
