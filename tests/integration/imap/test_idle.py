"""The IMAP IDLE holder (issue #33, SPEC Part F.2) in the running app against the real Dovecot
and Cyrus's imapd, on the real Redis: new mail delivered over LMTP is enqueued through IDLE
within 2 s with no periodic pass, `/ready` and `/api/push/status` say `ok (idle)`, one holder in
the cluster, and a Dovecot restart while idling loses and doubles nothing."""

from __future__ import annotations

import asyncio
import contextlib
import email.message
import email.policy
import os
import pwd
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.aio import cancel
from messageweave.config.live import ConfigService
from messageweave.config.model import parse_wire
from messageweave.mail.imap.catchup import read_cursors
from messageweave.mail.imap.idle import IdleHolder
from messageweave.mail.imap.ids import mail_id
from messageweave.store import keys, receivers
from messageweave.store.config_store import ConfigStore
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis, connect
from tests.helpers import configure, eventually, sample_wire, settings_for
from tests.integration.imap.conftest import ImapPeer
from tests.peers.dovecot import DovecotServer
from tests.peers.dovecot import running as running_dovecot
from tests.peers.telegram import TelegramEmulator

DELIVERED_WITHIN_S = 2.0


def _raw(subject: str) -> bytes:
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "Bob <bob@example.org>", "alice@localhost", subject
    msg.set_content(f"the body of {subject}")
    return msg.as_bytes(policy=email.policy.SMTP)


def _ca_pem(context: ssl.SSLContext) -> str:
    return "".join(ssl.DER_cert_to_PEM_cert(der)
                   for der in context.get_ca_certs(binary_form=True))


def imap_wire(peer: ImapPeer, emulator: TelegramEmulator, **overrides: Any) -> dict[str, Any]:
    """A wire for `peer`'s user over IMAP, the Bot API emulator, and no periodic pass."""
    values: dict[str, Any] = {
        "mail_source": "imap", "imap_host": "127.0.0.1", "imap_port": peer.port,
        "imap_security": peer.security, "imap_username": peer.user,
        "imap_password": peer.password, "imap_ca_pem": _ca_pem(peer.ssl_context),
        "telegram_api_base_url": emulator.base_url,
        "bot_token": f"{os.getpid()}{time.monotonic_ns() % 10**6}:imap-idle-bot-token",
        "reconcile_interval_s": 0, "audit_interval_s": 0,
    }
    values.update(overrides)
    return sample_wire(**values)


async def _queued(redis: aioredis.Redis) -> list[str]:
    ids: list[str] = []
    for _, fields in await redis.xrange(keys.STREAM_JMAP):
        ids += fields["email_ids"].split() if "email_ids" in fields else [fields["email_id"]]
    return ids


async def _idle_status(redis: aioredis.Redis) -> str | None:
    status = await receivers.read_status(redis, keys.IMAP_IDLE_STATUS)
    return None if status is None else status.state


async def _watching(client: httpx.AsyncClient, redis: aioredis.Redis, admin: dict[str, str]
                    ) -> None:
    """Until the app idles and its first catch-up recorded the cursor."""
    async def ok_idle() -> bool:
        r = await client.get("/api/push/status", headers=admin)
        return r.status_code == 200 and r.json()["in_force"] == "ok (idle)"

    await eventually(ok_idle, "the push in force says ok (idle)", timeout_s=20)

    async def baselined() -> bool:
        return "INBOX" in await read_cursors(redis)

    await eventually(baselined, "the reconnect catch-up recorded the INBOX cursor")


async def _inbox_id(peer: ImapPeer, uid_index: int = -1) -> str:
    async with peer.client() as c:
        state = await c.select("INBOX", readonly=True)
        uids = await c.uid_search("ALL")
    return mail_id("INBOX", state.uidvalidity, uids[uid_index])


