"""Per-account fairness with many accounts (issue #37 item 4): every account that hangs holds
its share of the worker's slots and no more, and what the shares leave free is enough for the
worker to read another account's new mail."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator

from messageweave.pipeline.worker import WorkerOptions
from messageweave.store.mail_entries import enqueue_new_mails
from messageweave.store.streams import StreamStore
from tests.helpers import eventually
from tests.integration.accounts.conftest import ServedAccount, add_account
from tests.integration.accounts.test_fairness import blackhole
from tests.peers.cyrus import CyrusServer
from tests.served import ServedApp

HANGING = 7  # with `default` and the family, 9 mail streams: a share of 64 // 9 = 7 slots
STUCK = 20  # each hanging account's queued mails: more than its share


async def test_many_hanging_mail_servers_at_their_share_leave_another_account_room(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a worker whose read waited for a quarter of its slots (16 of 64) to be free:
    seven accounts whose mail server hangs, each holding its share (7 slots, every attempt
    waiting out the mail timeout), left 15 free, and another account's new mail was not even
    read until their attempts timed out (10 s here, 15 s by default)."""
    async with blackhole() as port:
        hanging = [await add_account(served, cyrus, f"dead{n}",
                                     jmap_session_url=f"https://127.0.0.1:{port}/")
                   for n in range(HANGING)]
        family = await add_account(served, cyrus, "family")
        await counted_by_the_worker(served, cyrus, family)
        share = WorkerOptions().concurrency // (HANGING + 2)
        for account in hanging:
            await hang(served, account, STUCK, share)
        await notified_at_once(served, cyrus, family)


async def test_an_account_over_its_share_leaves_another_account_the_free_slots(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches a worker whose read waited for more free slots than the accounts at their
    shares leave: an account whose mail server hangs took its share while it had one
    neighbour (32 of 64 slots) and keeps them while it hangs; two more hanging accounts came,
    each taking its new share (12), and with 8 slots free another account's new mail waited
    for a hanging attempt to end (the mail timeout, 10 s here, and longer: each retries)."""
    async with blackhole() as port:
        hole = f"https://127.0.0.1:{port}/"
        first = await add_account(served, cyrus, "dead0", jmap_session_url=hole)
        await hang(served, first, 32, 32)
        more = [await add_account(served, cyrus, f"dead{n}", jmap_session_url=hole)
                for n in (1, 2)]
        family = await add_account(served, cyrus, "family")
        await counted_by_the_worker(served, cyrus, family)
        for account in more:  # five mail streams: a share of 12
            await hang(served, account, STUCK, 12)
        await notified_at_once(served, cyrus, family)


async def test_hanging_accounts_added_one_by_one_give_back_what_is_over_their_share(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches slots kept by accounts whose mail servers hang (`bench.accounts --ghosts 3`:
    none of 20 mails in a minute): three such accounts added one after another each took its
    share of the time (32, then 21, then the 11 left of 64) and kept every slot while their
    attempts waited out the mail timeout and their retries, so a fourth account's new mail
    was not even read. Slots an account holds above its share of now are not counted against
    the others: the fourth account's share is free at once."""
    async with blackhole() as port:
        hole = f"https://127.0.0.1:{port}/"
        for n, taken in enumerate((32, 21, 11)):  # 2, 3, 4 mail streams: 64 // n, the rest
            dead = await add_account(served, cyrus, f"dead{n}", jmap_session_url=hole)
            await hang(served, dead, taken + 8, taken)
        family = await add_account(served, cyrus, "family")
        await counted_by_the_worker(served, cyrus, family)
        await notified_at_once(served, cyrus, family)


async def test_a_deleted_accounts_attempts_stop_and_hang_up_on_its_mail_server(
    served: ServedApp, cyrus: CyrusServer
) -> None:
    """Catches the attempts of an account deleted while its mail server hung running on: each
    waited out the mail timeout (a minute here) and then its retries, for up to the retry
    window, holding connections to the deleted account's server and writing its leases after
    its sweep. They are stopped within a maintenance pass: the server sees every connection
    closed, long before the timeout. (A TLS handshake cut by a cancellation leaves its socket
    to the garbage collector: httpcore's `start_tls` closes the stream on an `Exception`, not
    on `CancelledError`; so the check collects first. An attempt still running keeps its
    connection whatever is collected.)"""
    slow = {"jmap_timeout_ms": 60000, "telegram_timeout_ms": 5000, "llm_timeout_ms": 5000,
            "max_retries": 1}
    assert (await served.client.put("/api/config", headers=served.admin,
                                    json=slow)).status_code == 200
    async with watched_blackhole() as (port, connected):
        dead = await add_account(served, cyrus, "dead0",
                                 jmap_session_url=f"https://127.0.0.1:{port}/")
        await hang(served, dead, 3, 3)

        async def hanging() -> bool:
            return bool(connected)
        await eventually(hanging, "the deleted account's attempts connected")
        gone = await served.client.delete("/api/accounts/dead0", headers=served.admin)
        assert gone.status_code == 204, gone.text

        async def hung_up() -> bool:
            gc.collect()
            await asyncio.sleep(0.1)  # the server's side reads the EOF
            return not connected
        await eventually(hung_up, "every connection to its mail server closed", timeout_s=20)


@contextlib.asynccontextmanager
async def watched_blackhole() -> AsyncIterator[tuple[int, set[asyncio.StreamWriter]]]:
    """A mail server that accepts and never answers (as `blackhole`), and the connections its
    clients hold open (each leaves the set when the client closes it)."""
    connected: set[asyncio.StreamWriter] = set()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.add(writer)
        try:
            while await reader.read(4096):  # read and dropped, never answered, until EOF
                pass
        except ConnectionError:
            pass
        finally:
            connected.discard(writer)
            writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], connected
    finally:
        for writer in list(connected):
            writer.close()
        server.close()


