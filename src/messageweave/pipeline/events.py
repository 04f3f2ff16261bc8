"""What one stream entry becomes: the Telegram messages to send, or a classified failure."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from messageweave.chat import texts
from messageweave.chat.telegram import PLAIN, FailureClass, SendOptions
from messageweave.config.live import NotConfigured
from messageweave.mail.errors import MailAuthError, MailError, MailUnreachable
from messageweave.mail.records import EmailMeta
from messageweave.pipeline import digest
from messageweave.pipeline.buttons import Press, handle_press, notification_keyboard
from messageweave.pipeline.conversation import (
    ConversationContext,
    IncomingMessage,
    chat_update,
    reply_to_update,
)
from messageweave.pipeline.notify import render_notification
from messageweave.pipeline.routing import facts_for, route_for
from messageweave.services import AccountRuntime, Services
from messageweave.store import keys, waiting
from messageweave.store.keys import DEFAULT_ACCOUNT
from messageweave.store.streams import Entry, is_mail_stream


@dataclass(frozen=True)
class Outgoing:
    chat_id: int
    text: str
    options: SendOptions = PLAIN  # topic, silent, inline keyboard (issue #16)


class DeliveryFailure(Exception):
    """A classified failure; `reason` is short and never holds mail content or a secret.

    `peer` names the peer (`store.waiting.PEERS`) a `transient` failure found out of reach —
    connection refused or reset, DNS, a timeout, a 5xx: the entry waits for it, with capped
    backoff, for up to `retry_window_s` (docs/reference.md §7.11). None for anything else."""

    def __init__(self, failure_class: FailureClass, reason: str,
                 retry_after: float | None = None, chat_id: int | None = None,
                 peer: str | None = None) -> None:
        super().__init__(reason)
        self.failure_class = failure_class
        self.reason = reason[:300]
        self.retry_after = retry_after
        self.chat_id = chat_id
        self.peer = peer if failure_class == FailureClass.TRANSIENT else None


def mail_failure(exc: MailError) -> DeliveryFailure:
    """A mailbox read that failed, as a delivery failure: `transient`, waiting for the mail
    server (`store.waiting.JMAP`, "the mail server") when it was out of reach
    (`MailUnreachable`: network, timeout, HTTP 5xx/429, `serverUnavailable`)."""
    return DeliveryFailure(FailureClass.TRANSIENT, f"{exc.source}: {type(exc).__name__}",
                           peer=waiting.JMAP if isinstance(exc, MailUnreachable) else None)


@dataclass(frozen=True)
class Muted:
    """What a mail a `mute` rule matched becomes instead of messages: nothing is sent, the entry
    ends `skipped` with the rule's name (issue #16)."""

    rule: str


def kind_of(stream: str) -> str:
    return "notification" if is_mail_stream(stream) else "reply"


def account_of(entry: Entry, svc: Services) -> AccountRuntime:
    """The account whose mail a notification entry is (its stream's), served here:
    `DeliveryFailure` (transient: retried) while it is not (paused, or not loaded yet)."""
    account = svc.accounts.of_stream(entry.stream)
    if account is None or not account.enabled:
        raise DeliveryFailure(FailureClass.TRANSIENT, "account not served")
    return account


def lane_of(entry: Entry, svc: Services) -> int:
    """The chat the entry's messages go to (its per-chat order lane): a notification's is its
    account's chat."""
    if is_mail_stream(entry.stream):
        account = svc.accounts.of_stream(entry.stream)
        return account.config.telegram_chat_id if account is not None else 0
    try:
        return int(entry.fields.get("chat_id", "0"))
    except ValueError:
        return 0


