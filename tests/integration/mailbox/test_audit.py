"""The gap auditor against the real Cyrus JMAP server and a real Redis (no worker runs here, so
each test decides what the pipeline did with an entry, the way the ledger contract says)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio as aioredis

from messageweave.mail.gap_audit import AuditResult, audit
from messageweave.mail.reconcile import encode_walk, reconcile
from messageweave.store import gaps, keys
from messageweave.store.redis import open_redis
from tests.helpers import FreshUser, enqueue_mail
from tests.peers.cyrus import CyrusServer

INBOX = ("inbox",)
WINDOW = 86_400
HOUR_AGO = time.time() - 3600
CONSUMER = "test-consumer"


async def first_run(redis: aioredis.Redis, mailbox: FreshUser) -> None:
    """The reconcile's first run, then the baseline moved 2 s back: receivedAt has a 1 s
    resolution, so mail appended in the very second of a first run is (by design) not audited;
    the tests append right away."""
    result = await reconcile(redis, mailbox.client, INBOX)
    assert result.phase == "first_run"
    baseline = await redis.get(keys.RECONCILE_BASELINE)
    assert baseline is not None
    await redis.set(keys.RECONCILE_BASELINE, int(baseline) - 2)


async def run(redis: aioredis.Redis, mailbox: FreshUser, **kw: int) -> AuditResult:
    return await audit(redis, mailbox.client, INBOX, kw.pop("window", WINDOW), **kw)


def counts(result: AuditResult) -> tuple[int, int, int]:
    return result.checked, result.missing, result.enqueued


async def entries_for(redis: aioredis.Redis, email_id: str) -> list[str]:
    return [entry_id for entry_id, fields in await redis.xrange(keys.STREAM_JMAP)
            if fields["email_id"] == email_id]


async def claim_of(redis: aioredis.Redis, mailbox: FreshUser, email_id: str) -> str | None:
    value: str | None = await redis.get(keys.dedup_jmap(mailbox.client.account_id, email_id))
    return value


async def skip_past(redis: aioredis.Redis, mailbox: FreshUser) -> None:
    """Lose the discovery of everything appended so far: the cursor jumps to the current
    state, as if a pass had saved it without enqueuing the page."""
    await redis.set(keys.RECONCILE_CURSOR, await mailbox.client.email_state())


async def read_all(redis: aioredis.Redis) -> list[str]:
    """A worker reads every new entry (pending in the group, not acknowledged)."""
    await redis.xgroup_create(keys.STREAM_JMAP, keys.CONSUMER_GROUP, id="0", mkstream=True)
    reply = await redis.xreadgroup(keys.CONSUMER_GROUP, CONSUMER, {keys.STREAM_JMAP: ">"})
    return [entry_id for _stream, rows in reply for entry_id, _fields in rows]


async def finish(redis: aioredis.Redis, entry_id: str, state: str) -> None:
    """What the ledger does when an entry is finished: the terminal record, then the ack."""
    await redis.set(keys.delivery_committed(keys.STREAM_JMAP, entry_id),
                    json.dumps({"state": state}), ex=keys.COMMITTED_TTL_S)
    await redis.xack(keys.STREAM_JMAP, keys.CONSUMER_GROUP, entry_id)


# ------------------------------------------------------------------------------ claims


async def test_the_reconcile_claim_names_its_entry_and_lives_seven_days(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches a claim that still holds "1" (the auditor could not follow the mail to its
    entry) or keeps the 24 h TTL (it would expire inside a 6-day window and the mail would
    read as missing and be notified again)."""
    await first_run(redis_client, mailbox)
    new = cyrus.append(user=mailbox.user, subject="claimed")
    await reconcile(redis_client, mailbox.client, INBOX)
    [entry] = await entries_for(redis_client, new.email_id)
    key = keys.dedup_jmap(mailbox.client.account_id, new.email_id)
    assert await redis_client.get(key) == entry
    assert keys.DEDUP_TTL_S < await redis_client.ttl(key) <= keys.DEDUP_JMAP_TTL_S == 604_800
    assert await enqueue_mail(redis_client, mailbox.client.account_id, new.email_id) is None


