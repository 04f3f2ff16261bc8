"""Per-account fairness in the worker (issue #35, SPEC G.5), with the Bot API emulator's real
per-chat rate: one account's backlog, or its mail server that hangs, does not hold back another
account's new mail."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from messageweave.store import keys
from messageweave.store.mail_entries import enqueue_new_mails
from messageweave.store.streams import StreamStore
from tests.helpers import eventually
from tests.integration.accounts.conftest import add_account
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp

BACKLOG = 2000
BLACKHOLED = 200  # more than the worker's slots (64)


async def test_a_backlog_in_one_account_does_not_hold_back_another_accounts_new_mail(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a worker that serves one account only (another account's mail stream never
    read), or one whose slots a single account's backlog can fill: 2,000 notifications to one
    chat wait in that chat's lane (about one message a second), each holding a slot, and the
    other account's new mail waited behind them."""
    await served.redis.delete(keys.GOVERNOR_LIMITS)  # Telegram's own: a chat ≤ 1 message/s
    big = await add_account(served, cyrus, "big", digest_threshold=0)
    family = await add_account(served, cyrus, "family", digest_threshold=0)
    mails = cyrus.append_many([f"backlog {n:04d}" for n in range(BACKLOG)], user=big.user)
    queued = await enqueue_new_mails(served.redis, big.user, [m.email_id for m in mails],
                                     names=big.keys)
    assert queued == BACKLOG
    await served.emulator.wait_for_messages(served.token, big.chat, 1, timeout_s=10)

    new = cyrus.append(subject="dinner at eight", user=family.user)
    started = time.monotonic()
    await enqueue_new_mails(served.redis, family.user, [new.email_id], names=family.keys)
    [sent] = await served.emulator.wait_for_messages(served.token, family.chat, 1,
                                                     timeout_s=2.0)
    took = time.monotonic() - started
    assert "dinner at eight" in sent.text, sent.text
    assert took < 2.0, f"the other account's mail took {took:.2f} s"
    assert len(await served.emulator.sent_messages(served.token, big.chat)) < BACKLOG / 4


@contextlib.asynccontextmanager
async def blackhole() -> AsyncIterator[int]:
    """A TCP server that accepts every connection and never answers (not even TLS): a mail
    server that hangs. Its port."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()


async def test_a_mail_server_that_hangs_does_not_delay_another_accounts_mail(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches one account's blackholed mail server holding back another account's
    notifications: its queued mail (each attempt waits out the JMAP timeout, holding a slot)
    filled every slot of the worker, or building its client held up the reload."""
    async with blackhole() as port:
        dead = await add_account(served, cyrus, "dead",
                                 jmap_session_url=f"https://127.0.0.1:{port}/")
        family = await add_account(served, cyrus, "family")
        stuck = [f"M{n:024x}" for n in range(BLACKHOLED)]
        assert await enqueue_new_mails(served.redis, dead.user, stuck,
                                       names=dead.keys) == BLACKHOLED

        async def hanging() -> bool:  # the worker is working on them (and waiting)
            return (await StreamStore(served.redis).stats(dead.keys.stream_jmap))["pending"] > 0

        await eventually(hanging, "the dead account's entries taken")
        new = cyrus.append(subject="dinner at eight", user=family.user)
        started = time.monotonic()
        await enqueue_new_mails(served.redis, family.user, [new.email_id], names=family.keys)
        [sent] = await served.emulator.wait_for_messages(served.token, family.chat, 1,
                                                         timeout_s=2.0)
        assert "dinner at eight" in sent.text
        assert time.monotonic() - started < 2.0
