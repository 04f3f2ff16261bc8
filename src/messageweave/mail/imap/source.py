"""`ImapReader`: the `MailReader` and `MailActions` of an IMAP mailbox (issue #33), over one
connection (`session.MailboxSession`: connected on first use, once more when it broke). The
`ReplySender` half is `mail.imap.reply.ImapReplies`; `ImapSource` joins the two.

- `metas`: ENVELOPE, INTERNALDATE and FLAGS (as JMAP keywords), the mailbox as its one
  mailbox id; not `brief`, the preview from the first text part (`BODY.PEEK[n]<0.2048>`).
- `mail_with_text`, `read_email`: only the text parts (`bodies.text_parts`), each fetched
  partially for the bytes asked for, the transfer encoding and the charset undone, HTML
  converted off the event loop. `read_email`'s header fields are read from
  `BODY.PEEK[HEADER.FIELDS (...)]` (`headers`), so Reply-To is the mail's own, not ENVELOPE's
  stand-in.
- `attachments`: the other leaves of BODYSTRUCTURE; `blob_id` is the mail id and the part's
  section (`{email_id}/{section}`), the size the decoded size estimated from the encoded one.
- `download`: BODYSTRUCTURE read again and the part refused (`ImapTooLarge`) before any of
  its bytes are fetched when it is larger than `max_bytes` (at most `MAX_DOWNLOAD_BYTES`); then
  only that part, at most the encoded bytes that limit allows, decoded.
- `mark_seen` (`+FLAGS \\Seen`), `archive` (`UID MOVE` to the `\\Archive` mailbox, else one
  named `Archive`; `ImapRefused("no-archive-mailbox")` when there is neither: an IMAP source
  creates no mailbox). False when the mail is gone; a NO is `ImapRefused`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from messageweave.aio import cancel
from messageweave.config.model import BusinessConfig
from messageweave.mail.errors import MailError
from messageweave.mail.imap import bodies, headers
from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.errors import (
    ImapCapabilityError,
    ImapCommandError,
    ImapRefused,
    ImapTooLarge,
)
from messageweave.mail.imap.ids import parse_mail_id
from messageweave.mail.imap.kept import KeptConnection
from messageweave.mail.imap.reply import ImapReplies
from messageweave.mail.imap.responses import BodyPart, Fetched, MailboxInfo
from messageweave.mail.imap.searching import ImapSearch
from messageweave.mail.imap.session import (
    FULL_ITEMS,
    Located,
    meta_of,
    preview_of,
    role_of,
    texts_of,
)
from messageweave.mail.records import Attachment, EmailMeta, MailText
from messageweave.untrusted import clean

MAX_DOWNLOAD_BYTES = 50 * 1024 * 1024
ARCHIVE_NAME = "Archive"
NO_ARCHIVE = "no-archive-mailbox"


class ImapReader(ImapSearch):
    """Reading and changing the mail of one IMAP account (`mail.source.MailReader`,
    `MailActions`)."""

    async def metas(self, email_ids: Sequence[str], *, brief: bool = False) -> list[EmailMeta]:
        """The mails `email_ids`, in that order, the unknown and stale ones left out."""
        async def work(client: ImapClient) -> dict[str, EmailMeta]:
            groups: dict[tuple[str, int], list[int]] = {}
            for email_id in dict.fromkeys(email_ids):
                if (at := await self.locate(client, email_id)) is not None:
                    groups.setdefault((at.mailbox, at.uidvalidity), []).append(at.uid)
            found: dict[str, EmailMeta] = {}
            for (box, validity), uids in groups.items():
                if await self.select(client, box, validity) is not None:
                    metas = await self.fetch_metas(client, box, validity, uids, brief=brief)
                    found |= {m.id: m for m in metas.values()}
            return found

        found = await self.run(work)
        return [found[i] for i in email_ids if i in found]

    async def mail_with_text(self, email_id: str, *, text_max_bytes: int) -> EmailMeta | None:
        """One mail with its text (at most `text_max_bytes` of UTF-8); None when gone."""
        async def work(client: ImapClient) -> EmailMeta | None:
            got = await self._fetch_one(client, email_id, FULL_ITEMS)
            if got is None:
                return None
            at, item = got
            parts = await self.fetch_texts(client, [item], text_max_bytes)
            text, cut = (await texts_of(parts, text_max_bytes)).get(at.uid, ("", False))
            return meta_of(at.mailbox, at.uidvalidity, item, preview_of(text), text, cut)

        return await self.run(work)

    async def mailbox_roles(self, mailbox_ids: frozenset[str]) -> frozenset[str]:
        """The roles of the mailboxes `mailbox_ids` (the list kept a minute)."""
        boxes = await self.run(lambda c: self.boxes(c, mailbox_ids))
        return frozenset(role for key in mailbox_ids
                         if (info := boxes.get(key)) and (role := role_of(info)))

    async def read_email(self, email_id: str, *, text_cap: int) -> MailText | None:
        """One mail as Read shows it, its text cut at `text_cap` bytes; None when gone."""
        async def work(client: ImapClient) -> MailText | None:
            got = await self._fetch_one(client, email_id,
                                        ("UID", "INTERNALDATE", "BODYSTRUCTURE",
                                         headers.fields_item()))
            if got is None:
                return None
            at, item = got
            parts = await self.fetch_texts(client, [item], text_cap)
            text, cut = (await texts_of(parts, text_cap)).get(at.uid, ("", False))
            raw = next(iter(item.sections.values()), None) or b""
            msg = headers.parse(raw)
            return MailText(
                id=email_id,
                sender=headers.addresses(msg, "from"),
                to=headers.addresses(msg, "to"),
                cc=headers.addresses(msg, "cc"),
                reply_to=headers.addresses(msg, "reply-to"),
                subject=headers.subject(msg),
                sent_at=headers.sent_at(msg),
                received_at=headers.utc_date(item.internaldate),
                message_ids=headers.ids(msg, "message-id"),
                references=headers.ids(msg, "references"),
                text=text,
                text_truncated=cut,
                attachments=_attachments(email_id, item.bodystructure),
            )

        return await self.run(work)

    async def attachments(self, email_id: str) -> list[Attachment] | None:
        """The mail's attachments (no bytes); None when gone."""
        got = await self.run(lambda c: self._fetch_one(c, email_id, ("UID", "BODYSTRUCTURE")))
        return None if got is None else list(_attachments(email_id, got[1].bodystructure))

    async def download(self, attachment: Attachment, name: str, *, max_bytes: int) -> bytes:
        """The attachment's bytes (`name` is not needed); `ImapTooLarge` before its bytes are
        fetched when its size is past `max_bytes`, or once they are, decoded; `ImapRefused`
        when the mail or the part is gone."""
        email_id, _, section = attachment.blob_id.rpartition("/")
        limit = min(max_bytes, MAX_DOWNLOAD_BYTES)

        async def work(client: ImapClient) -> bytes:
            got = await self._fetch_one(client, email_id, ("UID", "BODYSTRUCTURE"))
            part = bodies.find_part(got[1].bodystructure, section) if (
                got is not None and got[1].bodystructure is not None) else None
            if got is None or part is None:
                raise ImapRefused("attachment-gone")
            if bodies.decoded_size(part) > limit:
                raise ImapTooLarge(f"the attachment is about {bodies.decoded_size(part)} bytes")
            cap = bodies.encoded_bound(limit + 1, part.encoding)
            item = f"BODY.PEEK[{section}]<0.{cap}>"
            fetched = (await client.uid_fetch([got[0].uid], ["UID", item])).get(got[0].uid)
            raw = next(iter(fetched.sections.values()), None) if fetched else None
            if raw is None:
                raise ImapRefused("attachment-gone")
            return bodies.undo_transfer(raw, part.encoding, cut=len(raw) >= cap)

        content = await self.run(work)
        if len(content) > limit:
            raise ImapTooLarge(f"the attachment is over {limit} bytes")
        return content

    async def mark_seen(self, email_id: str) -> bool:
        """`\\Seen` set; False when the mail is gone."""
        async def work(client: ImapClient) -> bool:
            at = await self._writable(client, email_id)
            if at is None:
                return False
            try:
                await client.uid_store([at.uid], ["\\Seen"])
            except ImapCommandError as exc:
                raise ImapRefused("store-refused", exc.state) from None
            return True

        return await self.run(work)

    async def archive(self, email_id: str) -> bool:
        """Moved to the archive mailbox; False when the mail is gone; `ImapRefused` when the
        account has no archive mailbox or the server refuses the move."""
        async def work(client: ImapClient) -> bool:
            at = await self.locate(client, email_id)
            archive = _archive_of(list((await self.boxes(client)).values()))
            if at is None:
                return False
            if archive is None:
                raise ImapRefused(NO_ARCHIVE, "no \\Archive mailbox and none named Archive")
            at = await self._writable(client, email_id)
            if at is None or at.mailbox == archive:
                return at is not None
            try:
                await client.uid_move([at.uid], archive)
            except (ImapCommandError, ImapCapabilityError) as exc:
                raise ImapRefused("move-refused", type(exc).__name__) from None
            return True

        return await self.run(work)

    # ------------------------------------------------------------------ helpers
    async def _fetch_one(self, client: ImapClient, email_id: str, items: Sequence[str]
                         ) -> tuple[Located, Fetched] | None:
        """`items` of one mail, its mailbox selected read-only; None when gone or stale."""
        at = await self.locate(client, email_id)
        if at is None or await self.select(client, at.mailbox, at.uidvalidity) is None:
            return None
        found = (await client.uid_fetch([at.uid], items)).get(at.uid)
        return None if found is None else (at, found)

    async def _writable(self, client: ImapClient, email_id: str) -> Located | None:
        """The mail's mailbox selected read-write; None when the mail is gone or stale."""
        at = await self.locate(client, email_id)
        if at is None or await self.select(client, at.mailbox, at.uidvalidity,
                                           readonly=False) is None:
            return None
        found = await client.uid_search("UID", str(at.uid))
        return at if at.uid in found else None


