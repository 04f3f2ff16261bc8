"""The backlog digest (issue #16): what a digest entry of `stalwart:jmap` becomes.

A reconcile pass that finds more new mails than `digest_threshold` enqueues them as one entry
`{kind: digest, account_id, email_ids}` (`store.mail_entries.enqueue_digest`) instead of one each.
Here every mail of it is routed like a notification (`pipeline.routing`; a muted one and one no
longer in the mailbox are left out) and the mails are grouped by chat and forum topic. A group
of more than `digest_threshold` mails gets one digest message: the count, one line per mail
"sender — subject", newest first, at most `MAX_LINES`, then "and N more", in the bot's language,
silent when all its mails are (quiet hours), without buttons (one row of three per mail would
not fit). A smaller group gets the usual notification per mail, with its buttons. They are all
messages of the one entry, so the ledger resumes a crash where it stopped and never sends one
twice.

The first attempt writes the entry's plan (`digest:` key, `keys.digest_plan`: which mails go
into which message, where; ids and chats only, no mail content) and every later attempt follows
it, so a retry sends the same messages in the same order even when mails were deleted or rules
changed meanwhile (a notification whose mail is gone by then says so). The trace reads it to
name the message a mail went out in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from messageweave.chat import texts
from messageweave.chat.telegram import SendOptions
from messageweave.config.features import BotLanguage
from messageweave.config.model import BusinessConfig
from messageweave.config.outbound import OutboundConfig
from messageweave.mail.records import EmailMeta
from messageweave.mail.source import MailReader
from messageweave.pipeline.buttons import notification_keyboard
from messageweave.pipeline.notify import render_notification
from messageweave.pipeline.routing import Route, facts_for, route_for
from messageweave.services import AccountRuntime
from messageweave.store import keys
from messageweave.store.keys import AccountKeys
from messageweave.store.mail_entries import DIGEST_KIND, DIGEST_MAX_IDS
from messageweave.store.redis import Redis, text_of
from messageweave.store.streams import Entry, is_mail_stream
from messageweave.untrusted import clean

MAX_LINES = 20
LINE_MAX_CHARS = 100  # 20 such lines and the rest stay one Telegram message
GET_PAGE = 256  # mails per Email/get

class DigestInvalid(ValueError):
    """The entry is not a digest this instance can deliver (the reason holds no mail content)."""


def is_digest(entry: Entry) -> bool:
    """A digest entry: the `kind` only a mail stream's entries carry (`store.mail_entries`)."""
    return entry.fields.get("kind") == DIGEST_KIND and is_mail_stream(entry.stream)


@dataclass(frozen=True)
class Message:
    chat_id: int
    text: str
    options: SendOptions


# ----------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Part:
    """One message of the plan: a digest of `email_ids`, or the notification of its one mail."""

    chat_id: int
    thread_id: int | None
    silent: bool
    digest: bool
    email_ids: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"chat_id": self.chat_id, "thread_id": self.thread_id, "silent": self.silent,
                "digest": self.digest, "email_ids": list(self.email_ids)}


