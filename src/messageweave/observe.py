"""The seam through which lower layers report what `/metrics` counts.

`mail/` must not import `ops/` (siblings never import each other), yet a reconcile pass and a
gap audit are counted in `ops.metrics`. So the reporting side calls the functions here, and
`ops.metrics` subscribes when it is imported (every process that serves `/metrics` imports
it). With no subscriber a report is a no-op: the CLI counts nothing.
"""

from __future__ import annotations

from collections.abc import Callable

ReconcileObserver = Callable[[bool], None]
GapAuditObserver = Callable[[str, int], None]
IngestObserver = Callable[[str, int], None]

_reconcile: list[ReconcileObserver] = []
_gap_audit_missing: list[GapAuditObserver] = []
_ingested: list[IngestObserver] = []


def on_reconcile(observer: ReconcileObserver) -> None:
    _reconcile.append(observer)


def on_gap_audit_missing(observer: GapAuditObserver) -> None:
    _gap_audit_missing.append(observer)


def on_ingested(observer: IngestObserver) -> None:
    _ingested.append(observer)


def ingested(source: str, count: int) -> None:
    """`count` events were accepted into a stream from `source` (`reconcile`, `jmap_push`,
    `telegram_webhook`)."""
    for observer in _ingested:
        observer(source, count)


def reconcile(ok: bool) -> None:
    """One reconcile pass ended, successfully or not."""
    for observer in _reconcile:
        observer(ok)


def gap_audit_missing(reason: str, count: int) -> None:
    """One audit found `count` mails missing for `reason` (`unclaimed` or `lost`)."""
    for observer in _gap_audit_missing:
        observer(reason, count)
