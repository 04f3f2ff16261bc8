"""Finding IMAP mail across the notify mailboxes (`imap_notify_mailboxes`, less any with the
Drafts / Sent / Junk / Trash role): the newest mails (the rules' dry run), a subject match
(trace), and the chat's text search.

Each is a server-side `UID SEARCH` per mailbox (the user's words go as `wire.Text`: quoted, or
a UTF-8 literal with `CHARSET UTF-8`), then the INTERNALDATE of at most `SCAN` of the highest
UIDs found, newest INTERNALDATE first across the mailboxes, `limit` kept. A search's snippet is
cut from the first text part around the first word found, HTML-escaped, each word in `<mark>`
(what JMAP's SearchSnippet gives, `pipeline.search.clean_snippet` reads).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence

from messageweave.mail.imap.client import ImapClient
from messageweave.mail.imap.ids import mailbox_key
from messageweave.mail.imap.responses import MailboxInfo
from messageweave.mail.imap.session import (
    FULL_ITEMS,
    MailboxSession,
    meta_of,
    role_of,
    texts_of,
)
from messageweave.mail.imap.wire import Text
from messageweave.mail.records import EmailMeta, SearchResult, SearchSnippet

SCAN = 500  # the highest UIDs of a mailbox's hits whose INTERNALDATE is compared
MAX_WORDS = 8  # of a search text
SNIPPET_TEXT_BYTES = 16 * 1024  # of the first text part, searched for a snippet
SNIPPET_BEFORE, SNIPPET_AFTER = 60, 140  # characters around the first word found
Criteria = Sequence[str | Text]


class ImapSearch(MailboxSession):
    """`newest`, `subject_matches`, `notify_mailbox_ids` and `search` of the IMAP source."""

    async def notify_mailbox_ids(self, roles: Iterable[str]) -> frozenset[str]:
        """The ids of the configured notify mailboxes (IMAP notifies by mailbox name, so
        `roles` — JMAP's `notify_mailbox_roles` — is not read)."""
        boxes = await self.run(self.notify_boxes)
        return frozenset(mailbox_key(b.name) for b in boxes)

    async def newest(self, roles: Iterable[str], limit: int
                     ) -> list[tuple[EmailMeta, frozenset[str]]]:
        """The newest `limit` mails of the notify mailboxes (`roles` not read, as above), brief,
        each with its mailbox's role."""
        found = await self.run(lambda c: self._find(c, ("ALL",), limit))
        return [(meta, frozenset({role} if (role := role_of(box)) else ())) for meta, box in found]

    async def subject_matches(self, text: str, limit: int) -> list[EmailMeta]:
        """The mails whose subject holds `text` (the server's match), newest first, brief."""
        found = await self.run(lambda c: self._find(c, ("SUBJECT", Text(text)), limit))
        return [meta for meta, _ in found]

    async def search(self, text: str, limit: int = 10) -> SearchResult:
        """Every word of `text` in the subject, the sender or the text (`UID SEARCH`), newest
        first, with a snippet each."""
        words = text.split()[:MAX_WORDS]
        if not words or limit <= 0:
            return SearchResult([], [], [])
        criteria: list[str | Text] = []
        for word in words:
            criteria += ["OR", "SUBJECT", Text(word), "OR", "FROM", Text(word), "TEXT", Text(word)]
        found = await self.run(lambda c: self._find(c, criteria, limit, snippets=words))
        emails = [meta for meta, _ in found]
        snippets = [SearchSnippet(m.id, _marked(m.subject or "", words, whole=True) or None,
                                  m.preview or None) for m in emails]
        return SearchResult([m.id for m in emails], emails, snippets)

    async def _find(self, client: ImapClient, criteria: Criteria, limit: int,
                    snippets: Sequence[str] = ()) -> list[tuple[EmailMeta, MailboxInfo]]:
        """The newest `limit` mails matching `criteria` in the notify mailboxes; with
        `snippets` (the words), each meta's preview is its snippet."""
        if limit <= 0:
            return []
        dated: list[tuple[float, int, MailboxInfo, int]] = []
        for box in await self.notify_boxes(client):
            validity = await self.select(client, box.name)
            if validity is None:
                continue
            uids = (await client.uid_search(*criteria))[-SCAN:]
            times = await client.uid_fetch(uids, ("UID", "INTERNALDATE")) if uids else {}
            newest = sorted(((f.internaldate.timestamp() if f.internaldate else 0.0, uid)
                             for uid, f in times.items()), reverse=True)[:limit]
            dated += [(when, uid, box, validity) for when, uid in newest]
        dated.sort(key=lambda d: (d[0], d[1]), reverse=True)
        kept = dated[:limit]
        found: dict[tuple[str, int], EmailMeta] = {}
        for box in {b.name: b for _, _, b, _ in kept}.values():
            validity = await self.select(client, box.name)
            uids = [uid for _, uid, b, v in kept if b.name == box.name and v == validity]
            if validity is None or not uids:
                continue
            if snippets:
                metas = await self._snippets(client, box.name, validity, uids, snippets)
            else:
                metas = await self.fetch_metas(client, box.name, validity, uids, brief=True)
            found |= {(box.name, uid): meta for uid, meta in metas.items()}
        return [(found[b.name, uid], b) for _, uid, b, _ in kept if (b.name, uid) in found]

    async def _snippets(self, client: ImapClient, box: str, validity: int,
                        uids: Sequence[int], words: Sequence[str]) -> dict[int, EmailMeta]:
        fetched = await client.uid_fetch(uids, FULL_ITEMS)
        texts = await texts_of(await self.fetch_texts(
            client, fetched.values(), SNIPPET_TEXT_BYTES, first_only=True), None)
        return {uid: meta_of(box, validity, item, _marked(texts.get(uid, ("", False))[0], words))
                for uid, item in fetched.items()}


def _marked(text: str, words: Sequence[str], *, whole: bool = False) -> str:
    """`text` around the first of `words` (any case), HTML-escaped, each word in `<mark>`;
    "" when none is in it. `whole`: all of `text` (a subject), not a window."""
    pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)
    first = pattern.search(text)
    if first is None:
        return ""
    if not whole:
        start = max(0, first.start() - SNIPPET_BEFORE)
        text = " ".join(text[start:first.end() + SNIPPET_AFTER].split())
    out, at = [], 0
    for found in pattern.finditer(text):
        out += [html.escape(text[at:found.start()]), "<mark>", html.escape(found.group()),
                "</mark>"]
        at = found.end()
    out.append(html.escape(text[at:]))
    return "".join(out)
