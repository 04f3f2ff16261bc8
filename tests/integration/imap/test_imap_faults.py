"""Faults on an IMAP mailbox that must lose and double nothing in the chat (issue #33 "How it is
checked"): a Dovecot restart while the app is connected, and `kill -9` of a real `messageweave
serve` during a burst of 30 mails, then a start. What counts is what the owner sees: the
notifications the Bot API emulator received, one per mail."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator

import httpx
import pytest
import redis.asyncio as aioredis

from messageweave.store import keys
from tests.helpers import (
    WAIT_S,
    configure,
    eventually,
    every_entry_finished,
)
from tests.integration.imap.conftest import ImapPeer
from tests.integration.imap.test_idle import _drop_into_maildir, _raw, _watching, imap_wire
from tests.integration.receivers.test_poller_takeover import serve
from tests.peers.dovecot import DovecotServer
from tests.peers.dovecot import running as running_dovecot
from tests.peers.telegram import TelegramEmulator
from tests.served import lift_limits

BURST = 30


@pytest.fixture(scope="module")
def own_dovecot() -> Iterator[DovecotServer]:
    """A Dovecot of this module's own: the tests restart it."""
    with running_dovecot(prefix="mw-dovecot-faults-") as srv:
        yield srv


def _peer(dovecot: DovecotServer, name: str) -> ImapPeer:
    user = f"{name}{time.monotonic_ns() % 10**9}"
    dovecot.add_user(user, f"pw-{user}")
    return ImapPeer("dovecot-tls", dovecot.ports.imaps, "tls", dovecot.ssl_context(), user,
                    f"pw-{user}", lambda raw: dovecot.deliver(raw, user))


async def _notified(emulator: TelegramEmulator, token: str, subjects: Iterable[str]
                    ) -> Counter[str]:
    """How many messages of the bot name each of `subjects` (none is part of another)."""
    sent = [m.text for m in await emulator.sent_messages(token)]
    return Counter(s for text in sent for s in subjects if s in text)


async def _each_notified(emulator: TelegramEmulator, token: str, subjects: set[str],
                         timeout_s: float = WAIT_S) -> None:
    async def all_there() -> bool:
        return set(await _notified(emulator, token, subjects)) == subjects

    await eventually(all_there, lambda: f"{len(subjects)} notifications", timeout_s)


async def test_a_dovecot_restart_while_connected_loses_and_doubles_no_notification(
    own_dovecot: DovecotServer, client: httpx.AsyncClient, redis_client: aioredis.Redis,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches, through the chat: the mail of before a restart notified again (the reconnect
    catch-up not starting from the stored cursor, or the claim keyed on something the restart
    changed), the mail that came while Dovecot was down never notified (no catch-up on
    reconnect), and the app deaf to new mail after it (the IDLE holder not back). Mail already
    in the mailbox at the first pass is not notified either."""
    await lift_limits(redis_client)
    peer = _peer(own_dovecot, "restart")
    peer.deliver(_raw("mwold already there"))
    wire = imap_wire(peer, telegram_emulator)
    admin = await configure(client, wire)
    await _watching(client, redis_client, admin)
    token = str(wire["bot_token"])
    before = {f"mwbefore{n}" for n in range(3)}
    for subject in sorted(before):
        peer.deliver(_raw(subject))
    await _each_notified(telegram_emulator, token, before)

    with own_dovecot.stopped():
        _drop_into_maildir(own_dovecot, peer.user, _raw("mwdown"))
    after = {f"mwafter{n}" for n in range(3)}
    for subject in sorted(after):
        peer.deliver(_raw(subject))
    await _each_notified(telegram_emulator, token, before | after | {"mwdown"}, WAIT_S + 30)
    await every_entry_finished(redis_client)
    counts = await _notified(telegram_emulator, token, before | after | {"mwdown", "mwold"})
    assert counts == Counter(before | after | {"mwdown"}), counts


# ------------------------------------------------------------------------ kill -9 of serve


async def test_kill_9_of_serve_during_a_burst_then_a_start_notifies_each_mail_once(
    dovecot: DovecotServer, embedded_redis_url: str, redis_client: aioredis.Redis,
    telegram_emulator: TelegramEmulator,
) -> None:
    """Catches, on IMAP: mail delivered while the service was dead never notified (the start's
    catch-up not reading from the stored cursor, or the IDLE lease of the dead process never
    given up), mail enqueued before the kill but not yet sent lost, and mail notified before
    the kill notified again by the start's catch-up (a claim not found for an IMAP id). A kill
    between a sendMessage and its commit is the worker's at-least-once window (reference
    §1.3.1): a mail sent twice there must be the one recorded as resent."""
    await lift_limits(redis_client)
    peer = _peer(dovecot, "kill")
    wire = imap_wire(peer, telegram_emulator)
    token = str(wire["bot_token"])
    subjects = [f"mwkill{n:02d}" for n in range(BURST)]
    half = BURST // 2

    def deliver(part: list[str]) -> None:
        for subject in part:
            peer.deliver(_raw(subject))

    delivering = threading.Thread(target=deliver, args=(subjects[:half],))
    async with serve(embedded_redis_url) as (first, url):
        async with httpx.AsyncClient(base_url=url, timeout=15) as api:
            admin = await configure(api, wire, applied=True)
            await _watching(api, redis_client, admin)
        delivering.start()

        async def some_notified() -> bool:
            return len(await _notified(telegram_emulator, token, subjects)) >= BURST // 6

        await eventually(some_notified, "the burst's first mails notified")
        first.send_signal(signal.SIGKILL)
        await first.wait()
    await asyncio.to_thread(delivering.join)
    await asyncio.to_thread(deliver, subjects[half:])  # while no service runs
    async with serve(embedded_redis_url):
        # The dead holder's IDLE lease runs out before the new one idles.
        await _each_notified(telegram_emulator, token, set(subjects), WAIT_S + 15)
        await every_entry_finished(redis_client)
    counts = await _notified(telegram_emulator, token, subjects)
    assert set(counts) == set(subjects)
    doubled = [s for s, n in counts.items() if n > 1]
    assert len(doubled) <= 1, counts
    resent = await redis_client.zrange(keys.DELIVERY_UNKNOWN, 0, -1)
    assert not doubled or any(r.endswith("/resent") for r in resent), resent
