"""The accounts a running instance serves (issue #35, SPEC G.1, G.4): one `AccountRuntime` per
account (its effective configuration, Redis names, `enabled` flag and mail peers) in the
`AccountRegistry` that the reload loop keeps current (`Services.run_reload_loop`), with the map
of chats to accounts the bot resolves an update's account from.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from redis.exceptions import RedisError

from messageweave.aio import raise_if_cancelling
from messageweave.config.account_service import AccountService, UnknownAccount
from messageweave.config.accounts import chats_of
from messageweave.config.live import (
    ConfigService,
    NotConfigured,
    StoredConfigInvalid,
    StoreUnavailable,
)
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.source import MailSource
from messageweave.services.peers import Peers
from messageweave.store import keys
from messageweave.store.accounts import AccountStore
from messageweave.store.keys import DEFAULT_ACCOUNT, AccountKeys
from messageweave.store.redis import Redis, text_of

log = logging.getLogger(__name__)
# The accounts are read again this long after their last read even when their version did not
# move (`AccountRegistry.refresh`).
FULL_READ_S = 10.0

@dataclass
class AccountRuntime:
    """One account the instance serves (issue #35, SPEC G.1): its id, effective configuration
    (`config.accounts.effective`), Redis names and `enabled` flag, and the peers of its mailbox.
    `default`'s peers are the instance's own (`Services.peers`); another account's are built
    without I/O (its JMAP session is fetched on first use), so a dead mail server of one
    account never holds up the reload of the others. `peers` is None while the account is
    paused: a paused account opens no connection to its mail server."""

    id: str
    config: BusinessConfig
    keys: AccountKeys
    enabled: bool
    peers: Peers | None
    revision: int = 0  # the account's (for `default`, the business configuration's)

    def chats(self) -> tuple[int, ...]:
        return chats_of(self.config)

    async def mail(self, outbound: OutboundConfig) -> MailSource:
        """The account's mail source, connected on demand (`MailError`, `NotConfigured`)."""
        if self.peers is None:
            raise NotConfigured(f"account {self.id} is paused")
        return await self.peers.mail(outbound)


class AccountRegistry:
    """The accounts this instance serves, kept current by `refresh` (the reload loop, every
    `RELOAD_INTERVAL_S`): `default` whenever a business configuration is live (read from the
    config service on each call, so it is never behind a save), and every account of the index.
    One pipelined read per tick tells whether anything changed (the index, each account's
    revision and `enabled` flag); only a changed account is rebuilt."""

    def __init__(self, config: ConfigService, redis: Redis, key: bytes,
                 default_peers: Peers) -> None:
        self._config = config
        self._redis = redis
        self._service = AccountService(config, AccountStore(redis), key)
        self._default_peers = default_peers
        self._default_enabled = True
        self._others: dict[str, AccountRuntime] = {}
        self._chats: dict[int, str] = {}  # the other accounts' chats
        self._streams: dict[str, str] = {}  # the other accounts' mail streams
        self._stamps: dict[str, tuple[int, int, bool]] = {}  # id → business rev, rev, enabled
        # (the accounts' version, the business revision) at the last read, and the next one's
        self._seen: tuple[str | None, int] | None = None
        self._read_due = 0.0

    def get(self, account_id: str) -> AccountRuntime | None:
        if account_id != DEFAULT_ACCOUNT:
            return self._others.get(account_id)
        business = self._config.config
        if business is None:
            return None
        return AccountRuntime(DEFAULT_ACCOUNT, business, keys.DEFAULT, self._default_enabled,
                              self._default_peers, self._config.revision)

    def of_chat(self, chat_id: int) -> AccountRuntime | None:
        """The account a chat belongs to (SPEC G.4), None for a chat of no account."""
        default = self.get(DEFAULT_ACCOUNT)
        if default is not None and chat_id in default.chats():
            return default
        account_id = self._chats.get(chat_id)
        return self._others.get(account_id) if account_id is not None else None

    async def applied(self, account_id: str, revision: int) -> bool:
        """Whether the runtime serves `revision` of the account (or a newer one) once the
        registry has read the stored accounts now (a save's `runtime_applied`)."""
        await self.refresh(at_once=True)
        stamp = self._stamps.get(account_id)
        return stamp is not None and stamp[1] >= revision and account_id in self._others

    def allowlist(self) -> frozenset[int]:
        """The chats the bot takes updates from: every account's, paused ones' included (they
        are answered "paused"). Empty while `default`'s allowlist is (a configuration older
        than the allowlist: every chat, `pipeline.ingress.parse_update`)."""
        default = self.get(DEFAULT_ACCOUNT)
        if default is None or not default.config.chat_allowlist:
            return frozenset()
        return frozenset(default.config.chat_allowlist) | frozenset(self._chats)

    def of_stream(self, stream: str) -> AccountRuntime | None:
        """The account whose mail stream `stream` is, None for any other stream."""
        if stream == keys.STREAM_JMAP:
            return self.get(DEFAULT_ACCOUNT)
        account_id = self._streams.get(stream)
        return self._others.get(account_id) if account_id is not None else None

    def every(self) -> list[AccountRuntime]:
        """Every account, paused ones included, sorted by id."""
        default = self.get(DEFAULT_ACCOUNT)
        return [*([default] if default is not None else []),
                *(self._others[i] for i in sorted(self._others))]

    def served(self) -> list[AccountRuntime]:
        """The enabled accounts, sorted by id: those whose mailbox is watched."""
        return [a for a in self.every() if a.enabled]

    async def _read_stamps(self) -> dict[str, tuple[int, bool]]:
        """Every account's (revision, enabled): one round trip while the index is unchanged."""
        ids = sorted(self._stamps)
        for _ in range(2):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.smembers(keys.ACCOUNTS_INDEX)
                for account_id in [DEFAULT_ACCOUNT, *ids]:
                    k = AccountKeys(account_id)
                    # two GETs, not MGET: a cluster's pipeline refuses multi-key commands
                    pipe.get(k.revision)
                    pipe.get(k.enabled)
                replies = await pipe.execute()
            indexed = sorted(str(i) for i in replies[0])
            if indexed == ids:
                revs, enabled = replies[1::2], replies[2::2]
                return {account_id: (int(rev or 0), on != "0")
                        for account_id, rev, on in zip([DEFAULT_ACCOUNT, *ids], revs, enabled,
                                                       strict=True)}
            ids = indexed
        return {}  # the index moved twice in a row: the next tick reads it again

    async def refresh(self, *, at_once: bool = False) -> None:
        """Bring the registry up to the stored accounts; never raises (a failed read keeps
        what is in force and is tried again on the next tick). One GET of the accounts'
        version a tick: the accounts themselves are read when it moved, the business
        configuration's revision moved, `at_once`, or `FULL_READ_S` after the last read (a
        writer that died between its write and its bump)."""
        business = self._config.config
        if business is None:
            return
        try:
            version = await self._redis.get(keys.ACCOUNTS_VERSION)
            seen = (text_of(version), self._config.revision)
            if not at_once and seen == self._seen and time.monotonic() < self._read_due:
                return
            stamps = await self._read_stamps()
        except RedisError:
            raise_if_cancelling()
            return
        if not stamps:
            return
        self._seen, self._read_due = seen, time.monotonic() + FULL_READ_S
        self._default_enabled = stamps.pop(DEFAULT_ACCOUNT)[1]
        for account_id in [i for i in self._stamps if i not in stamps]:
            await self._drop(account_id)
        for account_id, (revision, enabled) in stamps.items():
            stamp = (self._config.revision, revision, enabled)
            if self._stamps.get(account_id) != stamp:
                await self._rebuild(account_id, stamp)

    def _reindex(self) -> None:
        self._chats = {chat: a.id for a in self._others.values() for chat in a.chats()}
        self._streams = {a.keys.stream_jmap: a.id for a in self._others.values()}

    async def _rebuild(self, account_id: str, stamp: tuple[int, int, bool]) -> None:
        try:
            account = await self._service.get(account_id)
        except UnknownAccount:  # indexed, not (or no longer) stored
            await self._drop(account_id)
            return
        except (StoreUnavailable, StoredConfigInvalid, RedisError) as exc:
            raise_if_cancelling()
            log.warning("account %s not loaded: %s", account_id, type(exc).__name__)
            self._stamps[account_id] = stamp  # not again in a hot loop
            return
        await self._drop(account_id)
        peers = None
        if account.enabled:
            peers = Peers()
            for warning in await peers.apply(account.config, self._config.outbound,
                                             current=lambda: True, connect=False):
                log.warning("account %s: %s %s: %s", account_id, warning.component,
                            warning.step, warning.detail)
        self._others[account_id] = AccountRuntime(account_id, account.config,
                                                  AccountKeys(account_id), account.enabled,
                                                  peers, account.revision)
        self._stamps[account_id] = stamp
        self._reindex()

    async def _drop(self, account_id: str) -> None:
        self._stamps.pop(account_id, None)
        account = self._others.pop(account_id, None)
        self._reindex()
        if account is not None and account.peers is not None:
            await account.peers.aclose()

    async def aclose(self) -> None:
        for account_id in list(self._others):
            await self._drop(account_id)
