"""`messageweave trace <email id | subject words>`: where a mail is, step by step, from what
the dedup claim, the ledger, the send log and the audit log hold (`pipeline.trace`).

Exit 0 when the system saw a matching mail, 3 when nothing matches (or the matches were never
seen: the output says why), 1 on a failure (no configuration, Redis down, or a subject search
while the mailbox does not answer).
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from redis.exceptions import RedisError

from messageweave.cli.common import (
    AccountOption,
    DataDirOption,
    check_account,
    console,
    fail,
    load_settings,
    stored_services,
)
from messageweave.config.live import NotConfigured, StoredConfigInvalid, StoreUnavailable
from messageweave.mail.errors import MailError
from messageweave.pipeline.trace import MAX_QUERY, QueryInvalid, trace
from messageweave.pipeline.trace_steps import Trace, iso
from messageweave.services.acting import AccountNotLoaded, AccountPaused, acting_mailbox
from messageweave.settings import Settings

EXIT_NOT_FOUND = 3

_REASONS = {
    "not_in_mailbox": "not seen: the mailbox has no mail with this id",
    "outside_notify_mailboxes": "not notified: it is outside the notify mailboxes",
    "older_than_dedup_window": "not seen: older than the dedup window (7 days)",
    "before_first_reconcile": "not seen: received before the first reconcile (never notified)",
    "not_seen_yet": "not seen by the reconcile yet",
}
_STATUS = {
    "delivered": "delivered", "dead_letter": "dead letter", "unknown": "outcome unknown",
    "skipped": "muted by a rule", "in_flight": "sending now", "retry_due": "waiting to retry",
    "queued": "queued", "lost": "lost (the gap audit re-enqueues it)", "seen": "seen",
    "not_notified": "not notified", "not_seen": "not seen",
    "left_out": "left out of its digest (no longer in the mailbox)",
}


def _print(answer: Trace) -> None:
    if not answer.mails:
        console.print(f"[yellow]not found[/] no mail with the subject {answer.query!r}",
                      highlight=False)
    if answer.mailbox != "ok":
        console.print(f"[yellow]warn[/] the mailbox did not answer ({answer.mailbox}): "
                      "from Redis only", highlight=False)
    for mail in answer.mails:
        subject = f" {mail.subject!r}" if mail.subject is not None else ""
        console.print(f"[bold]{mail.email_id}[/]{subject}: "
                      f"{_STATUS.get(mail.status, mail.status)}", highlight=False)
        for step in mail.steps:
            at = "now" if step.at_ms is None else iso(step.at_ms).replace("T", " ")[:-1]
            console.print(f"  {at:<23}  {step.text()}", highlight=False)
        if mail.reason in _REASONS:
            console.print(f"  {_REASONS[mail.reason]}", highlight=False)


async def _trace(settings: Settings, account: str, query: str) -> Trace:
    async with stored_services(settings) as svc:
        return await trace(await acting_mailbox(svc, account, mailbox=True), query)


def trace_command(
    query: Annotated[list[str], typer.Argument(help="An email id, or words of its subject.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the trace as JSON.")] = False,
    data_dir: DataDirOption = None,
    account: AccountOption = "default",
) -> None:
    """Where is my mail? Every step of a mail with its time: seen, enqueued, each attempt,
    the Telegram message id, the DLQ. Exit 0: found; 3: nothing matches; 1: failure.

    Example: messageweave trace "Invoice March" --data-dir .messageweave
    """
    text = " ".join(query)
    if not text.strip() or len(text) > MAX_QUERY:
        fail(f"query: give an email id or subject words (at most {MAX_QUERY} characters)")
    settings = load_settings(data_dir)
    check_account(settings, account)
    try:
        answer = asyncio.run(_trace(settings, account, text))
    except (QueryInvalid, MailError, RedisError, RuntimeError, NotConfigured, StoreUnavailable,
            StoredConfigInvalid, OSError, AccountPaused, AccountNotLoaded) as exc:
        fail(f"{type(exc).__name__}: {exc}", highlight=False)
    if as_json:
        typer.echo(json.dumps(answer.json(), ensure_ascii=False))
    else:
        _print(answer)
    if not answer.found:
        raise typer.Exit(EXIT_NOT_FOUND)


def register(app: typer.Typer) -> None:
    app.command("trace")(trace_command)
