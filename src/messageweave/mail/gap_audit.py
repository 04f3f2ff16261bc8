"""The gap auditor: proof that no new mail was left without its notification (issue #11).

One audit:
1. Lists the mail of the notify mailboxes (the reconcile's rule: a mailbox whose role is in
   `notify_mailbox_roles`, and in no Drafts / Sent / Junk / Trash mailbox) received after
   `since = max(baseline, now - audit_window_s)`, newest first, at most `AUDIT_MAX_EMAILS`.
   The baseline (`state:jmap:baseline_at`) is the reconcile's first run: mail received before
   it was never meant to be notified.
2. Leaves out mail the reconcile has not reached yet: after the listing it reads the cursor
   again and lists `Email/changes` from it (or, while the reconcile walks or must re-baseline,
   leaves out everything received after the watermark). That mail is the reconcile's to
   enqueue; counting it as missing would be a false alarm on every audit.
3. Checks every other listed mail against the ledger and re-enqueues the missing ones in one
   atomic script per batch (`messageweave.store.gaps.check_and_claim`).

`run_audit` adds the reporting (metric, audit log, `audit:last`, a warning per missing mail);
`run_auditor` is the periodic loop, once per `audit_interval_s` cluster-wide. Its failures are
logged through `logs.RepeatLog` (class, reason, what to check; once a minute with a count; one
line when an audit completes again).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from redis.exceptions import RedisError

from messageweave.aio import raise_if_cancelling
from messageweave.config.live import NotConfigured
from messageweave.config.model import EXCLUDED_ROLES
from messageweave.logs import RepeatLog
from messageweave.mail.context import MailContext
from messageweave.mail.jmap import (
    NEWEST_FIRST,
    CannotCalculateChanges,
    EmailMeta,
    InvalidArguments,
    JmapClient,
)
from messageweave.mail.jmap.mailboxes import in_any_mailbox, mailbox_sets
from messageweave.mail.passes import AuditResult
from messageweave.mail.reconcile import Replay, Walk, parse_cursor
from messageweave.ops import metrics
from messageweave.ops.audit import record_audit
from messageweave.store import gaps, keys
from messageweave.store.keys import AccountKeys
from messageweave.store.reconcile_state import claim_slot
from messageweave.store.redis import Redis

log = logging.getLogger(__name__)

AUDIT_MAX_EMAILS = 1000  # listed per audit; newer mail first, the rest waits for a later run
AUDIT_PAGE_SIZE = 100
CHANGES_WINDOW = 1000  # maxChanges per Email/changes call while looking for undiscovered mail
CHANGES_MAX_PAGES = 10
GAP_AUDIT = "gap_audit"  # the audit-log action (`ops.audit`) of a reported run
RECORD_MAX_IDS = 100  # email ids named in one audit-log record (the counts are always exact)
POLL_S = 1.0
POLL_MAX_S = 5.0
CHECKS_PER_INTERVAL = 10
PROPERTIES = ("mailboxIds", "receivedAt")

TRIGGER_SCHEDULE = "schedule"
TRIGGER_API = "api"
TRIGGER_CLI = "cli"


def _utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _listing_filter(since: int, mailbox_ids: Iterable[str]) -> dict[str, Any]:
    return {"operator": "AND",
            "conditions": [{"after": _utc(since)}, in_any_mailbox(mailbox_ids)]}


@dataclass(frozen=True)
class _Undiscovered:
    """Mail the reconcile still has to reach: created since its cursor, or (while it walks or
    must re-baseline) received after the watermark."""

    ids: frozenset[str]
    received_after: float | None

    def holds(self, email: EmailMeta) -> bool:
        if email.id in self.ids:
            return True
        return self.received_after is not None and (email.received_at or 0) > self.received_after


class Auditor:
    def __init__(self, redis: Redis, client: JmapClient, roles: Iterable[str], window_s: int,
                 *, max_emails: int = AUDIT_MAX_EMAILS,
                 names: AccountKeys = keys.DEFAULT) -> None:
        self.redis = redis
        self.names = names
        self.client = client
        self.roles = frozenset(r.lower() for r in roles) - EXCLUDED_ROLES
        self.window_s = window_s
        self.max_emails = max_emails

    async def run(self) -> AuditResult:
        now = time.time()
        result = AuditResult(at=int(now))
        state = await gaps.read_state(self.redis, self.names)
        if state.cursor is None:
            return result  # no first run yet: nothing was meant to be notified
        baseline = state.baseline
        if baseline is None:
            baseline = await gaps.start_baseline(self.redis, math.ceil(now), self.names)
            result.baseline_started = True
        result.since = max(baseline, int(now) - self.window_s)
        if result.since >= now:
            return result
        notify, excluded = await self._mailboxes()
        if not notify:
            return result
        listed = await self._list(result, notify)
        pending = await self._undiscovered()
        candidates = []
        for email in listed:
            if email.mailbox_ids & excluded:
                continue
            if pending.holds(email):
                result.undiscovered += 1
            else:
                candidates.append(email.id)
        await self._check(result, candidates)
        return result

    async def _mailboxes(self) -> tuple[frozenset[str], frozenset[str]]:
        return mailbox_sets(await self.client.mailboxes(), self.roles)

    async def _list(self, result: AuditResult, notify: frozenset[str]) -> list[EmailMeta]:
        assert result.since is not None
        where = _listing_filter(result.since, notify)
        seen: dict[str, EmailMeta] = {}
        position = 0
        page_size = min(AUDIT_PAGE_SIZE, (await self.client.get_session()).max_objects_in_get)
        while True:
            if position >= self.max_emails:
                more = await self.client.query_emails(where, NEWEST_FIRST, position, 1)
                result.complete = not more.ids
                break
            limit = min(page_size, self.max_emails - position)
            page = await self.client.query_and_get(where, NEWEST_FIRST, limit,
                                                   position=position, properties=PROPERTIES)
            for email in page.emails:  # new mail shifts later pages: an id may come twice
                seen.setdefault(email.id, email)
            position += len(page.ids)
            if len(page.ids) < limit:
                break
        return list(seen.values())

    async def _undiscovered(self) -> _Undiscovered:
        """Read after the listing: whatever the reconcile saved by now was enqueued before it
        saved, and anything it has not reached is in the changes from its cursor."""
        state = await gaps.read_state(self.redis, self.names)
        if state.cursor is None:
            return _Undiscovered(frozenset(), -math.inf)  # reset meanwhile: a first run is next
        parsed = parse_cursor(state.cursor)
        if state.watermark is None and not isinstance(parsed, Replay):
            return _Undiscovered(frozenset(), -math.inf)  # the next pass is a first run
        mark = float(state.watermark) if state.watermark is not None else time.time()
        if parsed is None:  # an unreadable walk cursor: the next pass walks after the watermark
            return _Undiscovered(frozenset(), mark)
        after = mark if isinstance(parsed, Walk) else None
        ids: set[str] = set()
        since = parsed.state
        try:
            for _ in range(CHANGES_MAX_PAGES):
                changes = await self.client.email_changes(since, CHANGES_WINDOW)
                ids.update(changes.created)
                since = changes.new_state
                if not changes.has_more:
                    break
            else:  # too far behind to list them all: also spare what a re-walk would reach
                after = mark
        except (CannotCalculateChanges, InvalidArguments):
            after = mark  # the reconcile re-baselines: it walks what came after the watermark
        return _Undiscovered(frozenset(ids), after)

    async def _check(self, result: AuditResult, email_ids: list[str]) -> None:
        await check(self.redis, self.client.account_id, result, email_ids, self.names)


async def check(redis: Redis, account_id: str, result: AuditResult,
                email_ids: list[str], names: AccountKeys = keys.DEFAULT) -> None:
    """Check the listed mails against the ledger, re-enqueue the missing ones once, and count
    them into `result` (the IMAP audit, `mail.imap.watch`, shares it)."""
    verdicts = await gaps.check_and_claim(redis, account_id, email_ids, names)
    result.checked = len(verdicts)
    for verdict in verdicts:
        if not verdict.missing:
            continue
        result.missing += 1
        result.missing_ids.append(verdict.email_id)
        result.reasons[verdict.detail] = result.reasons.get(verdict.detail, 0) + 1
        if verdict.entry_id is not None:
            result.enqueued += 1
            log.warning("gap audit: mail %s was missing (%s); re-enqueued as %s",
                        verdict.email_id, verdict.detail, verdict.entry_id)
        else:
            log.warning("gap audit: mail %s is missing (%s) again after the auditor "
                        "re-enqueued it once; not re-enqueued", verdict.email_id,
                        verdict.detail)


async def audit(redis: Redis, client: JmapClient, roles: Iterable[str], window_s: int,
                *, max_emails: int = AUDIT_MAX_EMAILS,
                names: AccountKeys = keys.DEFAULT) -> AuditResult:
    """One audit of `client`'s account (JMAP and Redis errors propagate)."""
    return await Auditor(redis, client, roles, window_s, max_emails=max_emails,
                         names=names).run()