async def test_the_first_run_records_the_baseline(
    mailbox: FreshUser, redis_client: aioredis.Redis
) -> None:
    """Catches a first run that does not record when the mailbox started being watched (the
    auditor would have no lower bound and flag every older mail)."""
    before = time.time()
    await reconcile(redis_client, mailbox.client, INBOX)
    baseline = int(await redis_client.get(keys.RECONCILE_BASELINE))
    assert before <= baseline <= time.time() + 1
    await reconcile(redis_client, mailbox.client, INBOX)  # later passes leave it alone
    assert int(await redis_client.get(keys.RECONCILE_BASELINE)) == baseline


# ------------------------------------------------------------------------------ found


async def test_a_mail_skipped_by_the_cursor_is_found_and_enqueued_once(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches the gap the auditor exists for: Email/changes moved past a mail that was never
    enqueued. It must be found, enqueued exactly once, and a second audit must not add it
    again."""
    await first_run(redis_client, mailbox)
    lost = cyrus.append(user=mailbox.user, subject="skipped by the cursor")
    await skip_past(redis_client, mailbox)
    assert (await reconcile(redis_client, mailbox.client, INBOX)).enqueued == 0

    result = await run(redis_client, mailbox)
    assert counts(result) == (1, 1, 1)
    assert result.missing_ids == [lost.email_id] and result.reasons == {"unclaimed": 1}
    [entry] = await entries_for(redis_client, lost.email_id)
    assert await claim_of(redis_client, mailbox, lost.email_id) == entry
    [(_, fields)] = await redis_client.xrange(keys.STREAM_JMAP)
    assert fields == {"account_id": mailbox.client.account_id, "email_id": lost.email_id}

    assert counts(await run(redis_client, mailbox)) == (1, 0, 0)
    assert await entries_for(redis_client, lost.email_id) == [entry]


async def test_an_entry_deleted_before_a_worker_read_it_is_missing(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches a check that trusts the claim alone: the mail was enqueued, but its entry was
    deleted (or trimmed) before any worker read it, so nobody will ever deliver it."""
    await first_run(redis_client, mailbox)
    mail = cyrus.append(user=mailbox.user, subject="entry deleted")
    await reconcile(redis_client, mailbox.client, INBOX)
    [entry] = await entries_for(redis_client, mail.email_id)
    await redis_client.xdel(keys.STREAM_JMAP, entry)

    result = await run(redis_client, mailbox)
    assert counts(result) == (1, 1, 1) and result.reasons == {"lost": 1}
    [again] = await entries_for(redis_client, mail.email_id)
    assert again != entry and await claim_of(redis_client, mailbox, mail.email_id) == again


async def test_an_entry_acknowledged_without_a_terminal_record_is_missing(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches a check that counts "read by the group" as done: an entry acked with no
    terminal record was never finished (the contract writes the record with the ack)."""
    await first_run(redis_client, mailbox)
    mail = cyrus.append(user=mailbox.user, subject="acked, no record")
    await reconcile(redis_client, mailbox.client, INBOX)
    [entry] = await read_all(redis_client)
    await redis_client.xack(keys.STREAM_JMAP, keys.CONSUMER_GROUP, entry)
    result = await run(redis_client, mailbox)
    assert counts(result) == (1, 1, 1) and result.reasons == {"lost": 1}
    assert result.missing_ids == [mail.email_id]


# ------------------------------------------------------------------------------ not missing


@pytest.mark.parametrize("state", ["delivered", "dead_letter", "unknown", "skipped"])
async def test_a_finished_mail_is_not_missing(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis, state: str
) -> None:
    """Catches an auditor that re-sends finished mail: a terminal record of any state
    (delivered, dead-lettered, not resent by policy, deliberately skipped) ends the entry,
    even after the stream was trimmed."""
    await first_run(redis_client, mailbox)
    cyrus.append(user=mailbox.user, subject=f"finished: {state}")
    await reconcile(redis_client, mailbox.client, INBOX)
    [entry] = await read_all(redis_client)
    await finish(redis_client, entry, state)
    await redis_client.xtrim(keys.STREAM_JMAP, maxlen=0)
    assert counts(await run(redis_client, mailbox)) == (1, 0, 0)
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0


async def test_queued_and_pending_entries_are_still_the_pipelines(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches an auditor that steals work in progress: an entry not read yet (with or
    without a consumer group) or read and pending (inflight, waiting for a retry) is owned by
    the pipeline and must not be enqueued again."""
    await first_run(redis_client, mailbox)
    cyrus.append(user=mailbox.user, subject="queued before any worker")
    await reconcile(redis_client, mailbox.client, INBOX)
    assert counts(await run(redis_client, mailbox)) == (1, 0, 0)  # no group yet

    [pending] = await read_all(redis_client)
    cyrus.append(user=mailbox.user, subject="queued after the group")
    await reconcile(redis_client, mailbox.client, INBOX)
    await redis_client.zadd(keys.retry_due(keys.STREAM_JMAP), {pending: time.time() * 1000})
    result = await run(redis_client, mailbox)
    assert counts(result) == (2, 0, 0)
    assert await redis_client.xlen(keys.STREAM_JMAP) == 2


async def test_mail_the_reconcile_has_not_reached_yet_is_left_to_it(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches false alarms: mail that arrived since the last pass has no claim yet; calling
    it missing would flag (and race) every new mail on every audit."""
    await first_run(redis_client, mailbox)
    new = cyrus.append(user=mailbox.user, subject="not reconciled yet")
    result = await run(redis_client, mailbox)
    assert counts(result) == (0, 0, 0) and result.undiscovered == 1
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0
    assert (await reconcile(redis_client, mailbox.client, INBOX)).enqueued == 1
    assert counts(await run(redis_client, mailbox)) == (1, 0, 0)
    assert len(await entries_for(redis_client, new.email_id)) == 1


@pytest.mark.parametrize("cursor", ["refused", "walk", "unreadable"])
async def test_while_the_reconcile_must_walk_it_keeps_mail_after_the_watermark(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis, cursor: str
) -> None:
    """Catches a listing of undiscovered mail that gives up when the cursor cannot be
    replayed (a state the server refuses, a walk in progress, a walk cursor that does not
    decode): the walk will enqueue what came after the watermark, so the auditor leaves it."""
    await first_run(redis_client, mailbox)
    await redis_client.set(keys.RECONCILE_WATERMARK, int(time.time()) - 3)
    state = await mailbox.client.email_state()
    cyrus.append(user=mailbox.user, subject="after the watermark")
    value = {"refused": "not-a-state", "walk": encode_walk(state, 0),
             "unreadable": "baseline:zz:1"}[cursor]
    await redis_client.set(keys.RECONCILE_CURSOR, value)
    result = await run(redis_client, mailbox)
    assert counts(result) == (0, 0, 0) and result.undiscovered == 1
    await reconcile(redis_client, mailbox.client, INBOX)  # walks it
    assert counts(await run(redis_client, mailbox)) == (1, 0, 0)
    assert await redis_client.xlen(keys.STREAM_JMAP) == 1


async def test_mail_before_the_baseline_is_never_audited(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches an auditor that notifies the mail that was already in the mailbox at the first
    run (never notified by design), whether received an hour or a moment before it."""
    cyrus.append(user=mailbox.user, subject="an hour before", received_at=HOUR_AGO)
    cyrus.append(user=mailbox.user, subject="just before")
    await reconcile(redis_client, mailbox.client, INBOX)
    result = await run(redis_client, mailbox)
    assert counts(result) == (0, 0, 0) and result.undiscovered == 0
    assert result.since == int(await redis_client.get(keys.RECONCILE_BASELINE))
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0


async def test_mail_older_than_the_window_is_not_audited(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches a window that is ignored: only mail received within `audit_window_s` counts."""
    await reconcile(redis_client, mailbox.client, INBOX)
    await redis_client.set(keys.RECONCILE_BASELINE, int(time.time()) - 10 * 3600)
    cyrus.append(user=mailbox.user, subject="two hours old", received_at=time.time() - 7200)
    cyrus.append(user=mailbox.user, subject="fresh")
    await skip_past(redis_client, mailbox)
    assert counts(await run(redis_client, mailbox, window=3600)) == (1, 1, 1)
    assert counts(await run(redis_client, mailbox, window=3 * 3600)) == (2, 1, 1)


async def test_mail_outside_the_notify_mailboxes_is_not_audited(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches an auditor with its own idea of what notifies: mail in Junk, Sent, Drafts or
    Trash (or moved there) is never notified by the reconcile, so it is never missing."""
    await first_run(redis_client, mailbox)
    for box in ("Junk", "Sent", "Drafts", "Trash"):
        cyrus.append(user=mailbox.user, mailbox=box, subject=f"in {box}")
    binned = cyrus.append(user=mailbox.user, subject="read, then binned")
    cyrus.move_to_trash(binned)
    await skip_past(redis_client, mailbox)
    assert counts(await run(redis_client, mailbox)) == (0, 0, 0)
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0


async def test_mail_moved_into_the_inbox_after_the_reconcile_saw_it_elsewhere_is_not_missing(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches the auditor contradicting the reconcile: a mail created in Junk is (by the
    contract) never notified, even once the owner moves it into the inbox; without the
    reconcile's `not_notified` claim the auditor reported it missing and notified it."""
    await first_run(redis_client, mailbox)
    junk = cyrus.append(user=mailbox.user, mailbox="Junk", subject="not spam after all")
    seen = await reconcile(redis_client, mailbox.client, INBOX)
    assert seen.enqueued == 0
    assert await claim_of(redis_client, mailbox, junk.email_id) == "not_notified"
    cyrus.move(junk, "INBOX")
    again = await reconcile(redis_client, mailbox.client, INBOX)
    assert again.enqueued == 0  # an update, not a creation
    result = await run(redis_client, mailbox)
    assert counts(result) == (1, 0, 0)
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0


# ------------------------------------------------------------------------------ at most once


async def test_two_audits_and_a_reconcile_at_once_enqueue_each_mail_once(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches a check and an enqueue that are two steps: concurrent audits (and a reconcile
    pass enqueuing new mail meanwhile) must still leave exactly one entry per mail."""
    await first_run(redis_client, mailbox)
    lost = [cyrus.append(user=mailbox.user, subject=f"lost {i}").email_id for i in range(4)]
    await skip_past(redis_client, mailbox)
    fresh = [cyrus.append(user=mailbox.user, subject=f"fresh {i}").email_id for i in range(3)]
    results = await asyncio.gather(run(redis_client, mailbox), run(redis_client, mailbox),
                                   reconcile(redis_client, mailbox.client, INBOX))
    assert sum(r.enqueued for r in results[:2]) == 4
    for email_id in lost + fresh:
        assert len(await entries_for(redis_client, email_id)) == 1, email_id
    assert await redis_client.xlen(keys.STREAM_JMAP) == 7
    assert counts(await run(redis_client, mailbox)) == (7, 0, 0)


async def test_the_auditor_re_enqueues_a_mail_at_most_once(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches a self-heal loop: when the auditor's own entry is lost again (something
    downstream keeps dropping it), the mail is reported missing again but not re-enqueued on
    every run."""
    await first_run(redis_client, mailbox)
    mail = cyrus.append(user=mailbox.user, subject="dropped twice")
    await skip_past(redis_client, mailbox)
    assert counts(await run(redis_client, mailbox)) == (1, 1, 1)
    [healed] = await entries_for(redis_client, mail.email_id)
    assert await redis_client.get(
        keys.audit_healed(mailbox.client.account_id, mail.email_id)) == healed
    await redis_client.xdel(keys.STREAM_JMAP, healed)
    again = await run(redis_client, mailbox)
    assert counts(again) == (1, 1, 0) and again.missing_ids == [mail.email_id]
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0


async def test_the_reconcile_and_the_audit_claims_race_to_one_entry_on_both_redis_versions(
    any_redis_url: str,
) -> None:
    """Catches a script that is not atomic or does not run on both servers (XINFO GROUPS and
    XPENDING inside Lua, Redis 6.2 and 7.0): 40 mails claimed by the reconcile's script and
    the auditor's at the same time end with one entry each."""
    redis = await open_redis(any_redis_url)
    try:
        await redis.flushdb()
        await redis.xgroup_create(keys.STREAM_JMAP, keys.CONSUMER_GROUP, id="0", mkstream=True)
        ids = [f"M{n:04d}" for n in range(40)]
        jobs = [enqueue_mail(redis, "acct", i) for i in ids]
        jobs += [gaps.check_and_claim(redis, "acct", ids[n:n + 7]) for n in range(0, 40, 7)]
        jobs += [gaps.check_and_claim(redis, "acct", list(reversed(ids)))]
        await asyncio.gather(*jobs)
        rows = await redis.xrange(keys.STREAM_JMAP)
        assert sorted(fields["email_id"] for _, fields in rows) == ids
        verdicts = await gaps.check_and_claim(redis, "acct", ids)
        assert {(v.missing, v.detail) for v in verdicts} == {(False, "unread")}
        await redis.xreadgroup(keys.CONSUMER_GROUP, CONSUMER, {keys.STREAM_JMAP: ">"})
        verdicts = await gaps.check_and_claim(redis, "acct", ids)
        assert {(v.missing, v.detail) for v in verdicts} == {(False, "pending")}
    finally:
        await redis.flushdb()
        await redis.aclose()


# ------------------------------------------------------------------------------ upgrades


async def test_a_claim_from_before_the_upgrade_counts_as_present(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches an upgrade that re-notifies recent mail: a claim written by the previous
    version holds "1", not an entry id, and cannot be followed; it is not missing."""
    await first_run(redis_client, mailbox)
    mail = cyrus.append(user=mailbox.user, subject="claimed by the old version")
    await skip_past(redis_client, mailbox)
    await redis_client.set(keys.dedup_jmap(mailbox.client.account_id, mail.email_id), "1")
    assert counts(await run(redis_client, mailbox)) == (1, 0, 0)


async def test_an_install_without_a_baseline_starts_one_and_audits_nothing_before_it(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches an upgrade that audits the whole window at once: an install whose first run
    predates the baseline key has old-style claims; the baseline starts at the first audit."""
    await reconcile(redis_client, mailbox.client, INBOX)
    cyrus.append(user=mailbox.user, subject="before the upgrade")
    await skip_past(redis_client, mailbox)
    await redis_client.delete(keys.RECONCILE_BASELINE)
    before = time.time()
    result = await run(redis_client, mailbox)
    assert counts(result) == (0, 0, 0) and result.baseline_started
    assert int(await redis_client.get(keys.RECONCILE_BASELINE)) >= before
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0


async def test_nothing_is_audited_before_the_first_reconcile(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches an audit that runs ahead of discovery: with no first run, no mail was meant to
    be notified yet (and no baseline is invented)."""
    cyrus.append(user=mailbox.user, subject="before anything")
    result = await run(redis_client, mailbox)
    assert result.since is None and counts(result) == (0, 0, 0)
    assert await redis_client.get(keys.RECONCILE_BASELINE) is None


async def test_one_audit_lists_at_most_its_bound_newest_first(
    mailbox: FreshUser, cyrus: CyrusServer, redis_client: aioredis.Redis
) -> None:
    """Catches an unbounded listing: an audit looks at `max_emails` mails (the newest), says
    it is incomplete, and a later run with room covers the rest."""
    await first_run(redis_client, mailbox)
    now = time.time()
    ids = [cyrus.append(user=mailbox.user, subject=f"bulk {i}", received_at=now + i).email_id
           for i in range(5)]
    await skip_past(redis_client, mailbox)
    result = await run(redis_client, mailbox, max_emails=3)
    assert counts(result) == (3, 3, 3) and not result.complete
    assert sorted(result.missing_ids) == sorted(ids[2:])
    rest = await run(redis_client, mailbox)
    assert counts(rest) == (5, 2, 2) and rest.complete
