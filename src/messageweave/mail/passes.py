"""What a catch-up pass and a gap audit take and report, whatever the source
(`mail.watch.MailWatch`): a pass's budget, its progress (also its result) and its errors, and an
audit's result. The JMAP pass is `mail.reconcile`, the JMAP audit `mail.gap_audit`; both import
these from here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Budget:
    """Per-pass limits (reference §1.5). A pass cut by one saves its cursor and ends cleanly."""

    page_size: int = 100  # BASELINE_PAGE_SIZE
    max_walk_pages: int = 100  # BASELINE_MAX_PAGES
    max_walk_emails: int = 10_000  # BASELINE_MAX_EMAILS
    max_change_pages: int = 100  # RECONCILE_MAX_PAGES
    seconds: float = 20.0  # RECONCILE_BUDGET
    initial_window: int = 4096  # CHANGE_WINDOW_CAP from the first page (module docstring)
    window_cap: int = 4096  # CHANGE_WINDOW_CAP


class ReconcileError(Exception):
    """A pass could not run or finish (the cursor keeps its last checkpoint)."""


class ReconcileBusy(ReconcileError):
    """Another pass holds `lock:reconcile`. (A pass that loses the lock midway raises
    `store.locks.LockLost`: the cursor was not moved.)"""


@dataclass
class Progress:
    """What a pass did so far (also its result). `phase`: first_run, replay, walk, done."""

    phase: str = "start"
    pages: int = 0
    emails: int = 0
    enqueued: int = 0
    digests: int = 0  # digest entries enqueued (their mails are counted in `enqueued`)
    rebaselined: bool = False
    complete: bool = False
    cursor: str | None = None


ProgressCallback = Callable[[Progress], None]


@dataclass
class AuditResult:
    """`checked`: mails compared with the ledger; `missing`: of those, owned by nobody;
    `enqueued`: of those, re-enqueued now (a mail the auditor already re-enqueued once is only
    reported). `undiscovered`: listed mails left to the reconcile. `complete` is False when
    `AUDIT_MAX_EMAILS` cut the listing. `since` is None when nothing could be audited yet (no
    reconcile first run)."""

    at: int
    since: int | None = None
    checked: int = 0
    missing: int = 0
    enqueued: int = 0
    undiscovered: int = 0
    complete: bool = True
    baseline_started: bool = False
    missing_ids: list[str] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)

    def answer(self) -> dict[str, int]:
        return {"checked": self.checked, "missing": self.missing, "enqueued": self.enqueued}

    def summary(self) -> dict[str, Any]:
        return {**self.answer(), "at": self.at, "since": self.since,
                "undiscovered": self.undiscovered, "complete": self.complete}