# ---------------------------------------------------------------------------------- service


async def run_audit(svc: MailContext, trigger: str) -> AuditResult:
    """One audit with the live configuration, then its report: the missing-mail counter, a
    `gap_audit` audit-log record (always for `api`/`cli`, for `schedule` only when mail was
    missing) and `audit:last`. NotConfigured, MailError and RedisError propagate (a failed
    run is still recorded in `audit:last` when Redis answers)."""
    cfg = svc.config.config
    try:
        if cfg is None:
            raise NotConfigured
        watch = await svc.watch()
        result = await watch.audit(svc.redis, cfg.notify_mailbox_roles, cfg.audit_window_s,
                                   names=svc.keys)
    except Exception as exc:
        raise_if_cancelling()
        try:
            await gaps.save_last(svc.redis, {"at": int(time.time()), "trigger": trigger,
                                             "ok": False, "error": type(exc).__name__},
                                 svc.keys)
        except RedisError:
            pass
        raise
    for reason, count in result.reasons.items():
        metrics.observe_gap_audit_missing(reason, count)
    if result.missing:
        log.warning("gap audit: %d missing mail(s), %d re-enqueued", result.missing,
                    result.enqueued)
    await gaps.save_last(svc.redis, {**result.summary(), "trigger": trigger, "ok": True},
                         svc.keys)
    if trigger != TRIGGER_SCHEDULE or result.missing:
        await record_audit(
            svc, GAP_AUDIT, account=svc.keys.account_id, trigger=trigger, **result.answer(),
            complete=result.complete, email_ids=result.missing_ids[:RECORD_MAX_IDS],
        )
    return result


