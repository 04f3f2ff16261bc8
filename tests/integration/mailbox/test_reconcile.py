"""Reconcile (new-mail discovery) against the real Cyrus JMAP server and a real Redis."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from messageweave.mail.reconcile import (
    Budget,
    ReconcileBusy,
    Reconciler,
    encode_walk,
    parse_cursor,
    reconcile,
)
from messageweave.store import keys
from messageweave.store.locks import LockLost
from messageweave.store.reconcile_state import reconcile_lock
from tests.helpers import FreshUser, enqueued
from tests.peers.cyrus import CyrusServer

INBOX = ("inbox",)
HOUR_AGO = time.time() - 3600


async def test_first_run_notifies_nothing_already_in_the_mailbox(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    cyrus.append(user=mailbox.user, subject="old one", received_at=HOUR_AGO)
    cyrus.append(user=mailbox.user, subject="old two", received_at=HOUR_AGO)
    result = await reconcile(redis_client, mailbox.client, INBOX)
    assert result.phase == "first_run" and result.enqueued == 0
    assert await enqueued(redis_client) == []
    assert await redis_client.get(keys.RECONCILE_CURSOR) == await mailbox.client.email_state()
    assert await redis_client.get(keys.RECONCILE_WATERMARK) is not None


async def test_mail_appended_after_the_first_reconcile_is_enqueued_exactly_once(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, INBOX)
    new = cyrus.append(user=mailbox.user, subject="fresh mail")
    result = await reconcile(redis_client, mailbox.client, INBOX)
    assert result.enqueued == 1 and result.complete
    assert await enqueued(redis_client) == [new.email_id]
    [(_id, fields)] = await redis_client.xrange(keys.STREAM_JMAP)
    assert fields == {"account_id": mailbox.client.account_id, "email_id": new.email_id}

    again = await reconcile(redis_client, mailbox.client, INBOX)
    assert again.enqueued == 0
    assert await enqueued(redis_client) == [new.email_id]


async def test_a_replayed_cursor_does_not_enqueue_the_same_mail_twice(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, INBOX)
    before = await redis_client.get(keys.RECONCILE_CURSOR)
    new = cyrus.append(user=mailbox.user, subject="crash in between")
    await reconcile(redis_client, mailbox.client, INBOX)
    # as if the cursor write had been lost: the next pass replays the same changes
    await redis_client.set(keys.RECONCILE_CURSOR, before)
    await reconcile(redis_client, mailbox.client, INBOX)
    assert await enqueued(redis_client) == [new.email_id]


async def test_flag_changes_and_moves_to_trash_enqueue_nothing(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    read = cyrus.append(user=mailbox.user, subject="will be read", received_at=HOUR_AGO)
    binned = cyrus.append(user=mailbox.user, subject="will be binned", received_at=HOUR_AGO)
    await reconcile(redis_client, mailbox.client, INBOX)
    cyrus.set_flags(read, ["\\Seen", "\\Flagged"])
    cyrus.move_to_trash(binned)
    result = await reconcile(redis_client, mailbox.client, INBOX)
    assert result.complete and result.enqueued == 0
    assert await enqueued(redis_client) == []


async def test_mail_in_sent_drafts_junk_or_trash_enqueues_nothing(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, INBOX)
    for folder in ("Sent", "Drafts", "Junk", "Trash", "Archive"):
        cyrus.append(user=mailbox.user, mailbox=folder, subject=f"in {folder}")
    inbox = cyrus.append(user=mailbox.user, subject="in the inbox")
    result = await reconcile(redis_client, mailbox.client, INBOX)
    assert result.emails == 6
    assert await enqueued(redis_client) == [inbox.email_id]


async def test_notify_roles_other_than_inbox_are_honoured_but_trash_never(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, ("archive", "trash"))
    archived = cyrus.append(user=mailbox.user, mailbox="Archive", subject="archived")
    cyrus.append(user=mailbox.user, mailbox="Trash", subject="binned")
    cyrus.append(user=mailbox.user, subject="inbox, not a notify mailbox here")
    await reconcile(redis_client, mailbox.client, ("archive", "trash"))
    assert await enqueued(redis_client) == [archived.email_id]


async def test_many_changes_are_replayed_with_a_growing_window(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, INBOX)
    new = [cyrus.append(user=mailbox.user, subject=f"burst {i}").email_id for i in range(7)]
    result = await reconcile(redis_client, mailbox.client, INBOX,
                             budget=Budget(initial_window=2, window_cap=4))
    assert result.complete
    assert sorted(await enqueued(redis_client)) == sorted(new)


async def test_a_forced_rebaseline_notifies_only_mail_after_the_watermark(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    cyrus.append(user=mailbox.user, subject="present before", received_at=HOUR_AGO)
    await reconcile(redis_client, mailbox.client, INBOX)
    after = cyrus.append(user=mailbox.user, subject="arrived after")
    gone = cyrus.append(user=mailbox.user, subject="expunged", received_at=HOUR_AGO)
    cyrus.expunge(gone)
    cyrus.purge_expunged(mailbox.user)  # the stored state is now too old for Email/changes

    result = await reconcile(redis_client, mailbox.client, INBOX)
    assert result.rebaselined and result.complete
    assert await enqueued(redis_client) == [after.email_id]
    # back to replay mode from a fresh state
    cursor = await redis_client.get(keys.RECONCILE_CURSOR)
    assert cursor is not None and not cursor.startswith("baseline:")


async def test_a_state_the_server_rejects_rebaselines_instead_of_failing(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, INBOX)
    await redis_client.set(keys.RECONCILE_CURSOR, "bogus")  # Cyrus: invalidArguments
    new = cyrus.append(user=mailbox.user, subject="after a bogus state")
    for _ in range(2):
        result = await reconcile(redis_client, mailbox.client, INBOX)
        assert result.complete
    assert await enqueued(redis_client) == [new.email_id]


async def test_a_walk_cut_by_the_page_budget_resumes_where_it_stopped(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, INBOX)
    new = [cyrus.append(user=mailbox.user, subject=f"walk {i}").email_id for i in range(5)]
    state = await mailbox.client.email_state()
    await redis_client.set(keys.RECONCILE_CURSOR, encode_walk(state, 0))
    budget = Budget(page_size=2, max_walk_pages=1)

    first = await reconcile(redis_client, mailbox.client, INBOX, budget=budget)
    assert not first.complete and first.enqueued == 2
    assert await redis_client.get(keys.RECONCILE_CURSOR) == encode_walk(state, 2)
    second = await reconcile(redis_client, mailbox.client, INBOX, budget=budget)
    assert not second.complete
    assert await redis_client.get(keys.RECONCILE_CURSOR) == encode_walk(state, 4)
    third = await reconcile(redis_client, mailbox.client, INBOX, budget=budget)
    assert third.complete
    walked = await enqueued(redis_client)
    assert sorted(walked) == sorted(new) and len(walked) == len(new)  # each exactly once
    assert parse_cursor(await redis_client.get(keys.RECONCILE_CURSOR) or "") is not None


async def test_a_second_pass_while_one_holds_the_lock_is_refused(
    mailbox: FreshUser, redis_client: aioredis.Redis
) -> None:
    holder = reconcile_lock(redis_client)
    assert await holder.acquire()
    with pytest.raises(ReconcileBusy):
        await reconcile(redis_client, mailbox.client, INBOX)
    await holder.release()
    assert (await reconcile(redis_client, mailbox.client, INBOX)).complete


async def test_a_lost_lease_aborts_without_moving_the_cursor(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    await reconcile(redis_client, mailbox.client, INBOX)
    cursor = await redis_client.get(keys.RECONCILE_CURSOR)
    cyrus.append(user=mailbox.user, subject="during a lost lease")
    lock = reconcile_lock(redis_client)
    assert await lock.acquire()
    await redis_client.set(keys.RECONCILE_LOCK, "someone-else")  # our lease expired, retaken
    with pytest.raises(LockLost):
        await Reconciler(redis_client, mailbox.client, lock, INBOX).run()
    assert await redis_client.get(keys.RECONCILE_CURSOR) == cursor
