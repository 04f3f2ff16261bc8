"""The steps of a trace (`pipeline.trace`, issue #15) as typed records: one class per kind of
step, its fields the step's details, so the step vocabulary is in one place in Python.

`json()` is a step as `GET /api/trace` and `messageweave trace --json` give it: `{step, at,
…details}` in the order the fields are declared (the page reads that and keeps its own words
for each kind: `web/strings-ops.js`, `trace.step.*`); `text()` is the CLI's line for it. The
values come from the service's own records (the send log, the terminal record, the audit log)
and are carried as they were written.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

from messageweave.ops.sendlog import Outcome


def iso(millis: float) -> str:
    """A time of the trace (Unix milliseconds) as ISO 8601 UTC, to the millisecond."""
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


@dataclass(frozen=True)
class DigestPlace:
    """Where a mail went out in a backlog digest entry (issue #16): which of its `of`
    messages, covering `mails` mails; `summary`: a digest message, not its own notification."""

    message: int
    of: int
    mails: int
    summary: bool

    def json(self) -> dict[str, Any]:
        return {"message": self.message, "of": self.of, "mails": self.mails,
                "summary": self.summary}


@dataclass(frozen=True)
class TraceStep:
    """One step of a mail: when (Unix ms; None for a state that holds now), and its details
    (the fields of its kind). `template` is the CLI's line, filled in from the fields, for a
    kind whose line is no more than that."""

    kind: ClassVar[str]
    template: ClassVar[str] = ""
    at_ms: int | None

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.kind,
                               "at": None if self.at_ms is None else iso(self.at_ms)}
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if isinstance(value, DigestPlace):
                out[f.name] = value.json()
            elif value is not None or not f.metadata.get("omit_none"):
                out[f.name] = value
        return out

    def text(self) -> str:
        return self.template.format_map(self.__dict__)


def at(millis: float | None) -> int | None:
    """A step's time, whole milliseconds."""
    return None if millis is None else int(millis)


@dataclass(frozen=True)
class Received(TraceStep):
    """The mail's `receivedAt`, from the mailbox."""

    kind, template = "received", "received by the mailbox"


_SEEN_VIA = {"gap_audit": "the gap audit", "push": "the reconcile, after a push"}


@dataclass(frozen=True)
class Seen(TraceStep):
    """The dedup claim: by the reconcile (`via` `push` when a push woke it) or the gap audit;
    `notified` false for a claim outside the notify mailboxes."""

    kind = "seen"
    via: str
    notified: bool

    def text(self) -> str:
        by = _SEEN_VIA.get(self.via, "the reconcile")
        return f"seen by {by}" + ("" if self.notified else " (not to notify)")


@dataclass(frozen=True)
class AuditMissing(TraceStep):
    """A `gap_audit` audit record that found the mail missing (`trigger`: what ran it)."""

    kind, template = "audit_missing", "found missing by the gap audit ({trigger})"
    trigger: str | None


@dataclass(frozen=True)
class EntryStep(TraceStep):
    """A step of one stream entry (`entry_id`: the mail's, or a replay's)."""

    entry_id: str


@dataclass(frozen=True)
class Enqueued(TraceStep):
    """The mail's entry on `stream` (`stalwart:jmap`), as the send log names it."""

    kind, template = "enqueued", "enqueued on {stream} as {entry_id}"
    stream: str
    entry_id: str


@dataclass(frozen=True)
class Attempt(EntryStep):
    """One send-log record of the entry."""

    kind = "attempt"
    outcome: str | None
    failure_class: str | None
    latency_ms: int | None
    message_ids: list[int] | None

    def text(self) -> str:
        parts = [str(self.outcome)]
        if self.failure_class:
            parts.append(str(self.failure_class))
        parts.append(f"{self.latency_ms} ms")
        ids = self.message_ids or []
        tail = f", Telegram message {' '.join(map(str, ids))}" if ids else ""
        return f"attempt: {', '.join(parts)}{tail}"


@dataclass(frozen=True)
class UnknownAfterSend(EntryStep):
    """A send whose outcome was lost (`resolution`: `resent` or `not_resent`)."""

    kind, template = "unknown_after_send", "flagged unknown after send ({resolution})"
    resolution: str


@dataclass(frozen=True)
class Delivered(EntryStep):
    """The terminal record `delivered`; of a digest entry, where the mail went out in it."""

    kind = Outcome.DELIVERED.value
    message_ids: list[int] | None
    # only in the step of a digest entry: no `digest` key otherwise
    digest: DigestPlace | None = field(default=None, metadata={"omit_none": True})

    def text(self) -> str:
        ids = " ".join(map(str, self.message_ids or [])) or "—"
        place = self.digest
        if place is None:
            return f"delivered: Telegram message {ids}"
        what = f"a digest of {place.mails} mails" if place.summary else "its own notification"
        return (f"delivered in digest entry {self.entry_id}, message {place.message} of "
                f"{place.of} ({what}): Telegram message {ids}")


@dataclass(frozen=True)
class Skipped(EntryStep):
    """Muted by the `mute` rule `rule` (a terminal record, or a digest's plan)."""

    kind = Outcome.SKIPPED.value
    rule: str | None

    def text(self) -> str:
        return f"muted by rule {self.rule}" if self.rule else "muted by a rule"


@dataclass(frozen=True)
class LeftOut(EntryStep):
    """A digest left the mail out: it was no longer in the mailbox (issue #16)."""

    kind = "left_out"
    template = "left out of digest entry {entry_id}: no longer in the mailbox"


@dataclass(frozen=True)
class OutcomeUnknown(EntryStep):
    """The terminal record `unknown`: sent or not, nobody knows (`at_most_once`), not resent."""

    kind, template = Outcome.UNKNOWN.value, "outcome unknown: not resent"


@dataclass(frozen=True)
class DeadLetter(EntryStep):
    """The terminal record `dead_letter`; `reason` from the DLQ while the entry is there."""

    kind = Outcome.DEAD_LETTER.value
    dlq_id: str | None
    failure_class: str | None
    attempts: int | None
    in_dlq: bool
    reason: str | None  # while it is in the DLQ

    def text(self) -> str:
        where = f"in the DLQ as {self.dlq_id}" if self.in_dlq else "no longer in the DLQ"
        reason = f": {self.reason}" if self.reason else ""
        return (f"dead letter after {self.attempts} attempt(s), {self.failure_class}, "
                f"{where}{reason}")


@dataclass(frozen=True)
class Replayed(EntryStep):
    """The dead letter put back as a new entry, whose steps follow."""

    kind, template = "replayed", "replayed from the DLQ as {new_entry_id}"
    new_entry_id: str


@dataclass(frozen=True)
class InFlight(EntryStep):
    """An attempt holds the entry's lease now (`consumer`: the worker); since it was read."""

    kind, template = "in_flight", "being sent by {consumer}"
    consumer: str


@dataclass(frozen=True)
class RetryDue(EntryStep):
    """The next attempt is due at the step's time."""

    kind, template = "retry_due", "next attempt due (after {attempts} attempt(s))"
    attempts: int


@dataclass(frozen=True)
class Queued(EntryStep):
    """In the stream, not finished: `read` by a worker (pending, `deliveries` times) or not."""

    kind = "queued"
    read: bool  # a worker read it (it is pending)
    deliveries: int

    def text(self) -> str:
        return "queued, read by a worker" if self.read else "queued, not read yet"


@dataclass(frozen=True)
class Lost(EntryStep):
    """Gone from the stream without a terminal record: the gap auditor re-enqueues it."""

    kind, template = "lost", "entry gone without a terminal record"


@dataclass(frozen=True)
class MailTrace:
    """One mail's trace: its steps, oldest first; `status` the last state, `reason` why an
    unseen mail was not (`pipeline.trace`)."""

    email_id: str
    subject: str | None
    received_at: str | None
    seen: bool
    status: str
    reason: str | None
    steps: list[TraceStep]

    def json(self) -> dict[str, Any]:
        return {"email_id": self.email_id, "subject": self.subject,
                "received_at": self.received_at, "seen": self.seen, "status": self.status,
                "reason": self.reason, "steps": [s.json() for s in self.steps]}


@dataclass(frozen=True)
class Trace:
    """What `pipeline.trace.trace` found for a query: `by` `email_id` or `subject`; `mailbox`
    `ok` or the mailbox's error class; `found` when the system saw at least one mail."""

    query: str
    by: str
    mailbox: str  # `jmap` in the JSON
    found: bool
    mails: list[MailTrace]

    def json(self) -> dict[str, Any]:
        return {"query": self.query, "by": self.by, "jmap": self.mailbox, "found": self.found,
                "mails": [m.json() for m in self.mails]}