async def test_lmtp_delivery_is_enqueued_within_two_seconds_through_idle(
    imap_peer: ImapPeer, client: httpx.AsyncClient, redis_client: aioredis.Redis,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches new IMAP mail left to the periodic pass (none here: `reconcile_interval_s` 0):
    the IDLE holder not running, not asking for a catch-up on EXISTS, or the scheduler taking no
    catch-up for an IMAP account (its `_tick` read the account from the JMAP client only). Also
    `/ready` failing an IMAP wire on the JMAP probe, and the push label not `ok (idle)`."""
    admin = await configure(client, imap_wire(imap_peer, telegram_emulator))
    await _watching(client, redis_client, admin)
    ready = await client.get("/ready")
    assert ready.status_code == 200, ready.headers.get("x-ready-failed")
    body = ready.json()
    assert body["mail"] is True and "jmap" not in body and body["push"] == "ok (idle)"

    imap_peer.deliver(_raw("through idle"))
    delivered = time.monotonic()

    async def enqueued() -> bool:
        return len(await _queued(redis_client)) >= 1

    await eventually(enqueued, "the delivered mail on the delivery stream",
                     timeout_s=DELIVERED_WITHIN_S)
    assert time.monotonic() - delivered < DELIVERED_WITHIN_S
    assert await _queued(redis_client) == [await _inbox_id(imap_peer)]


# ----------------------------------------------------------------------------- one holder


@dataclass
class _Instance:
    """What the holder needs of a running instance (`mail.context.MailContext`): the real
    Redis, `ConfigStore` and `ConfigService` (its configuration set directly, not loaded). It
    leaves out the app's other loops so that the test decides which holders run."""

    redis: Redis
    store: ConfigStore
    config: ConfigService
    live: bool = True
    keys: AccountKeys = keys.DEFAULT


@contextlib.asynccontextmanager
async def _instance(redis_url: str, wire: dict[str, Any]) -> AsyncIterator[_Instance]:
    redis = connect(redis_url)
    store = ConfigStore(redis)
    config = ConfigService(store, settings_for(redis_url).encryption_key)
    config.config, config.revision = parse_wire(wire), 1
    await store.set_enabled(True)
    try:
        yield _Instance(redis, store, config)
    finally:
        await redis.aclose()


LEASE_S = 3


# The lease is Redis's and the holder's, not the server's: one peer is enough (9 s each).
@pytest.mark.parametrize("imap_peer", ["dovecot-tls"], indirect=True)
async def test_two_instances_keep_one_idle_holder_past_the_lease(
    imap_peer: ImapPeer, embedded_redis_url: str, redis_client: aioredis.Redis,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches two IDLE holders at once (a lease not taken, or renewed after its TTL): watched
    for three leases of 3 s, `lock:imap-idle` must name the first holder every time, and the
    status stays `connected`."""
    wire = imap_wire(imap_peer, telegram_emulator)
    async with _instance(embedded_redis_url, wire) as a, \
            _instance(embedded_redis_url, wire) as b:
        first = asyncio.create_task(IdleHolder(a, lease_s=LEASE_S).run())  # type: ignore[arg-type]
        try:
            async def connected() -> bool:
                return await _idle_status(redis_client) == "connected"

            await eventually(connected, "the first instance idles", timeout_s=20)
            holder = await redis_client.get(keys.IMAP_IDLE_LOCK)
            assert holder is not None
            second = asyncio.create_task(IdleHolder(b, lease_s=LEASE_S).run())  # type: ignore[arg-type]
            try:
                owners = []
                loop = asyncio.get_running_loop()
                end = loop.time() + 3 * LEASE_S
                while loop.time() < end:
                    owners.append(await redis_client.get(keys.IMAP_IDLE_LOCK))
                    await asyncio.sleep(0.05)  # a sample of the lock, not a wait for an event
                assert not first.done() and not second.done()
            finally:
                await cancel(second)
        finally:
            await cancel(first)
    assert set(owners) == {holder}, f"{owners.count(holder)} of {len(owners)} samples"


# ---------------------------------------------------------------------- a Dovecot restart


@pytest.fixture(scope="module")
def own_dovecot() -> Iterator[DovecotServer]:
    """A Dovecot of this module's own: the test restarts it."""
    with running_dovecot(prefix="mw-dovecot-idle-") as srv:
        yield srv


def _drop_into_maildir(dovecot: DovecotServer, user: str, raw: bytes) -> None:
    """Mail that arrives while Dovecot is down (an MTA's local delivery to the maildir):
    Dovecot finds it at the next SELECT, and no IDLE tells anyone."""
    new = dovecot.maildir(user) / "new"
    new.mkdir(parents=True, exist_ok=True)
    path = Path(new) / f"{time.time_ns()}.M1P{os.getpid()}.mw-test"
    path.write_bytes(raw)
    mail = pwd.getpwnam("mail")
    for p in (path, new):
        os.chown(p, mail.pw_uid, mail.pw_gid)


async def test_a_dovecot_restart_while_idling_reconnects_catches_up_and_doubles_nothing(
    own_dovecot: DovecotServer, client: httpx.AsyncClient, redis_client: aioredis.Redis,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches a holder that does not reconnect after its connections dropped, does no
    catch-up on reconnect (the mail that came while Dovecot was down would wait for a periodic
    pass that never comes: interval 0), or enqueues the mail of before the restart again."""
    user = f"idle{time.monotonic_ns() % 10**9}"
    own_dovecot.add_user(user, f"pw-{user}")
    peer = ImapPeer("dovecot-tls", own_dovecot.ports.imaps, "tls", own_dovecot.ssl_context(),
                    user, f"pw-{user}", lambda raw: own_dovecot.deliver(raw, user))
    admin = await configure(client, imap_wire(peer, telegram_emulator))
    await _watching(client, redis_client, admin)
    peer.deliver(_raw("before the restart"))

    async def count(n: int) -> bool:
        return len(await _queued(redis_client)) >= n

    await eventually(lambda: count(1), "the first mail enqueued through IDLE")

    with own_dovecot.stopped():
        async def lost() -> bool:
            return await _idle_status(redis_client) not in (None, "connected")

        await eventually(lost, "the holder saw its connections drop")
        _drop_into_maildir(own_dovecot, user, _raw("while Dovecot was down"))

    async def back() -> bool:
        return await _idle_status(redis_client) == "connected"

    await eventually(back, "the holder idles again", timeout_s=60)
    await eventually(lambda: count(2), "the mail of the outage enqueued by the reconnect "
                     "catch-up", timeout_s=15)
    peer.deliver(_raw("after the restart"))
    await eventually(lambda: count(3), "the mail after the restart enqueued through IDLE")
    queued = await _queued(redis_client)
    async with peer.client() as c:
        state = await c.select("INBOX", readonly=True)
        uids = await c.uid_search("ALL")
    assert sorted(queued) == sorted(mail_id("INBOX", state.uidvalidity, u) for u in uids)
    assert len(set(queued)) == len(queued) == 3


async def test_a_switch_to_jmap_on_hot_reload_lets_the_idle_holder_go(
    dovecot: DovecotServer, client: httpx.AsyncClient, redis_client: aioredis.Redis,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches an IDLE holder that goes on idling (and asking for IMAP catch-ups) after the
    configuration switched the mail source to JMAP, or does not take the lease again when it
    switches back."""
    user = f"switch{time.monotonic_ns() % 10**9}"
    dovecot.add_user(user, f"pw-{user}")
    peer = ImapPeer("dovecot-tls", dovecot.ports.imaps, "tls", dovecot.ssl_context(),
                    user, f"pw-{user}", lambda raw: dovecot.deliver(raw, user))
    wire = imap_wire(peer, telegram_emulator)
    admin = await configure(client, wire)
    await _watching(client, redis_client, admin)

    switched = await client.put("/api/business-config", headers=admin,
                                json={**wire, "mail_source": "jmap"})
    assert switched.status_code == 200, switched.text

    async def let_go() -> bool:
        return (await redis_client.get(keys.IMAP_IDLE_LOCK) is None
                and await _idle_status(redis_client) == "off")

    await eventually(let_go, "the IDLE holder released its lease and said off")
    status = (await client.get("/api/push/status", headers=admin)).json()
    assert status["in_force"] != "ok (idle)"

    back = await client.put("/api/business-config", headers=admin, json=wire)
    assert back.status_code == 200, back.text

    async def idling() -> bool:
        return await _idle_status(redis_client) == "connected"

    await eventually(idling, "the IDLE holder idles again after the switch back")
