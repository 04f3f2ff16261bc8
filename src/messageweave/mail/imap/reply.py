"""Replying from the chat on an IMAP mailbox (issue #33, SPEC F.3; reference §7.15): the
`mail.source.ReplySender` of an IMAP source, the draft in `\\Drafts`, its Send by SMTP
submission (`mail.smtp`), its copy in `\\Sent`.

`ImapReplies` is a mixin: the host (`ImapReader`, which holds the connection) provides
`_imap()`, a logged-in `ImapClient` held for one sequence of commands (these SELECT Drafts or
Sent: no other command may run on the connection in between), and `_mail_config()`.

Once, whatever fails (the IMAP side of what JMAP's `$draft` gives, reference §7.13):
1. `submit_draft` fetches the draft's bytes and marks it `$MWSending` (a keyword, before any
   byte goes to SMTP);
2. sends exactly those bytes; a definite refusal (a reply code, or nothing reached the
   server) takes the marker off again; an answer that never came after the message's end
   (`SmtpUncertain`) leaves it;
3. marks it `$MWSent` (the server said 250);
4. APPENDs the bytes to `\\Sent` with `\\Seen` and an `X-MessageWeave-Draft: <draft id>` header
   (the Sent copy only: the recipients got the draft's bytes), then removes the draft (`\\Deleted`
   + `UID EXPUNGE` of its UID only).
`draft_state` reads that trail: `$MWSent` → "sent", and it finishes steps 4 (an APPEND or a
removal lost); `$MWSending` alone → "sent" (step 2's window, below); `\\Draft` → "draft";
the draft gone → "sent" when `\\Sent` holds a mail with its `X-MessageWeave-Draft`, else None.
The window left open: a worker killed (or an IMAP connection lost) between step 1 and step 3,
or an SMTP answer lost after the message's end, is reported "sent" though the server may not
have taken it: at most once, never twice. Such a draft stays in Drafts with `$MWSending`,
where the owner's mail client shows it.
"""

from __future__ import annotations

import abc
import datetime as dt
import email.errors
import email.policy
import email.utils
import re
from contextlib import AbstractAsyncContextManager
from email._header_value_parser import get_address_list
from email.header import decode_header, make_header
from email.message import EmailMessage
from email.parser import BytesHeaderParser

from messageweave.config.model import BusinessConfig
from messageweave.mail import smtp
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.errors import ImapRefused
from messageweave.mail.imap.ids import ImapMailId, mail_id, mailbox_key, parse_mail_id
from messageweave.mail.imap.wire import Text
from messageweave.mail.records import Address, Draft, DraftState, Identity, MailText
from messageweave.untrusted import SUBJECT_MAX_CHARS, clean, message_ids, plain_address

DRAFTS, SENT = "\\Drafts", "\\Sent"  # special-use attributes (RFC 6154)
_FALLBACK_NAMES = {DRAFTS: ("drafts",), SENT: ("sent", "sent items", "sent messages")}
SENDING = "$MWSending"  # on the draft before its bytes go to SMTP
SENT_KEYWORD = "$MWSent"  # on the draft once the SMTP server accepted it
DRAFT_HEADER = "X-MessageWeave-Draft"  # on the Sent copy: which draft it was
IDENTITY_ID = "smtp"  # the one identity of an IMAP source
HEADER_CAP = 64 * 1024  # bytes of the original's header fields read for a reply
_SOURCE_FIELDS = "FROM TO CC REPLY-TO SUBJECT MESSAGE-ID REFERENCES"
_MESSAGE_ID = re.compile(r"<[^<>\s]*>")
_SMTP_POLICY = email.policy.SMTP


