"""The services as one account sees them (issue #35, SPEC G.4): `AccountServices`, what
`Services.for_account` hands the chat's handlers for a chat of that account and
`Services.mail_context` hands the account's mail loops (`mail.context.MailContext`).

Its configuration is the account's effective one, its Redis names the account's
(`AccountKeys`), its mail peers the account's; Redis, the configuration store and the runtime
parameters are the instance's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from messageweave.config.live import ConfigService
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapClient
from messageweave.mail.source import MailSource
from messageweave.mail.watch import MailWatch
from messageweave.services.accounts import AccountRuntime
from messageweave.services.peers import Peers, Runtime
from messageweave.settings import Settings
from messageweave.store.config_store import ConfigStore
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis

if TYPE_CHECKING:
    from messageweave.services import Services


class AccountConfig:
    """The configuration in force as one account reads it (`mail.context.LiveConfig`): the
    account's effective configuration; the runtime parameters and the revision events are
    the instance's (`config.live.ConfigService`)."""

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


class PeerAccess:
    """The mail peers as `Services` (`default`'s) and `AccountServices` (an account's) hand
    them out, in one place: what `mail.context.MailContext` and the chat's handlers call."""

    peers: Peers

    def _outbound(self) -> OutboundConfig:
        raise NotImplementedError

    @property
    def runtime(self) -> Runtime | None:
        """The clients in use, None until a configuration was applied (or while paused)."""
        return self.peers.runtime

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
        return await self.peers.jmap(self._outbound())

    async def mail(self) -> MailSource:
        """The live mail source, connected on demand (`MailError`, `NotConfigured`)."""
        return await self.peers.mail(self._outbound())

    async def watch(self) -> MailWatch:
        """The live source's watching side (`MailError`, `NotConfigured`)."""
        return await self.peers.watch(self._outbound())


class AccountServices(PeerAccess):
    """One account's view of the services: its configuration (`config.config` is the
    account's effective configuration), Redis names (`keys`) and mail peers (`mail()`,
    `jmap()`, `watch()`, `runtime`). A paused account's peers are empty: every mail call is
    `NotConfigured`."""

    def __init__(self, svc: Services, account: AccountRuntime) -> None:
        self.account = account
        self.settings: Settings = svc.settings
        self.redis: Redis = svc.redis
        self.store: ConfigStore = svc.store
        self.config = AccountConfig(svc.config, account)
        self.keys: AccountKeys = account.keys
        self.peers = account.peers if account.peers is not None else Peers()
        self._secrets = svc.secrets

    @property
    def live(self) -> bool:
        """The account's clients are built (it is served and its configuration applied)."""
        return self.peers.runtime is not None

    def _outbound(self) -> OutboundConfig:
        return self.config.outbound

    def secrets(self) -> list[str | None]:
        return [*self._secrets(), *self.account.config.secrets()]
