"""The one IMAP connection a mail source reads and changes mail over (`MailboxSession`), its
mailbox list, and the fetches the source's methods share.

- `run(work)`: every use of the connection, one at a time (a SELECT and the commands that
  need it must not interleave with another task's); connects on first use, and once more when
  the connection broke (`ImapTransportError`) and `work` runs again from its start.
- The mailbox list (LIST with the special-use attributes) is kept `LISTING_TTL_S`; a mailbox
  key it does not know reads it again, at most every `LISTING_REFRESH_MIN_S`. A mailbox id
  (`EmailMeta.mailbox_ids`) is `ids.mailbox_key(name)`; its role is `inbox` for INBOX, else
  the lower-case RFC 6154 attribute (`archive`, `sent`, `drafts`, `junk`, `trash`).
- A mail id names mailbox, UIDVALIDITY and UID (`ids.parse_mail_id`): one of a mailbox that is
  gone, of an older UIDVALIDITY or no IMAP id at all is not found — never another mail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from messageweave.config.model import EXCLUDED_ROLES
from messageweave.mail.imap import bodies, headers
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.errors import ImapCommandError, ImapTransportError
from messageweave.mail.imap.ids import ImapMailId, mail_id, mailbox_key, parse_mail_id
from messageweave.mail.imap.responses import BodyPart, Fetched, MailboxInfo
from messageweave.mail.records import EmailMeta

T = TypeVar("T")
LISTING_TTL_S = 60.0
LISTING_REFRESH_MIN_S = 2.0
PREVIEW_CHARS = 256  # as JMAP's `preview`
PREVIEW_TEXT_BYTES = 2048  # of the first text part, fetched for a preview
BRIEF_ITEMS = ("UID", "FLAGS", "INTERNALDATE", "ENVELOPE")
FULL_ITEMS = (*BRIEF_ITEMS, "BODYSTRUCTURE")
_ROLES = {"\\archive": "archive", "\\sent": "sent", "\\drafts": "drafts", "\\junk": "junk",
          "\\trash": "trash"}


def role_of(info: MailboxInfo) -> str | None:
    if info.name.upper() == "INBOX":
        return "inbox"
    return next((_ROLES[a.lower()] for a in info.attributes if a.lower() in _ROLES), None)


@dataclass(frozen=True)
class Located:
    """A mail id taken apart: its mailbox's name, UIDVALIDITY and UID."""

    mailbox: str
    uidvalidity: int
    uid: int


@dataclass(frozen=True)
class _MailboxList:
    read_at: float  # time.monotonic()
    boxes: dict[str, MailboxInfo]  # mailbox_key(name) → the LIST entry