class ImapReplies:
    """`ReplySender` over IMAP + SMTP; every failure a `mail.errors` one."""

    @abc.abstractmethod
    def _imap(self) -> AbstractAsyncContextManager[ImapClient]:
        """A logged-in client, this caller's alone until the block ends."""

    @abc.abstractmethod
    def _mail_config(self) -> BusinessConfig:
        """The configuration in force (the `imap_*` and `smtp_*` fields)."""

    async def can_submit(self) -> bool:
        return smtp.SmtpSettings.of(self._mail_config()) is not None

    async def username(self) -> str:
        return self._mail_config().imap_username

    async def identities(self) -> list[Identity]:
        """One: `smtp_from`, else the IMAP login when it is an address, else no address (the
        pipeline then answers as the recipient whose local part is the login's)."""
        cfg = self._mail_config()
        address = plain_address((cfg.smtp_from or "").strip()) or plain_address(
            cfg.imap_username.strip())
        return [Identity(IDENTITY_ID, "", address or "")]

    async def reply_source(self, email_id: str) -> MailText | None:
        """From, To, Cc, Reply-To, Subject, Message-ID and References of the original (at
        most `HEADER_CAP` bytes of them), cleaned as the JMAP parse cleans them."""
        parsed = parse_mail_id(email_id)
        if parsed is None:
            return None
        async with self._imap() as client:
            names = [i.name for i in await client.list_mailboxes() if i.selectable]
            name = next((n for n in names if mailbox_key(n) == parsed.box), None)
            if name is None or (await client.select(name, readonly=True)
                                ).uidvalidity != parsed.uidvalidity:
                return None
            item = f"BODY.PEEK[HEADER.FIELDS ({_SOURCE_FIELDS})]<0.{HEADER_CAP}>"
            found = (await client.uid_fetch([parsed.uid], ["UID", item])).get(parsed.uid)
        raw = next((v for k, v in (found.sections if found else {}).items()
                    if k.startswith("BODY[HEADER.FIELDS")), None)
        return None if found is None else _mail_text(email_id, raw or b"")

    async def create_draft(self, draft: Draft) -> str:
        """The reply built with `email.policy.SMTP` and APPENDed to `\\Drafts` with `\\Draft
        \\Seen`; its id (the APPENDUID's). `ImapRefused` when a header value is not on one
        clean line (a CR/LF would start a header of its own) or an address is not a bare
        addr-spec: nothing is stored then."""
        raw = build_draft(draft)
        async with self._imap() as client:
            drafts = await _mailbox(client, DRAFTS)
            copied = await client.append(drafts, raw, flags=["\\Draft", "\\Seen"])
            if copied is not None and len(copied.uids) == 1:
                return mail_id(drafts, copied.uidvalidity, copied.uids[0])
            state = await client.select(drafts)  # no UIDPLUS: find it by its Message-ID
            uids = await client.uid_search("HEADER", "MESSAGE-ID",
                                           Text(_header(raw, "Message-ID")))
        if len(uids) != 1:
            raise ImapRefused("draft stored without a UID")
        return mail_id(drafts, state.uidvalidity, uids[0])

    async def draft_state(self, email_id: str) -> DraftState | None:
        """"draft", "sent" or None, from the draft's keywords or its copy in Sent (the module
        docstring); a draft sent whose Sent copy or removal was lost is finished here."""
        parsed = parse_mail_id(email_id)
        if parsed is None:
            return None
        async with self._imap() as client:
            drafts = await _mailbox(client, DRAFTS)
            flags = await _draft_flags(client, drafts, parsed)
            if flags is None or "\\Deleted" in flags:
                return "sent" if await _in_sent(client, email_id) else None
            if SENT_KEYWORD in flags:
                raw = await _draft_bytes(client, parsed.uid)
                await _file_sent(client, drafts, email_id, parsed.uid, raw, check=True)
                return "sent"
            if SENDING in flags:
                return "sent"
            return "draft" if "\\Draft" in flags else None

    async def submit_draft(self, email_id: str, identity_id: str) -> str | None:
        """The draft's bytes sent by SMTP as they are (envelope: its From, To and Cc), then
        filed in `\\Sent` and the draft removed; the time the server accepted it (RFC 3339).
        `identity_id` is the one identity. The steps and what a failure leaves: the module
        docstring."""
        settings = smtp.SmtpSettings.of(self._mail_config())
        parsed = parse_mail_id(email_id)
        if settings is None or parsed is None:
            raise ImapRefused("no submission" if settings is None else "not a draft")
        async with self._imap() as client:
            drafts = await _mailbox(client, DRAFTS)
            flags = await _draft_flags(client, drafts, parsed)
            if flags is None or "\\Deleted" in flags:
                raise ImapRefused("draft gone")
            if {SENDING, SENT_KEYWORD} & flags:
                return None  # an earlier attempt sent it (or may have): never twice
            raw = await _draft_bytes(client, parsed.uid)
            mail_from, rcpt_to = envelope_of(raw)
            await client.uid_store([parsed.uid], [SENDING])
            try:
                await smtp.send_message(settings, raw, mail_from, rcpt_to)
            except smtp.SmtpUncertain:
                raise
            except smtp.SmtpError:
                await client.uid_store([parsed.uid], [SENDING], mode="-")
                raise
            at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            await client.uid_store([parsed.uid], [SENT_KEYWORD])
            await _file_sent(client, drafts, email_id, parsed.uid, raw, check=False)
        return at

    async def destroy_draft(self, email_id: str) -> None:
        """The draft removed from Drafts (`\\Deleted` + `UID EXPUNGE` of its UID); nothing
        when it is gone."""
        parsed = parse_mail_id(email_id)
        if parsed is None:
            return
        async with self._imap() as client:
            drafts = await _mailbox(client, DRAFTS)
            if await _draft_flags(client, drafts, parsed) is not None:
                await _expunge(client, parsed.uid)