async def counted_by_the_worker(served: ServedApp, cyrus: CyrusServer,
                                family: ServedAccount) -> None:
    """Once the family's first mail is sent, every read of the worker counts every account: a
    read already waiting (XREADGROUP BLOCK) when the last accounts came counted fewer, so
    larger shares."""
    first = cyrus.append(subject="lunch at noon", user=family.user)
    await enqueue_new_mails(served.redis, family.user, [first.email_id], names=family.keys)
    await served.emulator.wait_for_messages(served.token, family.chat, 1, timeout_s=10)


async def hang(served: ServedApp, account: ServedAccount, mails: int, taken: int) -> None:
    """Queue `mails` mails of an account whose mail server hangs, until the worker holds
    `taken` of them (each attempt waiting out the mail timeout)."""
    stuck = [f"M{n:024x}" for n in range(mails)]
    assert await enqueue_new_mails(served.redis, account.user, stuck,
                                   names=account.keys) == mails
    streams = StreamStore(served.redis)

    async def held() -> bool:
        return (await streams.stats(account.keys.stream_jmap))["pending"] >= taken

    await eventually(held, f"{taken} of {account.id}'s mails taken")


async def notified_at_once(served: ServedApp, cyrus: CyrusServer,
                           family: ServedAccount) -> None:
    """The family's new mail is in its chat within 2 s (its second message)."""
    subject = "dinner at eight"
    new = cyrus.append(subject=subject, user=family.user)
    started = time.monotonic()
    await enqueue_new_mails(served.redis, family.user, [new.email_id], names=family.keys)
    sent = await served.emulator.wait_for_messages(served.token, family.chat, 2, timeout_s=2.0)
    took = time.monotonic() - started
    assert [m for m in sent if subject in m.text], f"{len(sent)} messages, not the mail's"
    assert took < 2.0, f"the family's mail took {took:.2f} s"
