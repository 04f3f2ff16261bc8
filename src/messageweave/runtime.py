"""The composition root: the one place that builds a running instance and hands it down.

`build_services(settings)` connects Redis and makes the config service with its peer clients
(`messageweave.services.Peers`); `serving(svc)` builds the instance's worker (the one that
`POST /worker` drains with too) and `background(svc, worker)` starts what runs beside the
HTTP server (config reload, worker, the Telegram poller, and `run_accounts`: each account's
scheduler, gap auditor and push holders); `close(svc)` releases it all. The app
(`messageweave.app`) and every CLI command that talks to the peers build through here, so they
wire the same things the same way.
Nothing below this module knows it exists.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from messageweave.aio import cancel
from messageweave.config.live import RELOAD_INTERVAL_S, ConfigService
from messageweave.logs import add_secret_source, remove_secret_source
from messageweave.mail.context import MailContext
from messageweave.mail.eventsource import run_eventsource
from messageweave.mail.gap_audit import run_auditor
from messageweave.mail.holder import UNWANTED_S
from messageweave.mail.kinds import kind_of
from messageweave.mail.scheduler import run_scheduler
from messageweave.pipeline.draft import run_draft_expiry
from messageweave.pipeline.polling import run_poller
from messageweave.pipeline.worker import Worker, run_worker
from messageweave.services import AccountRuntime, Peers, Services
from messageweave.settings import KEY_FILE, REDIS_DIR, Settings, default_data_dir, from_env
from messageweave.store.account_sweep import run_account_sweep
from messageweave.store.config_store import ConfigStore
from messageweave.store.keys import DEFAULT_ACCOUNT
from messageweave.store.redis import connect_detected, embedded_url
from messageweave.store.upgrade import (
    UNREACHABLE,
    upgrade,
    upgrade_if_reachable,
    upgrade_when_reachable,
)
from messageweave.version import build_version


def build_services(settings: Settings) -> Services:
    """Everything one instance shares. Connecting Redis does no I/O yet; the configuration is
    loaded by `svc.config.refresh()` (the app's lifespan, or the CLI command)."""
    redis = connect_detected(settings.redis_url)
    store = ConfigStore(redis)
    peers = Peers()
    return Services(
        settings=settings,
        redis=redis,
        store=store,
        config=ConfigService(store, settings.encryption_key, peers),
        version=build_version(),
        peers=peers,
    )


async def close(svc: Services) -> None:
    await svc.accounts.aclose()
    await svc.config.aclose()
    await svc.redis.aclose()


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Services]:
    """`build_services` with the stored configuration loaded, closed on exit (CLI commands)."""
    svc = build_services(settings)
    try:
        await upgrade_if_reachable(svc.redis)  # before any key is read (issue #35)
        await svc.refresh()
        yield svc
    finally:
        await close(svc)


def background(svc: Services, worker: Worker,
               upgrading: asyncio.Task[None] | None = None) -> list[asyncio.Task[None]]:
    """Start the loops of a serving instance; `stop` them in reverse order. A configured
    instance also opens its Telegram connection now (`TelegramClient.connect`), so the first
    message after the start does not wait for it. While
    `upgrading` (the data upgrade, Redis unreachable at the start) runs, the loops wait for it."""
    opening = [] if svc.runtime is None else [
        asyncio.create_task(svc.runtime.telegram.connect(), name="telegram-connect")]
    loops: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("config-reload", svc.run_reload_loop), ("worker", partial(run_worker, worker)),
        ("draft-expiry", partial(run_draft_expiry, svc)),
        ("telegram-poller", partial(run_poller, svc)), ("accounts", partial(run_accounts, svc)),
        ("account-sweep", partial(run_account_sweep, svc.redis)),
    ]
    return [*opening, *([upgrading] if upgrading is not None else []),
            *(asyncio.create_task(_after(upgrading, loop), name=name) for name, loop in loops)]


def account_loops() -> tuple[tuple[str, Callable[[MailContext], Coroutine[Any, Any, None]]],
                             ...]:
    """The mail loops of every account, `default` included (issue #35): one list, run by one
    supervisor (`run_accounts`); read each time an account's loops start."""
    return (("scheduler", run_scheduler), ("gap-auditor", run_auditor),
            ("jmap-eventsource", run_eventsource), ("imap-idle", run_idle))


async def run_idle(svc: MailContext) -> None:
    """The account's IMAP IDLE holder (`mail.imap.idle.run_idle`), once its configuration is
    IMAP: the IMAP package is imported then, not by every instance (1.5 MB of an idle JMAP-only
    instance, issue #37's idle RSS row). A new configuration ends the wait at once."""
    while (cfg := svc.config.config) is None or kind_of(cfg).push != "idle":
        await svc.config.changed_within(UNWANTED_S)
    from messageweave.mail.imap import idle  # on first use: see the docstring

    await idle.run_idle(svc)


