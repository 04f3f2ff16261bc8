"""Where is my mail? (issue #15): every step the system recorded for one mail, read from what
the dedup claim, the ledger, the send log and the audit log already hold. It writes nothing and
reads no mail body: of the mailbox (the live `mail.source.MailSource`) it asks only a mail's
brief metadata (sender, subject, date, mailboxes) and which mailboxes notify.

A query shaped like an email id (`[A-Za-z0-9_-]`, as JMAP's, RFC 8620 §1.2, and an IMAP
source's are) that the mailbox or the claims know is traced directly; anything else is a
subject search (`MailReader.subject_matches`, newest first, `MAX_MATCHES` mails), each match
traced. The steps of a mail, oldest first:

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
from datetime import UTC, datetime
from typing import Any

from messageweave.config.live import NotConfigured
from messageweave.mail.auditor import GAP_AUDIT
from messageweave.mail.context import MailContext
from messageweave.mail.errors import MailError
from messageweave.mail.records import EmailMeta
from messageweave.mail.source import MailReader
from messageweave.ops.sendlog import Outcome
from messageweave.pipeline.digest import load_plan
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.mailbox import NOT_NOTIFIED
from messageweave.store.oplog import audit_log, send_log, valid_stream_id
from messageweave.store.redis import Redis, int_of, text_of
from messageweave.store.streams import StreamStore, stream_name

MAX_QUERY = 200  # characters of a query
MAX_MATCHES = 5  # mails a subject search traces
MAX_REPLAYS = 3  # replays of one dead letter followed
PUSH_HINT_S = 30
_EMAIL_ID = re.compile(r"[A-Za-z0-9_-]{1,255}")
_STREAM_NAME = stream_name(keys.STREAM_JMAP)  # as the send log and the steps name it
LEFT_OUT = "left_out"  # a digest left the mail out: no longer in the mailbox (issue #16)


class InvalidQuery(ValueError):
    """An empty query, or one longer than `MAX_QUERY`."""


def normalize(query: str) -> str:
    """The query with its whitespace collapsed; `InvalidQuery` when empty or too long."""
    text = " ".join(query.split())
    if not text or len(text) > MAX_QUERY:
        raise InvalidQuery(query)
    return text


async def trace(ctx: MailContext, query: str) -> dict[str, Any]:
    """`{query, by, jmap, found, mails: [{email_id, subject, received_at, seen, status, reason,
    steps}]}`; `found` when the system saw at least one of the mails. `InvalidQuery`;
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
    return {"query": text, "by": by, "jmap": jmap, "found": any(m["seen"] for m in mails),
            "mails": mails}


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


def _step(name: str, at_ms: float | None, **details: Any) -> dict[str, Any]:
    return {"step": name, "at_ms": None if at_ms is None else int(at_ms), **details}


def _entry_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


async def _mail(redis: Redis, names: AccountKeys, account: str, email_id: str,
                meta: EmailMeta | None, notify: frozenset[str] | None,
                mailbox_known: bool) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    received = meta.received_at if meta is not None else None
    if received is not None:
        steps.append(_step("received", received * 1000))
    claim_key = names.dedup_jmap(account, email_id)
    claim, healed = (text_of(v) for v in await redis.mget(
        claim_key, names.audit_healed(account, email_id)))
    steps += await _audit_steps(redis, names, email_id, received)
    status, reason = "seen", None
    if claim is None:
        status = "not_seen"
        reason = await _unseen_reason(redis, names, meta, notify, mailbox_known)
    elif not valid_stream_id(claim):
        at = await _claimed_at(redis, claim_key)
        steps.append(_step("seen", at, via="reconcile", notified=claim != NOT_NOTIFIED))
        if claim == NOT_NOTIFIED:
            status, reason = "not_notified", "outside_notify_mailboxes"
    else:
        via = "gap_audit" if healed == claim else await _via(redis, names, _entry_ms(claim))
        steps.append(_step("seen", _entry_ms(claim), via=via, notified=True))
        status = await _entry_steps(redis, names, claim, steps, 0)
        if status == Outcome.DELIVERED:
            last = [s for s in steps if s["step"] == Outcome.DELIVERED][-1]
            status = await _digest_place(redis, names, email_id, last)
    steps.sort(key=lambda s: (s["at_ms"] is None, s["at_ms"] or 0))
    return {"email_id": email_id, "subject": meta.subject if meta is not None else None,
            "received_at": _iso(received * 1000) if received is not None else None,
            "seen": claim is not None, "status": status, "reason": reason,
            "steps": [_dated(s) for s in steps]}


