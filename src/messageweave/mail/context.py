"""What the mail loops (scheduler, gap auditor) need from a running instance.

`messageweave.services.Services` satisfies it; `mail/` cannot import that module (it sits
above), so it names only what it uses.
"""

from __future__ import annotations

from typing import Protocol

from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.jmap import JmapClient
from messageweave.mail.source import MailSource
from messageweave.mail.watch import MailWatch
from messageweave.store.config_store import ConfigStore
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis


class LiveConfig(Protocol):
    """The configuration in force as the loops read it: `config.live.ConfigService` for
    `default`, `services.AccountConfig` for an account's view (its effective configuration)."""

    @property
    def config(self) -> BusinessConfig | None: ...

    @property
    def outbound(self) -> OutboundConfig: ...

    @property
    def revision(self) -> int: ...

    async def changed_within(self, seconds: float) -> bool:
        """Wait up to `seconds` for a new revision to be applied: True when one was."""


class MailContext(Protocol):
    """One account's mailbox, as its loops see it: `Services` is `default`'s,
    `services.AccountServices` an account's (issue #35)."""

    @property
    def redis(self) -> Redis: ...

    @property
    def store(self) -> ConfigStore: ...

    @property
    def config(self) -> LiveConfig: ...

    @property
    def keys(self) -> AccountKeys:
        """The account's Redis names."""

    @property
    def live(self) -> bool:
        """A configuration is live and its clients are built."""

    @property
    def live_jmap(self) -> JmapClient | None:
        """The JMAP client in use when it is connected; None otherwise (no I/O)."""

    @property
    def live_account(self) -> str | None:
        """The mail account in use, whose catch-up flags the scheduler takes: the connected
        JMAP session's or the IMAP user name; None while unknown (no I/O)."""

    async def jmap(self) -> JmapClient:
        """The live JMAP client, connected on demand (`JmapError`, `NotConfigured`)."""

    async def mail(self) -> MailSource:
        """The live mail source, connected on demand (`MailError`, `NotConfigured`)."""

    async def watch(self) -> MailWatch:
        """The live source's watching side: catch-up passes and gap audits (`MailError`,
        `NotConfigured`)."""

    def secrets(self) -> list[str | None]:
        """Every secret value the instance knows, kept out of an audit record (`ops.audit`)."""
