"""A reconcile page is fetched in one JMAP request and enqueued in one Redis round trip, and
stays exactly-once: a page replayed after a crash enqueues only what it had not claimed."""

from __future__ import annotations

import redis.asyncio as aioredis

from messageweave.mail.reconcile import reconcile
from messageweave.store import keys
from messageweave.store.mailbox import NOT_NOTIFIED, enqueue_new_mails
from tests.helpers import FreshUser, enqueue_mail, enqueued
from tests.peers.cyrus import CyrusServer

INBOX = ("inbox",)


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
