"""A reply draft's life after it is made (issue #25; reference §7.13): its Send and Cancel
buttons (`press`, called by `pipeline.buttons` for a `DraftButton`), and its expiry
(`expire_drafts`, a loop of the serving instance: `run_draft_expiry`). Making the draft and
its preview is `pipeline.reply`; what Redis keeps of it is `store.drafts`.

One claim per draft, `button:d:{draft_id}` (`store.callbacks`, `CLAIM`), taken by a press or by
the expiry: a double press, Send then Cancel, or a Send while the expiry runs, does one of them.
It is finished when the draft settles (`_settle`: sent, cancelled or expired), kept through a
failure that may have sent (the entry's retry finds it and looks at the draft before sending),
and given back only when nothing happened.

The expiry runs beside the worker rather than inside it, each served account's drafts in its
own mailbox (issue #35), since it calls mailboxes, which must not hold up the worker's recovery.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from messageweave.aio import every
from messageweave.chat import texts
from messageweave.config.live import NotConfigured
from messageweave.config.model import BusinessConfig
from messageweave.mail.errors import MailError, MailRefused
from messageweave.mail.source import ReplySender
from messageweave.pipeline import reading
from messageweave.services import Services
from messageweave.store import callbacks, drafts, keys
from messageweave.store.keys import AccountKeys
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)

SEND, CANCEL = "d", "x"  # the draft's buttons' action letters (`pipeline.buttons.DraftButton`)
CLAIM = SEND  # both claim `button:d:{draft_id}`
EXPIRY_BATCH = 20
EXPIRY_OWNER = "expiry"  # who holds a draft's claim while the maintenance pass destroys it
DRAFT_EXPIRY_INTERVAL_S = 60.0


@dataclass(frozen=True)
class Done:
    """What a Send or Cancel press did: the press's notice, and a message for the chat."""

    notice: str
    message: str | None = None
    settled: bool = True  # the draft is no longer one: its preview's buttons go


# --- Send, Cancel ---------------------------------------------------------------------------


async def press(mail: Callable[[], Awaitable[ReplySender]], redis: Redis, names: AccountKeys,
                cfg: BusinessConfig, action: str, draft_id: str, *, chat_id: int,
                owner: str) -> Done:
    """Send (`SEND`) or Cancel the draft, pressed in `chat_id` by the stream entry `owner`:
    only in the chat that made it (and a configured one); claimed once per draft. Raises
    `MailError` / `NotConfigured` when the mailbox cannot be reached (the claim is kept for
    the entry's retry)."""
    table = texts.table(cfg.bot_language)
    record = await drafts.record(redis, names, draft_id)
    if record is None or record.chat_id != chat_id or not reading.allowed(cfg, chat_id):
        return Done(table["notice_draft_gone"], settled=False)
    if record.outcome is not None:
        return Done(table["notice_sent" if record.outcome == "sent" else "notice_draft_gone"])
    claim = await callbacks.claim(redis, names, CLAIM, draft_id, owner)
    if claim != "claimed":
        return Done(table["notice_busy" if claim == "busy" else "notice_draft_gone"],
                    settled=False)
    source, now = await mail(), time.time()
    if action == SEND:
        done = await send(source, redis, names, cfg, draft_id, record, now=now)
    else:
        done = await cancel(source, redis, names, cfg, draft_id, now=now)
    if not done.settled:
        await callbacks.release(redis, names, CLAIM, draft_id, owner)
    return done


async def send(mailbox: ReplySender, redis: Redis, names: AccountKeys, cfg: BusinessConfig,
               draft_id: str, record: drafts.DraftRecord, *, now: float) -> Done:
    """Submit the draft, claimed (`button:d:`) by the caller. A retried press whose first
    attempt submitted it (the answer lost, the worker killed) finds it sent: `$draft` is gone
    (Cyrus keeps no final EmailSubmission to look up), and it is not submitted again."""
    table = texts.table(cfg.bot_language)
    if not await mailbox.can_submit():
        return Done(table["reply_off"], settled=False)
    state = await mailbox.draft_state(draft_id)
    if state is None:
        await _settle(redis, names, draft_id, "cancelled", now)
        return Done(table["notice_draft_gone"])
    sent_at: str | None = None
    if state == "draft":
        try:
            sent_at = await mailbox.submit_draft(draft_id, record.identity_id)
        except MailRefused as exc:
            log.warning("a reply's submission was refused: %s", exc.reason)
            return Done(table["notice_send_refused"].format(reason=exc.reason), settled=False)
        log.info("a reply was submitted")
    at = sent_at or _rfc3339(now)
    await _settle(redis, names, draft_id, "sent", now, at)
    when = reading.local_date(at, cfg.timezone) or at
    return Done(table["notice_reply_sent"], table["reply_sent"].format(time=when))


