"""Where is my mail? (issue #15): every step the system recorded for one mail, read from what
the dedup claim, the ledger, the send log and the audit log already hold. It writes nothing and
reads no mail body: of the mailbox (the live `mail.source.MailSource`) it asks only a mail's
brief metadata (sender, subject, date, mailboxes) and which mailboxes notify.

A query shaped like an email id (`[A-Za-z0-9_-]`, as JMAP's, RFC 8620 §1.2, and an IMAP
source's are) that the mailbox or the claims know is traced directly; anything else is a
subject search (`MailReader.subject_matches`, newest first, `MAX_MATCHES` mails), each match
traced. The steps of a mail, oldest first (typed records, one class per kind:
`pipeline.trace_steps`):

- `received`: its `receivedAt` (from the mailbox);
- `seen`: the claim `dedup:jmap:{account}:{email}` — written with the entry it enqueued, by the
  reconcile (`via` `push` when the last StateChange came `PUSH_HINT_S` before it, else
  `reconcile`) or by the gap auditor (`gap_audit`: `audit:healed` names the same entry); a claim
  `not_notified` = seen outside the notify mailboxes;
- `audit_missing`: a `gap_audit` audit record that found the mail missing;
- `enqueued`: its `stalwart:jmap` entry; then one `attempt` per send-log record of it;
- `delivered` (Telegram `message_ids`), `dead_letter` (with the DLQ reason while it is there),
  `unknown` (not resent), `skipped` (muted by the rule `rule`): its terminal record;
  `unknown_after_send`: a send whose outcome was lost; `replayed`: the dead letter put back as
  a new entry, whose steps follow;
- a mail that went out in a backlog digest entry (issue #16, `pipeline.digest`): its
  `delivered` step has `digest` (`message`: which of the entry's `of` messages held it, `mails`:
  how many that message covered, `summary`: a digest message rather than its own notification)
  and, when the entry's message ids line up with its plan, only that message's id; a mail the
  digest left out ends `skipped` (muted by the rule `rule`) or `left_out` (no longer in the
  mailbox when the digest was made);
- while unfinished: `in_flight`, `retry_due` (the next attempt), `queued`, or `lost` (gone
  without a terminal record: the gap auditor re-enqueues it).

A mail without a claim says why, as far as the system can tell (`reason`): `not_in_mailbox`,
`outside_notify_mailboxes`, `older_than_dedup_window`, `before_first_reconcile`, `not_seen_yet`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from typing import Any

from messageweave.config.live import NotConfigured
from messageweave.mail.context import MailContext
from messageweave.mail.errors import MailError
from messageweave.mail.gap_audit import GAP_AUDIT
from messageweave.mail.records import EmailMeta
from messageweave.mail.source import MailReader
from messageweave.ops.sendlog import Outcome
from messageweave.pipeline.digest import load_plan
from messageweave.pipeline.trace_steps import (
    Attempt,
    AuditMissing,
    DeadLetter,
    Delivered,
    DigestPlace,
    Enqueued,
    InFlight,
    LeftOut,
    Lost,
    MailTrace,
    OutcomeUnknown,
    Queued,
    Received,
    Replayed,
    RetryDue,
    Seen,
    Skipped,
    Trace,
    TraceStep,
    UnknownAfterSend,
    at,
    iso,
)
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.mail_entries import NOT_NOTIFIED
from messageweave.store.oplog import audit_log, send_log, valid_stream_id
from messageweave.store.redis import Redis, int_of, text_of
from messageweave.store.streams import StreamStore, stream_name

MAX_QUERY = 200  # characters of a query
MAX_MATCHES = 5  # mails a subject search traces
MAX_REPLAYS = 3  # replays of one dead letter followed
PUSH_HINT_S = 30
_EMAIL_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")
_STREAM_NAME = stream_name(keys.STREAM_JMAP)  # as the send log and the steps name it
LEFT_OUT = LeftOut.kind  # a digest left the mail out: no longer in the mailbox (issue #16)


class QueryInvalid(ValueError):
    """An empty query, or one longer than `MAX_QUERY`."""


def normalize(query: str) -> str:
    """The query with its whitespace collapsed; `QueryInvalid` when empty or too long."""
    text = " ".join(query.split())
    if not text or len(text) > MAX_QUERY:
        raise QueryInvalid(query)
    return text


async def trace(ctx: MailContext, query: str) -> Trace:
    """The mails the query names, each with its steps (`Trace.json()`: `{query, by, jmap,
    found, mails: [{email_id, subject, received_at, seen, status, reason, steps}]}`); `found`
    when the system saw at least one of the mails. `QueryInvalid`;
    `NotConfigured`; a `MailError` only when the mailbox is needed and does not answer (a
    subject search, or no `account_id` configured)."""
    text = normalize(query)
    cfg = ctx.config.config
    if cfg is None:
        raise NotConfigured
    client: MailReader | None = None
    jmap = "ok"
    try:
        client = await ctx.mail()
        account = client.account_id
    except MailError as exc:
        if not cfg.account_id:
            raise
        jmap, account = type(exc).__name__, cfg.account_id
    by, targets = await _targets(ctx.redis, client, account, text, ctx.keys)
    notify = await _notify_boxes(client, cfg.notify_mailbox_roles, targets)
    mails = [await _mail(ctx.redis, ctx.keys, account, email_id, meta, notify,
                         client is not None)
             for email_id, meta in targets]
    return Trace(text, by, jmap, any(m.seen for m in mails), mails)


async def _targets(redis: Redis, client: MailReader | None, account: str, text: str,
                   names: AccountKeys) -> tuple[str, list[tuple[str, EmailMeta | None]]]:
    """The mails to trace: an id the mailbox or a claim knows, else the subject's matches,
    else (a query shaped like an id) that id, unseen."""
    looks_like_id = _EMAIL_ID.fullmatch(text) is not None
    if looks_like_id:
        found = await client.metas([text], brief=True) if client else []
        if found or await redis.exists(names.dedup_jmap(account, text)):
            return "email_id", [(text, found[0] if found else None)]
    if client is None:
        if looks_like_id:
            return "email_id", [(text, None)]
        raise MailError("a subject search needs the mailbox")
    matches = await client.subject_matches(text, MAX_MATCHES)
    if matches or not looks_like_id:
        return "subject", [(meta.id, meta) for meta in matches]
    return "email_id", [(text, None)]


async def _notify_boxes(client: MailReader | None, roles: tuple[str, ...],
                        targets: list[tuple[str, EmailMeta | None]]) -> frozenset[str] | None:
    """The ids of the mailboxes a new mail notifies from (as the reconcile decides), read only
    when a mail to trace has mailboxes to judge; None when unknown."""
    if client is None or not any(meta is not None for _, meta in targets):
        return None
    return await client.notify_mailbox_ids(roles)


# ----------------------------------------------------------------------------- one mail


def _entry_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


async def _mail(redis: Redis, names: AccountKeys, account: str, email_id: str,
                meta: EmailMeta | None, notify: frozenset[str] | None,
                mailbox_known: bool) -> MailTrace:
    steps: list[TraceStep] = []
    received = meta.received_at if meta is not None else None
    if received is not None:
        steps.append(Received(at(received * 1000)))
    claim_key = names.dedup_jmap(account, email_id)
    claim, healed = (text_of(v) for v in await redis.mget(
        claim_key, names.audit_healed(account, email_id)))
    steps += await _audit_steps(redis, names, email_id, received)
    status, reason = "seen", None
    if claim is None:
        status = "not_seen"
        reason = await _unseen_reason(redis, names, meta, notify, mailbox_known)
    elif not valid_stream_id(claim):
        claimed = await _claimed_at(redis, claim_key)
        steps.append(Seen(at(claimed), "reconcile", claim != NOT_NOTIFIED))
        if claim == NOT_NOTIFIED:
            status, reason = "not_notified", "outside_notify_mailboxes"
    else:
        via = "gap_audit" if healed == claim else await _via(redis, names, _entry_ms(claim))
        steps.append(Seen(_entry_ms(claim), via, True))
        status = await _entry_steps(redis, names, claim, steps, 0)
        if status == Outcome.DELIVERED:
            last, delivered = [(i, s) for i, s in enumerate(steps) if isinstance(s, Delivered)][-1]
            steps[last], status = await _digest_place(redis, names, email_id, delivered)
    steps.sort(key=lambda s: (s.at_ms is None, s.at_ms or 0))
    return MailTrace(email_id, meta.subject if meta is not None else None,
                     iso(received * 1000) if received is not None else None,
                     claim is not None, status, reason, steps)


async def _claimed_at(redis: Redis, key: str) -> float | None:
    ttl = int(await redis.ttl(key))
    if ttl < 0:
        return None
    return (time.time() - (keys.DEDUP_JMAP_TTL_S - ttl)) * 1000


async def _via(redis: Redis, names: AccountKeys, seen_ms: int) -> str:
    """`push` when the last StateChange came at most `PUSH_HINT_S` before the mail was seen
    (the push wakes the reconcile), else `reconcile`."""
    last = int_of(text_of(await redis.get(names.of(keys.PUSH_LAST_STATE_CHANGE))))
    if last is not None and 0 <= seen_ms / 1000 - last <= PUSH_HINT_S:
        return "push"
    return "reconcile"


async def _unseen_reason(redis: Redis, names: AccountKeys, meta: EmailMeta | None,
                         notify: frozenset[str] | None, mailbox_known: bool) -> str:
    if meta is None:
        return "not_in_mailbox" if mailbox_known else "not_seen_yet"
    if notify is not None and not meta.mailbox_ids & notify:
        return "outside_notify_mailboxes"
    received = meta.received_at
    if received is not None and received < time.time() - keys.DEDUP_JMAP_TTL_S:
        return "older_than_dedup_window"
    baseline = int_of(text_of(await redis.get(names.of(keys.RECONCILE_BASELINE))))
    if received is not None and baseline is not None and received < baseline:
        return "before_first_reconcile"
    return "not_seen_yet"


async def _audit_steps(redis: Redis, names: AccountKeys, email_id: str,
                       received: int | None) -> list[TraceStep]:
    """The account's gap audits that found this mail missing (from its arrival, or the dedup
    window); a record without `account` is `default`'s (`mail.gap_audit.run_audit`)."""
    start = received if received is not None else time.time() - keys.DEDUP_JMAP_TTL_S

    def keep(record: dict[str, Any]) -> bool:
        ids = record.get("email_ids")
        return (record.get("action") == GAP_AUDIT and isinstance(ids, list) and email_id in ids
                and record.get("account", keys.DEFAULT_ACCOUNT) == names.account_id)

    records = await audit_log(redis).since(int(start * 1000), keep, limit=20)
    return [AuditMissing(_entry_ms(r["id"]), r.get("trigger")) for r in records]


