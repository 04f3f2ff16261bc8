"""The checks behind `messageweave diagnose`: each one ok, warn or fail, with a one-line remedy.

They run against what the environment points at (Redis, the stored configuration, the peers it
names), in order; a check whose prerequisite failed is reported as failed with the remedy of
the prerequisite, so the first failing line is the one to fix. They first say how the
instance was started (`messageweave.cli.instance`: a data directory of `scripts/run.sh` or the
environment) and, for a data directory, whether it runs and whether systemd keeps it running;
the remedies then fit that way (issue #34).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from redis.exceptions import RedisError

from messageweave.chat.telegram import TelegramClient, TelegramSendError
from messageweave.cli.checks import Check
from messageweave.cli.checks import ok as _ok
from messageweave.cli.instance import Origin, Place
from messageweave.config.live import ConfigService, StoredConfigInvalid, StoreUnavailable
from messageweave.config.model import BusinessConfig
from messageweave.mail.eventsource import read_in_force
from messageweave.mail.kinds import kind_of
from messageweave.pipeline import owners
from messageweave.pipeline.polling import updates_label
from messageweave.probes import mail_server_failure, telegram_get_me_failure
from messageweave.settings import Settings
from messageweave.store import keys
from messageweave.store.account_keys import DEFAULT_ACCOUNT
from messageweave.store.accounts import AccountStore
from messageweave.store.config_store import ConfigStore
from messageweave.store.opstats import stream_stats
from messageweave.store.receivers import read_status
from messageweave.store.redis import Redis, open_redis
from messageweave.store.redis_url import topology_text
from messageweave.store.waiting import JMAP, LABELS, TELEGRAM, waiting_for_peers


async def run_checks(settings: Settings, origin: Origin | None = None) -> list[Check]:
    """The checks, for an instance started the way `origin` says (default: from the
    environment, as a container is)."""
    place = Place.find(origin)
    if settings.missing:  # and for a data directory, whether systemd would start it
        return [place.missing(settings.missing),
                *([place.service()] if place.origin.data_dir else [])]
    checks = [_ok("environment", place.origin.describe())]
    if place.origin.data_dir:
        checks.extend(place.checks())
    redis = await open_redis(settings.redis_url)
    try:
        checks.extend(await _with_redis(settings, redis, place))
    finally:
        await redis.aclose()
    return checks


async def _with_redis(settings: Settings, redis: Redis, place: Place) -> list[Check]:
    store = ConfigStore(redis)
    try:
        await asyncio.wait_for(store.ping(), 10)
        topology = await asyncio.wait_for(topology_text(redis), 10)
    except (RedisError, OSError, TimeoutError) as exc:
        return [place.redis_down(type(exc).__name__)]
    checks = [_ok("redis", f"answers PING ({topology})")]
    service = ConfigService(store, settings.encryption_key)
    try:
        _, cfg = await service.read_stored()
    except StoreUnavailable:
        return [*checks, Check("configuration", "fail", "stored configuration cannot be decrypted",
                               place.remedy_wrong_key())]
    except StoredConfigInvalid as exc:
        return [*checks, Check("configuration", "fail", f"stored configuration invalid: {exc}",
                               "fix it on the admin page")]
    if cfg is None:
        return [*checks, Check("configuration", "fail", "nothing configured yet",
                               f"save a configuration on the admin page{place.page()} or run "
                               "`messageweave bootstrap --file config.json`")]
    checks.append(_ok("configuration", "stored and valid"))
    checks.append(_owners(cfg))
    checks.append(await _enabled(store))
    checks.extend(await _peers(cfg))
    checks.append(await _updates(redis, cfg, await store.enabled(), place))
    # a paused `default` runs no holder: its push is off, whatever the holder last wrote
    served = (await AccountStore(redis).read(DEFAULT_ACCOUNT)).enabled
    checks.append(await _push(redis, cfg, time.time(), served and await store.enabled()))
    checks.extend(await _queues(redis))
    checks.extend(await _waiting(redis, cfg, time.time()))
    return checks


def _owners(cfg: BusinessConfig) -> Check:
    """Who may read mail and send from the chat (`pipeline.owners`, issue #32)."""
    if owners.unguarded_group(cfg):
        return Check("owners", "warn", "the notification chat is a group and no owner is "
                     "listed: every member may read mail and send replies",
                     "use \"Find my chat\" on the admin page (or set owner_user_ids)")
    listed = len(cfg.owner_user_ids)
    return _ok("owners", f"{listed} Telegram user(s) listed" if listed
               else "the user of the private notification chat")


async def _enabled(store: ConfigStore) -> Check:
    if await store.enabled():
        return _ok("enabled", "the service switch is on")
    return Check("enabled", "fail", "the service switch is off (every business route is 503)",
                 "turn it on on the admin page (PUT /api/enabled)")


async def _peers(cfg: BusinessConfig) -> list[Check]:
    kind = kind_of(cfg)
    mail_failure, telegram_failure = await asyncio.gather(
        mail_server_failure(cfg), telegram_get_me_failure(cfg)
    )
    name, where = kind.login_check, kind.server(cfg)
    checks = [
        _ok(name, where) if mail_failure is None else
        Check(name, "fail", f"{mail_failure.detail}: {mail_failure.cause}",
              mail_failure.remedy),
        _ok("telegram getMe", "the bot token is accepted") if telegram_failure is None else
        Check("telegram getMe", "fail", f"{telegram_failure.detail}: {telegram_failure.cause}",
              telegram_failure.remedy),
    ]
    if telegram_failure is None:
        checks.append(await _webhook(cfg))
    return checks


async def _webhook(cfg: BusinessConfig) -> Check:
    """The webhook Telegram has on file: none is fine unless `telegram_updates` is `webhook`
    (long polling needs none, and is what `auto` does without one)."""
    try:
        async with TelegramClient(cfg.bot_token, api_base_url=cfg.telegram_api_base_url,
                                  timeout_s=5) as bot:
            url = await bot.webhook_url()
    except TelegramSendError as exc:
        return Check("telegram webhook", "fail", f"getWebhookInfo failed ({exc.failure_class})",
                     "retry; check the Telegram API base URL")
    if url:
        return _ok("telegram webhook", url)
    if cfg.telegram_updates == "webhook":
        return Check("telegram webhook", "warn", "no webhook set: the bot hears nothing",
                     "register it on the admin page (POST /api/telegram/register-webhook), "
                     "or set telegram_updates to auto (long polling, no public URL needed)")
    return _ok("telegram webhook", "none: updates are received by long polling")


_UPDATES_REMEDIES = {
    "conflict": "another program reads this bot's updates (a second copy of the service with "
                "another Redis, or a webhook): stop it, or give this service its own bot",
    "unauthorized": "the bot token was refused: enter the right one on the admin page",
    "unreachable": "check this machine's connection to the Telegram API base URL; the service "
                   "retries with a backoff",
    "rate_limited": "wait: the service retries after Telegram's retry_after",
    "no_webhook": "register the webhook on the admin page, or set telegram_updates to auto",
}


async def _updates(redis: Redis, cfg: BusinessConfig, enabled: bool, place: Place) -> Check:
    """How Telegram's updates reach the service, as the receiving instance last reported."""
    status = await read_status(redis, keys.UPDATES_STATUS)
    label = updates_label(status, enabled=enabled, configured=True)
    if label.startswith("ok"):
        return _ok("telegram updates", f"{label} (telegram_updates is {cfg.telegram_updates})")
    if label == "off":
        return Check("telegram updates", "warn", "off: processing is switched off",
                     "turn it on on the admin page (PUT /api/enabled)")
    return Check("telegram updates", "warn", label,
                 _UPDATES_REMEDIES.get(status.state if status else "",
                                       place.remedy_not_receiving()))


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


async def _push(redis: Redis, cfg: BusinessConfig, now: float, enabled: bool) -> Check:
    """Push is `warn` unless `ok`: while it is off or degraded mail still arrives by reconcile
    (every `degraded_reconcile_interval_s` while degraded)."""
    force = await read_in_force(redis, cfg, now, enabled=enabled)
    if force.way == "idle":  # an IMAP wire (`mail.imap.idle`)
        if force.state == "ok":
            return _ok("imap push", force.label)
        return Check("imap push", "warn", f"{force.label}: new mail waits for the reconcile "
                     f"every {cfg.degraded_reconcile_interval_s} s",
                     "check the IMAP server, the credentials and imap_notify_mailboxes; the "
                     "service reconnects with a backoff")
    if force.way == "eventsource" and force.state == "ok":
        last = ("no event yet" if force.last_event is None
                else f"last event {_age(now - force.last_event)} ago")
        return _ok("jmap push", f"{force.label} ({last})")
    health = force.subscription
    assert health is not None
    last = ("no StateChange yet" if health.last_state_change is None
            else f"last StateChange {_age(now - health.last_state_change)} ago")
    expiry = ("no expiry" if health.expires is None else "expires "
              + datetime.fromtimestamp(health.expires, UTC).strftime("%Y-%m-%d %H:%M UTC"))
    if force.state == "ok":
        return _ok("jmap push", f"ok (subscription {health.subscription_id}, {expiry}, {last})")
    if force.state == "off":
        why = force.reason or "no push registration"
        return Check("jmap push", "warn", f"off ({why}): new mail waits for reconcile",
                     "set push_mode to auto on a server with EventSource, or register push on "
                     "the admin page (POST /api/push/register)")
    every = cfg.degraded_reconcile_interval_s
    if force.way == "eventsource":
        return Check("jmap push", "warn",
                     f"{force.label}: new mail waits for the reconcile every {every} s",
                     "check the mail server's EventSource (eventSourceUrl) and the credentials; "
                     "the service reconnects with a backoff")
    return Check("jmap push", "warn",
                 f"{force.label} (subscription {health.subscription_id}, {expiry}, {last}): "
                 f"new mail waits for the reconcile every {every} s",
                 _PUSH_REMEDIES.get(health.reason or "", _PUSH_RETRY))


async def _queues(redis: Redis) -> list[Check]:
    checks = []
    for s in await stream_stats(redis):
        detail = (f"{s.unread} waiting, {s.pending} being sent or retried, {s.history} done "
                  f"and kept in history, {s.dlq} in the DLQ")
        other = s.account not in (None, DEFAULT_ACCOUNT)
        name = f"queue {s.stream}" + (f" (account {s.account})" if other else "")
        if s.dlq:
            replay = f"messageweave dlq --account {s.account}" if other else "messageweave dlq"
            checks.append(Check(name, "warn", detail,
                                f"inspect and replay the dead letters (`{replay}`)"))
        else:
            checks.append(_ok(name, detail))
    return checks


_WAITING_REMEDIES = {
    TELEGRAM: "check this machine's connection to the Telegram API base URL",
    JMAP: "check that the mail server (jmap_session_url) is up and reachable",
}


async def _waiting(redis: Redis, cfg: BusinessConfig, now: float) -> list[Check]:
    """A `warn` line per peer that deliveries wait for (issue #22, §7.11): they go out by
    themselves once it answers, in order, or are dead-lettered after `retry_window_s`."""
    found = await waiting_for_peers(redis)
    if not found:
        return [_ok("delivery", "no entry waits for an unreachable peer")]
    checks = []
    for peer, w in found.items():
        since = datetime.fromtimestamp(w.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        checks.append(Check(
            "delivery", "warn",
            f"waiting for {LABELS[peer]} since {since} ({_age(max(0.0, now - w.since))}; "
            f"{w.entries} {'entry' if w.entries == 1 else 'entries'})",
            f"{_WAITING_REMEDIES[peer]}; they go out by themselves once it answers, else to "
            f"the DLQ {cfg.retry_window_s} s after their first failure (retry_window_s)"))
    return checks
