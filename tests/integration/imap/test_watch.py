"""`ImapWatch` (issue #33, SPEC Part F.2), the IMAP `MailWatch`, against the real Dovecot and
Cyrus's imapd on the real Redis: its catch-up maps onto `Progress` and the source-neutral
errors, and its gap audit finds nothing missing after a burst, leaves mail the catch-up has not
reached to it, and re-enqueues once a mail whose claim was deleted."""

from __future__ import annotations

import email.message
import email.policy
import time

import pytest
import redis.asyncio as aioredis

from messageweave.mail.errors import MailAuthError, MailUnreachable
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.ids import mail_id
from messageweave.mail.imap.watch import ImapWatch
from messageweave.mail.passes import ReconcileBusy
from messageweave.store import keys
from messageweave.store.reconcile_state import reconcile_lock
from tests.helpers import eventually, free_port
from tests.integration.imap.conftest import ImapPeer

WINDOW_S = 3600
ROLES = ("inbox",)  # JMAP's: an IMAP watch reads its mailboxes from the configuration


def _raw(subject: str) -> bytes:
    msg = email.message.EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = "Bob <bob@example.org>", "alice@localhost", subject
    msg.set_content(f"the body of {subject}")
    return msg.as_bytes(policy=email.policy.SMTP)


def _watch(peer: ImapPeer, **client: object) -> ImapWatch:
    return ImapWatch(lambda: peer.client(**client), ["INBOX"], peer.user)  # type: ignore[arg-type]


async def _past_the_baseline(redis: aioredis.Redis) -> None:
    """Mail of the baseline's own second is not audited (strictly after): deliver after it,
    with a second to spare. Cyrus's LMTP stamps INTERNALDATE up to a second behind our clock on
    a busy machine (seen: a mail delivered once `time.time()` had passed baseline + 1 stamped
    with the baseline's second, so the audit rightly left it out and checked 5 of 6)."""
    baseline = int(await redis.get(keys.RECONCILE_BASELINE) or 0)

    async def past() -> bool:
        return time.time() >= baseline + 2

    await eventually(past, "the clock past the baseline's second")


async def _inbox_ids(peer: ImapPeer) -> list[str]:
    async with peer.client() as c:
        state = await c.select("INBOX", readonly=True)
        return [mail_id("INBOX", state.uidvalidity, u) for u in await c.uid_search("ALL")]


async def test_the_audit_finds_nothing_missing_after_a_burst(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches an IMAP audit that reports mail the catch-up enqueued as missing (a wrong id,
    a wrong account in the claim key) or re-enqueues it; and one that lists mail from before
    the first pass (never meant to be notified)."""
    imap_peer.deliver(_raw("already there"))
    watch = _watch(imap_peer)
    first = await watch.catch_up(redis_client, ROLES)
    assert first.phase == "first_run" and first.enqueued == 0
    await _past_the_baseline(redis_client)
    for n in range(6):
        imap_peer.deliver(_raw(f"burst {n}"))
    seen = []
    progress = await watch.catch_up(redis_client, ROLES, on_progress=seen.append)
    assert progress.enqueued == 6 and progress.complete and seen == [progress]

    result = await watch.audit(redis_client, ROLES, WINDOW_S)
    assert result.answer() == {"checked": 6, "missing": 0, "enqueued": 0}
    assert result.undiscovered == 0 and result.complete
    assert await redis_client.xlen(keys.STREAM_JMAP) == 6


async def test_the_audit_re_enqueues_once_a_mail_whose_claim_was_deleted(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches a lost claim left unnoticed (the mail then has no notification and nobody owns
    it), a healed mail re-enqueued at every audit, and mail the catch-up has not reached yet
    counted as missing (a false alarm at every audit)."""
    watch = _watch(imap_peer)
    await watch.catch_up(redis_client, ROLES)
    await _past_the_baseline(redis_client)
    imap_peer.deliver(_raw("one"))
    imap_peer.deliver(_raw("two"))
    await watch.catch_up(redis_client, ROLES)
    one, two = await _inbox_ids(imap_peer)

    imap_peer.deliver(_raw("not reached yet"))
    pending = await watch.audit(redis_client, ROLES, WINDOW_S)
    assert pending.answer() == {"checked": 2, "missing": 0, "enqueued": 0}
    assert pending.undiscovered == 1

    await redis_client.delete(keys.dedup_jmap(imap_peer.user, two))
    healed = await watch.audit(redis_client, ROLES, WINDOW_S)
    assert healed.answer() == {"checked": 2, "missing": 1, "enqueued": 1}
    assert healed.missing_ids == [two]
    queued = [f["email_id"] for _, f in await redis_client.xrange(keys.STREAM_JMAP)]
    assert queued == [one, two, two]

    assert (await watch.audit(redis_client, ROLES, WINDOW_S)).missing == 0  # owned again
    await redis_client.delete(keys.dedup_jmap(imap_peer.user, two))
    again = await watch.audit(redis_client, ROLES, WINDOW_S)
    assert again.answer() == {"checked": 2, "missing": 1, "enqueued": 0}  # once only
    assert await redis_client.xlen(keys.STREAM_JMAP) == 3


async def test_an_audit_before_the_first_pass_audits_nothing(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches an audit that runs before the catch-up's first pass: every mail already in the
    mailbox would be re-enqueued as missing (Part C.2: none of it is notified)."""
    imap_peer.deliver(_raw("before everything"))
    result = await _watch(imap_peer).audit(redis_client, ROLES, WINDOW_S)
    assert result.since is None and result.checked == 0
    assert await redis_client.xlen(keys.STREAM_JMAP) == 0


async def test_the_catch_up_speaks_the_source_neutral_errors(
    imap_peer: ImapPeer, redis_client: aioredis.Redis,
) -> None:
    """Catches the IMAP client's own errors escaping the watch (the scheduler, `POST
    /reconcile` and the auditor catch `MailError` and `ReconcileBusy` only: anything else
    kills their tick or answers 500)."""
    lock = reconcile_lock(redis_client)
    assert await lock.acquire()
    with pytest.raises(ReconcileBusy):
        await _watch(imap_peer).catch_up(redis_client, ROLES)
    await lock.release()
    with pytest.raises(MailAuthError):
        await _watch(imap_peer, password="wrong").catch_up(redis_client, ROLES)
    port = free_port()  # nothing listens there
    closed = ImapWatch(lambda: ImapClient(
        "127.0.0.1", port, username="u", password="p", security=imap_peer.security,
        ssl_context=imap_peer.ssl_context, timeout=3), ["INBOX"], "u")
    with pytest.raises(MailUnreachable):
        await closed.catch_up(redis_client, ROLES)
    await redis_client.hset(keys.IMAP_CURSOR, "INBOX", "1:1:")  # a first pass an hour ago
    await redis_client.set(keys.RECONCILE_BASELINE, int(time.time()) - 3600)
    with pytest.raises(MailUnreachable):
        await closed.audit(redis_client, ROLES, WINDOW_S)