async def _digest_place(redis: Redis, names: AccountKeys, email_id: str,
                        step: Delivered) -> tuple[TraceStep, str]:
    """The `delivered` step of an entry that was a backlog digest: the message the mail went
    out in, or its being left out (muted, gone); and the mail's status. Another entry's step
    is left as it is."""
    plan = await load_plan(redis, step.entry_id, names)
    if plan is None:
        return step, Outcome.DELIVERED
    place = plan.place_of(email_id)
    if place is None:
        if email_id in plan.muted:
            return Skipped(step.at_ms, step.entry_id, plan.muted[email_id]), Outcome.SKIPPED
        return LeftOut(step.at_ms, step.entry_id), LEFT_OUT
    part = plan.parts[place]
    ids = step.message_ids or []
    if len(ids) == len(plan.parts):  # one Telegram message per part, all in this record
        step = replace(step, message_ids=[ids[place]])
    digest = DigestPlace(place + 1, len(plan.parts), len(part.email_ids), part.digest)
    return replace(step, digest=digest), Outcome.DELIVERED


# ----------------------------------------------------------------------------- one entry


def _terminal(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    record = value if isinstance(value, dict) else {}
    return {"state": Outcome.DELIVERED, **record}


def _terminal_ms(record: dict[str, Any], steps: list[TraceStep]) -> float | None:
    """The terminal record's time: it holds whole seconds, so never before the attempt that
    wrote it (the send log's millisecond time)."""
    at = record.get("at")
    if not isinstance(at, int | float):
        return None
    times = [float(s.at_ms) for s in steps if s.at_ms is not None]
    return max([float(at) * 1000, *times])


async def _entry_steps(redis: Redis, names: AccountKeys, entry_id: str,
                       steps: list[TraceStep], depth: int) -> str:
    """Append the steps of one entry of the account's `stalwart:jmap` (and of its replays);
    its status. A send-log record without `account` is `default`'s (`ops.sendlog`)."""
    streams = StreamStore(redis)
    stream = names.stream_jmap
    steps.append(Enqueued(_entry_ms(entry_id), _STREAM_NAME, entry_id))

    def mine(record: dict[str, Any]) -> bool:
        return (record.get("stream") == _STREAM_NAME and record.get("event_id") == entry_id
                and record.get("account", keys.DEFAULT_ACCOUNT) == names.account_id)

    for r in await send_log(redis).since(_entry_ms(entry_id), mine, limit=50):
        steps.append(Attempt(_entry_ms(r["id"]), entry_id, r.get("outcome"),
                             r.get("failure_class"), r.get("latency_ms"), r.get("message_ids")))
    for resolution in ("resent", "not_resent"):
        score = await redis.zscore(keys.DELIVERY_UNKNOWN, f"{stream}/{entry_id}/{resolution}")
        if score is not None:
            steps.append(UnknownAfterSend(at(score * 1000), entry_id, resolution))
    raw = text_of(await redis.get(keys.delivery_committed(stream, entry_id)))
    if raw is None:
        return await _live_steps(redis, streams, stream, entry_id, steps)
    record = _terminal(raw)
    state = str(record["state"])
    at_ms = at(_terminal_ms(record, steps))
    if state == Outcome.DEAD_LETTER:
        return await _dead_letter(redis, names, entry_id, record, at_ms, steps, depth)
    if state == Outcome.DELIVERED:
        steps.append(Delivered(at_ms, entry_id, record.get("message_ids", [])))
    elif state == Outcome.UNKNOWN:
        steps.append(OutcomeUnknown(at_ms, entry_id))
    elif state == Outcome.SKIPPED:  # the `mute` rule that matched
        steps.append(Skipped(at_ms, entry_id, record.get("rule")))
    return state


async def _dead_letter(redis: Redis, names: AccountKeys, entry_id: str,
                       record: dict[str, Any], at_ms: int | None,
                       steps: list[TraceStep], depth: int) -> str:
    streams, stream = StreamStore(redis), names.stream_jmap
    dlq_id = str(record.get("dlq_id") or "")
    held = await streams.dlq_entry(stream, dlq_id) if valid_stream_id(dlq_id) else None
    steps.append(DeadLetter(at_ms, entry_id, dlq_id or None, record.get("failure_class"),
                            record.get("attempts"), held is not None,
                            held.reason if held is not None else None))
    if held is not None or depth >= MAX_REPLAYS:
        return Outcome.DEAD_LETTER
    since = int(at_ms) if at_ms is not None else _entry_ms(entry_id)
    replay = await streams.replay_of(stream, entry_id, since)
    if replay is None:
        return Outcome.DEAD_LETTER
    steps.append(Replayed(_entry_ms(replay), entry_id, replay))
    return await _entry_steps(redis, names, replay, steps, depth + 1)


async def _live_steps(redis: Redis, streams: StreamStore, stream: str, entry_id: str,
                      steps: list[TraceStep]) -> str:
    """An entry without a terminal record: where the pipeline holds it now."""
    now_ms = time.time() * 1000
    lease = text_of(await redis.get(keys.delivery_inflight(stream, entry_id)))
    pending = await streams.pending_entry(stream, entry_id)
    attempts = int_of(text_of(await redis.get(keys.retry_counter(stream, entry_id)))) or 0
    if lease is not None:
        consumer = lease.split(" ", 1)[-1]
        since = now_ms - pending[1] if pending is not None else None
        steps.append(InFlight(at(since), entry_id, consumer))
        return "in_flight"
    due = await redis.zscore(keys.retry_due(stream), entry_id)
    if due is not None:
        steps.append(RetryDue(at(due), entry_id, attempts))
        return "retry_due"
    if pending is not None or await streams.entry(stream, entry_id) is not None:
        steps.append(Queued(None, entry_id, pending is not None,
                            pending[2] if pending is not None else 0))
        return "queued"
    steps.append(Lost(None, entry_id))
    return "lost"