def _archive_of(boxes: Sequence[MailboxInfo]) -> str | None:
    by_use = [b.name for b in boxes if role_of(b) == "archive"]
    by_name = [b.name for b in boxes if b.name == ARCHIVE_NAME]
    return next(iter(by_use or by_name), None)


def _attachments(email_id: str, root: BodyPart | None) -> tuple[Attachment, ...]:
    if root is None or parse_mail_id(email_id) is None:
        return ()
    return tuple(Attachment(part.section, f"{email_id}/{part.section}",
                            clean(part.filename) or None, bodies.media_type(part),
                            bodies.decoded_size(part))
                 for part in bodies.attachment_parts(root))


class ImapSource(ImapReader, ImapReplies):
    """The mail source of an IMAP account (`mail.source.MailSource`): the reading side and the
    replies over one connection, each use of it alone (`MailboxSession`)."""

    def __init__(self, client: ImapClient, cfg: BusinessConfig) -> None:
        super().__init__(client, cfg.imap_notify_mailboxes)
        self._cfg = cfg
        # The catch-up passes' own connection, kept between them (`kept`; issue #37): a pass
        # never waits for this one, which the worker reads mail over.
        self.kept = KeptConnection(client.twin)
        self._warming: asyncio.Task[None] | None = None

    @contextlib.asynccontextmanager
    async def for_pass(self) -> AsyncIterator[ImapClient]:
        """The kept connection for one catch-up pass (`kept.lend`). Meanwhile the worker's
        connection, which reads the mail the pass enqueues, is made ready ahead of need: logged
        in when it is not (the first mail after a start), and checked with a NOOP, logged in
        again when the server closed it during a quiet spell (issue #37)."""
        if self._warming is None or self._warming.done():
            self._warming = asyncio.create_task(self._ready_reader())
        async with self.kept.lend() as client:
            yield client

    async def _ready_reader(self) -> None:
        with contextlib.suppress(MailError):
            await self.run(lambda client: client.noop())

    async def aclose(self) -> None:
        if self._warming is not None:
            await cancel(self._warming)
        await self.kept.aclose()
        await super().aclose()

    @contextlib.asynccontextmanager
    async def _imap(self) -> AsyncIterator[ImapClient]:
        async with self._using:
            if not self._client.connected:
                await self._client.connect()
            yield self._client

    def _mail_config(self) -> BusinessConfig:
        return self._cfg