PERIODIC = "periodic gap audit"  # the place of its failure lines


async def run_auditor(svc: MailContext, *, clock: Callable[[], float] = time.monotonic) -> None:
    """Audit once per `audit_interval_s`, cluster-wide, until cancelled (started by the app
    lifespan). Nothing runs while the switch is off, no configuration is live or the interval
    is 0. `clock` times the failure lines' once-a-minute (tests pass their own)."""
    failures = RepeatLog(log, clock=clock)
    while True:
        wait = await _logged_tick(svc, failures)
        raise_if_cancelling()
        await svc.config.changed_within(wait)


def _gap(svc: MailContext) -> float:
    """How long until the slot is checked again while it cannot be claimed (no configuration,
    switched off, a failure): a tenth of `audit_interval_s`, between `POLL_S` and `POLL_MAX_S`
    (a second per account was most of an idle instance's Redis commands, issue #37)."""
    cfg = svc.config.config
    interval = cfg.audit_interval_s if cfg is not None else 0
    return min(POLL_MAX_S, max(POLL_S, interval / CHECKS_PER_INTERVAL))


async def _logged_tick(svc: MailContext, failures: RepeatLog) -> float:
    """One tick; how long until the next (a new configuration ends the wait early)."""
    try:
        audited, wait = await _tick(svc)
    except Exception as exc:  # Redis or the mail server down: counted, not logged each second
        raise_if_cancelling()
        failures.failed(PERIODIC, exc)
        return _gap(svc)
    if audited:
        failures.recovered(PERIODIC)
    return wait


async def _tick(svc: MailContext) -> tuple[bool, float]:
    """Whether an audit ran to its end, and how long until the slot is worth asking for again:
    its end when it was claimed or taken (the slot check of every 1–5 s was a command a
    second per idle account for an audit every 10 minutes, issue #37)."""
    cfg = svc.config.config
    if cfg is None or not svc.live or cfg.audit_interval_s <= 0:
        return False, _gap(svc)
    if not await svc.store.switched_on():
        return False, _gap(svc)
    claim = await claim_slot(svc.redis, svc.keys.of(keys.AUDIT_SCHEDULE), cfg.audit_interval_s)
    if claim.claimed:
        started = time.monotonic()
        await run_audit(svc, TRIGGER_SCHEDULE)
        return True, max(0.0, claim.left_s - (time.monotonic() - started))
    return False, max(POLL_S, claim.left_s)