# --- the draft ------------------------------------------------------------------------------


def build_draft(draft: Draft) -> bytes:
    """The draft as RFC 5322 bytes (CRLF): From, To, Subject, Date, Message-ID, In-Reply-To,
    References, the text as its only part (text/plain, UTF-8, quoted-printable).
    `ImapRefused` for a value with CR, LF or another character `untrusted.clean` would
    change, or an address that is not a bare addr-spec (or no recipient)."""
    sender = _address(draft.sender)
    if not draft.to:
        raise ImapRefused("unsafe address")
    msg = EmailMessage(policy=_SMTP_POLICY)
    msg["From"] = sender
    msg["To"] = ", ".join(_address(a) for a in draft.to)
    msg["Subject"] = _one_line(draft.subject)
    msg["Date"] = email.utils.formatdate(usegmt=True)
    msg["Message-ID"] = email.utils.make_msgid(domain=sender.rsplit("@", 1)[-1].rstrip(">"))
    if in_reply_to := message_ids(draft.in_reply_to):
        msg["In-Reply-To"] = " ".join(f"<{i}>" for i in in_reply_to)
    if references := message_ids(draft.references):
        msg["References"] = " ".join(f"<{i}>" for i in references)
    msg.set_content(draft.text, cte="quoted-printable")
    for _name, value in msg.items():
        if "\r" in str(value) or "\n" in str(value):
            raise ImapRefused("unsafe header")
    return msg.as_bytes()


def envelope_of(raw: bytes) -> tuple[str, list[str]]:
    """MAIL FROM and RCPT TO of a draft: its From and its To and Cc addresses, each a bare
    addr-spec (`ImapRefused` otherwise: the draft was changed outside the bot)."""
    msg = BytesHeaderParser(policy=_SMTP_POLICY).parsebytes(raw)
    senders = _addr_specs(msg, "From")
    recipients = list(dict.fromkeys(_addr_specs(msg, "To") + _addr_specs(msg, "Cc")))
    if len(senders) != 1 or not recipients:
        raise ImapRefused("unsafe address")
    return senders[0], recipients


def _address(address: Address) -> str:
    email_ = plain_address(address.email)
    if email_ is None:
        raise ImapRefused("unsafe address")
    return email.utils.formataddr((_one_line(address.name or ""), email_))


def _one_line(value: str) -> str:
    if value != clean(value, max(len(value), 1)):
        raise ImapRefused("unsafe header")
    return value


def _addr_specs(msg: EmailMessage, name: str) -> list[str]:
    found = []
    for _display, addr in email.utils.getaddresses([str(v) for v in msg.get_all(name, [])]):
        spec = plain_address(addr)
        if spec is None:
            raise ImapRefused("unsafe address")
        found.append(spec)
    return found


def _header(raw: bytes, name: str) -> str:
    return str(BytesHeaderParser(policy=_SMTP_POLICY).parsebytes(raw).get(name, ""))


# --- the original's headers -----------------------------------------------------------------