class MailPrefetch:
    """One Email/get for the mail entries a path took together, instead of one per entry.

    `start` fetches the mails of a batch in the background; each entry's first attempt then
    takes its own mail from that answer (`take`). An entry whose batch call failed, or that
    was not in a batch, or a later attempt (a retry fetches again), gets None and does its own
    Email/get, so a mail that is gone or unreadable ends its entry exactly as before. A batch
    call every entry of which is forgotten (each finished or cancelled without its mail) is
    cancelled: its mail server may hang, and the call would hold a connection to it until the
    timeout (an account deleted meanwhile)."""

    def __init__(self, svc: Services) -> None:
        self.svc = svc
        self._held: dict[tuple[str, str], tuple[str, asyncio.Task[dict[str, EmailMeta]]]] = {}
        # batch call → its entries not done with it (held, or taking its answer)
        self._users: dict[asyncio.Task[dict[str, EmailMeta]], int] = {}

    def start(self, entries: Iterable[Entry]) -> None:
        """One call per account (each mail stream is one account's mailbox)."""
        by_stream: dict[str, list[Entry]] = {}
        for entry in entries:
            if is_mail_stream(entry.stream):
                by_stream.setdefault(entry.stream, []).append(entry)
        for stream, taken in by_stream.items():
            self._start(stream, taken)

    def _start(self, stream: str, entries: list[Entry]) -> None:
        wanted = {(e.stream, e.id): e.fields.get("email_id", "").strip() for e in entries}
        wanted = {key: email_id for key, email_id in wanted.items() if email_id}
        ids = list(dict.fromkeys(wanted.values()))
        account = self.svc.accounts.of_stream(stream)
        if len(ids) < 2 or account is None:
            return  # one mail: its own Email/get is the same call
        task = asyncio.create_task(self._fetch(account, ids), name="mail-prefetch")
        task.add_done_callback(_retrieved)
        for key, email_id in wanted.items():
            self._held[key] = (email_id, task)
        self._users[task] = len(wanted)

    async def _fetch(self, account: AccountRuntime, ids: list[str]) -> dict[str, EmailMeta]:
        source = await account.mail(self.svc.config.outbound)
        return {meta.id: meta for meta in await source.metas(ids)}

    async def take(self, entry: Entry) -> list[EmailMeta] | None:
        """The entry's mail from its batch ([] when the server does not have it), once; None
        when there is no batch answer to use."""
        held = self._held.pop((entry.stream, entry.id), None)
        if held is None:
            return None
        email_id, task = held
        try:
            await asyncio.wait([task])  # a cancelled waiter leaves the call to the others
        finally:
            self._done_with(task)
        if task.cancelled() or task.exception() is not None:
            return None
        found = task.result().get(email_id)
        return [] if found is None else [found]

    def forget(self, entry: Entry) -> None:
        held = self._held.pop((entry.stream, entry.id), None)
        if held is not None:
            self._done_with(held[1])

    def _done_with(self, task: asyncio.Task[dict[str, EmailMeta]]) -> None:
        """One entry is done with `task`; the last one cancels it if it still runs."""
        left = self._users.get(task, 1) - 1
        if left > 0:
            self._users[task] = left
            return
        self._users.pop(task, None)
        task.cancel()

    def close(self) -> None:
        for _, task in self._held.values():
            task.cancel()
        self._held.clear()
        self._users.clear()


def _retrieved(task: asyncio.Task[dict[str, EmailMeta]]) -> None:
    """Mark a failed batch call's exception as seen: its entries fetch on their own."""
    if not task.cancelled():
        task.exception()


async def outgoing_for(entry: Entry, svc: Services,
                       mail: MailPrefetch | None = None) -> list[Outgoing] | Muted:
    """The messages `entry` becomes, or `Muted` when a rule says to send none (a notification
    only); a failure raises `DeliveryFailure`."""
    if digest.is_digest(entry):
        return await _digest(entry, svc)
    if is_mail_stream(entry.stream):
        return await _notification(entry, svc, mail)
    if entry.stream == keys.STREAM_TELEGRAM:
        return await _replies(entry, svc)
    raise DeliveryFailure(FailureClass.INVALID_PAYLOAD, "unknown stream")


@contextlib.contextmanager
def _mail_failures() -> Iterator[None]:
    """What reading the mailbox raised, as the class of failure it is for delivery."""
    try:
        yield
    except NotConfigured as exc:
        raise DeliveryFailure(FailureClass.TRANSIENT, "not configured") from exc
    except MailAuthError as exc:
        raise DeliveryFailure(FailureClass.AUTH, f"{exc.source} authentication failed") from exc
    except MailError as exc:
        raise mail_failure(exc) from exc


async def _digest(entry: Entry, svc: Services) -> list[Outgoing]:
    """A backlog digest entry (issue #16): its digests and notifications (`pipeline.digest`)."""
    try:
        with _mail_failures():
            messages = await digest.messages(entry, svc.redis, account_of(entry, svc),
                                             svc.config.outbound)
    except digest.DigestInvalid as exc:
        raise DeliveryFailure(FailureClass.INVALID_PAYLOAD, str(exc)) from exc
    return [Outgoing(m.chat_id, m.text, m.options) for m in messages]