class MailboxSession:
    """Owns one `ImapClient` (connected on first use) and the account's mailbox list."""

    def __init__(self, client: ImapClient, notify_mailboxes: Sequence[str]) -> None:
        self._client = client
        self._notify = tuple(dict.fromkeys(notify_mailboxes))
        self._using = asyncio.Lock()
        self._listing: _MailboxList | None = None

    @property
    def account_id(self) -> str:
        """The IMAP user name: what the catch-up's stream entries and dedup claims carry."""
        return self._client.username

    async def aclose(self) -> None:
        await self._client.aclose()

    async def run(self, work: Callable[[ImapClient], Awaitable[T]]) -> T:
        """`work` on the connection, alone; once more on a fresh connection when it broke."""
        async with self._using:
            for attempt in (1, 2):
                if not self._client.connected:
                    await self._client.connect()
                try:
                    return await work(self._client)
                except ImapTransportError:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

    # ------------------------------------------------------------------ mailboxes
    async def boxes(self, client: ImapClient, wanted: Iterable[str] = ()) -> dict[str, MailboxInfo]:
        """The selectable mailboxes by `mailbox_key`, read again when stale or when one of
        `wanted` is unknown (at most every `LISTING_REFRESH_MIN_S`)."""
        held, now = self._listing, time.monotonic()
        if held is not None:
            age = now - held.read_at
            if age < LISTING_TTL_S and (age < LISTING_REFRESH_MIN_S
                                        or set(wanted) <= held.boxes.keys()):
                return held.boxes
        found = {mailbox_key(i.name): i for i in await client.list_mailboxes() if i.selectable}
        self._listing = _MailboxList(now, found)
        return found

    async def notify_boxes(self, client: ImapClient) -> list[MailboxInfo]:
        """The configured notify mailboxes that exist and have none of the excluded roles."""
        by_key = await self.boxes(client, map(mailbox_key, self._notify))
        found = [by_key.get(mailbox_key(name)) for name in self._notify]
        return [i for i in found if i is not None and role_of(i) not in EXCLUDED_ROLES]

    async def locate(self, client: ImapClient, email_id: str) -> Located | None:
        parsed: ImapMailId | None = parse_mail_id(email_id)
        if parsed is None:
            return None
        info = (await self.boxes(client, [parsed.box])).get(parsed.box)
        return None if info is None else Located(info.name, parsed.uidvalidity, parsed.uid)

    async def select(self, client: ImapClient, name: str, uidvalidity: int | None = None, *,
                     readonly: bool = True) -> int | None:
        """SELECT (EXAMINE when `readonly`) `name`: its UIDVALIDITY, or None when the mailbox
        is gone or (given `uidvalidity`) its UIDVALIDITY is another one."""
        try:
            state = await client.select(name, readonly=readonly)
        except ImapCommandError:  # NO: deleted or renamed since the list was read
            self._listing = None
            return None
        if uidvalidity is not None and state.uidvalidity != uidvalidity:
            return None
        return state.uidvalidity

    # ------------------------------------------------------------------ fetching
    async def fetch_metas(self, client: ImapClient, box: str, uidvalidity: int,
                          uids: Sequence[int], *, brief: bool) -> dict[int, EmailMeta]:
        """The metas of `uids` in the selected mailbox `box` (missing ones left out); not
        `brief`: with the preview from the first text part."""
        if not uids:
            return {}
        fetched = await client.uid_fetch(uids, BRIEF_ITEMS if brief else FULL_ITEMS)
        previews: dict[int, str] = {}
        if not brief:
            texts = await self.fetch_texts(client, fetched.values(), PREVIEW_TEXT_BYTES,
                                           first_only=True)
            previews = {uid: preview_of(text)
                        for uid, (text, _) in (await texts_of(texts, None)).items()}
        return {uid: meta_of(box, uidvalidity, item, previews.get(uid, ""))
                for uid, item in fetched.items()}

    async def fetch_texts(self, client: ImapClient, items: Iterable[Fetched], text_bytes: int,
                          *, first_only: bool = False) -> dict[int, list[bodies.FetchedPart]]:
        """The text parts (`bodies.text_parts`) of mails whose BODYSTRUCTURE was fetched, each
        fetched partially for a text of `text_bytes`: one UID FETCH per distinct item."""
        wanted: dict[str, list[tuple[int, int, int]]] = {}  # item → (uid, position, bytes)
        parts: dict[int, list[BodyPart]] = {}
        for item in items:
            if item.uid is None or item.bodystructure is None:
                continue
            found = bodies.text_parts(item.bodystructure)[:1 if first_only else None]
            parts[item.uid] = found
            for n, part in enumerate(found):
                size = bodies.fetch_bytes(part, text_bytes)
                wanted.setdefault(f"BODY.PEEK[{part.section}]<0.{size}>", []).append(
                    (item.uid, n, size))
        raw: dict[tuple[int, int], bytes] = {}
        for name, members in wanted.items():
            got = await client.uid_fetch([uid for uid, _, _ in members], ["UID", name])
            section = name[len("BODY.PEEK"):name.index("]") + 1]
            for uid, n, _ in members:
                if uid in got:
                    raw[uid, n] = _section(got[uid], "BODY" + section) or b""
        return {uid: [bodies.FetchedPart(p, data, p.size > len(data))
                      for n, p in enumerate(found) if (data := raw.get((uid, n))) is not None]
                for uid, found in parts.items()}


def meta_of(box: str, uidvalidity: int, item: Fetched, preview: str = "",
            text: str | None = None, truncated: bool = False) -> EmailMeta:
    env = item.envelope
    assert item.uid is not None
    return EmailMeta(
        id=mail_id(box, uidvalidity, item.uid),
        sender=headers.sender(env),
        subject=env.subject if env else None,
        received_at=headers.unix(item.internaldate),
        mailbox_ids=frozenset({mailbox_key(box)}),
        keywords=headers.keywords(item.flags),
        preview=preview,
        text=text,
        text_truncated=truncated,
    )


async def texts_of(parts: dict[int, list[bodies.FetchedPart]], cap: int | None
                   ) -> dict[int, tuple[str, bool]]:
    """`bodies.text_of` of each mail's parts; off the event loop when there is HTML to convert
    (CPU work of up to a few hundred milliseconds)."""
    def read() -> dict[int, tuple[str, bool]]:
        return {uid: bodies.text_of(found, cap) for uid, found in parts.items()}

    if any(bodies.is_html(p.part) for found in parts.values() for p in found):
        return await asyncio.to_thread(read)
    return read()


def preview_of(text: str) -> str:
    return " ".join(text[:PREVIEW_CHARS * 8].split())[:PREVIEW_CHARS]


def _section(item: Fetched, name: str) -> bytes | None:
    """The bytes of `BODY[...]` as the server named it (`BODY[1]<0>` for a partial one)."""
    for key, value in item.sections.items():
        if key == name or key.startswith(name + "<"):
            return value
    return None
