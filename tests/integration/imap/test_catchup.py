"""The IMAP catch-up (issue #33, SPEC Part F.2) against the real Dovecot and Cyrus's imapd: a first
pass notifies nothing already there, new mail is enqueued once on the delivery stream whatever is
replayed, a UIDVALIDITY change notifies no old mail, the backlog digest folds a burst, and a
pass that lost its lease moves no cursor."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.message
import email.policy
import imaplib
import time
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis

from messageweave.mail.imap.catchup import (
    CatchupBusy,
    ImapCatchup,
    catch_up,
    read_cursors,
    read_watermark,
)
from messageweave.mail.imap.ids import mail_id, parse_mail_id
from messageweave.mail.imap.mailbox import MailboxState
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.locks import LockLost
from messageweave.store.reconcile_state import reconcile_lock
from tests.integration.imap.conftest import ImapPeer

LISTS = "Lists"  # a second notify mailbox, one a test may delete and create again


def _raw(subject: str) -> bytes:
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "Bob <bob@example.org>", "alice@localhost", subject
    msg.set_content(f"the body of {subject}")
    return msg.as_bytes(policy=email.policy.SMTP)  # CRLF: Cyrus refuses bare newlines


@contextlib.contextmanager
def _admin(peer: ImapPeer) -> Iterator[imaplib.IMAP4]:
    """A plain `imaplib` session of the peer's user, for what the client under test does not
    do (CREATE, DELETE)."""
    if peer.security == "tls":
        m: imaplib.IMAP4 = imaplib.IMAP4_SSL("127.0.0.1", peer.port,
                                             ssl_context=peer.ssl_context, timeout=10)
    else:
        m = imaplib.IMAP4("127.0.0.1", peer.port, timeout=10)
        m.starttls(peer.ssl_context)
    try:
        m.login(peer.user, peer.password)
        yield m
    finally:
        with contextlib.suppress(Exception):
            m.logout()


def _create(peer: ImapPeer, name: str) -> None:
    with _admin(peer) as m:
        typ, data = m.create(name)
        assert typ == "OK", data


def _delete(peer: ImapPeer, name: str) -> None:
    with _admin(peer) as m:
        typ, data = m.delete(name)
        assert typ == "OK", data


async def _queued(redis: aioredis.Redis) -> list[str]:
    """The email ids on the delivery stream, in order (a digest entry's ids included)."""
    ids: list[str] = []
    for _, fields in await redis.xrange(keys.STREAM_JMAP):
        ids += fields["email_ids"].split() if "email_ids" in fields else [fields["email_id"]]
    return ids


async def test_the_first_pass_notifies_nothing_and_new_mail_is_enqueued_once(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches mail already in the mailbox notified at the first pass (Part C.2), new mail
    missed, or enqueued again by a second pass or by a pass replaying a page whose cursor was
    never saved (a crash after the XADD)."""
    async with imap_peer.client() as client:
        await client.append("INBOX", _raw("old 1"))
        await client.append("INBOX", _raw("old 2"))
        first = await catch_up(redis_client, client, ["INBOX"], imap_peer.user)
        assert first.first_runs == ["INBOX"] and first.enqueued == 0
        assert await redis_client.xlen(keys.STREAM_JMAP) == 0
        assert await redis_client.get(keys.RECONCILE_BASELINE) is not None
        before = (await read_cursors(redis_client))["INBOX"]

        new = [await client.append("INBOX", _raw(f"new {n}")) for n in range(3)]
        second = await catch_up(redis_client, client, ["INBOX"], imap_peer.user)
        assert second.enqueued == 3
        state = await client.select("INBOX", readonly=True)
        expected = [mail_id("INBOX", state.uidvalidity, c.uids[0]) for c in new if c]
        assert await _queued(redis_client) == expected
        assert [parse_mail_id(i) is not None for i in expected] == [True] * 3

        assert (await catch_up(redis_client, client, ["INBOX"], imap_peer.user)).enqueued == 0
        await redis_client.hset(keys.IMAP_CURSOR, "INBOX", before.encode())  # a lost save
        assert (await catch_up(redis_client, client, ["INBOX"], imap_peer.user)).enqueued == 0
        assert await _queued(redis_client) == expected
        assert (await read_cursors(redis_client))["INBOX"].last_uid == new[-1].uids[0]  # type: ignore[union-attr]


async def test_a_uidvalidity_change_notifies_no_old_mail(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches a mailbox whose UIDVALIDITY changed (deleted and made again, its mail put back)
    notifying every mail in it again, or missing the one that really is new."""
    _create(imap_peer, LISTS)
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    async with imap_peer.client() as client:
        await client.append(LISTS, _raw("kept"), internaldate=long_ago)
        await catch_up(redis_client, client, ["INBOX", LISTS], imap_peer.user)
    validity = (await read_cursors(redis_client))[LISTS].uidvalidity
    watermark = await read_watermark(redis_client)
    assert watermark is not None

    # From another session, as a mail client would (Dovecot does not expect a mailbox
    # deleted under a session that has it selected: the next pass is a new connection).
    _delete(imap_peer, LISTS)
    _create(imap_peer, LISTS)
    async with imap_peer.client() as client:
        await client.append(LISTS, _raw("kept"), internaldate=long_ago)
        await client.append(LISTS, _raw("the same day, before the pass"),
                            internaldate=dt.datetime.fromtimestamp(watermark - 5, dt.UTC))
        newer = await client.append(
            LISTS, _raw("new"), internaldate=dt.datetime.fromtimestamp(watermark + 2, dt.UTC))
        progress = await catch_up(redis_client, client, ["INBOX", LISTS], imap_peer.user)
        assert progress.rebaselined == [LISTS]
        state = await client.select(LISTS, readonly=True)
        assert state.uidvalidity != validity
        assert newer is not None
        assert await _queued(redis_client) == [mail_id(LISTS, state.uidvalidity, newer.uids[0])]
        assert (await catch_up(redis_client, client, ["INBOX", LISTS],
                               imap_peer.user)).enqueued == 0


async def test_a_backlog_over_the_threshold_is_one_digest_entry(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches the backlog digest ignored for IMAP mail (issue #16's `digest_threshold`): a
    burst found by one pass must be one digest entry, and the cursor must pass it."""
    async with imap_peer.client() as client:
        await catch_up(redis_client, client, ["INBOX"], imap_peer.user, digest_threshold=3)
        for n in range(5):
            await client.append("INBOX", _raw(f"burst {n}"))
        progress = await catch_up(redis_client, client, ["INBOX"], imap_peer.user,
                                  digest_threshold=3)
        assert progress.digests == 1 and progress.enqueued == 5
        [(_, fields)] = await redis_client.xrange(keys.STREAM_JMAP)
        assert len(fields["email_ids"].split()) == 5
        assert (await catch_up(redis_client, client, ["INBOX"], imap_peer.user,
                               digest_threshold=3)).enqueued == 0


async def test_a_pass_that_lost_its_lease_moves_no_cursor(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches a pass that writes its cursor after another instance took `lock:reconcile`
    (a paused process): its save must be refused, and a second pass must wait its turn."""
    async with imap_peer.client() as client:
        await catch_up(redis_client, client, ["INBOX"], imap_peer.user)
        before = (await read_cursors(redis_client))["INBOX"]
        await client.append("INBOX", _raw("during the pause"))
        paused = reconcile_lock(redis_client)
        assert await paused.acquire()
        with pytest.raises(CatchupBusy):
            await catch_up(redis_client, client, ["INBOX"], imap_peer.user)
        await redis_client.delete(keys.RECONCILE_LOCK)  # its lease ran out
        taker = reconcile_lock(redis_client)
        assert await taker.acquire()
        with pytest.raises(LockLost):
            await ImapCatchup(redis_client, client, paused, ["INBOX"], imap_peer.user).run()
        assert (await read_cursors(redis_client))["INBOX"] == before


@pytest.mark.parametrize("imap_peer", ["dovecot-tls"], indirect=True)  # Redis's lease alone
async def test_a_pass_killed_mid_way_holds_the_next_off_for_seconds_not_a_minute(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches a restarted instance's mail waiting up to a minute after a kill -9 during a pass
    (`lock:reconcile` left with a 60 s TTL: `test_imap_faults`'s kill during a burst missed its
    35 s on a busy machine): the next pass, retried as the scheduler retries a refused catch-up
    (`RETRY_S`), enqueues the mail within the lock's 15 s. And catches the shorter lock lost by
    a live pass whose work outlasts it (no `store.locks.LockLease` beside it): another account's
    pass, meanwhile, on a page 3 s longer than the TTL. That page's slowness is injected (its
    SELECT delayed in the client): Dovecot cannot be made to take 18 s over one command."""
    other = AccountKeys("other")
    async with imap_peer.client() as client, imap_peer.client() as slow:
        await catch_up(redis_client, client, ["INBOX"], imap_peer.user)
        await catch_up(redis_client, slow, ["INBOX"], imap_peer.user, names=other)
        select = slow.select

        async def slow_select(name: str, *, readonly: bool = False) -> MailboxState:
            await asyncio.sleep(keys.RECONCILE_LOCK_TTL_S + 3)
            return await select(name, readonly=readonly)

        slow.select = slow_select  # type: ignore[method-assign]
        live = asyncio.ensure_future(
            catch_up(redis_client, slow, ["INBOX"], imap_peer.user, names=other))
        dead = reconcile_lock(redis_client)  # the killed instance's pass: never renewed again
        assert await dead.acquire()
        killed_at = time.monotonic()
        imap_peer.deliver(_raw("while the dead pass's lock lives"))
        while True:
            try:
                done = await catch_up(redis_client, client, ["INBOX"], imap_peer.user)
            except CatchupBusy:
                assert time.monotonic() - killed_at < 20, "the dead pass's lock outlived 20 s"
                await asyncio.sleep(0.2)
                continue
            break
        assert done.enqueued == 1
        past_ttl = keys.RECONCILE_LOCK_TTL_S + 1 - (time.monotonic() - killed_at)
        await asyncio.sleep(max(0.0, past_ttl))
        assert not await reconcile_lock(redis_client, other).acquire()  # the live pass's still
        assert (await live).complete


async def test_an_unknown_mailbox_is_the_servers_no(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches a notify mailbox that does not exist passing silently (the page must be able to
    say which mailbox failed): SELECT's NO comes out, and the lock is given back."""
    from messageweave.mail.imap import ImapCommandError

    async with imap_peer.client() as client:
        with pytest.raises(ImapCommandError):
            await catch_up(redis_client, client, ["No such box"], imap_peer.user)
    assert not await redis_client.exists(keys.RECONCILE_LOCK)

