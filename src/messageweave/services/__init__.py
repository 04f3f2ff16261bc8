"""What the parts of a running instance share, in one container built by `messageweave.runtime`.

`Services` is what the HTTP handlers (`request.app.state.services`), the worker and the CLI
commands are handed. Layers below this package never import it: `mail/` states what it needs as
`mail.context.MailContext` and `ops.audit` as `ops.audit.AuditContext`; `Services` satisfies
both.

`peers.Peers` holds the peer clients of the configuration in force (the one place that knows
which mail protocol is configured); `accounts.AccountRegistry` (`Services.accounts`) the
accounts this instance serves, each with its own mail peers (issue #35).
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field

from messageweave.aio import raise_if_cancelling
from messageweave.config.live import RELOAD_INTERVAL_S, ConfigService, NotConfigured
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.logs import redis_url_secrets
from messageweave.mail.jmap import JmapClient
from messageweave.mail.source import MailSource
from messageweave.mail.watch import MailWatch
from messageweave.services.accounts import AccountRegistry, AccountRuntime
from messageweave.services.peers import SMTP_OFF, Peers, Runtime
from messageweave.settings import Settings
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis
from messageweave.store.state import ConfigStore
from messageweave.store.streams import UpdateIngress

__all__ = ["SMTP_OFF", "AccountMail", "AccountRuntime", "Peers", "Runtime", "Services"]


class AccountConfig:
    """The configuration in force as one account's loops read it (`mail.context.LiveConfig`):
    the account's effective configuration; the runtime parameters and the revision events are
    the instance's."""

    def __init__(self, service: ConfigService, account: AccountRuntime) -> None:
        self._service = service
        self.config: BusinessConfig | None = account.config

    @property
    def outbound(self) -> OutboundConfig:
        return self._service.outbound

    @property
    def revision(self) -> int:
        return self._service.revision

    async def changed_within(self, seconds: float) -> bool:
        return await self._service.changed_within(seconds)


class AccountMail:
    """An account's mailbox as its loops see it (`mail.context.MailContext`): its
    configuration, keys and mail peers, and the instance's Redis and switch (issue #35)."""

    def __init__(self, svc: Services, account: AccountRuntime) -> None:
        self.account = account
        self.redis = svc.redis
        self.store = svc.store
        self.config = AccountConfig(svc.config, account)
        self.keys = account.keys
        self._secrets = svc.secrets

    def _peers(self) -> Peers:
        if self.account.peers is None:
            raise NotConfigured(f"account {self.account.id} is paused")
        return self.account.peers

    @property
    def live(self) -> bool:
        return self.account.peers is not None and self.account.peers.runtime is not None

    @property
    def live_jmap(self) -> JmapClient | None:
        runtime = self.account.peers.runtime if self.account.peers is not None else None
        return runtime.jmap if runtime is not None else None

    @property
    def live_account(self) -> str | None:
        return self.account.peers.account() if self.account.peers is not None else None

    async def jmap(self) -> JmapClient:
        return await self._peers().jmap(self.config.outbound)

    async def mail(self) -> MailSource:
        return await self._peers().mail(self.config.outbound)

    async def watch(self) -> MailWatch:
        return await self._peers().watch(self.config.outbound)

    def secrets(self) -> list[str | None]:
        return [*self._secrets(), *self.account.config.secrets()]


@dataclass
class Services:
    settings: Settings
    redis: Redis
    store: ConfigStore
    config: ConfigService
    version: str
    peers: Peers = field(default_factory=Peers)
    # `secrets()` of the objects it read last, which it checks by identity (see there).
    _secrets_memo: tuple[tuple[object, ...], list[str | None]] | None = field(
        default=None, init=False, repr=False, compare=False)
    # The webhook's queue, whose concurrent enqueues share one script run (issue #14).
    ingress: UpdateIngress = field(init=False, repr=False, compare=False)

    # The accounts this instance serves (issue #35), kept current by `run_reload_loop`.
    accounts: AccountRegistry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.ingress = UpdateIngress(self.redis)
        self.accounts = AccountRegistry(self.config, self.redis, self.settings.encryption_key,
                                        self.peers)

    async def refresh(self) -> None:
        """The business configuration, then the accounts built on it (never raises)."""
        await self.config.refresh()
        await self.accounts.refresh()

    async def run_reload_loop(self) -> None:
        """`config.live.ConfigService.run_reload_loop` with the accounts: a write on any
        instance (an account's save, pause or deletion included) is live here within a
        second."""
        while True:
            await self.refresh()
            raise_if_cancelling()
            await asyncio.sleep(RELOAD_INTERVAL_S)

    @property
    def keys(self) -> AccountKeys:
        """As the mail loops' `mail.context.MailContext`, `Services` is `default`'s mailbox."""
        return keys.DEFAULT

    def for_account(self, account: AccountRuntime) -> Services:
        """These services with `account`'s mail peers (`mail()`, `jmap()`, `runtime`): what
        the chat's handlers are handed for a chat of that account (SPEC G.4). A paused
        account's are `NotConfigured` (`Peers` with no runtime)."""
        if account.peers is self.peers:
            return self
        view = copy.copy(self)
        view.peers = account.peers if account.peers is not None else Peers()
        return view

    def mail_context(self, account: AccountRuntime) -> AccountMail:
        """Another account's mailbox as its loops see it (`mail.context.MailContext`)."""
        return AccountMail(self, account)

    @property
    def runtime(self) -> Runtime | None:
        """The clients in use, None until a configuration was applied."""
        return self.peers.runtime

    @property
    def live(self) -> bool:
        """A configuration is live and its clients are built."""
        return self.config.config is not None and self.peers.runtime is not None

    @property
    def live_jmap(self) -> JmapClient | None:
        """The JMAP client in use when it is connected; None otherwise (no I/O)."""
        return self.peers.runtime.jmap if self.peers.runtime is not None else None

    @property
    def live_account(self) -> str | None:
        """The mail account in use (`Peers.account`; no I/O)."""
        return self.peers.account()

    async def jmap(self) -> JmapClient:
        """The live JMAP client, connected on demand (`JmapError`, `NotConfigured`)."""
        return await self.peers.jmap(self.config.outbound)

    async def mail(self) -> MailSource:
        """The live mail source, connected on demand (`MailError`, `NotConfigured`)."""
        return await self.peers.mail(self.config.outbound)

    async def watch(self) -> MailWatch:
        """The live source's watching side (`MailError`, `NotConfigured`)."""
        return await self.peers.watch(self.config.outbound)

    def secrets(self) -> list[str | None]:
        """Every secret value this instance knows, for redaction (logs, audit records).

        Read on every log line, so the list is kept while the objects it comes from are the
        same ones: settings and configurations are frozen, and a reload or a save puts a new
        configuration object in place, which is never redacted with the old list."""
        cfg = self.config.config
        applied = self.peers.runtime.config if self.peers.runtime is not None else None
        sources: tuple[object, ...] = (self.settings, cfg, applied)
        memo = self._secrets_memo
        if memo is not None and all(a is b for a, b in zip(memo[0], sources, strict=True)):
            return list(memo[1])
        values: list[str | None] = [
            self.settings.admin_key, self.settings.debug_token, self.settings.gateway_secret,
            *redis_url_secrets(self.settings.redis_url),
        ]
        for source in (cfg, applied):
            if source is not None:
                values.extend(source.secrets())
        self._secrets_memo = (sources, values)
        return list(values)