def _mail_text(email_id: str, raw: bytes) -> MailText:
    """The header fields as `MailText`. Addresses go through the stdlib's RFC 5322 address
    parser (what `email.policy.default` uses) without its `Address` check, which refuses a
    whole header whose display name decodes to a CR/LF: the reply would lose its recipient.
    The names are cleaned instead (`untrusted.clean`), as the JMAP parse does."""
    msg = BytesHeaderParser(policy=email.policy.compat32).parsebytes(raw)

    def values(name: str) -> list[str]:
        return [str(v) for v in msg.get_all(name, [])]

    def ids(name: str) -> tuple[str, ...]:
        return message_ids(_MESSAGE_ID.findall(" ".join(values(name))))

    subject = values("Subject")[:1]
    return MailText(
        id=email_id, sender=_addresses(values("From")), to=_addresses(values("To")),
        cc=_addresses(values("Cc")), reply_to=_addresses(values("Reply-To")),
        subject=clean(_decoded(subject[0]) if subject else None, SUBJECT_MAX_CHARS) or None,
        sent_at=None, received_at=None, message_ids=ids("Message-ID"),
        references=ids("References"),
    )  # fmt: skip


def _addresses(values: list[str]) -> tuple[Address, ...]:
    found = []
    for value in values:
        try:
            mailboxes = get_address_list(value)[0].mailboxes
        except (email.errors.HeaderParseError, IndexError, ValueError):  # malformed
            continue
        found += [Address(clean(m.display_name) or None, m.addr_spec or None)
                  for m in mailboxes]
    return tuple(found)


def _decoded(value: str) -> str:
    """RFC 2047 encoded words decoded; the raw text when they cannot be."""
    try:
        return str(make_header(decode_header(value)))
    except (email.errors.HeaderParseError, LookupError, UnicodeDecodeError, ValueError):
        return value


# --- mailboxes, Sent ------------------------------------------------------------------------


async def _mailbox(client: ImapClient, attribute: str) -> str:
    """The mailbox marked `attribute`, else one with the usual name; `ImapRefused` if none."""
    infos = [i for i in await client.list_mailboxes() if i.selectable]
    for info in infos:
        if info.has(attribute):
            return info.name
    for info in infos:
        if info.name.lower() in _FALLBACK_NAMES[attribute]:
            return info.name
    raise ImapRefused(f"no {attribute[1:]} mailbox")


async def _draft_flags(client: ImapClient, drafts: str, parsed: ImapMailId) -> set[str] | None:
    """The flags of draft `parsed`, Drafts left selected; None when Drafts has no such mail
    (another mailbox's id, a UIDVALIDITY changed since, the UID gone)."""
    if parsed.box != mailbox_key(drafts):
        return None
    if (await client.select(drafts)).uidvalidity != parsed.uidvalidity:
        return None
    found = (await client.uid_fetch([parsed.uid], ["UID", "FLAGS"])).get(parsed.uid)
    return None if found is None else set(found.flags or ())


async def _draft_bytes(client: ImapClient, uid: int) -> bytes:
    found = (await client.uid_fetch([uid], ["UID", "BODY.PEEK[]"])).get(uid)
    raw = found.sections.get("BODY[]") if found else None
    if raw is None:
        raise ImapRefused("draft gone")
    return raw


async def _in_sent(client: ImapClient, draft_id: str) -> bool:
    await client.select(await _mailbox(client, SENT), readonly=True)
    return bool(await client.uid_search("HEADER", DRAFT_HEADER, Text(draft_id)))


async def _file_sent(client: ImapClient, drafts: str, draft_id: str, uid: int, raw: bytes, *,
                     check: bool) -> None:
    """Steps 4: the Sent copy (unless `check` finds it there already), then the draft
    removed. Leaves Drafts selected."""
    if not check or not await _in_sent(client, draft_id):
        copy = f"{DRAFT_HEADER}: {draft_id}\r\n".encode("ascii") + raw
        await client.append(await _mailbox(client, SENT), copy, flags=["\\Seen"])
    await client.select(drafts)
    await _expunge(client, uid)


async def _expunge(client: ImapClient, uid: int) -> None:
    """`\\Deleted`, then `UID EXPUNGE` of that UID only (UIDPLUS; without it the mail stays
    marked `\\Deleted`, which `draft_state` reads as gone, until a client expunges)."""
    await client.uid_store([uid], ["\\Deleted"])
    if "UIDPLUS" in client.capabilities:
        await client.uid_expunge([uid])