def _dated(step: dict[str, Any]) -> dict[str, Any]:
    at_ms = step.pop("at_ms")
    return {"step": step.pop("step"), "at": None if at_ms is None else _iso(at_ms), **step}


def _iso(millis: float) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


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
                       received: int | None) -> list[dict[str, Any]]:
    """The account's gap audits that found this mail missing (from its arrival, or the dedup
    window); a record without `account` is `default`'s (`mail.auditor.run_audit`)."""
    start = received if received is not None else time.time() - keys.DEDUP_JMAP_TTL_S

    def keep(record: dict[str, Any]) -> bool:
        ids = record.get("email_ids")
        return (record.get("action") == GAP_AUDIT and isinstance(ids, list) and email_id in ids
                and record.get("account", keys.DEFAULT_ACCOUNT) == names.account_id)

    records = await audit_log(redis).since(int(start * 1000), keep, limit=20)
    return [_step("audit_missing", _entry_ms(r["id"]), trigger=r.get("trigger")) for r in records]


async def _digest_place(redis: Redis, names: AccountKeys, email_id: str,
                        step: dict[str, Any]) -> str:
    """The `delivered` step of an entry that was a backlog digest: the message the mail went
    out in, or its being left out (muted, gone). Another entry's step is left as it is."""
    plan = await load_plan(redis, str(step["entry_id"]), names)
    if plan is None:
        return Outcome.DELIVERED
    place = plan.place_of(email_id)
    if place is None:
        step.pop("message_ids", None)
        if email_id in plan.muted:
            step.update(step=Outcome.SKIPPED, rule=plan.muted[email_id])
            return Outcome.SKIPPED
        step["step"] = LEFT_OUT
        return LEFT_OUT
    part = plan.parts[place]
    step["digest"] = {"message": place + 1, "of": len(plan.parts),
                      "mails": len(part.email_ids), "summary": part.digest}
    ids = step.get("message_ids") or []
    if len(ids) == len(plan.parts):  # one Telegram message per part, all in this record
        step["message_ids"] = [ids[place]]
    return Outcome.DELIVERED


# ----------------------------------------------------------------------------- one entry


