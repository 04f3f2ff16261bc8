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
from dataclasses import dataclass, field

from messageweave.aio import raise_if_cancelling
from messageweave.config.live import RELOAD_INTERVAL_S, ConfigService
from messageweave.config.outbound import OutboundConfig
from messageweave.logs import redis_url_secrets
from messageweave.services.accounts import AccountRegistry, AccountRuntime
from messageweave.services.peers import SMTP_OFF, Peers, Runtime
from messageweave.services.view import AccountConfig, AccountServices, PeerAccess
from messageweave.settings import Settings
from messageweave.store import keys
from messageweave.store.config_store import ConfigStore
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis
from messageweave.store.streams import UpdateIngress

__all__ = ["SMTP_OFF", "AccountConfig", "AccountRuntime", "AccountServices", "Peers", "Runtime",
           "Services"]


@dataclass
class Services(PeerAccess):
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

    def for_account(self, account: AccountRuntime) -> AccountServices:
        """The services as `account` sees them: its configuration, Redis names and mail peers.
        What the chat's handlers are handed for a chat of that account (SPEC G.4), and its
        mail loops (`mail_context`). A paused account's mail calls are `NotConfigured`."""
        return AccountServices(self, account)

    def mail_context(self, account: AccountRuntime) -> AccountServices:
        """An account's mailbox as its loops see it (`mail.context.MailContext`): `for_account`."""
        return self.for_account(account)

    @property
    def live(self) -> bool:
        """A configuration is live and its clients are built."""
        return self.config.config is not None and self.peers.runtime is not None

    def _outbound(self) -> OutboundConfig:
        return self.config.outbound

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