async def cancel(mailbox: ReplySender, redis: Redis, names: AccountKeys, cfg: BusinessConfig,
                 draft_id: str, *, now: float) -> Done:
    """Destroy the draft (claimed by the caller); a mail that is no longer a draft (sent
    meanwhile) is left alone."""
    table = texts.table(cfg.bot_language)
    state = await mailbox.draft_state(draft_id)
    if state == "sent":
        await _settle(redis, names, draft_id, "sent", now)
        return Done(table["notice_sent"])
    if state == "draft":
        await mailbox.destroy_draft(draft_id)
    await _settle(redis, names, draft_id, "cancelled", now)
    return Done(table["notice_cancelled"])


async def _settle(redis: Redis, names: AccountKeys, draft_id: str, outcome: drafts.DraftEnd,
                  now: float, at: str | None = None) -> None:
    """What became of the draft, recorded; its claim finished (a later press finds it done)."""
    await drafts.settle(redis, names, draft_id, outcome, at or _rfc3339(now))
    await callbacks.finish(redis, names, CLAIM, draft_id)


def _rfc3339(unix: float) -> str:
    return dt.datetime.fromtimestamp(int(unix), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- expiry ---------------------------------------------------------------------------------


async def expire_drafts(redis: Redis, names: AccountKeys,
                        mail: Callable[[], Awaitable[ReplySender]], *, now: float) -> int:
    """Destroy the account's drafts (`names`, whose mailbox `mail` is) made more than
    `REPLY_DRAFT_MAX_AGE_S` ago and never sent; how many were. Each is taken out of the
    account's `reply:drafts` by one instance (ZREM) and claimed like a press, so a Send under
    way keeps it; when the mailbox cannot be reached it is put back for the next pass."""
    done = 0
    for draft_id, created in await drafts.older_than(redis, names, now - keys.REPLY_DRAFT_MAX_AGE_S,
                                                     EXPIRY_BATCH):
        if not await drafts.take(redis, names, draft_id):
            continue  # another instance has it
        claim = await callbacks.claim(redis, names, CLAIM, draft_id, EXPIRY_OWNER)
        if claim != "claimed":
            if claim == "busy":
                await drafts.put_back(redis, names, draft_id, created)
            continue
        try:
            mailbox = await mail()
            state = await mailbox.draft_state(draft_id)
            if state == "draft":
                await mailbox.destroy_draft(draft_id)
        except (MailError, NotConfigured) as exc:
            await callbacks.release(redis, names, CLAIM, draft_id, EXPIRY_OWNER)
            await drafts.put_back(redis, names, draft_id, created)
            log.warning("an old reply draft could not be destroyed: %s", type(exc).__name__)
            return done
        await _settle(redis, names, draft_id, "sent" if state == "sent" else "expired", now)
        done += 1
    return done


async def expire_every_account(svc: Services, now: float) -> None:
    """Every served account's drafts older than a day at `now`, each in its own mailbox."""
    for account in svc.accounts.served():
        view = svc.for_account(account)
        await expire_drafts(view.redis, view.keys, view.mail, now=now)


async def run_draft_expiry(svc: Services) -> None:
    """`expire_every_account` every `DRAFT_EXPIRY_INTERVAL_S` until stopped; a failed pass is
    logged and the next one tries again (a mailbox out of reach puts its drafts back)."""
    await every(DRAFT_EXPIRY_INTERVAL_S, lambda: expire_every_account(svc, time.time()), log,
                "reply draft expiry")