def _terminal(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    record = value if isinstance(value, dict) else {}
    return {"state": Outcome.DELIVERED, **record}


def _terminal_ms(record: dict[str, Any], steps: list[dict[str, Any]]) -> float | None:
    """The terminal record's time: it holds whole seconds, so never before the attempt that
    wrote it (the send log's millisecond time)."""
    at = record.get("at")
    if not isinstance(at, int | float):
        return None
    times = [float(s["at_ms"]) for s in steps if s["at_ms"] is not None]
    return max([float(at) * 1000, *times])


async def _entry_steps(redis: Redis, names: AccountKeys, entry_id: str,
                       steps: list[dict[str, Any]], depth: int) -> str:
    """Append the steps of one entry of the account's `stalwart:jmap` (and of its replays);
    its status. A send-log record without `account` is `default`'s (`ops.sendlog`)."""
    streams = StreamStore(redis)
    stream = names.stream_jmap
    steps.append(_step("enqueued", _entry_ms(entry_id), stream=_STREAM_NAME,
                       entry_id=entry_id))

    def mine(record: dict[str, Any]) -> bool:
        return (record.get("stream") == _STREAM_NAME and record.get("event_id") == entry_id
                and record.get("account", keys.DEFAULT_ACCOUNT) == names.account_id)

    for r in await send_log(redis).since(_entry_ms(entry_id), mine, limit=50):
        steps.append(_step("attempt", _entry_ms(r["id"]), entry_id=entry_id,
                           outcome=r.get("outcome"), failure_class=r.get("failure_class"),
                           latency_ms=r.get("latency_ms"), message_ids=r.get("message_ids")))
    for resolution in ("resent", "not_resent"):
        score = await redis.zscore(keys.DELIVERY_UNKNOWN, f"{stream}/{entry_id}/{resolution}")
        if score is not None:
            steps.append(_step("unknown_after_send", score * 1000, entry_id=entry_id,
                               resolution=resolution))
    raw = text_of(await redis.get(keys.delivery_committed(stream, entry_id)))
    if raw is None:
        return await _live_steps(redis, streams, stream, entry_id, steps)
    record = _terminal(raw)
    state = str(record["state"])
    at_ms = _terminal_ms(record, steps)
    if state == Outcome.DEAD_LETTER:
        return await _dead_letter(redis, names, entry_id, record, at_ms, steps, depth)
    if state in (Outcome.DELIVERED, Outcome.UNKNOWN, Outcome.SKIPPED):
        delivered = state == Outcome.DELIVERED
        details = {"message_ids": record.get("message_ids", [])} if delivered else {}
        if state == Outcome.SKIPPED:
            details = {"rule": record.get("rule")}  # the `mute` rule that matched
        steps.append(_step(state, at_ms, entry_id=entry_id, **details))
    return state


async def _dead_letter(redis: Redis, names: AccountKeys, entry_id: str,
                       record: dict[str, Any], at_ms: float | None,
                       steps: list[dict[str, Any]], depth: int) -> str:
    streams, stream = StreamStore(redis), names.stream_jmap
    dlq_id = str(record.get("dlq_id") or "")
    held = await streams.dlq_entry(stream, dlq_id) if valid_stream_id(dlq_id) else None
    steps.append(_step(Outcome.DEAD_LETTER, at_ms, entry_id=entry_id, dlq_id=dlq_id or None,
                       failure_class=record.get("failure_class"),
                       attempts=record.get("attempts"), in_dlq=held is not None,
                       reason=held.reason if held is not None else None))
    if held is not None or depth >= MAX_REPLAYS:
        return Outcome.DEAD_LETTER
    since = int(at_ms) if at_ms is not None else _entry_ms(entry_id)
    replay = await streams.replay_of(stream, entry_id, since)
    if replay is None:
        return Outcome.DEAD_LETTER
    steps.append(_step("replayed", _entry_ms(replay), entry_id=entry_id, new_entry_id=replay))
    return await _entry_steps(redis, names, replay, steps, depth + 1)


async def _live_steps(redis: Redis, streams: StreamStore, stream: str, entry_id: str,
                      steps: list[dict[str, Any]]) -> str:
    """An entry without a terminal record: where the pipeline holds it now."""
    now_ms = time.time() * 1000
    lease = text_of(await redis.get(keys.delivery_inflight(stream, entry_id)))
    pending = await streams.pending_entry(stream, entry_id)
    attempts = int_of(text_of(await redis.get(keys.retry_counter(stream, entry_id)))) or 0
    if lease is not None:
        consumer = lease.split(" ", 1)[-1]
        since = now_ms - pending[1] if pending is not None else None
        steps.append(_step("in_flight", since, entry_id=entry_id, consumer=consumer))
        return "in_flight"
    due = await redis.zscore(keys.retry_due(stream), entry_id)
    if due is not None:
        steps.append(_step("retry_due", due, entry_id=entry_id, attempts=attempts))
        return "retry_due"
    if pending is not None or await streams.entry(stream, entry_id) is not None:
        steps.append(_step("queued", None, entry_id=entry_id, read=pending is not None,
                           deliveries=pending[2] if pending is not None else 0))
        return "queued"
    steps.append(_step("lost", None, entry_id=entry_id))
    return "lost"
