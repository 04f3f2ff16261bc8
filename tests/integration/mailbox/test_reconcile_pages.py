"""A reconcile page is fetched in one JMAP request and enqueued in one Redis round trip, and
stays exactly-once: a page replayed after a crash enqueues only what it had not claimed."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from messageweave.mail.reconcile import NEXT_PAGE_TASK, Budget, Progress, Reconciler, reconcile
from messageweave.store import keys
from messageweave.store.locks import LockLost
from messageweave.store.mail_entries import NOT_NOTIFIED, enqueue_new_mails
from messageweave.store.reconcile_state import reconcile_lock
from tests.helpers import FreshUser, enqueue_mail, enqueued
from tests.peers.cyrus import CyrusServer

INBOX = ("inbox",)
PAGES_OF_3 = Budget(initial_window=3, window_cap=3)


class Crash(Exception):
    """The process dies right after a page's cursor was saved."""


def next_pages_in_flight() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == NEXT_PAGE_TASK and not t.done()]


async def test_batched_enqueue_claims_each_mail_once_across_scripts(
    redis_client: aioredis.Redis,
) -> None:
    assert await enqueue_mail(redis_client, "acct", "m2") is not None
    await redis_client.set(keys.dedup_jmap("acct", "m4"), NOT_NOTIFIED)
    ids = ["m1", "m2", "m3", "m1", "m4", "m5"]
    assert await enqueue_new_mails(redis_client, "acct", ids, batch=2) == 3
    assert await enqueued(redis_client) == ["m2", "m1", "m3", "m5"]
    for entry_id, fields in await redis_client.xrange(keys.STREAM_JMAP):
        assert await redis_client.get(keys.dedup_jmap("acct", fields["email_id"])) == entry_id
    assert 0 < await redis_client.ttl(keys.dedup_jmap("acct", "m5")) <= keys.DEDUP_JMAP_TTL_S
    assert await enqueue_new_mails(redis_client, "acct", ids, batch=4) == 0


async def test_a_page_replayed_after_a_crash_enqueues_only_the_mails_not_yet_claimed(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, INBOX)
    before = await redis_client.get(keys.RECONCILE_CURSOR)
    new = [cyrus.append(user=mailbox.user, subject=f"page {n}").email_id for n in range(5)]
    account = mailbox.client.account_id
    # a pass that crashed after its first scripts ran, before it saved the cursor
    for email_id in new[:2]:
        assert await enqueue_mail(redis_client, account, email_id) is not None
    result = await reconcile(redis_client, mailbox.client, INBOX)
    assert result.complete and result.emails == 5 and result.enqueued == 3
    assert await enqueued(redis_client) == new

    await redis_client.set(keys.RECONCILE_CURSOR, before)
    again = await reconcile(redis_client, mailbox.client, INBOX)
    assert again.complete and again.emails == 5 and again.enqueued == 0
    assert await enqueued(redis_client) == new


async def test_a_changes_page_and_its_new_mail_come_in_one_request(
    mailbox: FreshUser, cyrus: CyrusServer
) -> None:
    client = mailbox.client
    since = await client.email_state()
    new = [cyrus.append(user=mailbox.user, subject=f"one request {n}") for n in range(3)]
    cyrus.append(user=mailbox.user, mailbox="Junk", subject="junk")
    mailbox.transport.clear()
    page = await client.changes_page(since, 10**6, properties=("mailboxIds",),
                                     mailboxes_since=None)
    changes, created = page.changes, page.created
    assert len(mailbox.transport.posts()) == 1
    [body] = mailbox.transport.posts()
    max_get = (await client.get_session()).max_objects_in_get
    assert body["methodCalls"][0][1]["maxChanges"] == max_get
    assert [m.id for m in created] == changes.created and len(created) == 4
    inbox = {b.id for b in await client.mailboxes() if b.role == "inbox"}
    assert [m.id for m in created if m.mailbox_ids == inbox] == [a.email_id for a in new]


async def test_a_pass_that_dies_with_the_next_page_in_flight_resumes_after_its_last_saved_page(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches a next page fetched ahead that is enqueued, or has its state saved, by a pass
    that died before it got there (a cursor past unenqueued mail loses them on the next pass),
    and a fetch left running after the pass ended."""
    await reconcile(redis_client, mailbox.client, INBOX)
    new = [cyrus.append(user=mailbox.user, subject=f"ahead {n}").email_id for n in range(9)]
    saved: list[str | None] = []

    def die_after_the_first_page(progress: Progress) -> None:
        saved.append(progress.cursor)
        raise Crash

    with pytest.raises(Crash):
        await reconcile(redis_client, mailbox.client, INBOX, budget=PAGES_OF_3,
                        on_progress=die_after_the_first_page)
    assert next_pages_in_flight() == []
    assert await enqueued(redis_client) == new[:3]
    assert await redis_client.get(keys.RECONCILE_CURSOR) == saved[0]

    resumed = await reconcile(redis_client, mailbox.client, INBOX, budget=PAGES_OF_3)
    assert resumed.complete and resumed.enqueued == 6
    assert await enqueued(redis_client) == new  # each once, in order


async def test_a_lease_lost_with_the_next_page_in_flight_moves_no_cursor_and_loses_nothing(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches a pass that, its lease lost while the page after next is already requested,
    saves a cursor anyway, or goes on with that page (the enqueued but unsaved page must be
    replayed without a second entry)."""
    await reconcile(redis_client, mailbox.client, INBOX)
    new = [cyrus.append(user=mailbox.user, subject=f"lease {n}").email_id for n in range(9)]
    lock = reconcile_lock(redis_client)
    assert await lock.acquire()
    saved: list[str | None] = []

    def lose_the_lease_after_the_first_page(progress: Progress) -> None:
        saved.append(progress.cursor)
        lock.owner = "not-the-holder-any-more"  # every later write under the lock is refused

    with pytest.raises(LockLost):
        await Reconciler(redis_client, mailbox.client, lock, INBOX, budget=PAGES_OF_3,
                         on_progress=lose_the_lease_after_the_first_page).run()
    assert len(saved) == 1 and next_pages_in_flight() == []
    assert await redis_client.get(keys.RECONCILE_CURSOR) == saved[0]
    assert await enqueued(redis_client) == new[:6]  # the second page, enqueued before its save
    await redis_client.delete(keys.RECONCILE_LOCK)

    resumed = await reconcile(redis_client, mailbox.client, INBOX, budget=PAGES_OF_3)
    assert resumed.complete and resumed.emails == 6 and resumed.enqueued == 3
    assert await enqueued(redis_client) == new


async def test_a_default_pass_asks_for_full_pages_from_its_first_request(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches the window starting small again: Cyrus's every Email/changes costs in proportion
    to all the mail after its state, so 10,000 new mails took 7 requests and a quarter more time
    than the 3 full pages."""
    await reconcile(redis_client, mailbox.client, INBOX)
    new = [cyrus.append(user=mailbox.user, subject=f"full {n}").email_id for n in range(3)]
    mailbox.transport.clear()
    result = await reconcile(redis_client, mailbox.client, INBOX)
    assert result.complete and result.pages == 1 and await enqueued(redis_client) == new
    [body] = mailbox.transport.posts()
    max_get = (await mailbox.client.get_session()).max_objects_in_get
    assert body["methodCalls"][0][1]["maxChanges"] == min(Budget().window_cap, max_get) == 4096