def _wanted(svc: Services) -> dict[str, AccountRuntime | None]:
    """The accounts whose loops run: every served one, and `default` while no configuration
    is live (None): its loops wait for one, as they did from the start, so the first save is
    served at once (a scheduler watching for wakes, the holders for the configuration)."""
    wanted: dict[str, AccountRuntime | None] = {a.id: a for a in svc.accounts.served()}
    if svc.accounts.get(DEFAULT_ACCOUNT) is None:
        wanted[DEFAULT_ACCOUNT] = None
    return wanted


def _context(svc: Services, account: AccountRuntime | None) -> MailContext:
    """The account's mailbox as its loops see it. `default`'s is the instance itself, whose
    configuration is the live one: a save of the business configuration reaches its loops
    as it did (hot reload, `changed_within`), not by restarting them."""
    return svc if account is None or account.id == DEFAULT_ACCOUNT else svc.mail_context(account)


def _same(account_id: str, running: AccountRuntime | None,
          wanted: dict[str, AccountRuntime | None]) -> bool:
    """Whether the loops started for `running` still serve what is wanted: `default`'s run
    while it is wanted (its configuration is live in them); another account's are started
    again with every new revision (the registry rebuilds it)."""
    if account_id not in wanted:
        return False
    return account_id == DEFAULT_ACCOUNT or wanted[account_id] is running


async def run_accounts(svc: Services) -> None:
    """The one supervisor of the accounts' mail loops (issue #35): every `RELOAD_INTERVAL_S`
    it starts `account_loops` for each account `_wanted` (`default`'s at its first tick) and
    stops those of an account paused, deleted or rebuilt (a new revision: its loops start
    again with it)."""
    running: dict[str, tuple[AccountRuntime | None, list[asyncio.Task[None]]]] = {}
    try:
        while True:
            wanted = _wanted(svc)
            for account_id, (account, tasks) in list(running.items()):
                if not _same(account_id, account, wanted):
                    del running[account_id]
                    await stop(tasks)
            for account_id, account in wanted.items():
                if account_id not in running:
                    context = _context(svc, account)
                    running[account_id] = (account, [
                        asyncio.create_task(loop(context), name=f"{name}:{account_id}")
                        for name, loop in account_loops()])
            await asyncio.sleep(RELOAD_INTERVAL_S)
    finally:
        for _account, tasks in running.values():
            await stop(tasks)


async def _after(upgrading: asyncio.Task[None] | None, loop: Callable[[], Awaitable[None]]
                 ) -> None:
    if upgrading is not None:
        await asyncio.shield(upgrading)  # one loop stopped does not stop the upgrade
    await loop()


async def _upgrade_later(svc: Services) -> None:
    await upgrade_when_reachable(svc.redis)
    await svc.refresh()


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in reversed(tasks):
        await cancel(task)


@asynccontextmanager
async def serving(svc: Services) -> AsyncIterator[Worker]:
    """The app's lifespan: secrets redacted from the logs, configuration loaded, loops running;
    everything stopped and closed on exit. Yields the instance's worker, which the app hands
    to `POST /worker` (`app.state.worker`): one consumer name per process."""
    add_secret_source(svc.secrets)
    upgrading = None
    try:
        await upgrade(svc.redis)  # before any key is read (issue #35)
    except UNREACHABLE:  # serve `/healthz` (and `/ready`: redis failed) meanwhile, as before
        upgrading = asyncio.create_task(_upgrade_later(svc), name="upgrade")
    await svc.refresh()
    worker = Worker(svc)
    tasks = background(svc, worker, upgrading)
    # What the imports and the set-up allocated for good leaves the collector's view: a full
    # collection then scans only what the running service makes (shorter pauses on the push path).
    gc.collect()
    gc.freeze()
    try:
        yield worker
    finally:
        await stop(tasks)
        await close(svc)
        remove_secret_source(svc.secrets)


def settings_from_data_dir(data_dir: Path | None = None) -> Settings:
    """`from_env`, with `REDIS_URL` and `CONFIG_ENCRYPTION_KEY` taken from the data directory
    of `messageweave run` (default `default_data_dir()`) when the environment lacks them: the
    embedded Redis (socket and password, `embedded_url`) and the generated key."""
    env = dict(os.environ)
    directory = (data_dir or default_data_dir()).resolve()
    if not env.get("REDIS_URL", "").strip():
        env["REDIS_URL"] = embedded_url(directory / REDIS_DIR) or ""
    if not env.get("CONFIG_ENCRYPTION_KEY", "").strip():
        try:
            env["CONFIG_ENCRYPTION_KEY"] = (directory / KEY_FILE).read_text().strip()
        except OSError:
            pass
    return from_env(env)