async def _notification(entry: Entry, svc: Services,
                        mail: MailPrefetch | None) -> list[Outgoing] | Muted:
    account = account_of(entry, svc)
    cfg = account.config
    email_id = entry.fields.get("email_id", "").strip()
    account_id = entry.fields.get("account_id", "").strip()
    if not email_id:
        raise DeliveryFailure(FailureClass.INVALID_PAYLOAD, "entry has no email_id")
    with _mail_failures():
        source = await account.mail(svc.config.outbound)
        if account_id and account_id != source.account_id:
            raise DeliveryFailure(FailureClass.INVALID_PAYLOAD, "account is not the configured one")
        found = await mail.take(entry) if mail is not None else None
        if found is None:
            found = await source.metas([email_id])
        if not found:
            raise DeliveryFailure(FailureClass.NOT_FOUND, "email not found")
        facts = await facts_for(cfg, source, found[0])
    route = route_for(cfg, facts)  # the rules, and quiet hours at `routing.clock()`
    if route.muted and route.rule is not None:
        return Muted(route.rule)
    options = SendOptions(route.thread_id, route.silent, notification_keyboard(cfg, email_id))
    return [Outgoing(route.chat_id, render_notification(found[0], cfg.timezone), options)]


def _allowed_chat(entry: Entry, allowlist: tuple[int, ...]) -> int | None:
    """The entry's chat, checked against the allowlist again before any reply or JMAP call
    (issue #23): the ingress checked it, but an entry may come from anywhere that can write
    the stream, or from before the chat left the list. The ingress's rule
    (`ingress.parse_update`): an empty allowlist (a configuration older than the rule that
    one is needed) allows every chat. None when the entry names no chat."""
    chat = entry.fields.get("chat_id")
    if not chat:
        return None
    try:
        chat_id = int(chat)
    except ValueError as exc:
        raise DeliveryFailure(FailureClass.INVALID_PAYLOAD, "chat_id is not an integer") from exc
    if allowlist and chat_id not in allowlist:
        raise DeliveryFailure(FailureClass.INVALID_PAYLOAD, "chat is not on the allowlist")
    return chat_id


def chat_account(entry: Entry, svc: Services) -> AccountRuntime | None:
    """The account of the chat an update came from (SPEC G.4): every command, button and id
    is resolved in it. A chat of no account is `default`'s to refuse (its allowlist); None
    while nothing is configured."""
    chat = entry.fields.get("chat_id", "")
    account = svc.accounts.of_chat(int(chat)) if chat.lstrip("-").isdigit() else None
    return account or svc.accounts.get(DEFAULT_ACCOUNT)


def _chat_account(entry: Entry, svc: Services) -> AccountRuntime:
    account = chat_account(entry, svc)
    if account is None:
        raise DeliveryFailure(FailureClass.TRANSIENT, "not configured")
    return account


async def _replies(entry: Entry, svc: Services) -> list[Outgoing]:
    account = _chat_account(entry, svc)
    cfg = account.config
    chat_id = _allowed_chat(entry, cfg.chat_allowlist)
    if not account.enabled and chat_id is not None:
        if "callback_id" not in entry.fields and chat_update(entry).needs_no_reply:
            return []
        return [Outgoing(chat_id, texts.table(cfg.bot_language)["account_paused"],
                         SendOptions())]
    view = svc.for_account(account)
    if "callback_id" in entry.fields:  # a button pressed (issue #16)
        if chat_id is None:
            raise DeliveryFailure(FailureClass.INVALID_PAYLOAD, "button press without a chat")
        try:
            pressed = await handle_press(Press.of(entry.id, entry.fields), view, cfg)
        except MailError as exc:
            raise mail_failure(exc) from exc
        except NotConfigured as exc:
            raise DeliveryFailure(FailureClass.TRANSIENT, f"jmap: {type(exc).__name__}") from exc
        return [Outgoing(r.chat_id, r.text, r.options) for r in pressed]
    text = entry.fields.get("text")
    if text is None or chat_id is None:
        return []  # not a text message: acknowledged, no reply
    ctx = ConversationContext(view.redis, view.keys, cfg, view.config.outbound, mail=view.mail)
    try:
        incoming = IncomingMessage.of(chat_id, text, chat_update(entry))
        replies = await reply_to_update(incoming, ctx)
    except MailError as exc:
        raise mail_failure(exc) from exc
    except NotConfigured as exc:
        raise DeliveryFailure(FailureClass.TRANSIENT, f"jmap: {type(exc).__name__}") from exc
    return [Outgoing(r.chat_id, r.text, r.options) for r in replies]