@dataclass(frozen=True)
class Plan:
    parts: tuple[Part, ...]
    muted: Mapping[str, str] = field(default_factory=dict)  # email id → the rule's name
    gone: tuple[str, ...] = ()  # not in the mailbox when the plan was made

    def to_json(self) -> str:
        return json.dumps({"parts": [p.to_json() for p in self.parts], "muted": dict(self.muted),
                           "gone": list(self.gone)}, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> Plan:
        data = json.loads(raw)
        parts = tuple(Part(int(p["chat_id"]), p["thread_id"], bool(p["silent"]),
                           bool(p["digest"]), tuple(p["email_ids"])) for p in data["parts"])
        return cls(parts, dict(data["muted"]), tuple(data["gone"]))

    def place_of(self, email_id: str) -> int | None:
        """The index of the message `email_id` went out in (None: not in any)."""
        return next((n for n, p in enumerate(self.parts) if email_id in p.email_ids), None)


def make_plan(cfg: BusinessConfig, email_ids: Sequence[str], metas: Mapping[str, EmailMeta],
              routes: Mapping[str, Route]) -> Plan:
    """Group the routed mails by (chat, topic), in the order of their first mail; a group of
    more than `digest_threshold` mails is one digest part, a smaller one a part per mail."""
    groups: dict[tuple[int, int | None], list[str]] = {}
    muted: dict[str, str] = {}
    gone: list[str] = []
    for email_id in dict.fromkeys(email_ids):
        route = routes.get(email_id)
        if email_id not in metas or route is None:
            gone.append(email_id)
        elif route.muted:
            muted[email_id] = route.rule or ""
        else:
            groups.setdefault(route.destination, []).append(email_id)
    parts: list[Part] = []
    threshold = cfg.digest_threshold
    for (chat, thread), ids in groups.items():
        if threshold and len(ids) > threshold:
            silent = all(routes[i].silent for i in ids)
            parts.append(Part(chat, thread, silent, True, tuple(ids)))
        else:
            parts += [Part(chat, thread, routes[i].silent, False, (i,)) for i in ids]
    return Plan(tuple(parts), muted, tuple(gone))


async def load_plan(redis: Redis, entry_id: str,
                    names: AccountKeys = keys.DEFAULT) -> Plan | None:
    """The plan of the digest entry `entry_id` of the account whose `names` these are."""
    raw = text_of(await redis.get(names.digest_plan(entry_id)))
    return Plan.from_json(raw) if raw is not None else None


async def _keep_plan(redis: Redis, entry_id: str, plan: Plan, names: AccountKeys) -> Plan:
    """Store `plan` unless an attempt stored one first; the one stored."""
    key = names.digest_plan(entry_id)
    if await redis.set(key, plan.to_json(), nx=True, ex=keys.COMMITTED_TTL_S):
        return plan
    return await load_plan(redis, entry_id, names) or plan


# ----------------------------------------------------------------------------- the texts


def _cut(text: str) -> str:
    return text if len(text) <= LINE_MAX_CHARS else text[:LINE_MAX_CHARS - 1] + "…"


def _who(sender: str | None, table: Mapping[str, str]) -> str:
    """The sender's display name, else its address."""
    if not sender or not sender.strip():
        return table["digest_unknown_sender"]
    name = _name_before_address(sender)
    if name is None:
        return sender
    return name.strip('" ') or sender


def _name_before_address(sender: str) -> str | None:
    """What comes before a trailing `<address>`, spaces dropped; None without one (or with a line
    break before it). The regex it replaces, `^(.*?)\\s*<[^<>]*>\\s*$`, retried a sender's run
    of spaces from each of its characters: quadratic in a name the mail chose."""
    rest = sender.rstrip()
    at = rest.rfind("<")
    if at < 0 or not rest.endswith(">") or ">" in rest[at + 1:-1]:
        return None
    name = rest[:at].rstrip()
    return None if "\n" in name else name


def digest_text(language: BotLanguage, count: int, metas: Sequence[EmailMeta]) -> str:
    """The digest of `count` mails: a line for each of `metas` (newest first, at most
    `MAX_LINES`), then "and N more" for the rest of `count`."""
    table = texts.table(language)
    newest = sorted(metas, key=lambda m: -(m.received_at or 0))[:MAX_LINES]
    lines = [table["digest_header"].format(count=count)]
    for meta in newest:
        # Cleaned first (`untrusted.clean`: one line, no control or format character, short).
        subject = clean(meta.subject, LINE_MAX_CHARS) or table["digest_no_subject"]
        sender = _who(clean(meta.sender), table)
        lines.append(_cut(table["digest_line"].format(sender=sender, subject=subject)))
    if count > len(newest):
        lines.append(table["digest_more"].format(count=count - len(newest)))
    return "\n".join(lines)


def render(cfg: BusinessConfig, plan: Plan, metas: Mapping[str, EmailMeta]) -> list[Message]:
    """One message per part of `plan`, from the mails as they are now."""
    table = texts.table(cfg.bot_language)
    out = []
    for part in plan.parts:
        if part.digest:
            found = [metas[i] for i in part.email_ids if i in metas]
            text = digest_text(cfg.bot_language, len(part.email_ids), found)
            out.append(Message(part.chat_id, text, SendOptions(part.thread_id, part.silent)))
            continue
        [email_id] = part.email_ids
        meta = metas.get(email_id)
        text = (render_notification(meta, cfg.timezone) if meta is not None
                else table["digest_gone"].format(email_id=email_id))
        keyboard = notification_keyboard(cfg, email_id) if meta is not None else None
        out.append(Message(part.chat_id, text,
                           SendOptions(part.thread_id, part.silent, keyboard)))
    return out


# ----------------------------------------------------------------------------- the entry


def email_ids_of(entry: Entry) -> list[str]:
    ids = list(dict.fromkeys(entry.fields.get("email_ids", "").split()))
    if not ids:
        raise DigestInvalid("digest entry has no email_ids")
    if len(ids) > DIGEST_MAX_IDS:
        raise DigestInvalid(f"digest entry holds more than {DIGEST_MAX_IDS} mails")
    return ids


async def _fetch(source: MailReader, ids: Sequence[str]) -> dict[str, EmailMeta]:
    found: dict[str, EmailMeta] = {}
    for start in range(0, len(ids), GET_PAGE):
        page = ids[start:start + GET_PAGE]
        for meta in await source.metas(page, brief=True):
            found[meta.id] = meta
    return found


async def messages(entry: Entry, redis: Redis, account: AccountRuntime,
                   outbound: OutboundConfig) -> list[Message]:
    """The messages of a digest entry of `account`'s stream. `DigestInvalid`; `NotConfigured`
    and mail errors propagate (the entry is retried)."""
    cfg = account.config
    ids = email_ids_of(entry)
    source = await account.mail(outbound)
    mail_account = entry.fields.get("account_id", "").strip()
    if mail_account and mail_account != source.account_id:
        raise DigestInvalid("account is not the configured one")
    plan = await load_plan(redis, entry.id, account.keys)
    if plan is not None:
        return render(cfg, plan, await _fetch(source, [i for p in plan.parts
                                                        for i in p.email_ids]))
    metas = await _fetch(source, ids)
    routes = {i: route_for(cfg, await facts_for(cfg, source, meta)) for i, meta in metas.items()}
    plan = await _keep_plan(redis, entry.id, make_plan(cfg, ids, metas, routes), account.keys)
    return render(cfg, plan, metas)
